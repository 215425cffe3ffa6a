#include "convert.h"

#include "flashback/error.h"

namespace flashback::python {
namespace {

using nb::dlpack::dtype_code;

DType dtype_of(const nb::dlpack::dtype& t, const char* name) {
  const auto code = static_cast<dtype_code>(t.code);
  const std::string got = detail::concat("DLPack code ", int(t.code), ", ", int(t.bits), " bits, ",
                                         int(t.lanes), " lanes");
  FLASHBACK_CHECK(t.lanes == 1, name, "one lane per element", got);
  if (code == dtype_code::Float && t.bits == 32) return DType::kF32;
  if (code == dtype_code::Float && t.bits == 16) return DType::kF16;
  if (code == dtype_code::Bfloat && t.bits == 16) return DType::kBF16;
  if (code == dtype_code::Int && t.bits == 32) return DType::kI32;
  if (code == dtype_code::Int && t.bits == 64) return DType::kI64;
  if (code == dtype_code::UInt && t.bits == 8) return DType::kU8;
  // DLPack 1.1 names fp8 formats; frameworks that export them arrive here directly.
  if (code == dtype_code::Float8_E4M3FN && t.bits == 8) return DType::kF8E4M3;
  if (code == dtype_code::Float8_E5M2 && t.bits == 8) return DType::kF8E5M2;
  throw Error(name, "float32, float16, bfloat16, int32, int64, uint8 or float8 (e4m3fn, e5m2)",
              got);
}

template <typename A>
Device device_of(const A& a, const char* name) {
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:  // pinned host memory is ordinary host memory here
      return Device{DeviceType::kCPU, 0};
    case nb::device::cuda::value:
      return Device{DeviceType::kCUDA, a.device_id()};
    default:
      throw Error(name, "an array on the CPU or a CUDA device",
                  detail::concat("DLPack device type ", a.device_type()));
  }
}

}  // namespace

std::optional<DType> parse_kv_dtype(const std::optional<std::string>& name) {
  if (!name || name->empty() || *name == "auto") return std::nullopt;
  if (*name == "fp8_e4m3" || *name == "float8_e4m3fn") return DType::kF8E4M3;
  if (*name == "fp8_e5m2" || *name == "float8_e5m2") return DType::kF8E5M2;
  throw Error("kv_dtype", "\"fp8_e4m3\", \"fp8_e5m2\", \"auto\" or None", "\"" + *name + "\"");
}

namespace {

template <typename A>
TensorView view_of(const A& a, const char* name, std::optional<DType> as_dtype) {
  if (!a.is_valid()) return TensorView{};
  FLASHBACK_CHECK(a.ndim() <= size_t{TensorView::kMaxDims}, name, "at most 6 dimensions",
                  std::to_string(a.ndim()));
  TensorView v;
  v.dtype = dtype_of(a.dtype(), name);
  if (as_dtype && *as_dtype != v.dtype) {
    FLASHBACK_CHECK(v.dtype == DType::kU8 && is_fp8(*as_dtype), name,
                    "a uint8 array when an fp8 dtype is named (or an array of that dtype)",
                    std::string(dtype_name(v.dtype)) + " named as " + dtype_name(*as_dtype));
    v.dtype = *as_dtype;
  }
  v.device = device_of(a, name);
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));  // read-only by contract
  v.ndim = static_cast<int>(a.ndim());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = static_cast<int64_t>(a.shape(d));
    v.strides[d] = a.stride(d);  // in elements, as DLPack; nanobind fills them when absent
  }
  // An empty array may have a null data pointer; the entry points treat a null pointer as
  // "absent", so give such arrays a harmless non-null address (nothing is ever read from it).
  if (v.data == nullptr && v.numel() == 0) {
    alignas(64) static char empty_sentinel[64];
    v.data = empty_sentinel;
  }
  return v;
}

}  // namespace

TensorView to_view(const Array& a, const char* name, std::optional<DType> as_dtype) {
  return view_of(a, name, as_dtype);
}

TensorView to_view(const InArray& a, const char* name, std::optional<DType> as_dtype) {
  return view_of(a, name, as_dtype);
}

}  // namespace flashback::python

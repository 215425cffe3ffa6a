#include "flashback/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "flashback/numeric.h"

namespace flashback {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF8E4M3:
      return "fp8_e4m3";
    case DType::kF8E5M2:
      return "fp8_e5m2";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU8:
      return "uint8";
  }
  return "?";
}

std::string to_string(Device d) {
  return d.type == DeviceType::kCPU ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

namespace {
void check_rank(size_t n) {
  FLASHBACK_CHECK(n <= TensorView::kMaxDims, "shape", "at most 6 dimensions", std::to_string(n));
}
}  // namespace

TensorView::TensorView(void* d, DType t, std::initializer_list<int64_t> shp, Device dev)
    : data(d), dtype(t), device(dev), ndim(static_cast<int>(shp.size())) {
  check_rank(shp.size());
  int i = 0;
  for (int64_t s : shp) shape[i++] = s;
  int64_t st = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    strides[k] = st;
    st *= shape[k];
  }
}

TensorView::TensorView(void* d, DType t, std::initializer_list<int64_t> shp,
                       std::initializer_list<int64_t> str, Device dev)
    : data(d), dtype(t), device(dev), ndim(static_cast<int>(shp.size())) {
  check_rank(shp.size());
  FLASHBACK_CHECK(str.size() == shp.size(), "strides", std::to_string(shp.size()) + " strides",
                  std::to_string(str.size()));
  int i = 0;
  for (int64_t s : shp) shape[i++] = s;
  i = 0;
  for (int64_t s : str) strides[i++] = s;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t st = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    if (shape[k] != 1 && strides[k] != st) return false;
    st *= shape[k];
  }
  return true;
}

std::string TensorView::shape_str() const {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < ndim; ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

TensorView TensorView::transposed(int a, int b) const {
  TensorView t = *this;
  std::swap(t.shape[a], t.shape[b]);
  std::swap(t.strides[a], t.strides[b]);
  return t;
}

TensorView TensorView::slice(int d, int64_t begin, int64_t end) const {
  FLASHBACK_CHECK(d >= 0 && d < ndim && begin >= 0 && begin <= end && end <= shape[d], "slice",
                  "a range inside " + shape_str(),
                  detail::concat("dim ", d, " [", begin, ", ", end, ")"));
  TensorView t = *this;
  t.data = static_cast<char*>(data) + begin * strides[d] * dtype_size(dtype);
  t.shape[d] = end - begin;
  return t;
}

Tensor::Tensor(DType dtype, std::initializer_list<int64_t> shape)
    : Tensor(dtype, shape.begin(), static_cast<int>(shape.size())) {}

Tensor::Tensor(DType dtype, const int64_t* shape, int ndim) {
  FLASHBACK_CHECK(ndim >= 0 && ndim <= TensorView::kMaxDims, "shape", "at most 6 dimensions",
                  std::to_string(ndim));
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    FLASHBACK_CHECK(shape[i] >= 0, "shape", "non-negative sizes", std::to_string(shape[i]));
    n *= shape[i];
  }
  const size_t bytes = (static_cast<size_t>(n * dtype_size(dtype)) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  if (p == nullptr)
    throw Error("Tensor", "an allocation of " + std::to_string(bytes) + " bytes", "out of memory");
  storage_ = std::shared_ptr<void>(p, std::free);
  view_.data = p;
  view_.dtype = dtype;
  view_.ndim = ndim;
  int64_t st = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    view_.shape[k] = shape[k];
    view_.strides[k] = st;
    st *= shape[k];
  }
}

double load_as_double(const TensorView& t, int64_t off) {
  const char* base = static_cast<const char*>(t.data);
  switch (t.dtype) {
    case DType::kF32:
      return reinterpret_cast<const float*>(base)[off];
    case DType::kF16:
      return f16_to_f32(reinterpret_cast<const uint16_t*>(base)[off]);
    case DType::kBF16:
      return bf16_to_f32(reinterpret_cast<const uint16_t*>(base)[off]);
    case DType::kF8E4M3:
      return fp8_e4m3_to_f32(reinterpret_cast<const uint8_t*>(base)[off]);
    case DType::kF8E5M2:
      return fp8_e5m2_to_f32(reinterpret_cast<const uint8_t*>(base)[off]);
    case DType::kI32:
      return reinterpret_cast<const int32_t*>(base)[off];
    case DType::kI64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(base)[off]);
    case DType::kU8:
      return reinterpret_cast<const uint8_t*>(base)[off];
  }
  return 0;
}

void store_from_double(const TensorView& t, int64_t off, double v) {
  char* base = static_cast<char*>(t.data);
  const float f = static_cast<float>(v);
  switch (t.dtype) {
    case DType::kF32:
      reinterpret_cast<float*>(base)[off] = f;
      break;
    case DType::kF16:
      reinterpret_cast<uint16_t*>(base)[off] = f32_to_f16(f);
      break;
    case DType::kBF16:
      reinterpret_cast<uint16_t*>(base)[off] = f32_to_bf16(f);
      break;
    case DType::kF8E4M3:
      reinterpret_cast<uint8_t*>(base)[off] = f32_to_fp8_e4m3(f);
      break;
    case DType::kF8E5M2:
      reinterpret_cast<uint8_t*>(base)[off] = f32_to_fp8_e5m2(f);
      break;
    case DType::kI32:
      reinterpret_cast<int32_t*>(base)[off] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      reinterpret_cast<int64_t*>(base)[off] = static_cast<int64_t>(v);
      break;
    case DType::kU8:
      reinterpret_cast<uint8_t*>(base)[off] = static_cast<uint8_t>(v);
      break;
  }
}

double Tensor::get(int64_t i) const { return load_as_double(view_, i); }
void Tensor::set(int64_t i, double v) { store_from_double(view_, i, v); }
void Tensor::poison() { std::memset(view_.data, 0xff, static_cast<size_t>(nbytes())); }
void Tensor::zero() { std::memset(view_.data, 0, static_cast<size_t>(nbytes())); }

}  // namespace flashback

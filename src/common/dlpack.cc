#include "flashback/dlpack.h"

#include <dlpack/dlpack.h>

#include <memory>

namespace flashback {
namespace {

DType dtype_from_dl(DLDataType t) {
  const std::string got =
      detail::concat("code ", int(t.code), ", ", int(t.bits), " bits, ", int(t.lanes), " lanes");
  FLASHBACK_CHECK(t.lanes == 1, "dltensor.dtype", "one lane", got);
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  if (t.code == kDLUInt && t.bits == 8) return DType::kU8;
  throw Error("dltensor.dtype", "f32, f16, bf16, int32, int64 or uint8", got);
}

DLDataType dtype_to_dl(DType t) {
  switch (t) {
    case DType::kF32:
      return {kDLFloat, 32, 1};
    case DType::kF16:
      return {kDLFloat, 16, 1};
    case DType::kBF16:
      return {kDLBfloat, 16, 1};
    case DType::kI32:
      return {kDLInt, 32, 1};
    case DType::kI64:
      return {kDLInt, 64, 1};
    default:
      return {kDLUInt, 8, 1};  // uint8 and both fp8 formats
  }
}

}  // namespace

TensorView from_dlpack(const DLTensor& t, std::optional<DType> as_dtype) {
  FLASHBACK_CHECK(t.ndim >= 0 && t.ndim <= TensorView::kMaxDims, "dltensor.ndim", "0 to 6",
                  std::to_string(t.ndim));
  TensorView v;
  v.dtype = dtype_from_dl(t.dtype);
  if (as_dtype && *as_dtype != v.dtype) {
    FLASHBACK_CHECK(
        v.dtype == DType::kU8 && is_fp8(*as_dtype), "as_dtype",
        "an fp8 dtype for a uint8 tensor (or the tensor's own dtype)",
        std::string(dtype_name(*as_dtype)) + " for a " + dtype_name(v.dtype) + " tensor");
    v.dtype = *as_dtype;
  }
  if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost) {
    v.device = Device{DeviceType::kCPU, 0};
  } else if (t.device.device_type == kDLCUDA) {
    v.device = Device{DeviceType::kCUDA, t.device.device_id};
  } else {
    throw Error("dltensor.device", "CPU or CUDA",
                "device type " + std::to_string(t.device.device_type));
  }
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  v.ndim = t.ndim;
  int64_t st = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    v.shape[k] = t.shape[k];
    v.strides[k] = t.strides ? t.strides[k] : st;
    st *= t.shape[k];
  }
  return v;
}

namespace {
struct ExportCtx {
  std::shared_ptr<void> storage;
  int64_t shape[TensorView::kMaxDims];
  int64_t strides[TensorView::kMaxDims];
};
}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  auto* ctx = new ExportCtx{t.storage(), {}, {}};
  const TensorView v = t.view();
  for (int i = 0; i < v.ndim; ++i) {
    ctx->shape[i] = v.shape[i];
    ctx->strides[i] = v.strides[i];
  }
  auto* m = new DLManagedTensor{};
  m->dl_tensor.data = v.data;
  m->dl_tensor.device = {kDLCPU, 0};
  m->dl_tensor.ndim = v.ndim;
  m->dl_tensor.dtype = dtype_to_dl(v.dtype);
  m->dl_tensor.shape = ctx->shape;
  m->dl_tensor.strides = ctx->strides;
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = ctx;
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportCtx*>(self->manager_ctx);
    delete self;
  };
  return m;
}

}  // namespace flashback

// Element access by run-time dtype, for small memory-bound kernels (merge_state, KV store) whose
// tensors may each have their own dtype: one switch per element costs nothing next to DRAM.
#pragma once

#include <cstdint>

#include "cuda/common/dtype.cuh"

namespace flashback::cuda {

// Codes match flashback::DType's order.
enum class DCode : int { kF32 = 0, kF16 = 1, kBF16 = 2, kF8E4M3 = 3, kF8E5M2 = 4 };

__device__ __forceinline__ float load_any(const void* base, DCode t, int64_t i) {
  switch (t) {
    case DCode::kF32:
      return static_cast<const float*>(base)[i];
    case DCode::kF16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DCode::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DCode::kF8E4M3: {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<const uint8_t*>(base)[i], __NV_E4M3);
      return __half2float(__half(h));
    }
    case DCode::kF8E5M2: {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<const uint8_t*>(base)[i], __NV_E5M2);
      return __half2float(__half(h));
    }
  }
  return 0.f;
}

__device__ __forceinline__ void store_any(void* base, DCode t, int64_t i, float x) {
  switch (t) {
    case DCode::kF32:
      static_cast<float*>(base)[i] = x;
      break;
    case DCode::kF16:
      static_cast<__half*>(base)[i] = __float2half_rn(x);
      break;
    case DCode::kBF16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
      break;
    case DCode::kF8E4M3:
      static_cast<uint8_t*>(base)[i] = float_to_fp8<KvKind::kE4M3>(x);
      break;
    case DCode::kF8E5M2:
      static_cast<uint8_t*>(base)[i] = float_to_fp8<KvKind::kE5M2>(x);
      break;
  }
}

}  // namespace flashback::cuda

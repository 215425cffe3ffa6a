// Element types on the device: 16-bit activations (bf16, fp16) and the KV cache kinds (the same
// 16-bit type, or fp8 e4m3 / e5m2 widened exactly to the activation type in registers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace flashback::cuda {

enum class KvKind : int { kSame = 0, kE4M3 = 1, kE5M2 = 2 };

// Short names used in generated instance symbols (decode_128_128_bf16).
using bf16 = __nv_bfloat16;
using f16 = __half;

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_float(float x) {
  return x;
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ float from_float(float x) {
  return x;
}

/// Two floats as two 16-bit values of type T packed in a uint32 (low half first): an MMA
/// fragment register.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  T x[2] = {from_float<T>(a), from_float<T>(b)};
  return *reinterpret_cast<const uint32_t*>(x);
}

/// Element i (0: low half) of two 16-bit values of type T packed in a uint32, as a float.
template <typename T>
__device__ __forceinline__ float unpack_at(uint32_t two, int i) {
  const unsigned short bits = static_cast<unsigned short>(i ? two >> 16 : two & 0xffffu);
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(__ushort_as_bfloat16(bits));
  else
    return __half2float(__ushort_as_half(bits));
}

// Two fp8 values (low byte first) to two 16-bit values of type T, packed in a uint32. Exact:
// every e4m3 and e5m2 value is representable in both fp16 and bf16.
template <typename T, KvKind K>
__device__ __forceinline__ uint32_t fp8x2_to(uint16_t two) {
  constexpr __nv_fp8_interpretation_t kInterp = K == KvKind::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, kInterp);
  if constexpr (std::is_same_v<T, __half>) {
    return uint32_t{h.x} | (uint32_t{h.y} << 16);
  } else {
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<const uint32_t*>(&b);
  }
}

// Float to an fp8 byte, round to nearest even, saturating to the largest finite value (the
// convention of include/flashback/numeric.h).
template <KvKind K>
__device__ __forceinline__ uint8_t float_to_fp8(float x) {
  constexpr __nv_fp8_interpretation_t kInterp = K == KvKind::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kInterp);
}

}  // namespace flashback::cuda

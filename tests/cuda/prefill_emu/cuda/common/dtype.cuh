// CPU emulation stand-in for src/cuda/common/dtype.cuh: 16-bit types as bit patterns, converted
// with the library's own host conversions (include/flashback/numeric.h).
#pragma once

#include <cstdint>

#include "emu_rt.h"
#include "flashback/numeric.h"

namespace flashback::cuda {

enum class KvKind : int { kSame = 0, kE4M3 = 1, kE5M2 = 2 };

struct bf16 {
  uint16_t x;
};
struct f16 {
  uint16_t x;
};
using __nv_bfloat16 = bf16;
using __half = f16;

template <typename T>
inline float to_float(T x);
template <>
inline float to_float(bf16 x) {
  return bf16_to_f32(x.x);
}
template <>
inline float to_float(f16 x) {
  return f16_to_f32(x.x);
}

template <typename T>
inline T from_float(float x);
template <>
inline bf16 from_float(float x) {
  return {f32_to_bf16(x)};
}
template <>
inline f16 from_float(float x) {
  return {f32_to_f16(x)};
}

template <typename T>
inline uint32_t pack2(float a, float b) {
  return static_cast<uint32_t>(from_float<T>(a).x) |
         (static_cast<uint32_t>(from_float<T>(b).x) << 16);
}

template <typename T, KvKind K>
inline uint32_t fp8x2_to(uint16_t two) {
  auto one = [](uint8_t b) {
    const float f = K == KvKind::kE4M3 ? fp8_e4m3_to_f32(b) : fp8_e5m2_to_f32(b);
    return static_cast<uint32_t>(from_float<T>(f).x);
  };
  return one(static_cast<uint8_t>(two & 0xff)) | (one(static_cast<uint8_t>(two >> 8)) << 16);
}

}  // namespace flashback::cuda

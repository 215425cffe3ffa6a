// Scalar element conversions for the fast CPU kernels' tails and rare paths. fp8 decodes through
// 256-entry tables (this Highway version has no fp8 vectors); every value is exact in fp32.
#pragma once

#include <array>
#include <cstdint>

#include "flashback/numeric.h"
#include "flashback/tensor.h"

namespace flashback::cpu_fast {

template <float (*Decode)(uint8_t)>
inline const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = Decode(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

/// Element i of a contiguous row of dtype dt, as fp32.
inline float load_f32(const void* row, DType dt, int64_t i) {
  switch (dt) {
    case DType::kF32:
      return static_cast<const float*>(row)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case DType::kF8E4M3:
      return fp8_table<fp8_e4m3_to_f32>()[static_cast<const uint8_t*>(row)[i]];
    case DType::kF8E5M2:
      return fp8_table<fp8_e5m2_to_f32>()[static_cast<const uint8_t*>(row)[i]];
    default:
      return 0.0f;  // validated away
  }
}

/// Rounds x to dtype dt (nearest even; fp8 saturates) and stores it as element i of `row`.
inline void store_f32(void* row, DType dt, int64_t i, float x) {
  switch (dt) {
    case DType::kF32:
      static_cast<float*>(row)[i] = x;
      break;
    case DType::kF16:
      static_cast<uint16_t*>(row)[i] = f32_to_f16(x);
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(row)[i] = f32_to_bf16(x);
      break;
    case DType::kF8E4M3:
      static_cast<uint8_t*>(row)[i] = f32_to_fp8_e4m3(x);
      break;
    case DType::kF8E5M2:
      static_cast<uint8_t*>(row)[i] = f32_to_fp8_e5m2(x);
      break;
    default:
      break;  // validated away
  }
}

inline void store_f32_row(const float* src, int64_t n, void* dst, DType dt) {
  for (int64_t i = 0; i < n; ++i) store_f32(dst, dt, i, src[i]);
}

}  // namespace flashback::cpu_fast

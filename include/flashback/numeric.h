/// @brief Conversions between f32 and f16 / bf16 / fp8 (e4m3, e5m2): round to nearest even;
/// fp8 saturates to the largest finite value (OCP FP8: ±448 e4m3, ±57344 e5m2), NaN stays NaN.
/// Header-only and constexpr-friendly so kernels of every backend can use the same bits.
#pragma once

#include <bit>
#include <cstdint>

namespace flashback {

namespace numeric_detail {
constexpr uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
constexpr float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }
}  // namespace numeric_detail

constexpr float bf16_to_f32(uint16_t h) { return numeric_detail::bits_f32(uint32_t{h} << 16); }

constexpr uint16_t f32_to_bf16(float f) {
  uint32_t u = numeric_detail::f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

constexpr float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return numeric_detail::bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return numeric_detail::bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return numeric_detail::bits_f32(sign);
  // Subnormal half: value = mant * 2^-24.
  float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
  return sign ? -v : v;
}

namespace numeric_detail {
/// Rounds |f| (finite, non-negative bits u) to a float format with `mant_bits` mantissa bits,
/// exponent bias `bias`, and smallest normal exponent 1; returns the encoded magnitude.
/// Values at or above `max_code`'s value saturate to max_code when `saturate`, else to inf_code.
constexpr uint32_t round_small_float(uint32_t u, int mant_bits, int bias, uint32_t max_code,
                                     bool saturate, uint32_t inf_code) {
  const int e = static_cast<int>((u >> 23) & 0xff) - 127;  // unbiased exponent of input
  const uint32_t m = (u & 0x7fffffu) | 0x800000u;          // 24-bit significand
  if ((u & 0x7fffffffu) == 0) return 0;
  const int min_exp = 1 - bias;  // exponent of the smallest normal
  // Number of low significand bits to drop: normal → 23 - mant_bits; subnormal → more.
  int shift = 23 - mant_bits + (e < min_exp ? (min_exp - e) : 0);
  if (shift > 25) return 0;  // far below half the smallest subnormal
  const uint32_t keep = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  uint32_t q = keep + ((rem > half || (rem == half && (keep & 1u))) ? 1u : 0u);
  // q is the significand in units of the target's ulp at exponent max(e, min_exp).
  uint32_t code;
  if (e < min_exp) {
    code = q;  // subnormal (q may carry into the smallest normal, which encodes the same way)
  } else {
    int be = e + bias;
    if (q >> (mant_bits + 1)) {  // rounding carried into the next binade
      q >>= 1;
      ++be;
    }
    code = (static_cast<uint32_t>(be) << mant_bits) | (q & ((1u << mant_bits) - 1));
  }
  if (code > max_code) return saturate ? max_code : inf_code;
  return code;
}
}  // namespace numeric_detail

constexpr uint16_t f32_to_f16(float f) {
  const uint32_t u = numeric_detail::f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;  // NaN
  if (a == 0x7f800000u) return sign | 0x7c00;
  if ((a >> 23) >= 127 + 16) return sign | 0x7c00;  // ≥ 65536 overflows
  return sign |
         static_cast<uint16_t>(numeric_detail::round_small_float(a, 10, 15, 0x7bff, false, 0x7c00));
}

/// e4m3 (OCP "fn"): bias 7, no infinities, 0x7f/0xff NaN, max finite 0x7e = 448.
constexpr uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = numeric_detail::f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;
  if (a == 0x7f800000u) return sign | 0x7e;  // saturate
  if ((a >> 23) >= 127 + 9) return sign | 0x7e;
  return sign | static_cast<uint8_t>(numeric_detail::round_small_float(a, 3, 7, 0x7e, true, 0x7e));
}

/// e5m2: bias 15, IEEE-like; saturating conversion maps overflow and ±inf to ±57344 (0x7b).
constexpr uint8_t f32_to_fp8_e5m2(float f) {
  const uint32_t u = numeric_detail::f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e;
  if (a == 0x7f800000u) return sign | 0x7b;
  if ((a >> 23) >= 127 + 17) return sign | 0x7b;
  return sign | static_cast<uint8_t>(numeric_detail::round_small_float(a, 2, 15, 0x7b, true, 0x7b));
}

constexpr float fp8_e4m3_to_f32(uint8_t b) {
  const bool neg = b & 0x80;
  const uint32_t exp = (b >> 3) & 0xf, mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return numeric_detail::bits_f32(neg ? 0xffc00000u : 0x7fc00000u);
  float v = exp == 0 ? static_cast<float>(mant) * (1.0f / 512.0f)  // mant * 2^-9
                     : numeric_detail::bits_f32(((exp + 120) << 23) | (mant << 20));
  return neg ? -v : v;
}

constexpr float fp8_e5m2_to_f32(uint8_t b) { return f16_to_f32(static_cast<uint16_t>(b) << 8); }

}  // namespace flashback

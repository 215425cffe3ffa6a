// Conversions f32 <-> f16 / bf16 / fp8 at the formats' edges.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "flashback/numeric.h"

namespace flashback {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Numeric, Fp8E4m3Edges) {
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7e);  // tie between 448 and (NaN code) → saturate
  EXPECT_EQ(f32_to_fp8_e4m3(500.0f), 0x7e);  // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(kInf), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-kInf), 0xfe);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::nanf("")))));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  // Subnormals: smallest 2^-9, largest 7·2^-9; smallest normal 2^-6.
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half the smallest: tie → even (0)
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.5f, -10)), 0x01);   // above the tie
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 ulp tie → even (2)
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(15.0f, -10)), 0x08);  // 7.5 ulp → carries into the normal
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);  // 1 + 1/16: tie between 1 and 1.125 → even (1)
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // 1 + 3/16: tie between 1.125 and 1.25 → 1.25
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
}

TEST(Numeric, Fp8E5m2Edges) {
  EXPECT_EQ(f32_to_fp8_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(f32_to_fp8_e5m2(61440.0f), 0x7b);  // would round to inf: saturates
  EXPECT_EQ(f32_to_fp8_e5m2(1e30f), 0x7b);
  EXPECT_EQ(f32_to_fp8_e5m2(kInf), 0x7b);
  EXPECT_EQ(f32_to_fp8_e5m2(-kInf), 0xfb);
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(std::nanf("")))));
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(f32_to_fp8_e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(f32_to_fp8_e5m2(1.125f), 0x3c);  // tie between 1 and 1.25 → even (1)
}

TEST(Numeric, Fp8RoundTripsEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const auto c = static_cast<uint8_t>(b);
    const float a = fp8_e4m3_to_f32(c);
    if (!std::isnan(a)) EXPECT_EQ(f32_to_fp8_e4m3(a), c) << b;
    const float e = fp8_e5m2_to_f32(c);
    if (std::isfinite(e)) EXPECT_EQ(f32_to_fp8_e5m2(e), c) << b;
  }
}

TEST(Numeric, HalfAndBfloat) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to inf (IEEE, not saturating)
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);         // tie → even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie → even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie → even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) EXPECT_EQ(f32_to_f16(f), h) << h;
    const float g = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(g)) EXPECT_EQ(f32_to_bf16(g), h) << h;
  }
}

}  // namespace
}  // namespace flashback

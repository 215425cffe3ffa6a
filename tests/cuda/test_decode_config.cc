// The short-query kernels' host-side rules (src/cuda/decode/config.h): which kernel serves a
// shape (decode_shape, read by both the launcher and the split plan, so they must agree) and
// the warps-split-keys kernel's shared-memory layout and residency (wk_layout, which the split
// plan reads as the resident CTA count). Plain C++ (label cpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cuda/common/row_swizzle.h"
#include "cuda/decode/config.h"

namespace flashback::cuda {
namespace {

constexpr int kH200 = 227 * 1024;  // shared memory per block (opt-in maximum)
constexpr int kA100 = 163 * 1024;
constexpr int kAda = 99 * 1024;  // sm_86 / sm_89

TEST(DecodeConfig, ShapeRule) {
  // MLA absorbed (qv) goes to the Hopper kernel only where dispatch allowed it (hopper_mla).
  EXPECT_EQ(decode_shape(64, 512, true, false, 1, true, kH200), DecodeShape::kMlaWgmma);
  EXPECT_EQ(decode_shape(64, 512, true, false, 4, true, kH200), DecodeShape::kMlaWgmma);
  EXPECT_EQ(decode_shape(64, 512, true, false, 1, false, kH200), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(64, 512, true, true, 1, false, kH200), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(64, 512, true, true, 1, true, kH200), DecodeShape::kColumns);  // fp8 cache
  // <= 16 rows (one m-tile) and v heads <= 256: warps split the keys; fp8 needs D % 64 == 0
  // and DV % 64 == 0.
  for (int d : {64, 128, 192, 256}) {
    EXPECT_EQ(decode_shape(d, d == 192 ? 128 : d, false, false, 1, false, kH200),
              DecodeShape::kWarpKeys);
    EXPECT_EQ(decode_shape(d, d == 192 ? 128 : d, false, true, 1, false, kH200),
              DecodeShape::kWarpKeys);
    EXPECT_EQ(decode_shape(d, d == 192 ? 128 : d, false, false, 4, false, kH200),
              DecodeShape::kColumns);
  }
  EXPECT_EQ(decode_shape(80, 80, false, false, 1, false, kH200), DecodeShape::kWarpKeys);
  EXPECT_EQ(decode_shape(80, 80, false, true, 1, false, kH200), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(96, 96, false, true, 1, false, kH200), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(128, 512, false, false, 1, false, kH200), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(64, 48, false, false, 1, false, kH200), DecodeShape::kWarpKeys);
  EXPECT_EQ(decode_shape(64, 48, false, true, 1, false, kH200), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(128, 96, false, true, 1, false, kH200), DecodeShape::kColumns);
}

// The warps-split-keys layout is sized for Hopper: where it needs more shared memory per block
// than the device has, kernel.cuh serves the shape instead (see also the next test for what
// fits nowhere).
TEST(DecodeConfig, NarrowFormForAtMostEightRows) {
  // The warps-split-keys kernel runs S^T = K Q^T when a CTA's rows (queries x group) fit N = 8.
  EXPECT_TRUE(wk_narrow(1, 1));
  EXPECT_TRUE(wk_narrow(4, 1));
  EXPECT_TRUE(wk_narrow(8, 1));
  EXPECT_TRUE(wk_narrow(4, 2));
  EXPECT_TRUE(wk_narrow(1, 8));
  EXPECT_FALSE(wk_narrow(4, 3));   // 12 rows: the 16-row form
  EXPECT_FALSE(wk_narrow(4, 4));   // verify q4 with a group of 4
  EXPECT_FALSE(wk_narrow(16, 1));  // a group of 16
}

TEST(DecodeConfig, ShapeRuleFollowsTheDevicesSharedMemory) {
  EXPECT_EQ(decode_shape(128, 128, false, false, 1, false, kAda), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(128, 128, false, true, 1, false, kAda), DecodeShape::kWarpKeys);
  EXPECT_EQ(decode_shape(64, 64, false, false, 1, false, kAda), DecodeShape::kWarpKeys);
  EXPECT_EQ(decode_shape(128, 128, false, false, 1, false, kA100), DecodeShape::kWarpKeys);
  EXPECT_EQ(decode_shape(256, 256, false, false, 1, false, kA100), DecodeShape::kColumns);
  EXPECT_EQ(decode_shape(256, 256, false, true, 1, false, kA100), DecodeShape::kWarpKeys);
  for (int d : {64, 80, 96, 128, 192, 256})
    for (bool fp8 : {false, true}) {
      const int dv = d == 192 ? 128 : d;
      const WkLayout narrow = wk_layout(d, dv, fp8, true), wide = wk_layout(d, dv, fp8, false);
      // The rule and the layouts agree: warps-split-keys exactly where both forms' layouts fit.
      for (int block : {kAda, kA100, kH200})
        if (!fp8 || (d % 64 == 0 && dv % 64 == 0))
          EXPECT_EQ(decode_shape(d, dv, false, fp8, 1, false, block) == DecodeShape::kWarpKeys,
                    std::max(wk_smem_bytes(narrow), wk_smem_bytes(wide)) <= block)
              << d << " fp8 " << fp8 << " block " << block;
      for (const WkLayout& l : {narrow, wide}) {
        // Residency on a smaller SM: an A100 (164 KB per SM) holds fewer of the Hopper layout.
        EXPECT_EQ(wk_resident(l, 228 * 1024), wk_form_ctas(l)) << d;
        EXPECT_LE(wk_resident(l, 164 * 1024) * (wk_smem_bytes(l) + 1024),
                  std::max(164 * 1024, wk_smem_bytes(l) + 1024))
            << d;
      }
    }
  EXPECT_EQ(wk_resident(wk_layout(128, 128, false, true), 164 * 1024), 1);
  // Where the warps-split-keys layout does not fit, kernel.cuh's 16-row layout (the fallback)
  // does: head dim 128 (bf16) and 192/128 on sm_86/89, head dim 256 on an A100. Head dim 256 bf16
  // fits neither on sm_86/89 (113 KB): a clear error at launch (common/launch.cuh).
  EXPECT_LE((DecodeConfig<128, 128, false, false, 1>::SMEM_BYTES), kAda);
  EXPECT_LE((DecodeConfig<192, 128, false, false, 1>::SMEM_BYTES), kAda);
  EXPECT_EQ(decode_shape(192, 128, false, false, 1, false, kAda), DecodeShape::kColumns);
  EXPECT_LE((DecodeConfig<256, 256, false, false, 1>::SMEM_BYTES), kA100);
  EXPECT_GT((DecodeConfig<256, 256, false, false, 1>::SMEM_BYTES), kAda);
}

// Shared memory per block of the kernel decode_shape picks for (d, dv, fp8, m-tiles) on a
// device with `block` bytes per block (no MLA Hopper kernel: it needs sm_90a).
template <int D, int DV, bool FP8, int MT>
int picked_bytes(int block) {
  if (decode_shape(D, DV, false, FP8, MT, false, block) == DecodeShape::kWarpKeys)
    return std::max(wk_smem_bytes(wk_layout(D, DV, FP8, true)),
                    wk_smem_bytes(wk_layout(D, DV, FP8, false)));
  return DecodeConfig<D, DV, false, FP8, MT>::SMEM_BYTES;
}

// Every built head dim fits an H200 whichever kernel serves it; on smaller GPUs the shapes below
// exceed the device and end in launch_with_smem's flashback::Error (none of them fitted before
// session 7 either). Pinned here so a change to the layouts shows up.
TEST(DecodeConfig, WhatFitsWhichGpu) {
  struct Row {
    const char* name;
    int (*bytes)(int);
    bool a100, ada;  // fits an A100 (163 KB per block), an sm_86/89 GPU (99 KB)
  };
  const Row rows[] = {
      {"64 x16", picked_bytes<64, 64, false, 1>, true, true},
      {"64 x64", picked_bytes<64, 64, false, 4>, true, false},
      {"64 fp8 x16", picked_bytes<64, 64, true, 1>, true, true},
      {"80 x16", picked_bytes<80, 80, false, 1>, true, true},
      {"96 x16", picked_bytes<96, 96, false, 1>, true, true},
      {"128 x16", picked_bytes<128, 128, false, 1>, true, true},
      {"128 x64", picked_bytes<128, 128, false, 4>, true, false},
      {"128 fp8 x16", picked_bytes<128, 128, true, 1>, true, true},
      {"128 fp8 x64", picked_bytes<128, 128, true, 4>, true, true},
      {"192/128 x16", picked_bytes<192, 128, false, 1>, true, true},
      {"192/128 x64", picked_bytes<192, 128, false, 4>, true, false},
      {"256 x16", picked_bytes<256, 256, false, 1>, true, false},
      {"256 x64", picked_bytes<256, 256, false, 4>, false, false},
      {"256 fp8 x16", picked_bytes<256, 256, true, 1>, true, true},
  };
  for (const Row& r : rows) {
    EXPECT_LE(r.bytes(kH200), kH200) << r.name;
    EXPECT_EQ(r.bytes(kA100) <= kA100, r.a100) << r.name << ": " << r.bytes(kA100);
    EXPECT_EQ(r.bytes(kAda) <= kAda, r.ada) << r.name << ": " << r.bytes(kAda);
  }
}

// A CTA's share of an SM: 228 KB over the resident CTAs, 1 KB of each reserved, 227 KB at most.
TEST(DecodeConfig, SharedMemoryPerCta) {
  EXPECT_EQ(decode_smem_per_cta(1), 227 * 1024);
  EXPECT_EQ(decode_smem_per_cta(2), 113 * 1024);
  EXPECT_EQ(decode_smem_per_cta(3), 76 * 1024 - 1024);
}

TEST(DecodeConfig, WarpKeysLayoutFitsItsResidency) {
  struct Want {
    int d, dv;
    bool fp8;
    int ctas, stages;
  };
  // The shapes measured on the H200 (docs/PERFORMANCE_GPU.md, session 7): head dim 128 runs two
  // CTAs per SM with three stages (bf16: 34 KB stages, 32 KB with unpadded rows); head dim 256
  // one CTA; head dim 64 bf16 three (four with unpadded rows, FLASHBACK_WK_SWIZZLE=1). fp8 (18 KB
  // stages, no widened V copy) ran three CTAs with three stages until session 21 measured four
  // with two faster; head dim 256 fp8 takes two with two (its registers hold two CTAs; a third
  // stage, which fits since the narrow form holds 8 q rows, measured no faster).
  for (const Want& w : std::vector<Want>{{128, 128, false, 2, 3},
                                         {128, 128, true, 4, 2},
                                         {256, 256, false, 1, 3},
                                         {256, 256, true, 2, 2},
                                         {64, 64, false, FLASHBACK_WK_SWIZZLE ? 4 : 3, 3}}) {
    const WkLayout l = wk_layout(w.d, w.dv, w.fp8, true);
    EXPECT_EQ(l.ctas, w.ctas) << w.d << " fp8 " << w.fp8;
    EXPECT_EQ(l.stages, w.stages) << w.d << " fp8 " << w.fp8;
  }
  // The 16-row form: bf16 as the narrow one; fp8 keeps three stages (three CTAs by its
  // registers), as it measured faster on verify_b64_q4_L4k than two. (With unpadded rows its
  // shared memory would hold four CTAs with three stages; its registers still hold three.)
  for (const Want& w : std::vector<Want>{{128, 128, false, 2, 3},
                                         {128, 128, true, FLASHBACK_WK_SWIZZLE ? 4 : 3, 3},
                                         {256, 256, true, 1, 4},
                                         {64, 64, true, 6, 3}}) {
    const WkLayout l = wk_layout(w.d, w.dv, w.fp8, false);
    EXPECT_EQ(l.ctas, w.ctas) << w.d << " fp8 " << w.fp8 << " wide";
    EXPECT_EQ(l.stages, w.stages) << w.d << " fp8 " << w.fp8 << " wide";
  }
  // The 16-row form's registers cap it at three CTAs of four warps at head dim 128, two at 256;
  // the narrow one's at four and two (ptxas: 115 and 174 registers for fp8).
  EXPECT_EQ(wk_reg_ctas(4, false, 128), 3);
  EXPECT_EQ(wk_reg_ctas(4, true, 128), 4);
  EXPECT_EQ(wk_reg_ctas(4, false, 256), 2);
  EXPECT_EQ(wk_reg_ctas(4, true, 256), 2);
  const WkLayout f8 = wk_layout(128, 128, true, true), f8w = wk_layout(128, 128, true, false);
  EXPECT_EQ(wk_form_ctas(f8), f8.ctas);
  EXPECT_EQ(wk_form_ctas(f8w), 3);
  EXPECT_EQ(wk_resident(f8w, 228 * 1024), 3);
  EXPECT_EQ(wk_form_ctas(wk_layout(64, 64, true, false)), 3);
  for (int warps : {2, 4})
    for (int d : {64, 80, 96, 128, 192, 256})
      for (bool fp8 : {false, true})
        for (bool narrow : {true, false}) {
          if (fp8 && d % 64 != 0) continue;
          const int dv = d == 192 ? 128 : d;
          const WkLayout l = wk_layout(d, dv, fp8, narrow, warps);
          const int smem = l.q_bytes + l.static_bytes + l.stages * (l.stage_bytes + l.loc_stage);
          EXPECT_EQ(l.n, 16 * warps);
          // q in shared memory: the rows the form's mma reads (narrow: its N = 8), 8 elements of
          // pitch padding.
          EXPECT_EQ(l.q_rows, narrow ? 8 : WkLayout::ROWS);
          EXPECT_EQ(l.q_bytes, l.q_rows * (d + 8) * 2);
          EXPECT_GE(l.stages, 2) << d;
          EXPECT_LE(l.stages, 4) << d;
          EXPECT_LE(smem, decode_smem_per_cta(l.ctas)) << d;
          // The residency is the largest (up to 8) that keeps three stages, or for fp8 in the
          // narrow form two (exactly) from as many as its registers allow down: one more CTA per SM
          // would not get them; one CTA takes what fits.
          const auto least = [&](int ctas) {
            return fp8 && narrow && ctas <= wk_reg_ctas(warps, true, dv) ? 2 : 3;
          };
          if (l.ctas > 1) EXPECT_GE(l.stages, least(l.ctas)) << d;
          // fp8 in the narrow form at the CTAs its registers hold: two stages exactly.
          if (fp8 && narrow && l.ctas > 1 && l.ctas <= wk_reg_ctas(warps, true, dv))
            EXPECT_EQ(l.stages, 2) << d;
          if (l.ctas < 8) {
            const int more = decode_smem_per_cta(l.ctas + 1) - l.q_bytes - l.static_bytes;
            EXPECT_LT(more / (l.stage_bytes + l.loc_stage), least(l.ctas + 1)) << d;
          }
          // 16-bit rows of whole 128-byte lines copied by cp.async (not head dim 256's bulk
          // copies) are swizzled and unpadded; the others end 16 bytes past the row (the pad that
          // spreads a read's rows over the banks).
          // fp8 head dim 128 too (its rows are one line each).
          const int eb = fp8 ? 1 : 2;
          const RowSwizzle want = !FLASHBACK_WK_SWIZZLE                       ? RowSwizzle::kNone
                                  : !fp8 && (d == 64 || d == 128 || d == 192) ? RowSwizzle::kLdsm
                                  : fp8 && d == 128                           ? RowSwizzle::kFp8
                                                                              : RowSwizzle::kNone;
          EXPECT_EQ(l.swizzle, want) << d << " fp8 " << fp8;
          const int pad = want == RowSwizzle::kNone ? 16 : 0;
          EXPECT_EQ(l.kraw, d * eb + pad);
          EXPECT_EQ(l.vraw, dv * eb + pad);
          // The merge at the end reuses the stages for the warps' rows x DV fp32 partials (fp8:
          // rows padded by a float), the narrow form's 8 rows, the 16-row form's 16.
          const int rows = narrow ? 8 : WkLayout::ROWS, op = fp8 ? dv + 1 : dv;
          EXPECT_EQ(wk_merge_bytes(l),
                    l.warps * rows * op * 4 + 2 * l.warps * rows * 4 + 2 * rows * 4);
          EXPECT_LE(wk_merge_bytes(l), l.stages * l.stage_bytes)
              << d << " fp8 " << fp8 << " narrow " << narrow;
        }
}

bool distinct(const int (&g)[8]) {
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < i; ++j)
      if (g[i] == g[j]) return false;
  return true;
}

// Byte b of stage row `row` as the kernel addresses it (warp_keys.cuh's wk::row_at).
int row_at(const WkLayout& l, int pitch, int row, int b) {
  return row * pitch + stage_row_byte(l.swizzle, row, b);
}

// Every 8-lane phase of the kernel's ldmatrix reads (8 rows from a multiple of 8, one 16-byte
// chunk each) and of its fp8 V reads touches 8 different bank groups of the rows, padded or
// swizzled; so do its fp8 K reads when swizzled.
TEST(DecodeConfig, StageRowsSpreadTheKernelsReads) {
  for (int d : {64, 80, 96, 128, 192, 256})
    for (bool swizzle : {false, true}) {
      const WkLayout l = wk_layout(d, d == 192 ? 128 : d, false, true, kWkWarps, swizzle);
      EXPECT_EQ(l.swizzle, swizzle && (d == 64 || d == 128 || d == 192) ? RowSwizzle::kLdsm
                                                                        : RowSwizzle::kNone)
          << d;
      for (int pitch : {l.kraw, l.vraw})
        for (int r0 : {0, 8})
          for (int c = 0; c < pitch / 16; ++c) {
            int g[8];
            for (int i = 0; i < 8; ++i) g[i] = (row_at(l, pitch, r0 + i, c * 16) / 16) % 8;
            EXPECT_TRUE(distinct(g)) << d << " " << pitch << " " << r0 << " " << c;
          }
    }
  // fp8 head dim 128, V (v_fp8_words): lane l = 4 g + c reads chunk g of row 2 c + p + 8 h.
  // K (the S step): lane l reads chunk 4 gq + l % 4 of row 8 nt + l / 4, so an 8-lane phase
  // takes chunks 4 gq..4 gq + 3 of two rows: 2-way conflicts with padded rows (144 bytes), none
  // swizzled.
  for (bool swizzle : {false, true}) {
    const WkLayout f8 = wk_layout(128, 128, true, true, kWkWarps, swizzle);
    EXPECT_EQ(f8.swizzle, swizzle ? RowSwizzle::kFp8 : RowSwizzle::kNone);
    for (int q = 0; q < 4; ++q)
      for (int ph = 0; ph < 4; ++ph) {
        int g[8];
        for (int l = 0; l < 8; ++l) {
          const int lane = 8 * ph + l, grp = lane / 4, c = lane % 4;
          g[l] = (row_at(f8, f8.vraw, 2 * c + (q & 1) + 8 * (q >> 1), grp * 16) / 16) % 8;
        }
        EXPECT_TRUE(distinct(g)) << "V " << swizzle << " " << q << " " << ph;
      }
    for (int nt = 0; nt < 2; ++nt)
      for (int gq = 0; gq < 2; ++gq)
        for (int ph = 0; ph < 4; ++ph) {
          int g[8];
          for (int l = 0; l < 8; ++l) {
            const int lane = 8 * ph + l;
            g[l] = (row_at(f8, f8.kraw, 8 * nt + lane / 4, gq * 64 + (lane % 4) * 16) / 16) % 8;
          }
          EXPECT_EQ(distinct(g), swizzle) << "K " << nt << " " << gq << " " << ph;
        }
  }
}

// Swizzled rows exist so that every copy writes whole shared-memory lines: the 8 lanes that copy
// one key's 128-byte run (copy_keys_warp, 8 lanes per key) fill exactly one line, each lane its
// own 16-byte chunk. (Padded rows split each run over two lines; the SM then reads 1.5x the L2
// sectors: config.h.)
TEST(DecodeConfig, SwizzledCopiesWriteWholeLines) {
  for (int d : {64, 128, 192, 0}) {  // 0: fp8 head dim 128
    const bool fp8 = d == 0;
    const WkLayout l = fp8 ? wk_layout(128, 128, true, true, kWkWarps, true)
                           : wk_layout(d, d == 192 ? 128 : d, false, true, kWkWarps, true);
    ASSERT_NE(l.swizzle, RowSwizzle::kNone) << d;
    for (int pitch : {l.kraw, l.vraw})
      for (int key = 0; key < WkLayout::KW; ++key)
        for (int run = 0; run < pitch / 128; ++run) {
          int g[8];
          const int line = row_at(l, pitch, key, run * 128) / 128;
          for (int c = 0; c < 8; ++c) {
            const int mask = fp8 ? (key & 6) ^ ((key & 1) << 2) : key & 7;
            const int at = key * pitch + (((c + 8 * run) * 16) ^ (mask << 4));  // the copy's
            EXPECT_EQ(at, row_at(l, pitch, key, (c + 8 * run) * 16));           // = the reads'
            EXPECT_EQ(at / 128, line) << d << " key " << key << " run " << run;
            g[c] = (at / 16) % 8;
          }
          EXPECT_TRUE(distinct(g)) << d << " key " << key << " run " << run;
        }
  }
}

}  // namespace
}  // namespace flashback::cuda

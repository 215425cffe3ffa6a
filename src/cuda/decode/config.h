// Compile-time shape of the short-query paged attention kernel, per (head dims, KV kind, row
// tiles). Every shared-memory and register figure is derived here so the kernel stays generic.
#pragma once

#include "cuda/common/row_swizzle.h"

namespace flashback::cuda {

// Shared memory a CTA may take when `ctas` of them are resident on an SM (the SM has 228 KB, the
// driver reserves 1 KB per CTA, a CTA may take at most 227 KB).
constexpr int decode_smem_per_cta(int ctas) {
  const int share = 228 * 1024 / ctas - 1024;
  return share < 227 * 1024 ? share : 227 * 1024;
}

/// K/V stages of `stage` bytes beside `base` bytes, up to 4: as many as fit with two CTAs per SM
/// when at least `min_two` do, else as many as fit with one CTA per SM.
constexpr int decode_stages(int base, int stage, int min_two) {
  const int two = (decode_smem_per_cta(2) - base) / stage;
  const int one = (decode_smem_per_cta(1) - base) / stage;
  const int n = two >= min_two ? two : one;
  return n < 4 ? n : 4;
}

/// The three short-query kernels; `decode_shape` (below) is the one rule that picks among them
/// (launch.cuh launches it, dispatch.cu plans its splits). `mla_ok`: DecodeParams::hopper_mla (a
/// 64/512 qv shape with 16-bit caches on an sm_90a build and device); `m_tiles`: 16-row m-tiles per
/// block.
enum class DecodeShape {
  kMlaWgmma,  // mla_wgmma.cuh: MLA absorbed on Hopper
  kWarpKeys,  // warp_keys.cuh: <= 16 rows, v heads <= 256 (fp8: d % 64 == 0, dv % 64 == 0)
  kColumns,   // kernel.cuh: everything else
};
template <int D_, int DV_, bool QV_, bool FP8_, int MT_>
struct DecodeConfig {
  static constexpr int D = D_;     // q/k head dim (MLA: the rope part)
  static constexpr int DV = DV_;   // v head dim (MLA: the latent width, also q_nope's)
  static constexpr bool QV = QV_;  // MLA absorbed: logits add q_nope . c_kv
  static constexpr bool FP8 = FP8_;
  static constexpr int MT = MT_;  // 16-row m-tiles per CTA (rows = query x head-in-group)
  static constexpr int ROWS = 16 * MT;
  // MLA: 8 warps so the 512-wide output splits into 64 columns per warp (32 fp32 registers per
  // m-tile); MHA: 4 warps.
  static constexpr int WARPS = QV ? 8 : 4;
  static constexpr int THREADS = 32 * WARPS;
  // Keys per tile: 32 for 128-wide heads and up, so that several stages (tiles in flight) fit
  // with two CTAs per SM; Little's law at ~4.3 TB/s and ~1-2 us loaded latency wants ~32-64 KB
  // in flight per SM.
  static constexpr int N = (D + DV) < 256 ? 64 : 32;
  static constexpr int EB = FP8 ? 1 : 2;  // bytes per cache element
  // Shared-memory row pitches (in elements / bytes), padded by 16 bytes so the 8 rows an
  // ldmatrix reads fall in different banks.
  static constexpr int QP = D + 8, QVP = DV + 8;                 // 16-bit elements
  static constexpr int KP = D + 8, VP = DV + 8;                  // 16-bit converted tiles
  static constexpr int KRAW = D * EB + 16, VRAW = DV * EB + 16;  // raw stage rows, bytes
  static constexpr int SP = N + 4;                               // fp32 logits
  static constexpr int PP = N + 8;                               // 16-bit probabilities
  static constexpr int STAGE_BYTES = N * (KRAW + VRAW);
  static constexpr int LOC_BYTES = 4 * N * 16;  // a tile's key offsets per stage (up to 4)
  static constexpr int BASE_BYTES = ROWS * QP * 2 + (QV ? ROWS * QVP * 2 : 0) +
                                    (FP8 ? N * (KP + VP) * 2 : 0) + ROWS * SP * 4 + ROWS * PP * 2 +
                                    4 * ROWS * 4 + LOC_BYTES;
  // Two CTAs per SM whenever two stages fit that way.
  static constexpr int STAGES = decode_stages(BASE_BYTES, STAGE_BYTES, 2);
  static constexpr int SMEM_BYTES = BASE_BYTES + STAGES * STAGE_BYTES;
  static constexpr int TPR = THREADS / ROWS;  // softmax threads per row
  static constexpr int NT8 = DV / 8;          // output n8 tiles, dealt round-robin to warps
  static constexpr int NT8_PER_WARP = (NT8 + WARPS - 1) / WARPS;

  static_assert(D % 16 == 0 && DV % 16 == 0, "head dims must be multiples of 16");
  static_assert(N % 16 == 0, "keys per tile must be a multiple of 16");
  static_assert(TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0,
                "softmax row groups must be power-of-two lane groups within a warp");
  static_assert(STAGES >= 2, "fewer than two K/V stages fit in shared memory");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per CTA exceeds 227 KB");
  static_assert(N <= THREADS, "one thread per key reads the page table");
};

}  // namespace flashback::cuda

namespace flashback::cuda {

// Shared-memory layout of the warps-split-keys kernel, as plain constexpr arithmetic so the host
// (the split plan in dispatch.cu) reads the same residency the kernel is built for.
struct WkLayout {
  static constexpr int KW = 16, ROWS = 16;  // keys per warp per tile (the P V mma's k); rows
  int dv;                                   // v's head dim (the registers' share, wk_regs)
  int warps, n;                             // warps per CTA; keys per tile (KW per warp)
  int eb, qp, kraw, vraw;  // element bytes; q's pitch (16-bit elements); stage rows (bytes)
  int q_rows;              // q rows held in shared memory: the narrow form reads 8 (its N)
  RowSwizzle swizzle;      // kNone: padded stage rows; else unpadded, chunks XOR-swizzled (below)
  int stage_bytes, loc_stage, q_bytes;
  int static_bytes;  // static __shared__ of the kernel (fp8: load_q_fp16's reduction; the pick),
                     // rounded up to the line the dynamic part starts on
  int ctas, stages;  // resident CTAs per SM (shared memory, fp8 narrow also registers), stages
  bool narrow;       // the form it is built for (wk_narrow): the narrow one or the 16-row one
};

// Stage rows. The rows a warp's ldmatrix (or fp8 fragment) reads take at once must fall in
// different banks: either rows padded by 16 bytes, or (the default) rows of whole 128-byte lines
// unpadded with chunk x of row r stored at chunk x ^ mask(r) (FLASHBACK_WK_SWIZZLE=1;
// common/row_swizzle.h: kLdsm, r % 8, for 16-bit rows that are whole lines and go by cp.async
// (common/key_rows.cuh takes rows of 512 bytes and up by bulk copy); kFp8 for fp8 head dim 128,
// whose rows are one line each; fp8 rows of 64 or 256 bytes keep the pad: V's reads there take
// chunks 2 g + h that no 8-row mask spreads). common/paged.cuh's copy_keys_warp writes them,
// warp_keys.cuh's wk::row_at reads them.
//
// What the H200 showed (docs/PERFORMANCE_GPU.md, session 23): a copy whose 128-byte runs cross
// shared-memory lines makes the SM read more L2 sectors than it needs. decode_b64_L8k with padded
// rows reads 100.7 M L2 sectors for 67.1 M of K/V (2.29 per request, 33.6 % L2 hits on data read
// once, the L2 93.9 % busy; fp8 the same ratio). A copy-only probe of its reads
// (tools/probes/kv_pattern.cu, with the kernel's ldmatrix reads) ran 4.14 TB/s into padded rows
// and 4.48 into swizzled ones, 4.00 sectors per request. But the kernel's stages began 16 bytes
// into a line (static __shared__ first, then the dynamic part at 16-byte alignment), so its
// swizzled rows crossed lines too: 2.67 sectors per request, 50 % hits, 7-11 % slower than
// padded (session 23; session 19's swizzle, 5.6-8.5 % slower in session 20, had the same
// offset). The stages now start on a line (__align__(128), SASS: dynamic base 0x480), and there
// the swizzled rows read 3.99 sectors per request with no L2 hits and run 5.7-6.7 % faster than
// padded ones on every bf16 head-dim-128 workload, 4.2 % on fp8 (session 24: decode_b64_L8k
// 0.4958 against 0.5312 ms, 4.33 TB/s; decode_fp8_b64_L8k 0.2925 against 0.3052), so they are
// the default; FLASHBACK_WK_SWIZZLE=0 builds the padded rows for A/B runs.
#ifndef FLASHBACK_WK_SWIZZLE
#define FLASHBACK_WK_SWIZZLE 1
#endif
// Stages of the fp8 narrow form at the CTAs its registers hold (wk_layout, below), at most. Three
// fit at head dim 128 with unpadded rows and measured no faster (session 24: 0.98-1.03x).
#ifndef FLASHBACK_WK_FP8_STAGES
#define FLASHBACK_WK_FP8_STAGES 2
#endif
constexpr RowSwizzle wk_swizzled(int d, int dv, bool fp8, bool enabled) {
  if (!enabled) return RowSwizzle::kNone;
  if (fp8) return d == 128 && dv == 128 ? RowSwizzle::kFp8 : RowSwizzle::kNone;
  const int kb = d * 2, vb = dv * 2;
  return kb % 128 == 0 && vb % 128 == 0 && !(kb >= 512 && vb >= 512) ? RowSwizzle::kLdsm
                                                                     : RowSwizzle::kNone;
}

/// Warps per CTA of the warps-split-keys kernel (the one instance built). The layout takes the
/// count as a parameter; 2-warp CTAs (32-key tiles, four resident per SM) were built and run in
/// session 20 and were 2-17 % slower on every bf16 workload, 0.6 % faster on fp8
/// (docs/PERFORMANCE_GPU.md), so only 4 is instantiated.
inline constexpr int kWkWarps = 4;

// Registers per thread of warp_keys.cuh, by form and v head dim: the O accumulators (16-row form
// DV / 2 per thread, narrow DV / 4, plus q's fragments, D / 8) grow with the head; base + DV / 2
// in either form fits what ptxas reports (sm_90a, where the launch bounds left room): the 16-row
// form ~160-170 at 128 (session 12) and 226-239 at 256; the narrow form 114-126 at 128 (115 fp8,
// session 21) and 174 (fp8) / 201 (bf16) at 256 (session 22). The narrow form's residency is
// its shared memory's except where fp8 takes two stages (wk_layout): head dim 64 fp8 runs six
// CTAs, which its launch bounds fit in 76 registers without spills.
constexpr int kWkWideRegBase = 104, kWkNarrowRegBase = 64;
constexpr int wk_regs(bool narrow, int dv) {
  return (narrow ? kWkNarrowRegBase : kWkWideRegBase) + dv / 2;
}

/// CTAs of `warps` warps that an SM's 65536 registers hold in the narrow or the 16-row form.
constexpr int wk_reg_ctas(int warps, bool narrow, int dv) {
  return 65536 / (32 * warps * wk_regs(narrow, dv));
}

/// The layout for the narrow (`narrow`, wk_narrow) or the 16-row form of the kernel.
constexpr WkLayout wk_layout(int d, int dv, bool fp8, bool narrow, int warps = kWkWarps,
                             bool swizzle = FLASHBACK_WK_SWIZZLE) {
  WkLayout l{};
  l.narrow = narrow;
  l.dv = dv;
  l.warps = warps;
  l.n = warps * WkLayout::KW;
  l.eb = fp8 ? 1 : 2;
  l.qp = d + 8;
  l.swizzle = wk_swizzled(d, dv, fp8, swizzle);  // else padded rows (above)
  const int pad = l.swizzle == RowSwizzle::kNone ? 16 : 0;
  l.kraw = d * l.eb + pad;
  l.vraw = dv * l.eb + pad;
  l.stage_bytes = l.n * (l.kraw + l.vraw);
  l.loc_stage = l.n * 16;  // a tile's key offsets (KeyBytes per key)
  l.q_rows = narrow ? 8 : WkLayout::ROWS;
  l.q_bytes = l.q_rows * l.qp * 2;
  // fp8 K and V fragments are built in registers from the raw stage bytes: no widened copy.
  // Static shared memory (and entry.cuh's longest-first pick) comes first; the dynamic part
  // (the stages) starts at the next 128-byte line (warp_keys.cuh's __align__(128)).
  l.static_bytes = ((fp8 ? 32 * 4 : 0) + 4 + 127) / 128 * 128;
  const auto stages_at = [&l](int ctas) {
    const int n =
        (decode_smem_per_cta(ctas) - l.q_bytes - l.static_bytes) / (l.stage_bytes + l.loc_stage);
    return n < 4 ? n : 4;
  };
  // The most resident CTAs (up to 8) that still get three stages, i.e. two tiles in flight per
  // warp while it computes on a third; one CTA when none does. The warps wait on their copies
  // most of the time, so the tiles in flight come first, then the warps to overlap them. On the
  // H200 (docs/PERFORMANCE_GPU.md, session 7), bf16 head dim 128 with 2 CTAs x 3 stages against
  // 3 x 2: verify_b64_q4_L4k -6 %, cross -5 %, decode_b1_L128k -4 %, decode_b64_L4k -3 %,
  // decode_b64_L8k -1 %; fp8 (18 KB stages) with 3 x 3 against 2 x 5 (the cap of 4 stages
  // raised for that test): 3 % faster.
  // fp8 caches in the narrow form take two stages from as many CTAs as its registers allow (four)
  // down: a key costs the tensor cores what a bf16 one does, plus its dequantisation, on half the
  // bytes, so warps to overlap that work come before a third stage. Session 21, same call, 4 x 2
  // against 3 x 3 (head dim 128; 256: 2 x 2 against 1 x 4): decode_fp8_b64_L8k -7.2 %, _p1
  // -8.2 %, b64_L4k -16 %, mha_b32_L4k -7 %, b128_ragged -2 %, b1_L128k 0 %, head dim 256
  // window -18 % and softcap -23 %, cross -29 %. The 16-row form (three CTAs by its registers)
  // keeps three stages: verify_b64_q4_L4k on fp8 was 5 % slower with 3 x 2. Session 22: head
  // dim 256 at 3 x 2 (its registers squeezed from 174 to 167) was 3-6 % slower than 2 x 2 on
  // the fp8 window and softcap workloads, whose 256 entries then need three splits and a combine
  // to fill 396 slots, so the CTAs are the ones its registers hold (wk_reg_ctas), and at 2 x 3
  // (a third stage fits since the narrow form holds 8 q rows) 0.6-1.5 % slower than 2 x 2, so
  // two stages exactly. bf16 head dim 128 narrow at 3 x 2 was 1.5-6 % slower than 2 x 3 on all
  // but decode_b1_L128k (-1.4 %), so bf16 keeps three stages.
  l.ctas = 1;
  l.stages = stages_at(1);
  for (int c = 8; c > 1; --c) {
    if (fp8 && narrow && c <= wk_reg_ctas(warps, true, dv) && stages_at(c) >= 2) {
      l.ctas = c;
      l.stages = stages_at(c) < FLASHBACK_WK_FP8_STAGES ? stages_at(c) : FLASHBACK_WK_FP8_STAGES;
      break;
    }
    if (stages_at(c) >= 3) {
      l.ctas = c;
      l.stages = stages_at(c);
      break;
    }
  }
  return l;
}

/// Resident CTAs per SM the layout is built for: its shared memory's, in the 16-row form capped
/// by the register file (the narrow form's __launch_bounds__ fits its registers to the count).
constexpr int wk_form_ctas(const WkLayout& l) {
  if (l.narrow) return l.ctas;
  const int regs = wk_reg_ctas(l.warps, false, l.dv);
  return l.ctas < regs ? l.ctas : regs < 1 ? 1 : regs;
}

/// The cross-warp merge's scratch at the end, which reuses the stages: per warp an fp32 partial
/// of each row the form holds (`q_rows`: the narrow form's 8, the 16-row form's 16) and each v
/// column (fp8: rows padded by one float, so the permuted columns' scalar stores spread over
/// the banks, 4-way instead of one bank for all 32 lanes), the row maxima and sums, then the
/// merged row statistics. The narrow form's 8 rows let fp8 head dim 128's two unpadded 16 KB
/// stages hold it.
constexpr int wk_merge_pitch(const WkLayout& l) { return l.eb == 1 ? l.dv + 1 : l.dv; }
constexpr int wk_merge_bytes(const WkLayout& l) {
  return l.warps * l.q_rows * wk_merge_pitch(l) * 4 + 2 * l.warps * l.q_rows * 4 + 2 * l.q_rows * 4;
}

/// Shared memory the warps-split-keys kernel takes per CTA (dynamic and static).
constexpr int wk_smem_bytes(const WkLayout& l) {
  return l.q_bytes + l.static_bytes + l.stages * (l.stage_bytes + l.loc_stage);
}

/// Resident CTAs of the warps-split-keys kernel on an SM with `smem_sm` bytes of shared memory
/// (the layout is sized for Hopper's 228 KB; an A100 holds fewer).
constexpr int wk_resident(const WkLayout& l, int smem_sm) {
  const int fit = smem_sm / (wk_smem_bytes(l) + 1024), built = wk_form_ctas(l);
  return fit < 1 ? 1 : fit < built ? fit : built;
}

/// The one rule that picks the short-query kernel (launch.cuh launches it, dispatch.cu plans its
/// splits). `mla_ok`: DecodeParams::hopper_mla (a 64/512 qv shape with 16-bit caches on an sm_90a
/// build and device); `m_tiles`: 16-row m-tiles per block; `smem_block`: the device's shared
/// memory per block (opt-in maximum). The warps-split-keys layout is sized for Hopper; where it
/// does not fit (head dim 128 bf16 needs 112 KB: not on sm_86/89's 99 KB; head dim 256 214 KB:
/// not on an A100's 163 KB) kernel.cuh serves (its 16-row layouts: 76–113 KB; head dim 256 bf16
/// fits neither on sm_86/89, a clear error at launch).
constexpr DecodeShape decode_shape(int d, int dv, bool qv, bool fp8, int m_tiles, bool mla_ok,
                                   int smem_block) {
  if (qv && mla_ok && !fp8) return DecodeShape::kMlaWgmma;
  if (!qv && dv <= 256 && m_tiles == 1 && (!fp8 || (d % 64 == 0 && dv % 64 == 0)) &&
      wk_smem_bytes(wk_layout(d, dv, fp8, true)) <= smem_block &&
      wk_smem_bytes(wk_layout(d, dv, fp8, false)) <= smem_block)  // either form may run
    return DecodeShape::kWarpKeys;
  return DecodeShape::kColumns;
}

/// Whether the warps-split-keys kernel runs narrow (S^T = K Q^T, warp_keys.cuh): every CTA's rows
/// (max_q queries x a GQA group of q heads) fit the mma's N = 8. dispatch.cu decides it once
/// (DecodeParams::narrow; FLASHBACK_DECODE_NARROW=0 keeps the 16-row form, for A/B runs).
constexpr bool wk_narrow(int group, int max_q) { return group * max_q <= 8; }

// The warps-split-keys shape (warp_keys.cuh) for up to 16 rows per CTA (decode with GQA groups
// up to 16, verify with group x tokens <= 16) and v heads up to 256 wide: each of the WARPS warps
// takes 16 keys of every tile and keeps S, P and its O partial (16 x DV fp32) in registers.
// NARROW: the form (wk_narrow), which the layout depends on.
template <int D_, int DV_, bool FP8_, bool NARROW_>
struct DecodeWkConfig {
  static constexpr int D = D_, DV = DV_;
  static constexpr bool FP8 = FP8_, NARROW = NARROW_;
  static constexpr WkLayout L = wk_layout(D, DV, FP8, NARROW);
  static constexpr int WARPS = L.warps, THREADS = 32 * WARPS;
  static constexpr int KW = WkLayout::KW;  // keys per warp per tile (the k of the P V mma)
  static constexpr int N = L.n;            // keys per tile
  static constexpr int ROWS = WkLayout::ROWS, Q_ROWS = L.q_rows;
  static constexpr int EB = L.eb;
  static constexpr int QP = L.qp, KRAW = L.kraw, VRAW = L.vraw;
  static constexpr RowSwizzle SWIZZLE = L.swizzle;
  static constexpr int STAGE_BYTES = L.stage_bytes, Q_BYTES = L.q_bytes;
  static constexpr int CTAS = L.ctas, STAGES = L.stages;
  static constexpr int LOC_BYTES = STAGES * L.loc_stage;
  static constexpr int BASE_BYTES = Q_BYTES + LOC_BYTES;
  static constexpr int SMEM_BYTES = BASE_BYTES + STAGES * STAGE_BYTES;
  static constexpr int OP = wk_merge_pitch(L);  // the merge's row pitch (floats; wk_merge_bytes)
  static constexpr int MERGE_BYTES = wk_merge_bytes(L);

  static_assert(D % 16 == 0 && DV % 16 == 0 && DV <= 256, "head dims");
  static_assert(!FP8 || (D % 64 == 0 && DV % 64 == 0),
                "fp8 K fragments are read 64 dims at a time, V fragments 8 columns at a time");
  static_assert(STAGES >= 2, "fewer than two K/V stages fit in shared memory");
  static_assert(SMEM_BYTES + L.static_bytes <= decode_smem_per_cta(CTAS),
                "shared memory exceeds the CTA's share");
  static_assert(MERGE_BYTES <= STAGES * STAGE_BYTES, "merge scratch must fit in the stages");
  static_assert(WARPS * STAGES * 8 <= LOC_BYTES,
                "the bulk-copy pipeline's barriers (one per warp and stage) fit the offset buffer");
};

}  // namespace flashback::cuda

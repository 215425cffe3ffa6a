// Compile-time shape of the long-query (prefill / extend / ragged) attention kernel, per (head
// dims, KV kind). Every shared-memory and register figure is derived here.
#pragma once

namespace flashback::cuda {

template <int D_, int DV_, bool FP8_>
struct PrefillConfig {
  static constexpr int D = D_;    // q/k head dim
  static constexpr int DV = DV_;  // v head dim
  static constexpr bool FP8 = FP8_;
  // Each warp owns MT m-tiles of 16 query rows and keeps their S tiles (MT N/2 fp32) and O tiles
  // (MT DV/2 fp32) in registers. Up to 128 wide: MT = 2 (as FlashAttention-2 does), so every K
  // and V fragment read from shared memory feeds two mma.sync, halving shared-memory traffic per
  // FLOP; 4 warps (128 rows, ~250 registers) let two CTAs share an SM. Wider heads: MT = 1 (the
  // O tile alone is 96-128 registers), 8 warps when D + DV <= 256 else 4.
  static constexpr int MT = (D <= 128 && DV <= 128) ? 2 : 1;
  static constexpr int WARPS = MT == 2 ? 4 : (D + DV) <= 256 ? 8 : 4;
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int BM = 16 * MT * WARPS;  // query rows per CTA
  static constexpr int EB = FP8 ? 1 : 2;      // bytes per cache element
  // Row pitches padded by 16 bytes so the 8 rows an ldmatrix reads fall in distinct banks.
  static constexpr int QP = D + 8;                               // 16-bit elements
  static constexpr int KP = D + 8, VP = DV + 8;                  // 16-bit K / V tiles
  static constexpr int KRAW = D * EB + 16, VRAW = DV * EB + 16;  // raw stage rows, bytes
  static constexpr int Q_BYTES = BM * QP * 2;
  // Shared memory of a CTA with n-key tiles and `stages` stages: Q, the raw stages, the fp8
  // widening buffer and the key byte offsets (16 bytes per key and stage, paged.cuh).
  static constexpr int smem_for(int n, int stages) {
    return Q_BYTES + stages * n * (KRAW + VRAW) + (FP8 ? n * (KP + VP) * 2 : 0) + stages * n * 16;
  }
  // Two CTAs per SM share 228 KB less 1 KB reserved per CTA.
  static constexpr int kTwoCtaBytes = 113 * 1024;
  // Keys per tile and stages. 64 keys (as FlashAttention-2 uses with 128-row blocks): the
  // per-tile costs (the O rescale, DV / 2 multiplies per row; the row-max shuffles; the
  // barrier; the loop) are paid once per 64 keys, and QK^T has 2 MT N / 8 independent
  // accumulator chains to hide HMMA latency; with the straight-line softmax (softmax.cuh) the
  // 128-wide 16-bit instances fit 255 registers with no spill in the loop, at ~20% fewer
  // instructions per key than N = 32 (SASS sm_90a). Two 64-key stages give a copy the same
  // lead (64 keys of compute) and bytes in flight as three 32-key ones did. Where that no
  // longer lets two CTAs share an SM but 32 x 3 did (192/192), 32 x 3 stays.
  static constexpr bool WIDE = smem_for(64, 2) <= kTwoCtaBytes || smem_for(32, 3) > kTwoCtaBytes;
  static constexpr int N = WIDE ? 64 : 32;
  static constexpr int STAGES = WIDE ? 2 : 3;
  static constexpr int STAGE_BYTES = N * (KRAW + VRAW);
  static constexpr int CVT_BYTES = FP8 ? N * (KP + VP) * 2 : 0;  // fp8 widened to 16 bits
  static constexpr int LOC_BYTES = STAGES * N * 16;  // key byte offsets per stage (paged.cuh)
  static constexpr int SMEM_BYTES = Q_BYTES + STAGES * STAGE_BYTES + CVT_BYTES + LOC_BYTES;

  static_assert(D % 16 == 0 && DV % 16 == 0, "head dims must be multiples of 16 (mma k / n pairs)");
  static_assert(N % 16 == 0, "keys per tile must be a multiple of 16");
  static_assert(THREADS >= N, "one thread per key locates a tile's keys (paged.cuh)");
  static_assert((D * EB) % 16 == 0 && (DV * EB) % 16 == 0, "rows must be whole 16-byte chunks");
  static_assert(KRAW % 16 == 0 && VRAW % 16 == 0 && (QP * 2) % 16 == 0,
                "shared rows must stay 16-byte aligned for cp.async / ldmatrix");
  static_assert(Q_BYTES % 16 == 0 && STAGE_BYTES % 16 == 0, "shared regions 16-byte aligned");
  static_assert(SMEM_BYTES == smem_for(N, STAGES), "shared-memory budget out of date");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per CTA exceeds 227 KB");
};

}  // namespace flashback::cuda

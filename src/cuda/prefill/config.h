// Compile-time shape of the long-query (prefill / extend / ragged) attention kernel, per (head
// dims, KV kind). Every shared-memory and register figure is derived here.
#pragma once

namespace flashback::cuda {

template <int D_, int DV_, bool FP8_>
struct PrefillConfig {
  static constexpr int D = D_;    // q/k head dim
  static constexpr int DV = DV_;  // v head dim
  static constexpr bool FP8 = FP8_;
  // Each warp owns 16 query rows and keeps its S tile (N/2 fp32) and O tile (DV/2 fp32) in
  // registers. Up to 128+128 wide: 8 warps (128 rows) so each K/V byte brought into shared memory
  // serves 128 queries; wider heads: 4 warps, since the O tile alone is 96-128 registers and two
  // CTAs of 64 rows hide latency better than one of 128.
  static constexpr int WARPS = (D + DV) <= 256 ? 8 : 4;
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int BM = 16 * WARPS;  // query rows per CTA
  // Keys per tile: 64 keeps S at 32 registers; 32 for wide heads keeps S + O under ~160.
  static constexpr int N = (D <= 128 && DV <= 128) ? 64 : 32;
  static constexpr int EB = FP8 ? 1 : 2;  // bytes per cache element
  static constexpr int STAGES = 2;        // cp.async double buffering of K/V tiles
  // Row pitches padded by 16 bytes so the 8 rows an ldmatrix reads fall in distinct banks.
  static constexpr int QP = D + 8;                               // 16-bit elements
  static constexpr int KP = D + 8, VP = DV + 8;                  // 16-bit K / V tiles
  static constexpr int KRAW = D * EB + 16, VRAW = DV * EB + 16;  // raw stage rows, bytes
  static constexpr int STAGE_BYTES = N * (KRAW + VRAW);
  static constexpr int Q_BYTES = BM * QP * 2;
  static constexpr int CVT_BYTES = FP8 ? N * (KP + VP) * 2 : 0;  // fp8 widened to 16 bits
  static constexpr int SMEM_BYTES = Q_BYTES + STAGES * STAGE_BYTES + CVT_BYTES;

  static_assert(D % 16 == 0 && DV % 16 == 0, "head dims must be multiples of 16 (mma k / n pairs)");
  static_assert(N % 16 == 0, "keys per tile must be a multiple of 16");
  static_assert((D * EB) % 16 == 0 && (DV * EB) % 16 == 0, "rows must be whole 16-byte chunks");
  static_assert(KRAW % 16 == 0 && VRAW % 16 == 0 && (QP * 2) % 16 == 0,
                "shared rows must stay 16-byte aligned for cp.async / ldmatrix");
  static_assert(Q_BYTES % 16 == 0 && STAGE_BYTES % 16 == 0, "shared regions 16-byte aligned");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per CTA exceeds 227 KB");
};

}  // namespace flashback::cuda

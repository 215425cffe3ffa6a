// The Hopper path of the long-query attention kernel (sm_90a): the same work as kernel.cuh
// (blocks of BM queries of one q head of one entry; bottom-right causal, window, softcap, LSE,
// paged or ragged K/V, 16-bit caches), on warpgroup MMA.
//
// Warp-specialised, as FlashAttention-3 does. Warpgroup 2 is the producer: per 128-key tile,
// thread t reads key t's table entry (a tile ahead); a tile whose keys all exist then comes by
// TMA, a box per page (or per tile of ragged keys) issued by the thread of its first key, and
// any other tile by the warps' cp.async in 128-byte pieces, both into the 128-byte-swizzled
// layout wgmma reads (cuda/common/wgmma.cuh), STAGES deep; the copies complete on the stage's
// `full` mbarrier (cp.async by arrivals, TMA by bytes). Warpgroups 0 and 1 consume 64 query rows
// each: S = Q K^T (K from shared memory, Q from registers at D = 128: kQRegs), the online softmax
// in registers (softmax.cuh, as the mma.sync kernel), O += P V with P straight from the S registers
// as the A operand. A consumer issues S of tile j together with P V of tile j - 1 and runs tile j's
// softmax while P V does, so a stage holds what one such step reads: K of tile j and V of tile j -
// 1 (a block of n tiles takes n + 1 stages, the first with K only, the last with V only), and it is
// freed on its `empty` mbarrier after the step. A consumer thus holds one stage at a time, and the
// two stages give the producer a step of lead. The two consumers take turns issuing a step's MMAs
// (FlashAttention-3's pingpong), so one's softmax overlaps the other's MMAs. The
// producer also schedules: it walks the CTA's blocks (blocks.h, BlockCursor: a persistent grid
// of about one CTA per SM over every block of the batch, longest first, or a grid over the
// blocks with two per CTA where that fills the GPU; launch.cu, wgmma_grid) and publishes each
// block's entry in a shared slot beside its Q, so the next block's Q and tiles stream in while
// the consumers finish the current one. Registers move from the producer to the consumers
// with setmaxnreg. Head pairs (persistent grid, KV groups of an even number of q heads, tiles by
// TMA): CTAs in clusters of two take q heads 2i and 2i + 1 of the same block, whose tiles are
// the same keys of the same KV head, and each CTA's producer issues half of every tile's TMA
// boxes with multicast into both; a stage is refilled once the consumers of both CTAs released
// it (`empty` counts the other CTA's warps too). That halves the K/V bytes each SM pulls from L2,
// an energy cost where sustained prefill is bound by the power limit (~5 % of it in V's half,
// docs/PERFORMANCE_GPU.md, session 33); on by default since session 35 (launch.cu,
// wgmma_head_pairs: 1-2 % faster on the H100 with the stale softmax below).
//
// The stale softmax: after a block's first tile, a whole tile's probabilities are first taken
// against the running maxima as they stand (softmax_probs_stale: no row max, no shuffles), and
// kept when every one stays within the lazy rule's bound; otherwise, rarely, the warp computes
// its S again by mma.sync from Q's fragments and the tile still in its stage (warp_s.cuh) and
// runs the full softmax. Three instructions per score instead of four: +3-6 % (session 34).
//
// Built only for (D, 128) with D a multiple of 64 up to 192 (128/128 and the MLA chunked-prefix
// 192/128 of the workloads); the mma.sync kernel serves every other case, fp8 caches included.
//
// What set the pace (docs/PERFORMANCE_GPU.md, session 4): the producer. Copying with ~24
// instructions of index and swizzle arithmetic per 16 bytes, it could not fill stages as fast as
// the consumers drained them (ncu: consumers spinning on `full`, the producer never waiting on
// `empty`); at ~5 instructions per copy prefill_1x16k went from 412 to 502 TFLOP/s, and whole
// tiles by TMA (session 10) took another 3-5 %. The pingpong, slower in session 3 while the
// producer was still the limit, gained 1-2 % on the short and 192/128 shapes after TMA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cluster.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/sw128_copy.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/prefill/blocks.h"
#include "cuda/prefill/kernel.cuh"
#include "cuda/prefill/warp_s.cuh"

namespace flashback::cuda::prefill {

template <int D_, int DV_>
struct WgmmaConfig {
  static constexpr int D = D_, DV = DV_;
  static constexpr bool kBuilt = DV == 128 && D % 64 == 0 && D <= 192;
  static constexpr int N = 128;   // keys per tile: one per producer thread
  static constexpr int BM = 128;  // query rows per block: 64 per consumer warpgroup
  static constexpr int THREADS = 384;
  static constexpr int CK = D * 2 / 16, CV = DV * 2 / 16;  // 16-byte chunks per K / V row
  static constexpr int Q_BYTES = BM * D * 2;
  static constexpr int K_BYTES = N * D * 2, V_BYTES = N * DV * 2;
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  // 1024 bytes of slack (swizzled blocks start on 1024-byte boundaries), the mbarriers (full
  // and empty per stage, q_full and q_empty) and two block slots (BlockSlot).
  static constexpr int SLOT_BYTES = 2 * 48;
  static constexpr int smem_for(int stages) {
    return 1024 + Q_BYTES + stages * STAGE_BYTES + 8 * (2 * stages + 2) + SLOT_BYTES;
  }
  // Two stages: all 192/128 has room for, and for 128/128 0.3-0.9 % faster than the three that
  // fit, on all four 128/128 workloads in three same-call A/Bs (H200, session 27). Why is not
  // isolated: with TMA filling the stages the third bought no lead the consumers used, and at
  // 164 KB instead of 225 the SM keeps a larger L1 carve-out.
  static constexpr int STAGES = 2;
  static constexpr int SMEM_BYTES = smem_for(STAGES);
  // 128 x 40 + 256 x 232 <= 64K. The consumers' 232 hold Q's fragments beside S, P and O
  // (kQRegs; at 224 ptxas spilled loop state); the producer needs no more than 40.
  static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
  static_assert(!kBuilt || SMEM_BYTES <= 227 * 1024, "shared memory per CTA exceeds 227 KB");
};

// The block the consumers run next, written by the producer beside the block's Q and published
// by the same barrier (q_full); row0 < 0 ends the CTA's work. Block k uses slot k % 2: the
// producer writes it after block k - 1's q_empty, i.e. after the consumers finished block
// k - 2, so the consumers read a block's facts from its slot whenever they need them (the
// epilogue's, late) instead of holding them in registers through the block.
struct BlockSlot {
  Entry e;
  int h, row0, pad[2];
};
static_assert(sizeof(BlockSlot) == 48 && sizeof(Entry) == 32, "BlockSlot layout");

template <typename Cfg, typename T, bool CAP>
struct WgmmaPrefill {
  static constexpr int D = Cfg::D, DV = Cfg::DV, N = Cfg::N, BM = Cfg::BM, S = Cfg::STAGES;
  static constexpr int CK = Cfg::CK, CV = Cfg::CV;

  // Shared memory, by 32-bit shared-window address from `base` (1024-byte aligned): Q
  // [D / 64][BM][128 B], then per stage K [D / 64][N][128 B] and V [DV / 64][N][128 B], then
  // the mbarriers. Stage i of a block holds K of its tile i and V of its tile i - 1.
  static constexpr uint32_t BAR_OFF = Cfg::Q_BYTES + S * Cfg::STAGE_BYTES;
  static constexpr uint32_t SLOT_OFF = BAR_OFF + 8 * (2 * S + 2);
  static_assert(SLOT_OFF % 16 == 0 && 2 * sizeof(BlockSlot) == Cfg::SLOT_BYTES, "slot layout");
  uint32_t base;
  BlockSlot* slot;  // generic pointer to the two slots at base + SLOT_OFF
  // Head pairs (p.head_pairs): this CTA's rank in its cluster of two; it runs q head 2i + rank
  // of the pair's blocks and the other CTA (rank ^ 1) head 2i.
  bool pairs;
  uint32_t rank;

  __device__ uint32_t q_addr() const { return base; }
  __device__ uint32_t k_stage(int s) const { return base + Cfg::Q_BYTES + s * Cfg::STAGE_BYTES; }
  __device__ uint32_t v_stage(int s) const { return k_stage(s) + Cfg::K_BYTES; }
  __device__ uint32_t bar(int i) const { return base + BAR_OFF + 8 * i; }
  __device__ uint32_t full(int s) const { return bar(s); }
  __device__ uint32_t empty(int s) const { return bar(S + s); }
  __device__ uint32_t q_full() const { return bar(2 * S); }
  __device__ uint32_t q_empty() const { return bar(2 * S + 1); }

  // Initialises the barriers (one thread; __syncthreads, or cluster_sync with head pairs,
  // before use).
  __device__ void init_barriers() const {
    for (int s = 0; s < S; ++s) {
      mbar_init(full(s), 128);  // one .noinc arrival per producer thread
      // Every consumer thread; with head pairs also each warp of the other CTA's consumers,
      // whose stage s this CTA's producer fills too.
      mbar_init(empty(s), 256 + (pairs ? 8 : 0));
    }
    mbar_init(q_full(), 129);  // the Q copies' .noinc arrivals and the slot writer's arrival
    mbar_init(q_empty(), 256);
  }

  // This CTA's blocks (blocks.h): a persistent grid of about one CTA per SM walks every
  // (rank, entry, head) item; otherwise the CTA is (x, head, entry) of a grid over the blocks.
  // With head pairs the cursor walks the clusters' items, a pair of heads as one head.
  __device__ BlockCursor cursor(const PrefillParams& p) const {
    const int c = pairs ? 2 : 1;
    return {.persistent = p.persistent,
            .ctas = static_cast<int>(gridDim.x) / c,
            .x = static_cast<int>(blockIdx.x) / c,
            .R = p.m_blocks,
            .batch = p.batch,
            .heads = p.heads_q / c,
            .band = p.sched_band,
            .b = static_cast<int>(blockIdx.z),
            .h = static_cast<int>(blockIdx.y)};
  }

  // The block's key range (the union of its rows' ranges, contiguous because both ends are
  // non-decreasing in the query index) in tiles of N keys from `lo`.
  struct Span {
    int lo, end, ntiles;
  };
  static __device__ Span span(const PrefillParams& p, const Entry& e, int row0) {
    const int last_row = min(row0 + BM, e.q_len) - 1;
    const int lo = visible_keys(p, row0, e.q_len, e.kv_len).lo;
    const int hi = visible_keys(p, last_row, e.q_len, e.kv_len).hi;
    return {lo, hi + 1, hi >= lo ? (hi - lo + N) / N : 0};
  }

  // The query rows of one consumer warpgroup in one block.
  struct Rows {
    int first;              // entry-relative first row
    bool live, whole;       // some / all of the 64 rows are real queries
    Range r_first, r_last;  // the key ranges of the first and last real row
  };

  // S = Q K^T of one tile into sacc (Q rows at sq_addr, K in stage `stage`).
  __device__ __forceinline__ void issue_s(uint32_t sq_addr, int stage,
                                          float (&sacc)[1][N / 8][4]) const {
    const uint32_t qa = sw128_desc_lo(sq_addr, 16),
                   kb = sw128_desc_lo(k_stage(warp_uniform(stage)), 16);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      // k step ks: column block ks / 4, 32 bytes further per step inside the block.
      const uint32_t col = (ks & 3) * 32;
      wgmma_ss_n128<T>(sacc[0], sw128_desc_at(qa, (ks >> 2) * BM * 128 + col),
                       sw128_desc_at(kb, (ks >> 2) * N * 128 + col), ks > 0);
    }
    wgmma_commit();
  }
  // Q in registers: S's A operand as the warp's mma.sync A fragments, loaded once per block
  // (ldmatrix from the swizzled Q rows), so S reads only K from shared memory: a fifth less
  // operand traffic per tile (Q 16 KB + K 32 KB + V 32 KB per warpgroup), and Q's rows are free
  // for the next block as soon as both warpgroups hold them. 1.4-1.7 % faster on the 128/128
  // workloads (H100, session 32), whose sustained clock the power limit sets. Not for D = 192
  // (48 more registers) nor with softcap (ptxas spilled).
  static constexpr bool kQRegs = D == 128 && !CAP;
  __device__ __forceinline__ void load_q(uint32_t (&qf)[D / 16][4], int wg, int warp,
                                         int lane) const {
    const int row = wg * 64 + warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t addr = q_addr() + sw128_offset(row, 2 * ks + (lane >> 4), BM);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(qf[ks][0]), "=r"(qf[ks][1]), "=r"(qf[ks][2]), "=r"(qf[ks][3])
                   : "r"(addr));
    }
  }
  __device__ __forceinline__ void issue_s(const uint32_t (&qf)[D / 16][4], int stage,
                                          float (&sacc)[1][N / 8][4]) const {
    const uint32_t kb = sw128_desc_lo(k_stage(warp_uniform(stage)), 16);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_rs_n128<T, false>(sacc[0], qf[ks],
                              sw128_desc_at(kb, (ks >> 2) * N * 128 + (ks & 3) * 32), ks > 0);
    wgmma_commit();
  }
  // O += P V of one tile (P in registers, V in stage `stage`).
  __device__ __forceinline__ void issue_pv(int stage, float (&acc)[1][DV / 8][4],
                                           const uint32_t (&pa)[N / 16][4]) const {
    const uint32_t vb = sw128_desc_lo(v_stage(warp_uniform(stage)), N * 128);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk)
      wgmma_rs_n128<T>(acc[0], pa[kk], sw128_desc_at(vb, kk * 16 * 128));
    wgmma_commit();
  }
  // Waits for every wgmma group of the warpgroup; O and P stay pinned until then.
  static __device__ __forceinline__ void wait_all(float (&acc)[1][DV / 8][4],
                                                  uint32_t (&pa)[N / 16][4]) {
    wgmma_wait<0>();
    reg_fence(acc[0]);
    reg_fence(pa);
  }
  // Softmax of the tile of keys [t0, t0 + N) (S done), O's rescale factors into alpha. STALE
  // (a block's tiles after its first, with Q in registers): a tile inside every row's range
  // first tries softmax_probs_stale, without the row max; false means it failed and sacc holds
  // no scores (the caller recomputes them, redo_s, and calls again without STALE).
  template <bool STALE>
  static __device__ __forceinline__ bool probs(const PrefillParams& p, const Entry& e,
                                               const Rows& rw, int t0, int warp, int lane,
                                               const LogitMap& lm, float (&sacc)[1][N / 8][4],
                                               float (&m_run)[2], float (&l_run)[2],
                                               float (&alpha)[2]) {
    if (rw.whole && t0 >= rw.r_last.lo && t0 + N - 1 <= rw.r_first.hi && (CAP || lm.mul >= 0.f)) {
      if constexpr (STALE && !CAP) {
        alpha[0] = alpha[1] = 1.f;
        return softmax_probs_stale<1, N>(sacc, m_run, l_run, lm.mul);
      }
      softmax_probs<1, N, false, CAP, true>(sacc, m_run, l_run, alpha, {}, t0, lane, lm);
      return true;
    }
    Range rr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = rw.first + warp * 16 + (lane >> 2) + 8 * i;
      rr[i] = r < e.q_len ? visible_keys(p, r, e.q_len, e.kv_len) : Range{0, -1};
    }
    // No row's range starts inside the tile (the ranges' starts rise with the row; a row past
    // q_len ends before key 0): only the ends are tested. The causal diagonal, a window's
    // diagonal while every row's window starts left of the tile, a block's partial last rows.
    if (!CAP && t0 >= rw.r_last.lo && lm.mul > 0.f)
      softmax_probs<1, N, true, false, true, false>(sacc, m_run, l_run, alpha, rr, t0, lane, lm);
    else
      softmax_probs<1, N, true, CAP, true>(sacc, m_run, l_run, alpha, rr, t0, lane, lm);
    return true;
  }
  // S of this warp's 16 rows again (a failed stale softmax overwrote them), from Q's fragments
  // and K still in stage `stage` (warp_s.cuh). Rare (a row's max grew past the lazy bound) and
  // the warp's own business: no warpgroup barrier, the other warps and the other warpgroup's
  // wgmma go on.
  __device__ __forceinline__ void redo_s(const uint32_t (&qf)[D / 16][4], int stage, int lane,
                                         float (&sacc)[1][N / 8][4]) const {
    // The stage's generic address, from the slots' (base + SLOT_OFF).
    const unsigned char* k = reinterpret_cast<const unsigned char*>(slot) - SLOT_OFF +
                             Cfg::Q_BYTES + warp_uniform(stage) * Cfg::STAGE_BYTES;
    warp_s_sw128<T, D, N>(sacc, qf, k, lane);
  }
  // O's rescale (skipped when the lazy softmax kept every row's max: alpha is exactly 1 for the
  // whole warp), then P as P V's A fragments: the S accumulators of keys [16 kk, 16 kk + 16)
  // are exactly that fragment.
  static __device__ __forceinline__ void to_p(const float (&alpha)[2], float (&acc)[1][DV / 8][4],
                                              const float (&sacc)[1][N / 8][4],
                                              uint32_t (&pa)[N / 16][4]) {
    rescale_rows<1, DV>(acc, alpha);
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) {
      pa[kk][0] = pack2<T>(sacc[0][2 * kk][0], sacc[0][2 * kk][1]);
      pa[kk][1] = pack2<T>(sacc[0][2 * kk][2], sacc[0][2 * kk][3]);
      pa[kk][2] = pack2<T>(sacc[0][2 * kk + 1][0], sacc[0][2 * kk + 1][1]);
      pa[kk][3] = pack2<T>(sacc[0][2 * kk + 1][2], sacc[0][2 * kk + 1][3]);
    }
  }

  // O's rows through shared memory, where the output's rows are 16-byte aligned. The block's
  // last step reads only V from its stage: the stage's K half (at least both warpgroups' 64 x
  // DV rows) stays free until the consumers' `empty` arrivals. Each warp writes its 16
  // normalised rows there with stmatrix (16-byte chunks XOR-swizzled by row % 8: no bank
  // conflicts), reads them back as whole rows and stores them in 16-byte pieces: 8 global stores
  // per thread instead of DV / 4 of 4 bytes, whose queue held the consumers at every block's end
  // (ncu, session 17: ~6 % of their samples at prefill_8x2k), and full 32-byte sectors. Then
  // this thread's `empty` arrival for the stage.
  static constexpr bool kStagedOut = DV == 128 && Cfg::K_BYTES >= 2 * 64 * DV * 2;
  __device__ __forceinline__ void store_staged(const PrefillParams& p, const Entry& e, int h,
                                               int first, int wg, int warp, int lane, int stage,
                                               float (&acc)[1][DV / 8][4], const float (&m_run)[2],
                                               float (&l_run)[2]) const {
    constexpr int ROW = DV * 2, CH = DV / 8, RPI = 32 / CH;  // bytes, chunks per row, rows per load
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
      inv[i] = finish_row(p, e, h, first + (lane >> 2) + 8 * i, m_run[i], l_run[i], lane);
    const uint32_t buf = k_stage(stage) + (wg * 64 + warp * 16) * ROW;
    // stmatrix u / 2: matrices (u, rows 0-7), (u, rows 8-15), (u + 1, 0-7), (u + 1, 8-15) of the
    // warp's 16 rows; lane l gives row l % 8 of matrix l / 8.
    const int srow = (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int u = 0; u < DV / 8; u += 2) {
      const int chunk = u + (lane >> 4);
      stmatrix_x4(buf + srow * ROW + ((chunk ^ (srow & 7)) << 4),
                  pack2<T>(acc[0][u][0] * inv[0], acc[0][u][1] * inv[0]),
                  pack2<T>(acc[0][u][2] * inv[1], acc[0][u][3] * inv[1]),
                  pack2<T>(acc[0][u + 1][0] * inv[0], acc[0][u + 1][1] * inv[0]),
                  pack2<T>(acc[0][u + 1][2] * inv[1], acc[0][u + 1][3] * inv[1]));
    }
    __syncwarp();
    uint4 v[16 / RPI];
    const int chunk = lane % CH;
#pragma unroll
    for (int k = 0; k < 16 / RPI; ++k) {
      const int row = k * RPI + lane / CH;
      v[k] = ld_shared_v4(buf + row * ROW + ((chunk ^ (row & 7)) << 4));
    }
    // The producer's next copies into this half come through the async proxy (TMA).
    fence_proxy_async_smem();
    if (!pairs) release(stage, lane);
    T* o = static_cast<T*>(p.out) + static_cast<int64_t>(h) * p.out_sh + chunk * 8;
#pragma unroll
    for (int k = 0; k < 16 / RPI; ++k) {
      const int r = first + k * RPI + lane / CH;
      if (r < e.q_len) st_global_v4(o + (e.q0 + r) * p.out_st, v[k]);
    }
    // With head pairs the other CTA's producer overwrites the half too, after an arrival with
    // CTA-scope semantics (mbar_arrive_cluster): after the stores, whose data are the loaded
    // values, so the loads have completed.
    if (pairs) release(stage, lane);
  }

  // One TMA box of a tile (box number i of its K or V); with head pairs, every other box, into
  // both CTAs of the cluster.
  __device__ __forceinline__ void load_box(uint32_t dst, const TensorMap& map, int col, int g,
                                           KeyLoc loc, uint32_t bar, int i) const {
    if (!pairs)
      tma_load_4d(dst, map, col, g, loc.y, loc.x, bar);
    else if ((i & 1) == static_cast<int>(rank))
      tma_load_4d_multicast(dst, map, col, g, loc.y, loc.x, bar, 0x3);
  }
  // A consumer thread is done with stage s: its arrival on the stage's `empty`, and with head
  // pairs the warp's on the other CTA's (whose producer fills this CTA's stage s too). The
  // warp's reads of the stage have completed before: at its wgmma wait, or (store_staged) once
  // the loaded values were stored.
  __device__ __forceinline__ void release(int s, int lane) const {
    mbar_arrive(empty(s));
    if (pairs) {
      __syncwarp();
      if (lane == 0) mbar_arrive_cluster(cluster_map(empty(s), rank ^ 1));
    }
  }

  // Producer warpgroup: for each block of the CTA (cursor), the slot and Q, then its n + 1
  // stages (K of tile j with V of tile j - 1). `it` counts stages over the CTA's blocks, so
  // stage and phase continue across blocks; after the last block a slot with row0 = -1.
  __device__ void produce(const PrefillParams& p) {
    const int t = threadIdx.x - 256, lane = t & 31, warp = t >> 5;
    BlockCursor cur = cursor(p);
    // The cursor's head, or its pair of heads: this CTA's q head.
    const auto head = [&](int ch) { return pairs ? 2 * ch + static_cast<int>(rank) : ch; };
    Entry e;
    int it = 0, blk = 0;
    for (int mb; (mb = cur.next([&](int b, int ch) {
                   e = load_entry(p, b, head(ch) / p.group);
                   return (e.q_len + BM - 1) / BM;
                 })) >= 0;
         ++blk) {
      const int h = head(cur.h), g = h / p.group, row0 = mb * BM;
      const unsigned char* kbase = static_cast<const unsigned char*>(p.k) + g * p.k_sh * 2;
      const unsigned char* vbase = static_cast<const unsigned char*>(p.v) + g * p.v_sh * 2;
      PageWalk walk;
      if (p.cu_k)
        walk.krow0 = e.krow0;
      else
        walk.paged(p.table + static_cast<int64_t>(e.trow) * p.table_s0, p.table_s1, e.start,
                   p.table_holds_slots, p.page_size);
      const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(e.q0) * p.q_st +
                   static_cast<int64_t>(h) * p.q_sh;
      const Span sp = span(p, e, row0);
      // Tile 0's table entry, read before the Q copies so its latency overlaps them.
      int32_t ent = sp.ntiles > 0 && sp.lo + t < sp.end ? walk.read(sp.lo + t) : 0;
      mbar_wait(q_empty(), (blk & 1) ^ 1);
      if (t == 0) {
        BlockSlot& bs = slot[blk & 1];
        bs.e = e;
        bs.h = h;
        bs.row0 = row0;
        mbar_arrive(q_full());  // releases the slot's stores to the consumers' q_full wait
      }
      const int64_t q_row_bytes = static_cast<int64_t>(p.q_st) * sizeof(T);
      const int q_rows = e.q_len - row0 - warp * 32;  // rows of this warp's 32 that exist
      copy_rows_sw128<CK, BM>(
          q_addr(), reinterpret_cast<const unsigned char*>(q + static_cast<int64_t>(row0) * p.q_st),
          [&](int r) { return r < q_rows ? (warp * 32 + r) * q_row_bytes : int64_t{0}; },
          e.q_len - row0, warp, lane);
      mbar_arrive_on_copies(q_full());
      // Tiles whose keys all exist come by TMA where launch.cu built the maps: a box per
      // kv_box keys, issued by the thread of its first key (paged boxes must then start on a
      // page boundary, and do for every tile when the block's first does), the stage's `full`
      // also waiting for their bytes. The other tiles, by the warps' cp.async. With head pairs
      // both CTAs walk the same tiles (same entry, block and KV head): each issues half of a
      // TMA tile's boxes, multicast to both, and each CTA's `full` expects the whole tile.
      const int R = p.kv_box;
      const bool box_ok = R > 0 && (p.cu_k || (e.start + sp.lo) % R == 0);
      const bool issuer = (t & (R - 1)) == 0;  // R is a power of two (add_kv_maps)
      // This thread's key's location and V offset in the previous tile, and that tile's rows.
      KeyLoc v_loc = make_int2(0, 0);
      int64_t v_off = 0;
      int v_rows = 0;
      for (int j = 0; sp.ntiles > 0 && j <= sp.ntiles; ++j, ++it) {
        const int s = it % S;
        const int key = sp.lo + j * N + t;  // this thread's key
        const int nvalid = j < sp.ntiles ? sp.end - (sp.lo + j * N) : 0;
        const bool tma_k = box_ok && nvalid >= N, tma_v = box_ok && v_rows >= N;
        const KeyLoc loc = key < sp.end ? walk.locate(ent, key) : make_int2(0, 0);
        const KeyBytes kb = key < sp.end && !tma_k
                                ? key_bytes(loc, p.k_sp, p.k_so, p.v_sp, p.v_so, 2)
                                : make_longlong2(0, 0);  // zero-filled; offset 0 keeps it valid
        // The next tile's entry now, so its latency overlaps this tile's wait and copies.
        ent = j + 1 < sp.ntiles && key + N < sp.end ? walk.read(key + N) : 0;
        mbar_wait(empty(s), ((it / S) & 1) ^ 1);
        if (issuer && (tma_k || tma_v)) {
          // Boxes at (column, head, offset in page, page); a ragged key's location is (row, 0).
          mbar_expect_tx(full(s), (tma_k ? R * D * 2 : 0) + (tma_v ? R * DV * 2 : 0));
          if (tma_k)
#pragma unroll
            for (int b = 0; b < CK / 8; ++b)
              load_box(k_stage(s) + b * N * 128 + t * 128, p.k_map, b * 64, g, loc, full(s),
                       (t / R) * (CK / 8) + b);
          if (tma_v)
#pragma unroll
            for (int b = 0; b < CV / 8; ++b)
              load_box(v_stage(s) + b * N * 128 + t * 128, p.v_map, b * 64, g, v_loc, full(s),
                       (t / R) * (CV / 8) + b);
        }
        // This warp's keys' offsets, shuffled from the lanes that located them.
        if (j < sp.ntiles && !tma_k)
          copy_rows_sw128<CK, N>(
              k_stage(s), kbase, [&](int r) { return __shfl_sync(~0u, kb.x, r); }, nvalid, warp,
              lane);
        if (j > 0 && !tma_v)
          copy_rows_sw128<CV, N>(
              v_stage(s), vbase, [&](int r) { return __shfl_sync(~0u, v_off, r); }, v_rows, warp,
              lane);
        mbar_arrive_on_copies(full(s));
        v_loc = loc;
        v_off = kb.y;
        v_rows = nvalid;
      }
    }
    // No more blocks: the consumers find row0 = -1 in the slot.
    mbar_wait(q_empty(), (blk & 1) ^ 1);
    if (t == 0) {
      slot[blk & 1].row0 = -1;
      mbar_arrive(q_full());
    }
    mbar_arrive(q_full());
  }

  // Consumer warpgroup wg (0 or 1): query rows [row0 + 64 wg, row0 + 64 wg + 64) of each block
  // the producer publishes in the slot, until one with row0 < 0.
  __device__ void consume(const PrefillParams& p, int wg) {
    const int tw = threadIdx.x & 127, lane = tw & 31, warp = tw >> 5;
    const uint32_t sq_addr = q_addr() + wg * 64 * 128;
    // FlashAttention-3's pingpong: the two consumers take turns issuing a step's MMAs (named
    // barrier 1 + wg is this warpgroup's turn, which the other one's arrival grants after
    // issuing its own), so one's softmax runs while the other's MMAs do. Warpgroup 0 goes
    // first; it takes warpgroup 1's last grant after the loop so that no arrival is left over.
    const bool pp = p.pingpong;
    auto turn = [&] {
      if (pp) named_barrier_sync(1 + wg, 256);
    };
    auto pass = [&] {
      if (pp) named_barrier_arrive(2 - wg, 256);
    };
    if (pp && wg == 1) named_barrier_arrive(1, 256);
    int it = 0;
    for (int blk = 0;; ++blk) {
      // The block (its slot holds until this warpgroup starts block blk + 2) and its Q.
      mbar_wait(q_full(), blk & 1);
      const BlockSlot& bs = slot[blk & 1];
      const int row0 = bs.row0;
      if (row0 < 0) break;
      const Entry& e = bs.e;
      // logit = softcap(scale * kd * (q . k_stored)), in base 2 (softmax.cuh).
      const float sk = p.scale * e.kd;
      LogitMap lm;
      lm.mul = sk * kLog2e;
      lm.in = CAP ? sk / p.softcap : 0.f;
      lm.out = CAP ? p.softcap * kLog2e : 0.f;
      const Span sp = span(p, e, row0);
      Rows rw;
      rw.first = row0 + wg * 64;
      rw.live = rw.first < e.q_len;
      rw.whole = rw.first + 63 < e.q_len;
      rw.r_first = rw.r_last = Range{1, 0};
      if (rw.live) {
        rw.r_first = visible_keys(p, rw.first, e.q_len, e.kv_len);
        rw.r_last = visible_keys(p, min(rw.first + 63, e.q_len - 1), e.q_len, e.kv_len);
      }
      float acc[1][DV / 8][4];
#pragma unroll
      for (int u = 0; u < DV / 8; ++u)
        acc[0][u][0] = acc[0][u][1] = acc[0][u][2] = acc[0][u][3] = 0.f;
      float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

      // Q's shared rows are dead after the block's last S (or, with kQRegs, once loaded into
      // registers): releasing them then lets the next block's Q load while this block
      // finishes. `done_with_q(j)` after tile j's S; a warpgroup that never ran the last S
      // releases Q after the loop.
      bool q_held = true;
      auto done_with_q = [&](int j) {
        if (!kQRegs && j == sp.ntiles - 1) {
          mbar_arrive(q_empty());
          q_held = false;
        }
      };
      // With Q in registers, Q's shared rows are free as soon as this warpgroup has them.
      uint32_t qf[kQRegs ? D / 16 : 1][4];
      if constexpr (kQRegs) {
        if (rw.live && sp.ntiles > 0) {
          load_q(qf, wg, warp, lane);
          mbar_arrive(q_empty());
          q_held = false;
        }
      }
      auto s_mma = [&](int s, float(&sa)[1][N / 8][4]) {
        if constexpr (kQRegs)
          issue_s(qf, s, sa);
        else
          issue_s(sq_addr, s, sa);
      };
      if (!rw.live) {
        // No real query in this warpgroup's 64 rows (a short entry or a block's tail): keep the
        // stage barriers in step (a wait on `full` before each `empty` arrival, so no arrival
        // counts toward a fill it did not see) and skip the MMAs.
        for (int j = 0; sp.ntiles > 0 && j <= sp.ntiles; ++j, ++it) {
          const int s = it % S;
          mbar_wait(full(s), (it / S) & 1);
          turn();  // no MMAs, but the turns stay in step
          pass();
          release(s, lane);
        }
      } else if (sp.ntiles > 0) {
        // FlashAttention-3's intra-warpgroup overlap: step j issues S of tile j together with
        // P V of tile j - 1 (both in stage j) and runs tile j's softmax while P V does. Steps 0
        // (S and softmax only) and n (P V only) are peeled off so that every wgmma group sits
        // in straight-line code with its commit and wait. cp.async wrote the stage through the
        // generic proxy; wgmma reads through the async one, hence the fence after each wait.
        // (Fencing in the producer instead, after cp.async.wait_group, held each stage back by
        // a step: mla_prefix_chunk_8x4k 402 -> 326 TFLOP/s.)
        uint32_t pa[N / 16][4];
        float sacc[1][N / 8][4];
        float alpha[2];
        {
          const int s = it % S;
          mbar_wait(full(s), (it / S) & 1);
          fence_proxy_async_smem();
          turn();
          s_mma(s, sacc);
          pass();
          wgmma_wait<0>();
          reg_fence(sacc[0]);
          release(s, lane);
          done_with_q(0);
          probs<false>(p, e, rw, sp.lo, warp, lane, lm, sacc, m_run, l_run, alpha);
          to_p(alpha, acc, sacc, pa);
          ++it;
        }
        for (int j = 1; j < sp.ntiles; ++j, ++it) {
          const int s = it % S;
          mbar_wait(full(s), (it / S) & 1);
          fence_proxy_async_smem();
          turn();
          s_mma(s, sacc);
          issue_pv(s, acc, pa);
          pass();
          wgmma_wait<1>();
          reg_fence(sacc[0]);
          done_with_q(j);
          const int t0 = sp.lo + j * N;
          const bool fresh = probs<kQRegs>(p, e, rw, t0, warp, lane, lm, sacc, m_run, l_run, alpha);
          wait_all(acc, pa);
          if constexpr (kQRegs) {
            if (!fresh) {  // warp-uniform; K is still in stage s
              redo_s(qf, s, lane, sacc);
              probs<false>(p, e, rw, t0, warp, lane, lm, sacc, m_run, l_run, alpha);
            }
          }
          release(s, lane);
          to_p(alpha, acc, sacc, pa);
        }
        {  // the last tile's P V, then O through the stage where it can (store_staged)
          const int s = it % S;
          mbar_wait(full(s), (it / S) & 1);
          fence_proxy_async_smem();
          turn();
          issue_pv(s, acc, pa);
          pass();
          // The epilogue's facts into registers while P V runs (S's registers are free): read
          // through the slot's generic pointer after the wait, they were reloaded after every
          // global store (which may alias it), each row's bound compare waiting on the reload
          // (ncu, session 27: ~1,000 long-scoreboard samples in the epilogue at prefill_8x2k).
          const Entry eo = bs.e;
          const int ho = bs.h;
          wait_all(acc, pa);
          if (kStagedOut && p.staged_out) {
            store_staged(p, eo, ho, rw.first + warp * 16, wg, warp, lane, s, acc, m_run, l_run);
          } else {
            release(s, lane);
            store_rows<T, 1, DV>(p, eo, ho, rw.first + warp * 16, acc, m_run, l_run, lane);
          }
          ++it;
        }
      }
      if (q_held) mbar_arrive(q_empty());
      if (rw.live && sp.ntiles == 0)  // rows that see no key: zeros (and LSE -inf)
        store_rows<T, 1, DV>(p, e, bs.h, rw.first + warp * 16, acc, m_run, l_run, lane);
    }
    if (pp && wg == 0) named_barrier_sync(1, 256);
  }
};

template <typename Cfg, typename T, bool CAP>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    prefill_wgmma_kernel(const __grid_constant__ PrefillParams p) {
#ifdef FLASHBACK_WGMMA
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Aligned up to 1024 bytes through an integer. (Through pointer arithmetic on the shared array
  // the compiler knows the block slots are shared and reads them with ld.shared, not generic
  // loads, which ncu counted at ~3 % of the consumers' samples at prefill_8x2k; yet that build
  // ran 1.6-2.2 % slower on prefill_8x2k and prefill_1x16k, H200 session 17.)
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  WgmmaPrefill<Cfg, T, CAP> k;
  k.base = smem_addr(smem);
  k.slot = reinterpret_cast<BlockSlot*>(smem + decltype(k)::SLOT_OFF);
  k.pairs = p.head_pairs;
  k.rank = k.pairs ? cluster_ctarank() : 0;
  if (threadIdx.x == 0) k.init_barriers();
  if (k.pairs) {
    // The other CTA arrives on these barriers and multicasts into this one's stages: both CTAs'
    // barriers are initialised before either's first copy.
    if (threadIdx.x == 0) fence_mbar_init();
    cluster_sync();
  } else {
    __syncthreads();
  }
  if (threadIdx.x >= 256) {
    regs_shrink<Cfg::PRODUCER_REGS>();
    k.produce(p);
  } else {
    regs_grow<Cfg::CONSUMER_REGS>();
    k.consume(p, warp_uniform(static_cast<int>(threadIdx.x) / 128));
  }
  // Neither CTA leaves while the other may still arrive on its barriers (its copies into this
  // one completed before this one's consumers finished).
  if (k.pairs) cluster_sync();
#else
  __trap();  // launched only where wgmma_available() (launch.cu) says this build has sm_90a
#endif
}

}  // namespace flashback::cuda::prefill

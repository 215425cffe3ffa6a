// The Hopper path (sm_90a) of MLA absorbed attention on the short-query grid: the same work as
// kernel.cuh's MLA instance (64 rows of (query, head) of one entry and one key split; logits
// q_rope . k_rope + q_nope . c_kv, output softmax . c_kv, 512 wide), on warpgroup MMA.
//
// Why a kernel of its own: with 128 heads sharing each latent row, MLA decode does ~240 FLOPs
// per cache byte and is compute-bound (docs/PERFORMANCE_GPU.md); the mma.sync kernel, S through
// shared memory, reached 59 TFLOP/s; this one 445-462 (mla_decode_b64_L4k_h128 on the H200).
//
// Shape (FlashInfer's split of the work, FlashMLA's split of the output):
//   - Warpgroup 2 produces: Q once (the 512 q_nope columns as blocks 0-7 and the 64 q_rope ones
//     as block 8 of the 128-byte-swizzled layout, common/sw128.h), then per tile of 64 keys
//     the latent rows (blocks 0-7) and the rope rows (block 8) into one of two stages, with
//     cp.async in 128-byte pieces (common/sw128_copy.cuh), arriving on the stage's `full`.
//   - Warpgroup 1 scores: S for all 64 keys and rows of the tile (36 steps of m64n64k16, Q and K
//     from shared memory, each read once per tile), the softmax of whole rows (no exchange of
//     maxima; common/softmax.cuh, the prefill kernels' too), P (16-bit) into the tile's rope
//     block, dead once S is done (stmatrix), and the rows' rescale factors into shared memory;
//     then it meets warpgroup 0 (named barrier 1).
//   - Both consumers then do O[:, c) += P V over the tile's 64 keys for their columns c
//     (m64n128k16, P and V from shared memory: V is the latent block, read MN-major), after
//     rescaling their O by the factors, and free the stage. Warpgroup 0 holds O's first 384
//     columns (Cfg::NB0 = 3 of the four 128-column blocks) and the scorer the last 128: the
//     scorer is the critical path (S, softmax, its P V, S again) and warpgroup 0 idles while
//     it scores, so the larger share of P V goes to warpgroup 0 (1-2 % faster than halves).
//   - The row sums stay partial per thread until the end, then are summed across the quad and
//     handed to warpgroup 0 with the maxima (barrier 3).
// 16-bit caches only (the mma.sync kernel takes fp8), softcap and every key-range rule as the
// other kernels (visible_keys), LSE, split-KV through the same workspace and combine.
//
// Measured (docs/PERFORMANCE_GPU.md): the first form split the keys between both consumer
// warpgroups for S (m64n32k16 each: Q read twice per tile, 216 KB of operand reads against
// 144) and exchanged row maxima through shared memory; this one is 10 % faster (session 25).
// Dropped: L2 prefetch of the next tile (session 5), FlashMLA's seesaw and S queued behind the
// previous tile's P V (session 13, and again in session 26: 1.63x slower; with two 72 KB stages
// any later release of a stage exposes the next copy; ncu puts ~16 % of the scorer's samples on
// the full barrier already), P V as m64n256k16 (session 26: within noise).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/dtype.cuh"
#include "cuda/common/log2.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/common/sw128_copy.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/decode/entry.cuh"
#include "cuda/decode/params.h"

namespace flashback::cuda {

struct MlaWgmmaConfig {
  static constexpr int D = 64, DV = 512;  // rope and latent widths
  static constexpr int ROWS = 64;         // (query, head) rows per CTA: one wgmma M
  static constexpr int N = 64;            // keys per tile
  static constexpr int STAGES = 2;
  static constexpr int THREADS = 384;
  static constexpr int BLOCKS = (D + DV) / 64;          // 64-column swizzled blocks of Q and a tile
  static constexpr int Q_BYTES = BLOCKS * ROWS * 128;   // 72 KB
  static constexpr int STAGE_BYTES = BLOCKS * N * 128;  // 72 KB
  static constexpr int RED_BYTES = 2 * 2 * ROWS * 4;    // rescale factors (2 tiles), m and l
  static constexpr int BARS = 2 * STAGES + 1;           // full, empty per stage; q_full
  static constexpr int SMEM_BYTES = 1024 + Q_BYTES + STAGES * STAGE_BYTES + RED_BYTES + 8 * BARS;
  static constexpr int NB0 = 3;  // O's 128-column blocks held by warpgroup 0 (the scorer: the rest)
  // Registers per thread of the producer, warpgroup 0 (192 accumulators) and the scorer (64,
  // plus S's 32). setmaxnreg moves registers within the CTA's launch allocation (168 per thread
  // at 384 threads, one CTA per SM), so the three counts sum to at most 3 x 168 = 504; asking
  // more never returns (the CTA hangs in setmaxnreg: 240 + 216 + 56 did, session 25).
  static constexpr int PRODUCER_REGS = 56, PV_REGS = 240, SCORER_REGS = 208;
  static constexpr int REG_POOL = 3 * (65536 / THREADS / 8 * 8);  // 504
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per CTA exceeds 227 KB");
  static_assert(ROWS * N * 2 == N * 128, "P (16-bit) fits the tile's rope block");
  static_assert(PRODUCER_REGS + PV_REGS + SCORER_REGS <= REG_POOL,
                "the warpgroups' setmaxnreg counts within the CTA's launch allocation");
};

// An fp32 at a shared-memory address (row statistics the warps or warpgroups exchange).
__device__ __forceinline__ void st_shared_f32(uint32_t a, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(a), "f"(v) : "memory");
}
__device__ __forceinline__ float ld_shared_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a) : "memory");
  return v;
}

// Byte offset of row r of the CTA (entry row row0 + r) in a [tokens, heads, width] tensor of T
// with element strides st, sh (q and qv); rows past the entry read row 0 (and are zero-filled).
template <typename T>
__device__ __forceinline__ int64_t mla_row_bytes(const DecodeParams& p, const DecodeEntry& e, int r,
                                                 int64_t st, int64_t sh) {
  const int gr = e.row0 + r;
  if (gr >= e.rows_total) return 0;
  return (static_cast<int64_t>(e.token(p, gr)) * st + static_cast<int64_t>(e.head(p, gr)) * sh) *
         static_cast<int64_t>(sizeof(T));
}

// The K/V tiles of the Hopper MLA kernels (64 keys: the latent rows as blocks 0-7 and the rope
// rows as block 8 of the 128-byte-swizzled layout, common/sw128.h), tiles [0, ntiles) of entry e
// into stage j % S, by the 128 threads of a producer warpgroup (t = 0..127): warps 0-1 copy latent
// blocks 0-3 of keys [0, 32) / [32, 64), warps 2-3 latent blocks 4-7 and the rope block of the
// same keys, with cp.async in 128-byte pieces; every lane locates key 32 (warp % 2) + lane (a
// tile ahead) and the warp shuffles the offsets. A stage is waited free on empty(s), and its
// copies arrive on full(s) (one .noinc arrival per thread: init it with 128).
template <int S, typename StageAt, typename FullAt, typename EmptyAt>
__device__ __forceinline__ void mla_copy_tiles(const DecodeParams& p, const DecodeEntry& e,
                                               int ntiles, int t, StageAt stage, FullAt full,
                                               EmptyAt empty) {
  constexpr int N = MlaWgmmaConfig::N, DV = MlaWgmmaConfig::DV, D = MlaWgmmaConfig::D;
  constexpr int BLK = N * 128;
  const int lane = t & 31, warp = t >> 5, half = warp & 1;
  const bool first_half = warp < 2;
  const unsigned char* kbase =
      static_cast<const unsigned char*>(p.k) + static_cast<int64_t>(e.g) * p.k_sh * 2;
  const unsigned char* vbase =
      static_cast<const unsigned char*>(p.v) + static_cast<int64_t>(e.g) * p.v_sh * 2;
  PageWalk walk;
  walk.paged(p.table + static_cast<int64_t>(e.trow) * p.table_s0, p.table_s1, e.start,
             p.table_holds_slots, p.page_size);
  const int kk = 32 * half + lane;  // this lane's key within a tile
  // Table entries of this lane's key in the next two tiles (read two tiles ahead).
  int32_t ent = e.begin + kk < e.end ? walk.read(e.begin + kk) : 0;
  int32_t ent2 = ntiles > 1 && e.begin + N + kk < e.end ? walk.read(e.begin + N + kk) : 0;
  for (int j = 0; j < ntiles; ++j) {
    const int s = j % S;
    const int key = e.begin + j * N + kk;
    const KeyBytes kb =
        key < e.end ? key_bytes(walk.locate(ent, key), p.k_sp, p.k_so, p.v_sp, p.v_so, 2)
                    : make_longlong2(0, 0);  // zero-filled; offset 0 keeps the address valid
    ent = ent2;
    ent2 = j + 2 < ntiles && key + 2 * N < e.end ? walk.read(key + 2 * N) : 0;
    mbar_wait(empty(s), ((j / S) & 1) ^ 1);
    const int nvalid = e.end - (e.begin + j * N);
    auto v_off = [&](int r) { return __shfl_sync(~0u, kb.y, r); };
    if (first_half) {
      copy_rows_sw128<32, N>(stage(s), vbase, v_off, nvalid, half, lane);
    } else {
      copy_rows_sw128<32, N>(stage(s) + 4 * BLK, vbase + 512, v_off, nvalid, half, lane);
      copy_rows_sw128<D * 2 / 16, N>(
          stage(s) + (DV / 64) * BLK, kbase, [&](int r) { return __shfl_sync(~0u, kb.x, r); },
          nvalid, half, lane);
    }
    mbar_arrive_on_copies(full(s));
  }
}

template <typename T, bool CAP>
struct MlaWgmma {
  using Cfg = MlaWgmmaConfig;
  static constexpr int N = Cfg::N, ROWS = Cfg::ROWS, S = Cfg::STAGES, DV = Cfg::DV, NB0 = Cfg::NB0;
  static constexpr int BLK = ROWS * 128;  // bytes of one 64-column block (ROWS == N rows)

  uint32_t base;  // 1024-byte aligned: Q, the stages (P in their rope blocks), red / lsum, barriers

  __device__ uint32_t q_addr() const { return base; }
  __device__ uint32_t stage(int s) const { return base + Cfg::Q_BYTES + s * Cfg::STAGE_BYTES; }
  // P of stage s's tile: its rope block, dead once S is done (the stage is refilled only after
  // both warpgroups have freed it).
  __device__ uint32_t p_at(int s) const { return stage(s) + (DV / 64) * BLK; }
  // [2][ROWS] fp32: the rows' rescale factors of tiles j with j % 2 == par; then [2][ROWS]: the
  // final row sums (w = 0) and maxima (w = 1).
  __device__ uint32_t red(int par, int r) const {
    return base + Cfg::Q_BYTES + S * Cfg::STAGE_BYTES + (par * ROWS + r) * 4;
  }
  __device__ uint32_t lsum(int w, int r) const { return red(2, r) + w * ROWS * 4; }
  __device__ uint32_t bar(int i) const {
    return base + Cfg::Q_BYTES + S * Cfg::STAGE_BYTES + Cfg::RED_BYTES + 8 * i;
  }
  __device__ uint32_t full(int s) const { return bar(s); }
  __device__ uint32_t empty(int s) const { return bar(S + s); }
  __device__ uint32_t q_full() const { return bar(2 * S); }

  __device__ void init_barriers() const {
    for (int s = 0; s < S; ++s) {
      mbar_init(full(s), 128);   // one .noinc arrival per producer thread
      mbar_init(empty(s), 256);  // every consumer thread
    }
    mbar_init(q_full(), 128);
  }

  // Producer warpgroup. Warps 0-1 copy latent blocks 0-3 of keys [0, 32) / [32, 64) of each
  // tile, warps 2-3 latent blocks 4-7 and the rope block of the same keys; every lane locates
  // key 32 (warp % 2) + lane (a tile ahead) and the warp shuffles the offsets.
  __device__ void produce(const DecodeParams& p, const DecodeEntry& e, int ntiles) const {
    const int t = threadIdx.x - 256, lane = t & 31, warp = t >> 5, half = warp & 1;
    const bool first_half = warp < 2;
    if (ntiles == 0) return;
    {  // Q: warps 0-1 q_nope (blocks 0-7), warps 2-3 q_rope (block 8).
      const int nvalid = e.rows_total - e.row0;
      if (first_half) {
        copy_rows_sw128<DV * 2 / 16, ROWS>(
            q_addr(), static_cast<const unsigned char*>(p.qv),
            [&](int r) { return mla_row_bytes<T>(p, e, 32 * half + r, p.qv_st, p.qv_sh); }, nvalid,
            half, lane);
      } else {
        copy_rows_sw128<Cfg::D * 2 / 16, ROWS>(
            q_addr() + (DV / 64) * BLK, static_cast<const unsigned char*>(p.q),
            [&](int r) { return mla_row_bytes<T>(p, e, 32 * half + r, p.q_st, p.q_sh); }, nvalid,
            half, lane);
      }
      mbar_arrive_on_copies(q_full());
    }
    mla_copy_tiles<S>(
        p, e, ntiles, t, [this](int st) { return stage(st); }, [this](int st) { return full(st); },
        [this](int st) { return empty(st); });
  }

  // S = Q K^T for all 64 keys of stage s: 36 steps of m64n64k16, Q and K from shared memory
  // (4 KB of operands per 32 clocks of tensor work).
  __device__ __forceinline__ void issue_s(int s, float (&sacc)[8][4]) const {
    const uint32_t qa = sw128_desc_lo(q_addr(), 16), kb = sw128_desc_lo(stage(s), 16);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Cfg::BLOCKS * 4; ++ks) {
      const uint32_t off = (ks >> 2) * BLK + (ks & 3) * 32;
      wgmma_ss_n64<T>(sacc, sw128_desc_at(qa, off), sw128_desc_at(kb, off), ks > 0);
    }
    wgmma_commit();
  }
  // O[:, 64 b0 + [0, 128 NB)) += P V over the tile's 64 keys (V = latent blocks b0 .. b0 + 2 NB
  // - 1, MN-major: the next 64 columns are BLK bytes on).
  template <int NB>
  __device__ __forceinline__ void issue_pv(int s, int b0, float (&acc)[NB][16][4]) const {
    const uint32_t pa = sw128_desc_lo(p_at(s), 16), vb = sw128_desc_lo(stage(s) + b0 * BLK, BLK);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
      for (int nh = 0; nh < NB; ++nh)
        wgmma_ss_n128<T, true>(acc[nh], sw128_desc_at(pa, kk * 32),
                               sw128_desc_at(vb, 2 * nh * BLK + kk * 16 * 128), true);
    wgmma_commit();
  }
  // P V of tile j into acc (after rescaling it by the rows' factors), then the stage freed.
  template <int NB>
  __device__ __forceinline__ void pv(int j, int b0, float (&acc)[NB][16][4],
                                     const float (&alpha)[2]) const {
    // O's rows times their factors (common/softmax.cuh; NB n128 blocks are one m-tile's
    // 16 NB n8 blocks in the same registers).
    rescale_rows<1, 128 * NB>(reinterpret_cast<float(&)[1][16 * NB][4]>(acc), alpha);
    issue_pv<NB>(j % S, b0, acc);
    wgmma_wait<0>();
#pragma unroll
    for (int nh = 0; nh < NB; ++nh) reg_fence(acc[nh]);
    mbar_arrive(empty(j % S));
  }

  // The epilogue: output columns 64 b0 + [0, 128 NB) of the thread's rows r0 and r0 + 8
  // normalised by their row sums l, and (warpgroup 0) their LSE, to the output or the split
  // workspace.
  template <int NB>
  __device__ __forceinline__ void finish(const DecodeParams& p, const DecodeEntry& e, int wg,
                                         int b0, const float (&acc)[NB][16][4], const float (&m)[2],
                                         const float (&l)[2]) const {
    const int tw = threadIdx.x & 127, lane = tw & 31, quad = lane & 3;
    const int r0 = (tw >> 5) * 16 + (lane >> 2);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + 8 * i, gr = e.row0 + r;
      if (gr >= e.rows_total) continue;
      const int tok = e.token(p, gr), head = e.head(p, gr);
      if (wg == 0 && quad == 0) {
        const float lse = l[i] != 0.f ? (m[i] + log2f(l[i])) * kLn2 : -INFINITY;
        if (p.use_workspace)
          p.ws_lse[(static_cast<int64_t>(e.split) * p.total_q + tok) * p.heads_q + head] = lse;
        else if (p.lse)
          p.lse[tok * p.lse_st + head * p.lse_sh] = lse;
      }
      const float inv = l[i] != 0.f ? 1.f / l[i] : 0.f;  // a NaN l stays NaN
#pragma unroll
      for (int nh = 0; nh < NB; ++nh)
#pragma unroll
        for (int u = 0; u < 16; ++u) {
          const int col = 64 * b0 + 128 * nh + 8 * u + 2 * quad;
          const float o0 = acc[nh][u][2 * i] * inv, o1 = acc[nh][u][2 * i + 1] * inv;
          if (p.use_workspace) {
            float* w = p.ws_o +
                       ((static_cast<int64_t>(e.split) * p.total_q + tok) * p.heads_q + head) * DV +
                       col;
            *reinterpret_cast<float2*>(w) = make_float2(o0, o1);
          } else {
            T* o = static_cast<T*>(p.out) + tok * p.out_st + head * p.out_sh + col;
            o[0] = from_float<T>(o0);
            o[1] = from_float<T>(o1);
          }
        }
    }
  }

  // Warpgroup 0: O's first 128 NB0 columns. Per tile it waits for P and the rows' rescale
  // factors (named barrier 1), then runs its P V; at the end it takes the row maxima and sums
  // from warpgroup 1 (barrier 3).
  __device__ void consume_pv(const DecodeParams& p, const DecodeEntry& e, int ntiles) const {
    const int tw = threadIdx.x & 127, lane = tw & 31;
    const int r0 = (tw >> 5) * 16 + (lane >> 2);
    float acc[NB0][16][4] = {};
    for (int j = 0; j < ntiles; ++j) {
      named_barrier_sync<1, 256>();         // P(j) and its factors written
      mbar_wait(full(j % S), (j / S) & 1);  // V of the stage, seen by this warpgroup too
      fence_proxy_async_smem();
      const float alpha[2] = {ld_shared_f32(red(j & 1, r0)), ld_shared_f32(red(j & 1, r0 + 8))};
      pv<NB0>(j, 0, acc, alpha);
    }
    named_barrier_sync<3, 256>();
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[i] = ld_shared_f32(lsum(0, r0 + 8 * i));
      m[i] = ld_shared_f32(lsum(1, r0 + 8 * i));
    }
    finish<NB0>(p, e, 0, 0, acc, m, l);
  }

  // Warpgroup 1, the scorer (FlashInfer's split of the work): S for the tile's 64 keys on
  // m64n64k16 (Q read once per tile: 144 KB of operand reads where splitting the keys between
  // two warpgroups read 216), the softmax of whole rows (no exchange of maxima), P into the
  // tile's rope block and the rows' rescale factors into red(j % 2, .), named barrier 1; then
  // its P V of O's last 512 - 128 NB0 columns. It owns the row maxima and sums and hands them
  // to warpgroup 0 at the end (lsum(0 / 1, .), barrier 3).
  __device__ void consume_scores(const DecodeParams& p, const DecodeEntry& e, int ntiles) const {
    constexpr int NB1 = DV / 128 - NB0, B1 = 2 * NB0;  // its n128 blocks, first latent block
    const int tw = threadIdx.x & 127, lane = tw & 31;
    const int quad = lane & 3;
    const int r0 = (tw >> 5) * 16 + (lane >> 2);
    float acc[NB1][16][4] = {};
    KeyRange rr[2];  // the rows' visible keys, cut at the entry's end
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int gr = e.row0 + r0 + 8 * i;
      rr[i] = gr < e.rows_total ? visible_keys(p, gr / p.group, e.q_len, e.kv_len) : KeyRange{1, 0};
      rr[i].hi = min(rr[i].hi, e.end - 1);
    }
    const LogitMap lm{p.scale * kLog2e, CAP ? p.scale / p.softcap : 0.f,
                      CAP ? p.softcap * kLog2e : 0.f};
    float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.f, 0.f};
    if (ntiles > 0) mbar_wait(q_full(), 0);
    float sacc[1][8][4];
    for (int j = 0; j < ntiles; ++j) {
      const int s = j % S;
      mbar_wait(full(s), (j / S) & 1);
      fence_proxy_async_smem();
      issue_s(s, sacc[0]);
      wgmma_wait<0>();
      reg_fence(sacc[0]);
      // The softmax of the tile's keys [k0, k0 + N) (prefill's, on the same accumulator
      // layout; lazy rescale per warp: while no row's maximum grew by more than
      // kLazyRescaleLog2, alpha is exactly 1 and warpgroup 0 skips its rescale too).
      const int k0 = e.begin + j * N;
      float alpha[2];
      if (k0 >= max(rr[0].lo, rr[1].lo) && k0 + N - 1 <= min(rr[0].hi, rr[1].hi) &&
          (CAP || lm.mul >= 0.f))
        softmax_probs<1, N, false, CAP, true>(sacc, m_run, l_part, alpha, {}, k0, lane, lm);
      else
        softmax_probs<1, N, true, CAP, true>(sacc, m_run, l_part, alpha, rr, k0, lane, lm);
      // P (16-bit) into the stage's rope block, row r's chunk u (keys 8 u .. 8 u + 7) at
      // 16 ((u ^ r) % 8) (the 128-byte swizzle): stmatrix u / 2 writes chunks u and u + 1 of
      // the warp's 16 rows, lane l giving row srow = l % 16 of chunk u + l / 16.
      const int srow = (lane & 7) + 8 * ((lane >> 3) & 1);
      const uint32_t prow = p_at(s) + ((tw >> 5) * 16 + srow) * 128;
#pragma unroll
      for (int u = 0; u < N / 8; u += 2)
        stmatrix_x4(prow + (((u + (lane >> 4)) ^ (lane & 7)) << 4),
                    pack2<T>(sacc[0][u][0], sacc[0][u][1]), pack2<T>(sacc[0][u][2], sacc[0][u][3]),
                    pack2<T>(sacc[0][u + 1][0], sacc[0][u + 1][1]),
                    pack2<T>(sacc[0][u + 1][2], sacc[0][u + 1][3]));
      if (quad == 0) {
        st_shared_f32(red(j & 1, r0), alpha[0]);
        st_shared_f32(red(j & 1, r0 + 8), alpha[1]);
      }
      fence_proxy_async_smem();  // P is read by wgmma (async proxy)
      named_barrier_sync<1, 256>();
      pv<NB1>(j, B1, acc, alpha);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l_part[i] += __shfl_xor_sync(~0u, l_part[i], 1);
      l_part[i] += __shfl_xor_sync(~0u, l_part[i], 2);
      if (quad == 0) {
        st_shared_f32(lsum(0, r0 + 8 * i), l_part[i]);
        st_shared_f32(lsum(1, r0 + 8 * i), m_run[i]);
      }
    }
    named_barrier_sync<3, 256>();
    finish<NB1>(p, e, 1, B1, acc, m_run, l_part);
  }
};

// The common start of the Hopper MLA kernels: the CTA's entry (ROWS-row blocks of (query, head)
// rows, splits in 64-key multiples), its 64-key tiles, the kernel's shared memory `k.base`
// aligned to 1024 bytes for the 128-byte swizzle, and its barriers initialised. False: nothing
// for this CTA.
template <typename T, int ROWS, typename K>
__device__ __forceinline__ bool mla_begin(const DecodeParams& p, DecodeEntry& e, int& ntiles, K& k,
                                          unsigned char* smem_raw) {
  constexpr int N = MlaWgmmaConfig::N, DV = MlaWgmmaConfig::DV;
  if (!load_entry<T, DV, ROWS, N>(p, e)) return false;
  ntiles = e.end > e.begin ? (e.end - e.begin + N - 1) / N : 0;
  k.base = smem_addr(reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023)));
  if (threadIdx.x == 0) k.init_barriers();
  __syncthreads();
  return true;
}

template <typename T, bool CAP>
__global__ void __launch_bounds__(MlaWgmmaConfig::THREADS, 1)
    mla_wgmma_kernel(const DecodeParams p) {
#ifdef FLASHBACK_WGMMA
  using Cfg = MlaWgmmaConfig;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  DecodeEntry e;
  int ntiles;
  MlaWgmma<T, CAP> k;
  if (!mla_begin<T, Cfg::ROWS>(p, e, ntiles, k, smem_raw)) return;
  if (threadIdx.x >= 256) {
    regs_shrink<Cfg::PRODUCER_REGS>();
    k.produce(p, e, ntiles);
  } else if (threadIdx.x < 128) {
    regs_grow<Cfg::PV_REGS>();
    k.consume_pv(p, e, ntiles);
  } else {
    regs_grow<Cfg::SCORER_REGS>();
    k.consume_scores(p, e, ntiles);
  }
#else
  __trap();  // launched only where the host found sm_90a code and a 9.0 device (dispatch.cu)
#endif
}

}  // namespace flashback::cuda

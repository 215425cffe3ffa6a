// The Hopper MLA decode kernel for at most 16 or 32 rows of (query, head) per entry (sm_90a):
// MLA absorbed attention (logits q_rope . k_rope + q_nope . c_kv, output softmax . c_kv, 512
// wide) for the grids whose row blocks hold <= 32 rows, e.g. DeepSeek's 128 heads over 8 GPUs
// (16 per GPU) in decode or with one MTP token (32 rows), 8 heads x 2 MTP tokens, or 32 heads.
//
// Status (session 14): the default for those grids (FLASHBACK_MLA_NARROW=0 keeps them on
// mla_wgmma.cuh). On the H200 mla_decode_b128_L4k_h16 takes 0.146-0.149 ms against
// mla_wgmma.cuh's 0.177-0.184, and 32-row blocks (16 heads x 2 tokens, 32 heads) 0.164 against
// 0.194 (docs/PERFORMANCE_GPU.md, session 14); CudaDecode.Mla*, racecheck and memcheck clean.
//
// Why a kernel of its own: mla_wgmma.cuh computes S = Q K^T with Q as the MMA's M = 64, so 16
// real rows pay for 64, and with 16 heads the work (not the bytes) bound it (0.178 ms for
// mla_decode_b128_L4k_h16, the same as the 128-head shape). Here the keys are M ("swap AB", as
// the short-query kernel's narrow form): S^T = K Q^T (64 keys x ROWS rows, m64nROWSk16, 36
// k-steps) and O^T = V^T P^T (512 columns x ROWS rows: 8 m-blocks of m64nROWSk16, 4 k-steps
// each), a quarter (16 rows) or half (32) of the tensor work, so the kernel is left with the
// copies. ROWS = 16 holds O^T in 64 fp32 registers per thread (148 in all), 32 in 128 (225).
//
// Shape: one consumer warpgroup (threads 0-127) and one producer warpgroup (128-255). The
// producer copies Q once (ROWS rows: q_nope as blocks 0-7 and q_rope as block 8, ROWS x 128 bytes
// each) and then every 64-key tile into one of two 72 KB stages exactly as mla_wgmma.cuh's
// producer does (mla_copy_tiles). The consumer: S^T with K (A, K-major) and Q (B, K-major) from
// shared memory; each row's tile maximum across the four warps (each holds 16 keys) through
// shared memory and named barrier 1; P (16-bit) into a swizzled ROWS x 64 block [row][key] (B of
// O^T, K-major), named barrier 2; O^T += V^T P^T with V read MN-major as A (the latent blocks as
// they lie). Every thread derives the same new row maxima from the same shared values, so the
// lazy rescale is decided per row with no vote. Softcap, every key-range rule (visible_keys),
// LSE and split-KV through the same workspace and combine as the other kernels.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/dtype.cuh"
#include "cuda/common/log2.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/decode/entry.cuh"
#include "cuda/decode/mla_wgmma.cuh"
#include "cuda/decode/params.h"

namespace flashback::cuda {

template <int ROWS_>
struct MlaNarrowConfig {
  static constexpr int D = 64, DV = 512;  // rope and latent widths
  static constexpr int ROWS = ROWS_;      // (query, head) rows per CTA: the MMAs' N (16 or 32)
  static constexpr int NB = ROWS / 8;     // n8 blocks of an accumulator
  static constexpr int N = 64;            // keys per tile: the MMAs' M
  static constexpr int STAGES = 2;
  static constexpr int THREADS = 256;  // consumer warpgroup, producer warpgroup
  static constexpr int BLOCKS = (D + DV) / 64;
  static constexpr int QBLK = ROWS * 128, BLK = N * 128;             // bytes of a 64-column block
  static constexpr int Q_BYTES = BLOCKS * QBLK;                      // 18 or 36 KB
  static constexpr int STAGE_BYTES = BLOCKS * BLK;                   // 72 KB, as mla_wgmma.cuh's
  static constexpr int P_BYTES = ROWS * 128;                         // [row][64 keys], swizzled
  static constexpr int RED_BYTES = 2 * 4 * ROWS * 4 + 4 * ROWS * 4;  // tile maxima x2, row sums
  static constexpr int BARS = 2 * STAGES + 1;                        // full, empty; q_full
  static constexpr int SMEM_BYTES =
      1024 + Q_BYTES + STAGES * STAGE_BYTES + P_BYTES + RED_BYTES + 8 * BARS;
  static_assert(ROWS == 16 || ROWS == 32, "m64n16 or m64n32");
  static_assert(Q_BYTES % 1024 == 0, "the stages start on 1024-byte boundaries");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per CTA exceeds 227 KB");
  static_assert(N == MlaWgmmaConfig::N && DV == MlaWgmmaConfig::DV && D == MlaWgmmaConfig::D,
                "the stages are mla_wgmma.cuh's (mla_copy_tiles)");
};

template <typename T, bool CAP, int ROWS_>
struct MlaNarrow {
  using Cfg = MlaNarrowConfig<ROWS_>;
  static constexpr int N = Cfg::N, ROWS = Cfg::ROWS, DV = Cfg::DV, S = Cfg::STAGES;
  static constexpr int NB = Cfg::NB, RI = 2 * NB;  // n8 blocks; rows per thread
  static constexpr int QBLK = Cfg::QBLK, BLK = Cfg::BLK;

  uint32_t base;  // 1024-byte aligned: Q, the stages, P, the row reductions, the barriers

  __device__ uint32_t q_addr() const { return base; }
  __device__ uint32_t stage(int s) const { return base + Cfg::Q_BYTES + s * Cfg::STAGE_BYTES; }
  __device__ uint32_t p_addr() const { return stage(S); }
  // [2][4 warps][ROWS] fp32: each warp's tile maxima per row (two buffers, tiles alternate),
  // then [4 warps][ROWS] the final row sums.
  __device__ uint32_t red(int buf, int w, int r) const {
    return p_addr() + Cfg::P_BYTES + ((buf * 4 + w) * ROWS + r) * 4;
  }
  __device__ uint32_t lsum(int w, int r) const { return red(2, w, r); }
  __device__ uint32_t bar(int i) const { return p_addr() + Cfg::P_BYTES + Cfg::RED_BYTES + 8 * i; }
  __device__ uint32_t full(int s) const { return bar(s); }
  __device__ uint32_t empty(int s) const { return bar(S + s); }
  __device__ uint32_t q_full() const { return bar(2 * S); }

  __device__ void init_barriers() const {
    for (int s = 0; s < S; ++s) {
      mbar_init(full(s), 128);   // one .noinc arrival per producer thread
      mbar_init(empty(s), 128);  // every consumer thread
    }
    mbar_init(q_full(), 128);
  }

  // Producer warpgroup: Q's ROWS rows (72 16-byte chunks each: q_nope's 64 into blocks 0-7,
  // q_rope's 8 into block 8; rows past the entry zero-filled), then the tiles.
  __device__ void produce(const DecodeParams& p, const DecodeEntry& e, int ntiles) const {
    const int t = threadIdx.x - 128;
    if (ntiles == 0) return;
    for (int i = t; i < ROWS * Cfg::BLOCKS * 8; i += 128) {
      const int r = i / (Cfg::BLOCKS * 8), c = i % (Cfg::BLOCKS * 8);
      const bool rope = c >= DV / 8;
      const int64_t off = rope ? mla_row_bytes<T>(p, e, r, p.q_st, p.q_sh)
                               : mla_row_bytes<T>(p, e, r, p.qv_st, p.qv_sh);
      const unsigned char* src =
          static_cast<const unsigned char*>(rope ? p.q : p.qv) + off + (rope ? c - DV / 8 : c) * 16;
      const uint32_t dst = q_addr() + (c >> 3) * QBLK + r * 128 + (((c & 7) ^ (r & 7)) << 4);
      cp_async16(dst, src, e.row0 + r < e.rows_total ? 16 : 0);
    }
    mbar_arrive_on_copies(q_full());
    mla_copy_tiles<S>(
        p, e, ntiles, t, [this](int st) { return stage(st); }, [this](int st) { return full(st); },
        [this](int st) { return empty(st); });
  }

  // S^T = K Q^T for stage s: 36 k-steps (latent blocks 0-7, then the rope block), K as A and Q as
  // B, both K-major from shared memory.
  __device__ __forceinline__ void issue_s(int s, float (&st)[NB][4]) const {
    const uint32_t ka = sw128_desc_lo(stage(warp_uniform(s)), 16), qb = sw128_desc_lo(q_addr(), 16);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Cfg::BLOCKS * 4; ++ks)
      wgmma_ss_nb<T>(st, sw128_desc_at(ka, (ks >> 2) * BLK + (ks & 3) * 32),
                     sw128_desc_at(qb, (ks >> 2) * QBLK + (ks & 3) * 32), ks > 0);
    wgmma_commit();
  }
  // O^T += V^T P^T over stage s's 64 keys: m-block mb is V's columns [64 mb, 64 mb + 64) (latent
  // block mb, read MN-major as A), P [row][key] as B (K-major).
  __device__ __forceinline__ void issue_pv(int s, float (&acc)[8][NB][4]) const {
    const uint32_t va = sw128_desc_lo(stage(warp_uniform(s)), BLK),
                   pb = sw128_desc_lo(p_addr(), 16);
    wgmma_fence();
#pragma unroll
    for (int mb = 0; mb < DV / 64; ++mb)
#pragma unroll
      for (int kk = 0; kk < N / 16; ++kk)
        wgmma_ss_nb<T, true>(acc[mb], sw128_desc_at(va, mb * BLK + kk * 16 * 128),
                             sw128_desc_at(pb, kk * 32), true);
    wgmma_commit();
  }

  __device__ void consume(const DecodeParams& p, const DecodeEntry& e, int ntiles) const {
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, quad = lane & 3, g = lane >> 2;
    // Accumulator element x of n8 block j (S^T's and each O^T m-block's): M index
    // 16 w + g + 8 (x >> 1) (a key of the tile, or a V column of the m-block), row
    // 8 j + 2 quad + (x & 1). This thread's rows, as ri = 2 j + (x & 1):
    const auto row_of = [quad](int ri) { return 8 * (ri >> 1) + 2 * quad + (ri & 1); };
    KeyRange rr[RI];
#pragma unroll
    for (int ri = 0; ri < RI; ++ri) {
      const int gr = e.row0 + row_of(ri);
      rr[ri] =
          gr < e.rows_total ? visible_keys(p, gr / p.group, e.q_len, e.kv_len) : KeyRange{1, 0};
    }
    const float mul = p.scale * kLog2e;
    const float cin = CAP ? p.scale / p.softcap : 0.f, cout = CAP ? p.softcap * kLog2e : 0.f;

    float acc[8][NB][4];
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int j = 0; j < NB; ++j)
        acc[mb][j][0] = acc[mb][j][1] = acc[mb][j][2] = acc[mb][j][3] = 0.f;
    float m_run[RI], l_part[RI];
#pragma unroll
    for (int ri = 0; ri < RI; ++ri) {
      m_run[ri] = -INFINITY;
      l_part[ri] = 0.f;
    }

    if (ntiles > 0) mbar_wait(q_full(), 0);
    for (int t = 0; t < ntiles; ++t) {
      const int s = t % S, buf = t & 1;
      mbar_wait(full(s), (t / S) & 1);
      fence_proxy_async_smem();  // cp.async wrote the stage through the generic proxy
      float st[NB][4];
      issue_s(s, st);
      wgmma_wait<0>();
      reg_fence(st);

      // Logits, the key-range mask and this warp's maxima per row (its 16 keys).
      const int k0 = e.begin + t * N, kw = k0 + 16 * w + g;
      float mx[RI];
#pragma unroll
      for (int ri = 0; ri < RI; ++ri) mx[ri] = -INFINITY;
#pragma unroll
      for (int j = 0; j < NB; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int ri = 2 * j + (x & 1), key = kw + 8 * (x >> 1);
          float v = CAP ? cout * tanhf(st[j][x] * cin) : st[j][x] * mul;
          v = key >= rr[ri].lo && key <= rr[ri].hi && key < e.end ? v : -INFINITY;
          st[j][x] = v;
          mx[ri] = fmaxf(mx[ri], v);
        }
#pragma unroll
      for (int ri = 0; ri < RI; ++ri) {
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(~0u, mx[ri], o));
        if (g == 0) st_shared_f32(red(buf, w, row_of(ri)), mx[ri]);
      }
      named_barrier_sync<1, 128>();
      // The tile's row maxima (the same for every thread), the new running maxima (lazy, per
      // row: kept while a row grows by <= 2^8) and O's factors.
      float alpha[RI], m_use[RI];
      bool moved = false;
#pragma unroll
      for (int ri = 0; ri < RI; ++ri) {
        float m = m_run[ri];
#pragma unroll
        for (int ww = 0; ww < 4; ++ww) m = fmaxf(m, ld_shared_f32(red(buf, ww, row_of(ri))));
        alpha[ri] = 1.f;
        if (m != -INFINITY && !lazy_keeps(m, m_run[ri])) {
          alpha[ri] = exp2f(m_run[ri] - m);  // 0 while m_run is -inf
          m_run[ri] = m;
          moved = true;
        }
        m_use[ri] = m_run[ri] == -INFINITY ? 0.f : m_run[ri];
        l_part[ri] *= alpha[ri];
      }
      // P into [row][key], swizzled: row r's keys 8 c .. 8 c + 7 at chunk c ^ (r % 8).
#pragma unroll
      for (int j = 0; j < NB; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int ri = 2 * j + (x & 1), r = row_of(ri), key = 16 * w + g + 8 * (x >> 1);
          const float pr = exp2f(st[j][x] - m_use[ri]);
          l_part[ri] += pr;
          const uint32_t a = p_addr() + r * 128 + (((key >> 3) ^ (r & 7)) << 4) + (key & 7) * 2;
          const unsigned short bits = static_cast<unsigned short>(pack2<T>(pr, 0.f) & 0xffffu);
          asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(a), "h"(bits) : "memory");
        }
      fence_proxy_async_smem();  // P is read by wgmma (async proxy)
      named_barrier_sync<2, 128>();
      if (moved) {
#pragma unroll
        for (int mb = 0; mb < 8; ++mb)
#pragma unroll
          for (int j = 0; j < NB; ++j)
#pragma unroll
            for (int x = 0; x < 4; ++x) acc[mb][j][x] *= alpha[2 * j + (x & 1)];
      }
      issue_pv(s, acc);
      wgmma_wait<0>();
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) reg_fence(acc[mb]);
      mbar_arrive(empty(s));
    }

    // Row sums: over the warp's lanes of the same quad, then the four warps.
#pragma unroll
    for (int ri = 0; ri < RI; ++ri) {
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) l_part[ri] += __shfl_xor_sync(~0u, l_part[ri], o);
      if (g == 0) st_shared_f32(lsum(w, row_of(ri)), l_part[ri]);
    }
    named_barrier_sync<3, 128>();
    float inv[RI];
#pragma unroll
    for (int ri = 0; ri < RI; ++ri) {
      const int r = row_of(ri), gr = e.row0 + r;
      const float l = ld_shared_f32(lsum(0, r)) + ld_shared_f32(lsum(1, r)) +
                      ld_shared_f32(lsum(2, r)) + ld_shared_f32(lsum(3, r));
      inv[ri] = l != 0.f ? 1.f / l : 0.f;  // l NaN (a NaN input): NaN out
      if (w == 0 && g == 0 && gr < e.rows_total) {
        const int tok = e.token(p, gr), head = e.head(p, gr);
        const float lse = l != 0.f ? (m_run[ri] + log2f(l)) * kLn2 : -INFINITY;
        if (p.use_workspace)
          p.ws_lse[(static_cast<int64_t>(e.split) * p.total_q + tok) * p.heads_q + head] = lse;
        else if (p.lse)
          p.lse[tok * p.lse_st + head * p.lse_sh] = lse;
      }
    }
#pragma unroll
    for (int ri = 0; ri < RI; ++ri) {
      const int gr = e.row0 + row_of(ri);
      if (gr >= e.rows_total) continue;
      const int tok = e.token(p, gr), head = e.head(p, gr);
      const int j = ri >> 1, xr = ri & 1;
#pragma unroll
      for (int mb = 0; mb < 8; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = 64 * mb + 16 * w + g + 8 * h;
          const float o = acc[mb][j][2 * h + xr] * inv[ri];
          if (p.use_workspace)
            p.ws_o[((static_cast<int64_t>(e.split) * p.total_q + tok) * p.heads_q + head) * DV +
                   col] = o;
          else
            static_cast<T*>(p.out)[tok * p.out_st + head * p.out_sh + col] = from_float<T>(o);
        }
    }
  }
};

template <typename T, bool CAP, int ROWS>
__global__ void __launch_bounds__(MlaNarrowConfig<ROWS>::THREADS, 1)
    mla_narrow_kernel(const DecodeParams p) {
#ifdef FLASHBACK_WGMMA
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  DecodeEntry e;
  int ntiles;
  MlaNarrow<T, CAP, ROWS> k;
  if (!mla_begin<T, ROWS>(p, e, ntiles, k, smem_raw)) return;
  if (threadIdx.x >= 128)
    k.produce(p, e, ntiles);
  else
    k.consume(p, e, ntiles);
#else
  __trap();  // launched only where the host found sm_90a code and a 9.0 device (dispatch.cu)
#endif
}

}  // namespace flashback::cuda

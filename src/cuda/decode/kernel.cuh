// Paged attention for short queries (1..16 per entry: decode, draft decode, verify, the decode
// rows of MIXED), split-KV (flash-decoding).
//
// This shape (warps split the output columns) serves 64-row blocks (large GQA groups x verify
// tokens) and MLA's 512-wide output; blocks of <= 16 rows with v heads <= 256 use
// warp_keys.cuh, where the warps split the keys instead (launch.cuh picks).
//
// One CTA = (split, KV head g, row block, batch entry). Its rows are the (query, head-in-group)
// pairs of one KV head, so each K/V byte is read once for the whole GQA group and all verify
// tokens. Per tile of N keys (cp.async, multi-stage):
//   1. logits: warps split the (m-tile, 16-key) blocks, S = Q K^T (+ Qv V^T for MLA) on tensor
//      cores, into shared memory;
//   2. softmax: a power-of-two lane group per row applies scale, softcap and the key-range mask
//      (SPEC.md §2 via the same bottom-right rule as the oracle), updates the running max and
//      sum in registers, writes P (16-bit) and the rescale factor;
//   3. P V: warps split the output columns (n8 tiles), so no cross-warp reduction is needed.
// FP8 caches are widened exactly to q's 16-bit type in shared memory; descales are per-CTA
// scalars folded into the logits (k) and the final output (v). Keys past the range load as
// zeros (never stale memory) and are masked to -inf.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/dtype.cuh"
#include "cuda/common/log2.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/decode/config.h"
#include "cuda/decode/entry.cuh"
#include "cuda/decode/params.h"

namespace flashback::cuda {

template <typename Cfg, typename T, KvKind KV>
__global__ void __launch_bounds__(Cfg::THREADS) decode_kernel(const DecodeParams p) {
  constexpr int D = Cfg::D, DV = Cfg::DV, N = Cfg::N, MT = Cfg::MT, ROWS = Cfg::ROWS;
  constexpr int WARPS = Cfg::WARPS, THREADS = Cfg::THREADS, STAGES = Cfg::STAGES;
  constexpr int QP = Cfg::QP, QVP = Cfg::QVP, KP = Cfg::KP, VP = Cfg::VP, SP = Cfg::SP,
                PP = Cfg::PP, TPR = Cfg::TPR, EB = Cfg::EB;
  constexpr bool QV = Cfg::QV, FP8 = Cfg::FP8;
  static_assert(FP8 == (KV != KvKind::kSame), "config and KV kind disagree");

  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sQV = sQ + ROWS * QP;
  unsigned char* sStage = reinterpret_cast<unsigned char*>(sQV + (QV ? ROWS * QVP : 0));
  T* sK16 = reinterpret_cast<T*>(sStage + STAGES * Cfg::STAGE_BYTES);
  T* sV16 = sK16 + (FP8 ? N * KP : 0);
  float* sS = reinterpret_cast<float*>(sV16 + (FP8 ? N * VP : 0));
  T* sP = reinterpret_cast<T*>(sS + ROWS * SP);
  float* sAlpha = reinterpret_cast<float*>(sP + ROWS * PP);
  float* sL = sAlpha + ROWS;
  KeyBytes* sLoc = reinterpret_cast<KeyBytes*>(sAlpha + 4 * ROWS);  // [STAGES][N]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  DecodeEntry e;
  if (!load_entry<T, DV, ROWS, N>(p, e)) return;
  const int q_len = e.q_len, kv_len = e.kv_len, rows_total = e.rows_total, row0 = e.row0;
  const int split = e.split, q0 = e.q0, g = e.g, end = e.end;
  const float kd = e.kd, vd = e.vd;
  load_rows<T, ROWS, D, QP, THREADS>(p, e, static_cast<const T*>(p.q), p.q_st, p.q_sh, sQ);
  if constexpr (QV)
    load_rows<T, ROWS, DV, QVP, THREADS>(p, e, static_cast<const T*>(p.qv), p.qv_st, p.qv_sh, sQV);

  // K/V tiles (cuda/common/paged.cuh).
  KvPipeline<N, D * EB / 16, DV * EB / 16, Cfg::KRAW, Cfg::VRAW, THREADS, STAGES, Cfg::STAGE_BYTES,
             EB>
      kv;
  bind_kv(kv, p, e, sLoc, sStage);

  // Softmax row ownership is static, so the running max and sum live in registers.
  const int my_row = tid / TPR, sub = tid % TPR;
  int lo_r = 1, hi_r = 0;
  {
    const int gr = row0 + my_row;
    if (gr < rows_total) {
      const KeyRange kr = visible_keys(p, gr / p.group, q_len, kv_len);
      lo_r = kr.lo;
      hi_r = kr.hi;
    }
  }
  float m_run = -INFINITY, l_run = 0.f;

  constexpr int NTW = Cfg::NT8_PER_WARP;
  float acc[MT][NTW][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int u = 0; u < NTW; ++u)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[mt][u][x] = 0.f;

  const int begin = e.begin, ntiles = kv.ntiles;
  kv.prologue(p);
  for (int j = 0; j < ntiles; ++j) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    kv.advance(j);
    unsigned char* stage = kv.stage(j);
    const T* Kt = reinterpret_cast<const T*>(stage);
    const T* Vt = reinterpret_cast<const T*>(stage + N * Cfg::KRAW);
    if constexpr (FP8) {
      // Widen 8 fp8 values (8 bytes) to 8 16-bit values (16 bytes) per step.
      for (int e = tid; e < N * (D + DV) / 8; e += THREADS) {
        const bool is_k = e < N * D / 8;
        const int ee = is_k ? e : e - N * D / 8;
        const int w = is_k ? D / 8 : DV / 8;
        const int key = ee / w, c8 = ee % w;
        const unsigned char* src = is_k ? stage + key * Cfg::KRAW + c8 * 8
                                        : stage + N * Cfg::KRAW + key * Cfg::VRAW + c8 * 8;
        const uint2 raw = *reinterpret_cast<const uint2*>(src);
        uint4 o;
        o.x = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.x & 0xffff));
        o.y = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.x >> 16));
        o.z = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.y & 0xffff));
        o.w = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.y >> 16));
        T* dst = is_k ? sK16 + key * KP + c8 * 8 : sV16 + key * VP + c8 * 8;
        *reinterpret_cast<uint4*>(dst) = o;
      }
      __syncthreads();
      Kt = sK16;
      Vt = sV16;
    }

    // 1. Logits.
    for (int item = warp; item < MT * (N / 16); item += WARPS) {
      const int mt = item / (N / 16), kb = item % (N / 16);
      float sk[2][4] = {}, sv[2][4] = {};
      const int arow = mt * 16 + (lane & 15), acol = (lane >> 4) * 8;
      const int bkey = kb * 16 + (lane & 7) + ((lane >> 4) << 3), bcol = ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4], bb[4];
        ldmatrix_x4(a, sQ + arow * QP + ks * 16 + acol);
        ldmatrix_x4(bb, Kt + bkey * KP + ks * 16 + bcol);
        mma16816<T>(sk[0], a, bb[0], bb[1]);
        mma16816<T>(sk[1], a, bb[2], bb[3]);
      }
      if constexpr (QV) {
#pragma unroll 4
        for (int ks = 0; ks < DV / 16; ++ks) {
          uint32_t a[4], bb[4];
          ldmatrix_x4(a, sQV + arow * QVP + ks * 16 + acol);
          ldmatrix_x4(bb, Vt + bkey * VP + ks * 16 + bcol);
          mma16816<T>(sv[0], a, bb[0], bb[1]);
          mma16816<T>(sv[1], a, bb[2], bb[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int r = mt * 16 + (lane >> 2), c = kb * 16 + nt * 8 + 2 * (lane & 3);
        float2 lo2, hi2;
        lo2.x = sk[nt][0] * kd + sv[nt][0] * vd;
        lo2.y = sk[nt][1] * kd + sv[nt][1] * vd;
        hi2.x = sk[nt][2] * kd + sv[nt][2] * vd;
        hi2.y = sk[nt][3] * kd + sv[nt][3] * vd;
        *reinterpret_cast<float2*>(sS + r * SP + c) = lo2;
        *reinterpret_cast<float2*>(sS + (r + 8) * SP + c) = hi2;
      }
    }
    __syncthreads();

    // 2. Online softmax, base 2.
    {
      const int t0 = begin + j * N;
      float x[N / TPR];
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < N / TPR; ++u) {
        const int jj = sub + u * TPR, t = t0 + jj;
        const float s = sS[my_row * SP + jj];
        const float logit =
            p.softcap > 0.f ? p.softcap * tanhf(s * p.scale / p.softcap) : s * p.scale;
        x[u] = (t >= lo_r && t <= hi_r && t < end) ? logit * kLog2e : -INFINITY;
        mx = fmaxf(mx, x[u]);
      }
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_run, mx);
      const float alpha = m_new == -INFINITY ? 1.f : exp2f(m_run - m_new);
      // A row with no finite logit yet subtracts 0: its masked keys' -inf still give 0, and a
      // NaN logit (a NaN input) stays NaN instead of the row passing for empty.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < N / TPR; ++u) {
        const float pr = exp2f(x[u] - m_use);
        sum += pr;
        sP[my_row * PP + sub + u * TPR] = from_float<T>(pr);
      }
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (sub == 0) sAlpha[my_row] = alpha;
    }
    __syncthreads();

    // 3. O = diag(alpha) O + P V.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const float a0 = sAlpha[mt * 16 + (lane >> 2)], a1 = sAlpha[mt * 16 + (lane >> 2) + 8];
#pragma unroll
      for (int u = 0; u < NTW; ++u) {
        acc[mt][u][0] *= a0;
        acc[mt][u][1] *= a0;
        acc[mt][u][2] *= a1;
        acc[mt][u][3] *= a1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < N / 16; ++ks) {
      uint32_t bv[NTW][2];
#pragma unroll
      for (int u = 0; u < NTW; ++u) {
        const int jt = warp + u * WARPS;
        if (jt < Cfg::NT8) ldmatrix_x2_trans(bv[u], Vt + (ks * 16 + (lane & 15)) * VP + jt * 8);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        ldmatrix_x4(a, sP + (mt * 16 + (lane & 15)) * PP + ks * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int u = 0; u < NTW; ++u)
          if (warp + u * WARPS < Cfg::NT8) mma16816<T>(acc[mt][u], a, bv[u][0], bv[u][1]);
      }
    }
    kv.retire(p, j);
  }
  cp_async_wait<0>();

  // Epilogue: normalise, apply the value descale, write the output (or this split's partial
  // state) and the LSE (natural log).
  if (sub == 0) sL[my_row] = l_run;
  __syncthreads();
  {
    const int gr = row0 + my_row;
    if (sub == 0 && gr < rows_total) {
      const int tok = q0 + gr / p.group, head = g * p.group + gr % p.group;
      const float lse = l_run != 0.f ? (m_run + log2f(l_run)) * kLn2 : -INFINITY;
      if (p.use_workspace)
        p.ws_lse[(static_cast<int64_t>(split) * p.total_q + tok) * p.heads_q + head] = lse;
      else if (p.lse)
        p.lse[tok * p.lse_st + head * p.lse_sh] = lse;
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = mt * 16 + (lane >> 2) + half * 8, gr = row0 + r;
      if (gr >= rows_total) continue;
      const int tok = q0 + gr / p.group, head = g * p.group + gr % p.group;
      const float l = sL[r];
      const float inv = l != 0.f ? vd / l : 0.f;  // empty by l == 0; a NaN l stays NaN
#pragma unroll
      for (int u = 0; u < NTW; ++u) {
        const int jt = warp + u * WARPS;
        if (jt >= Cfg::NT8) continue;
        const int col = jt * 8 + 2 * (lane & 3);
        const float o0 = acc[mt][u][half * 2] * inv, o1 = acc[mt][u][half * 2 + 1] * inv;
        if (p.use_workspace) {
          float* w = p.ws_o +
                     ((static_cast<int64_t>(split) * p.total_q + tok) * p.heads_q + head) * DV +
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

}  // namespace flashback::cuda

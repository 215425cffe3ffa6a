// Paged attention for up to 16 rows per CTA (decode with a GQA group <= 16, verify with group x
// tokens <= 16), v heads up to 256: the warps split the keys.
//
// Same grid, split-KV plan, workspace and combine as kernel.cuh; what differs is the inside of a
// tile. There, S went through shared memory and three barriers per tile separated the logits,
// softmax and P V phases (warps split the output columns): fine for 64 rows or a 512-wide MLA
// output, but for a 16-row decode block the barriers and shared round trips cost more issue
// slots than the copies. Here each of the 4 warps owns 16 keys of every 64-key tile and runs
// FlashAttention-2's inner loop on them alone: S = Q K^T (16 x 16) in registers, the online
// softmax in registers (a row lives in a lane quad), P re-packed as the A operand of P V, and a
// 16 x DV fp32 partial output per warp. Each warp streams its own keys (a __syncwarp per tile is
// the stage hand-off); the four partial states merge once, through shared memory, at the end.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/dtype.cuh"
#include "cuda/common/key_rows.cuh"
#include "cuda/common/log2.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/row_swizzle.h"
#include "cuda/decode/config.h"
#include "cuda/decode/entry.cuh"
#include "cuda/decode/params.h"

namespace flashback::cuda {

namespace wk {

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(ptr)));
}

// Byte b of stage row `row` (rows of PITCH bytes, Cfg::KRAW or Cfg::VRAW, counted from the warp's
// first key, a multiple of 8): padded rows, or (Cfg::SWIZZLE) unpadded ones whose 16-byte chunk
// x sits at chunk x ^ mask(row) of its line (common/row_swizzle.h), as copy_keys_warp laid them
// (config.h says why).
template <typename Cfg, int PITCH>
__device__ __forceinline__ int row_at(int row, int b) {
  return row * PITCH + stage_row_byte(Cfg::SWIZZLE, row, b);
}

// FP8 caches run the tensor cores in fp16 whatever q's type: every e4m3 / e5m2 value is an
// fp16 value, one cvt widens two of them (to bf16 it takes four instructions), and q is
// brought into fp16's range by a power-of-two scale (exact; folded back into the logits).
//
// K never goes through a widened copy: the B fragment of S = Q K^T is built in registers from
// one 16-byte shared load per lane per 64 dims. That works because the dot product does not
// care in which order the dims are summed: lane quad c of k-step s holds mma k-indices
// {2c, 2c+1, 2c+8, 2c+9}, and we let those be dims 64 (s / 4) + 16 c + 4 (s % 4) + {0..3}, four
// consecutive bytes of the key's row. q is stored in shared memory in the same permuted order.
__device__ __forceinline__ int fp8_dim_of(int pos) {  // shared q position -> head dim
  const int s = pos >> 4, kap = pos & 15;
  const int c = (kap & 7) >> 1, j = (kap & 1) + 2 * (kap >> 3);
  return (s >> 2) * 64 + c * 16 + (s & 3) * 4 + j;
}

template <KvKind KV>
__device__ __forceinline__ uint32_t fp8x2_f16(uint32_t two) {
  return fp8x2_to<__half, KV>(static_cast<uint16_t>(two));
}

// fp8_dim_of's inverse: the shared q position of head dim `dim`.
__device__ __forceinline__ int fp8_pos_of(int dim) {
  const int rem = dim & 63, c = rem >> 4, j = rem & 3;
  const int s = (dim >> 6) * 4 + ((rem & 15) >> 2);
  return s * 16 + (j >> 1) * 8 + c * 2 + (j & 1);
}

// The CTA's q rows, scaled by 2^k into fp16 range and permuted as above; returns 2^-k. The rows
// are read once, into registers (entry.cuh, RowChunks), for both the maximum and the store.
template <typename T, int ROWS, int D, int QP, int THREADS>
__device__ __forceinline__ float load_q_fp16(const DecodeParams& p, const DecodeEntry& e,
                                             __half* sQ) {
  __shared__ float red[32];  // counted in config.h's WkLayout::static_bytes
  RowChunks<T, ROWS, D, THREADS> q;
  q.load(p, e, static_cast<const T*>(p.q), p.q_st, p.q_sh);
  // Element x (0..7) of chunk c.
  auto elem = [&q](int c, int x) {
    const uint4& v = q.v[c];
    const uint32_t two = x < 2 ? v.x : x < 4 ? v.y : x < 6 ? v.z : v.w;
    return unpack_at<T>(two, x & 1);
  };
  float mx = 0.f;  // rows past the entry hold zeros
#pragma unroll
  for (int c = 0; c < q.IT; ++c)
#pragma unroll
    for (int x = 0; x < 8; ++x) mx = fmaxf(mx, fabsf(elem(c, x)));
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = 0.f;
  for (int wp = 0; wp < THREADS / 32; ++wp) mx = fmaxf(mx, red[wp]);
  // |q| 2^k in [2^14, 2^15): fp16's top binade stays free, so no rounding overflows.
  int k = 0;
  if (mx > 0.f && mx <= 3.0e38f) k = min(100, max(-100, 14 - ilogbf(mx)));
  const float qs = ldexpf(1.f, k);
#pragma unroll
  for (int c = 0; c < q.IT; ++c) {
    int r, d;
    if (!q.at(c, r, d)) continue;
#pragma unroll
    for (int x = 0; x < 8; ++x) sQ[r * QP + fp8_pos_of(d + x)] = __float2half_rn(elem(c, x) * qs);
  }
  return ldexpf(1.f, -k);
}

// The raw fp8 V bytes both P V forms below build their fragments from: lane group g = lane / 4
// takes DV / 8 consecutive bytes (W words) of each of the four key rows 2c, 2c+1, 2c+8, 2c+9
// (c = lane % 4) of a warp's stage.
template <typename Cfg, int W = Cfg::DV / 32>
__device__ __forceinline__ void v_fp8_words(uint32_t (&x)[4][W], const unsigned char* vrows,
                                            int lane) {
  static_assert(Cfg::DV % 64 == 0, "fp8 V fragments are read 8 columns (two words) at a time");
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int key = 2 * c + (q & 1) + 8 * (q >> 1);
    const auto at = [&](int w) {
      return vrows + row_at<Cfg, Cfg::VRAW>(key, g * (Cfg::DV / 8) + 4 * w);
    };
    if constexpr (W % 4 == 0) {
#pragma unroll
      for (int w = 0; w < W; w += 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(at(w));
        x[q][w] = v.x, x[q][w + 1] = v.y, x[q][w + 2] = v.z, x[q][w + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int w = 0; w < W; w += 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(at(w));
        x[q][w] = v.x, x[q][w + 1] = v.y;
      }
    }
  }
}

// Word w of v_fp8_words' bytes with two keys' bytes of each column side by side, ready for one
// cvt per pair: keys (2c, 2c+1) in lo0 (columns 4w, 4w+1) and hi0 (4w+2, 4w+3), keys
// (2c+8, 2c+9) in lo1 and hi1.
template <int W>
__device__ __forceinline__ void v_fp8_key_pairs(const uint32_t (&x)[4][W], int w, uint32_t& lo0,
                                                uint32_t& hi0, uint32_t& lo1, uint32_t& hi1) {
  lo0 = __byte_perm(x[0][w], x[1][w], 0x5140);
  hi0 = __byte_perm(x[0][w], x[1][w], 0x7362);
  lo1 = __byte_perm(x[2][w], x[3][w], 0x5140);
  hi1 = __byte_perm(x[2][w], x[3][w], 0x7362);
}

// O += P V for an fp8 stage, with V's B fragments built in registers from the raw bytes (no
// widened copy, no ldmatrix.trans). The columns are permuted instead of the keys: mma column n of
// n8 tile t is V column n * (DV / 8) + t so lane group g = lane / 4 reads DV / 8
// consecutive bytes of each of its four key rows (2c, 2c+1, 2c+8, 2c+9 with c = lane % 4), and
// one byte permute pairs two keys' bytes of the same column for one cvt.
template <typename Cfg, KvKind KV>
__device__ __forceinline__ void pv_fp8(float (&acc)[Cfg::DV / 8][4], const uint32_t (&a)[4],
                                       const unsigned char* vrows, int lane) {
  constexpr int DV = Cfg::DV, W = DV / 32;  // 32-bit words per key row per lane
  uint32_t x[4][W];
  v_fp8_words<Cfg>(x, vrows, lane);
#pragma unroll
  for (int w = 0; w < W; ++w) {
    // Keys (2c, 2c+1) and (2c+8, 2c+9), bytes of columns 4w, 4w+1 (lo) and 4w+2, 4w+3 (hi).
    uint32_t lo0, hi0, lo1, hi1;
    v_fp8_key_pairs(x, w, lo0, hi0, lo1, hi1);
    mma16816<__half>(acc[4 * w], a, fp8x2_f16<KV>(lo0 & 0xffff), fp8x2_f16<KV>(lo1 & 0xffff));
    mma16816<__half>(acc[4 * w + 1], a, fp8x2_f16<KV>(lo0 >> 16), fp8x2_f16<KV>(lo1 >> 16));
    mma16816<__half>(acc[4 * w + 2], a, fp8x2_f16<KV>(hi0 & 0xffff), fp8x2_f16<KV>(hi1 & 0xffff));
    mma16816<__half>(acc[4 * w + 3], a, fp8x2_f16<KV>(hi0 >> 16), fp8x2_f16<KV>(hi1 >> 16));
  }
}

// O^T += V^T P^T for an fp8 stage (the narrow form, below): the A fragments (16 V columns x 16
// keys per m-tile) built from the same raw bytes pv_fp8 reads. Row m of m-tile u is V column
// g (DV / 8) + 2 u + m / 8 for the lane group g that holds it, so each lane still reads DV / 8
// consecutive bytes of each of its four keys, and one byte permute pairs two keys of a column.
template <typename Cfg, KvKind KV>
__device__ __forceinline__ void pv_fp8_narrow(float (&acc)[Cfg::DV / 16][4], uint32_t b0,
                                              uint32_t b1, const unsigned char* vrows, int lane) {
  constexpr int DV = Cfg::DV, W = DV / 32;
  uint32_t x[4][W];
  v_fp8_words<Cfg>(x, vrows, lane);
#pragma unroll
  for (int w = 0; w < W; ++w) {
    // Keys (2c, 2c+1) and (2c+8, 2c+9); bytes 4w, 4w+1 (lo: rows g, g+8 of m-tile 2w) and
    // 4w+2, 4w+3 (hi: m-tile 2w+1).
    uint32_t lo0, hi0, lo1, hi1;
    v_fp8_key_pairs(x, w, lo0, hi0, lo1, hi1);
    const uint32_t a0[4] = {fp8x2_f16<KV>(lo0 & 0xffff), fp8x2_f16<KV>(lo0 >> 16),
                            fp8x2_f16<KV>(lo1 & 0xffff), fp8x2_f16<KV>(lo1 >> 16)};
    const uint32_t a1[4] = {fp8x2_f16<KV>(hi0 & 0xffff), fp8x2_f16<KV>(hi0 >> 16),
                            fp8x2_f16<KV>(hi1 & 0xffff), fp8x2_f16<KV>(hi1 >> 16)};
    mma16816<__half>(acc[2 * w], a0, b0, b1);
    mma16816<__half>(acc[2 * w + 1], a1, b0, b1);
  }
}

// A config's K/V pipeline, per-warp either way: on sm_90 and later, for rows of at least 512
// bytes (head dim 256 bf16/fp16), the owner lane of each key issues its K and V rows as two bulk
// copies (common/key_rows.cuh); otherwise the warp issues its keys' 16-byte cp.async chunks
// (common/paged.cuh), which is faster for short rows on the H200. Same stage layout; the bulk
// form's barriers take the start of the key-offset buffer, which it does not use.
template <typename Cfg>
using Pipeline = std::conditional_t<
    FLASHBACK_HAS_BULK_COPY && use_key_rows(Cfg::D* Cfg::EB, Cfg::DV* Cfg::EB),
    KeyRowPipeline<Cfg::N, Cfg::D * Cfg::EB, Cfg::DV * Cfg::EB, Cfg::KRAW, Cfg::VRAW, Cfg::STAGES,
                   Cfg::STAGE_BYTES, Cfg::EB, Cfg::KW>,
    KvPipeline<Cfg::N, Cfg::D * Cfg::EB / 16, Cfg::DV * Cfg::EB / 16, Cfg::KRAW, Cfg::VRAW,
               Cfg::THREADS, Cfg::STAGES, Cfg::STAGE_BYTES, Cfg::EB, Cfg::KW, Cfg::SWIZZLE>>;
// Bulk copies write whole rows (no swizzle); the 16-bit reads are ldmatrix's (kLdsm), the fp8
// ones lane quads' 16-byte pieces (kFp8).
template <typename Cfg>
inline constexpr bool kLayoutFitsItsReads = Cfg::SWIZZLE == RowSwizzle::kNone ||
                                            (Cfg::SWIZZLE == (Cfg::FP8 ? RowSwizzle::kFp8
                                                                       : RowSwizzle::kLdsm) &&
                                             !use_key_rows(Cfg::D * Cfg::EB, Cfg::DV* Cfg::EB));

}  // namespace wk

// NARROW (at most 8 rows per CTA: decode with a GQA group <= 8): S^T = K Q^T instead of S = Q K^T,
// so the 16 keys of a warp are the mma's M and the rows its N = 8 ("swap AB"). A 16-row block
// with 4 real rows pays for 16 rows of S, softmax and P V; here S is 8 mma per 16 keys (was 16),
// P V 8 per 128 columns (was 16), a lane softmaxes 4 logits (was 8) and holds half the O
// accumulators, and q's B fragments stay in registers for the whole split. P^T reaches P V's B
// operand through two movmatrix transposes.
template <typename Cfg, typename T, KvKind KV>
__global__ void __launch_bounds__(Cfg::THREADS, wk_form_ctas(Cfg::L))
    decode_wk_kernel(const DecodeParams p) {
  constexpr bool NARROW = Cfg::NARROW;
  constexpr int D = Cfg::D, DV = Cfg::DV, N = Cfg::N, KW = Cfg::KW, ROWS = Cfg::ROWS;
  constexpr int WARPS = Cfg::WARPS, THREADS = Cfg::THREADS, STAGES = Cfg::STAGES;
  constexpr int QP = Cfg::QP, KRAW = Cfg::KRAW, VRAW = Cfg::VRAW;
  constexpr bool FP8 = Cfg::FP8;
  static_assert(FP8 == (KV != KvKind::kSame), "config and KV kind disagree");
  static_assert(wk::kLayoutFitsItsReads<Cfg>, "swizzled rows: cp.async rows, the reads' rule");
  // S elements per lane (NT n8 tiles of 4; narrow: one 16 x 8 tile) and O accumulator tiles.
  constexpr int NT = NARROW ? 1 : 2, OT = NARROW ? DV / 16 : DV / 8;

  // The 16-bit type of the tensor-core operands: q's, or fp16 for fp8 caches (see above).
  using C = std::conditional_t<FP8, __half, T>;
  // The stages start on a 128-byte line: the static __shared__ variables come first, and with
  // 16-byte alignment the dynamic part began 16 bytes into a line (SASS: 0x400 + 0x10), so every
  // 128-byte run a copy writes straddled two lines and the SM read 1.5-2x the L2 sectors it needed
  // (docs/PERFORMANCE_GPU.md, session 23).
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* sStage = smem;
  C* sQ = reinterpret_cast<C*>(smem + STAGES * Cfg::STAGE_BYTES);
  KeyBytes* sLoc = reinterpret_cast<KeyBytes*>(smem + STAGES * Cfg::STAGE_BYTES + Cfg::Q_BYTES);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  DecodeEntry e;
  const int b = p.longest_first ? longest_first_entry(p, static_cast<int>(blockIdx.z),
                                                      reinterpret_cast<uint32_t*>(sStage))
                                : static_cast<int>(blockIdx.z);
  if (!load_entry<T, DV, ROWS, N>(p, e, b)) return;
  float q_unscale = 1.f;
  if constexpr (FP8)
    q_unscale = wk::load_q_fp16<T, Cfg::Q_ROWS, D, QP, THREADS>(p, e, sQ);
  else
    load_rows<T, Cfg::Q_ROWS, D, QP, THREADS>(p, e, static_cast<const T*>(p.q), p.q_st, p.q_sh, sQ);

  // K/V tiles through common/paged.cuh's pipeline with per-warp ownership: each warp streams its
  // own 16 keys of a tile, with no barrier across warps until the merge. (The CTA-wide form, a
  // __syncthreads per tile, stalled every warp on the SM with one resident CTA: H200, session 6,
  // CTA-wide -> per-warp: window_b32_L32k_w4k 0.338 -> 0.318 ms, softcap_b32_L8k_hd256 0.719 ->
  // 0.683, decode_fp8_b64_L8k 0.486 -> 0.467; it was last ahead, 0.529 against 0.538 ms, for
  // bf16 decode_b64_L8k at three CTAs x two stages, a layout config.h no longer picks.)
  wk::Pipeline<Cfg> kv;
  bind_kv(kv, p, e, sLoc, sStage);

  // This thread's two rows and their key ranges: lane / 4 and lane / 4 + 8 of the block (S's
  // rows), or (narrow, S^T's columns) 2 (lane % 4) and 2 (lane % 4) + 1.
  const auto row_of = [lane](int i) { return NARROW ? 2 * (lane & 3) + i : (lane >> 2) + 8 * i; };
  int lo[2], hi[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = e.row0 + row_of(i);
    lo[i] = 1;
    hi[i] = 0;
    if (gr < e.rows_total) {
      const KeyRange r = visible_keys(p, gr / p.group, e.q_len, e.kv_len);
      lo[i] = r.lo;
      hi[i] = min(r.hi, e.end - 1);
    }
  }
  // logit (base 2) = softcap(scale * kd * s) * log2(e); without softcap one multiply.
  const bool capped = p.softcap > 0.f;
  const float mul =
      capped ? p.scale * e.kd * q_unscale / p.softcap : p.scale * e.kd * q_unscale * kLog2e;
  const float post = capped ? p.softcap * kLog2e : 1.f;

  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float acc[OT][4];
#pragma unroll
  for (int u = 0; u < OT; ++u) acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = 0.f;

  kv.prologue(p);
  __syncthreads();  // q's rows, written by every warp, before any warp's first S
  // Narrow: q^T's B fragments (rows 0-7), one pair per k-step, for the whole split.
  uint32_t qf[NARROW ? D / 16 : 1][2];
  if constexpr (NARROW) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      ldmatrix_x2(qf[ks], sQ + (lane & 7) * QP + ks * 16 + ((lane >> 3) & 1) * 8);
  }
  for (int j = 0; j < kv.ntiles; ++j) {
    kv.wait(j);
    kv.sync();
    kv.advance(p, j);
    const int t0 = kv.first + j * N + warp * KW;  // this warp's first key
    if (t0 < e.end) {
      const unsigned char* stage = kv.stage(j);
      const unsigned char* vrows = stage + N * KRAW + warp * KW * VRAW;
      // S = Q K^T: 16 rows x 16 keys, n8 tiles 0 (keys 0-7) and 1 (8-15); narrow: S^T = K Q^T,
      // 16 keys x 8 rows. Two accumulator sets (even / odd k-steps) halve the dependent mma
      // chain: with one or two warps per scheduler its latency, not the issue rate, bounds a tile.
      float s[NT][4] = {}, s2[NT][4] = {};
      if constexpr (FP8) {
        // Each lane's key (lane / 4 of each n8 tile, or of each half of the narrow m-tile), 16
        // bytes per 64 dims.
        uint4 kr[2][D / 64];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int gq = 0; gq < D / 64; ++gq)
            kr[nt][gq] = *reinterpret_cast<const uint4*>(
                stage + warp * KW * KRAW +
                wk::row_at<Cfg, KRAW>(nt * 8 + (lane >> 2), gq * 64 + (lane & 3) * 16));
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          uint32_t w[2];
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            const uint4 w4 = kr[nt][ks / 4];
            w[nt] = (ks & 3) == 0 ? w4.x : (ks & 3) == 1 ? w4.y : (ks & 3) == 2 ? w4.z : w4.w;
          }
          if constexpr (NARROW) {
            const uint32_t a[4] = {wk::fp8x2_f16<KV>(w[0] & 0xffff),
                                   wk::fp8x2_f16<KV>(w[1] & 0xffff), wk::fp8x2_f16<KV>(w[0] >> 16),
                                   wk::fp8x2_f16<KV>(w[1] >> 16)};
            mma16816<C>((ks & 1) ? s2[0] : s[0], a, qf[ks][0], qf[ks][1]);
          } else {
            uint32_t a[4];
            ldmatrix_x4(a, sQ + (lane & 15) * QP + ks * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
              mma16816<C>((ks & 1) ? s2[nt] : s[nt], a, wk::fp8x2_f16<KV>(w[nt] & 0xffff),
                          wk::fp8x2_f16<KV>(w[nt] >> 16));
          }
        }
      } else {
        const unsigned char* Kw = stage + warp * KW * KRAW;
        // This lane's ldmatrix row of the warp's K rows, and its 8-element half of a k-step:
        // narrow, keys (lane & 7) + 8 ((lane >> 3) & 1), dims + 8 (lane >> 4); else keys
        // (lane & 7) + 8 (lane >> 4), dims + 8 ((lane >> 3) & 1).
        const int kr =
            NARROW ? (lane & 7) + ((lane >> 3) & 1) * 8 : (lane & 7) + ((lane >> 4) << 3);
        const int kh = NARROW ? lane >> 4 : (lane >> 3) & 1;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          const unsigned char* kaddr = Kw + wk::row_at<Cfg, KRAW>(kr, (ks * 16 + kh * 8) * 2);
          if constexpr (NARROW) {
            uint32_t a[4];
            ldmatrix_x4(a, kaddr);
            mma16816<T>((ks & 1) ? s2[0] : s[0], a, qf[ks][0], qf[ks][1]);
          } else {
            uint32_t a[4], b[4];
            ldmatrix_x4(a, sQ + (lane & 15) * QP + ks * 16 + (lane >> 4) * 8);
            ldmatrix_x4(b, kaddr);
            mma16816<T>((ks & 1) ? s2[0] : s[0], a, b[0], b[1]);
            mma16816<T>((ks & 1) ? s2[1] : s[1], a, b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) s[nt][x] += s2[nt][x];
      // Online softmax in base 2. Element x of n8 tile nt is row x >> 1, key nt*8 + 2*(lane&3) +
      // (x&1); narrow: row x & 1, key lane/4 + 8 (x >> 1).
      const auto row_i = [](int x) { return NARROW ? x & 1 : x >> 1; };
      const auto key_t = [lane, t0](int nt, int x) {
        return NARROW ? t0 + (lane >> 2) + 8 * (x >> 1) : t0 + nt * 8 + 2 * (lane & 3) + (x & 1);
      };
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int i = row_i(x), t = key_t(nt, x);
          float v = s[nt][x] * mul;
          if (capped) v = tanhf(v) * post;
          v = (t >= lo[i] && t <= hi[i]) ? v : -INFINITY;
          s[nt][x] = v;
          mx[i] = fmaxf(mx[i], v);
        }
      // Lazy rescale (FlashAttention-4's, cuda/common/log2.cuh): while no row of the warp has
      // a max more than kLazyRescaleLog2 above its running one, the running maxima stay and
      // alpha is exactly 1, so the O rescale below is skipped on more tiles than "no max grew".
      float alpha[2] = {1.f, 1.f};
      bool keep = true;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // A row's keys: over the lane quad, or (narrow) over the 8 lanes of its column.
#pragma unroll
        for (int o = NARROW ? 4 : 1; o < (NARROW ? 32 : 4); o <<= 1)
          mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], o));
        mx[i] = fmaxf(m_run[i], mx[i]);  // the new running max
        // A row that has seen no key (a padding row) keeps its -inf; one seeing its first key
        // (x - -inf = +inf) does not.
        keep = keep && (mx[i] == -INFINITY || lazy_keeps(mx[i], m_run[i]));
      }
      if (!__all_sync(0xffffffffu, keep)) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          alpha[i] = mx[i] == -INFINITY ? 1.f : exp2f(m_run[i] - mx[i]);
          m_run[i] = mx[i];
          l_run[i] *= alpha[i];  // per-thread partial sums; reduced at the end
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int i = row_i(x);
          // No finite logit yet: subtract 0 (masked -inf still gives 0, a NaN logit stays NaN).
          const float pr = exp2f(s[nt][x] - (m_run[i] == -INFINITY ? 0.f : m_run[i]));
          s[nt][x] = pr;
          l_run[i] += pr;
        }
      // Rescale O only when the warp moved some row's running max: after the first tiles it
      // rarely does, and the rescale is a multiply per accumulator (a warp-uniform branch).
      // Accumulator y of a tile is row y >> 1 (narrow: y & 1).
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int u = 0; u < OT; ++u)
#pragma unroll
          for (int y = 0; y < 4; ++y) acc[u][y] *= alpha[row_i(y)];
      }
      if constexpr (NARROW) {
        // O^T += V^T P^T: P^T's B fragment is the transpose of S^T's two 8 x 8 halves.
        const uint32_t b0 = movmatrix_trans(pack2<C>(s[0][0], s[0][1]));
        const uint32_t b1 = movmatrix_trans(pack2<C>(s[0][2], s[0][3]));
        if constexpr (FP8) {
          wk::pv_fp8_narrow<Cfg, KV>(acc, b0, b1, vrows, lane);
        } else {
#pragma unroll
          for (int u = 0; u < DV / 16; ++u) {
            uint32_t a[4];  // V^T: keys (lane & 7) + 8 (lane >> 4), columns + 8 ((lane >> 3) & 1)
            wk::ldsm_x4_trans(a,
                              vrows + wk::row_at<Cfg, VRAW>((lane & 7) + (lane >> 4) * 8,
                                                            (u * 16 + ((lane >> 3) & 1) * 8) * 2));
            mma16816<T>(acc[u], a, b0, b1);
          }
        }
      } else {
        // O += P V: S's accumulator layout is exactly the A fragment of a 16 x 16 (rows x keys)
        // tile.
        uint32_t a[4];
        a[0] = pack2<C>(s[0][0], s[0][1]);
        a[1] = pack2<C>(s[0][2], s[0][3]);
        a[2] = pack2<C>(s[1][0], s[1][1]);
        a[3] = pack2<C>(s[1][2], s[1][3]);
        if constexpr (FP8) {
          wk::pv_fp8<Cfg, KV>(acc, a, vrows, lane);
        } else {
#pragma unroll
          for (int dp = 0; dp < DV / 16; ++dp) {
            uint32_t bv[4];
            wk::ldsm_x4_trans(
                bv, vrows + wk::row_at<Cfg, VRAW>(lane & 15, (dp * 16 + (lane >> 4) * 8) * 2));
            mma16816<T>(acc[2 * dp], a, bv[0], bv[1]);
            mma16816<T>(acc[2 * dp + 1], a, bv[2], bv[3]);
          }
        }
      }
    }
    kv.retire(p, j);
  }
  cp_async_wait<0>();  // (bulk copies: every tile issued was waited for in the loop)
  __syncthreads();     // the stages become the merge scratch

  // Merge the four warps' states: row max M, sum L = sum_w l_w 2^(m_w - M), O = sum_w O_w 2^(m_w -
  // M).
  // MROWS: the rows this form holds (narrow: 8, its N; every CTA's rows fit them, wk_narrow).
  constexpr int OP = Cfg::OP, MROWS = Cfg::Q_ROWS;  // sO's row pitch (floats), its rows
  float* sO = reinterpret_cast<float*>(sStage);     // [WARPS][MROWS][OP]
  float* sM = sO + WARPS * MROWS * OP;              // [WARPS][MROWS]
  float* sLw = sM + WARPS * MROWS;                  // [WARPS][MROWS]
  float* sMt = sLw + WARPS * MROWS;                 // [MROWS] merged max
  float* sLt = sMt + MROWS;                         // [MROWS] merged sum
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int o = NARROW ? 4 : 1; o < (NARROW ? 32 : 4); o <<= 1)
      l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], o);
    if ((NARROW ? lane >> 2 : lane & 3) == 0) {
      sM[warp * MROWS + row_of(i)] = m_run[i];
      sLw[warp * MROWS + row_of(i)] = l_run[i];
    }
  }
  __syncthreads();
  if (tid < MROWS) {
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, sM[w * MROWS + tid]);
    // A warp with no finite logit (m -inf) adds its l as it is: 0, or NaN from a NaN input.
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float mw = sM[w * MROWS + tid];
      L += sLw[w * MROWS + tid] * (mw == -INFINITY ? 1.f : exp2f(mw - M));
    }
    sMt[tid] = M;
    sLt[tid] = L;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = row_of(i);
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, sM[w * MROWS + r]);
    const float f = m_run[i] == -INFINITY ? 0.f : exp2f(m_run[i] - M);
    float* o = sO + (warp * MROWS + r) * OP;
#pragma unroll
    for (int u = 0; u < OT; ++u) {
      if constexpr (NARROW) {
        // Accumulators i and i + 2 of m-tile u: its rows lane / 4 and + 8 (V columns below).
        const int g = lane >> 2;
        const int c0 = FP8 ? g * (DV / 8) + 2 * u : u * 16 + g;  // pv_fp8_narrow's columns
        const int c1 = FP8 ? c0 + 1 : c0 + 8;
        o[c0] = acc[u][i] * f;
        o[c1] = acc[u][i + 2] * f;
      } else {
        const int n = 2 * (lane & 3);  // mma columns n, n + 1 of n8 tile u
        if constexpr (FP8) {           // pv_fp8's column permutation
          o[n * (DV / 8) + u] = acc[u][2 * i] * f;
          o[(n + 1) * (DV / 8) + u] = acc[u][2 * i + 1] * f;
        } else {
          *reinterpret_cast<float2*>(o + u * 8 + n) =
              make_float2(acc[u][2 * i] * f, acc[u][2 * i + 1] * f);
        }
      }
    }
  }
  __syncthreads();

  // Normalise (with the value descale) and write the output, or this split's partial state.
  const int rows_here = min(MROWS, e.rows_total - e.row0);
  for (int idx = tid; idx < rows_here * (DV / 2); idx += THREADS) {
    const int r = idx / (DV / 2), c = 2 * (idx % (DV / 2));
    float2 sum = make_float2(0.f, 0.f);
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float* src = sO + (w * MROWS + r) * OP + c;
      float2 x;
      if constexpr (OP % 2 == 0)
        x = *reinterpret_cast<const float2*>(src);
      else
        x = make_float2(src[0], src[1]);
      sum.x += x.x;
      sum.y += x.y;
    }
    const float L = sLt[r], inv = L != 0.f ? e.vd / L : 0.f;
    const int gr = e.row0 + r, tok = e.token(p, gr), head = e.head(p, gr);
    if (p.use_workspace) {
      float* w =
          p.ws_o + ((static_cast<int64_t>(e.split) * p.total_q + tok) * p.heads_q + head) * DV + c;
      *reinterpret_cast<float2*>(w) = make_float2(sum.x * inv, sum.y * inv);
    } else {
      T* o = static_cast<T*>(p.out) + tok * p.out_st + head * p.out_sh + c;  // any strides
      o[0] = from_float<T>(sum.x * inv);
      o[1] = from_float<T>(sum.y * inv);
    }
    if (c == 0) {
      const float lse = L != 0.f ? (sMt[r] + log2f(L)) * kLn2 : -INFINITY;
      if (p.use_workspace)
        p.ws_lse[(static_cast<int64_t>(e.split) * p.total_q + tok) * p.heads_q + head] = lse;
      else if (p.lse)
        p.lse[tok * p.lse_st + head * p.lse_sh] = lse;
    }
  }
}

}  // namespace flashback::cuda

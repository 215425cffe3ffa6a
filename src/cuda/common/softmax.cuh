// The online softmax of one K/V tile on a warp's S accumulators (wgmma / mma.sync layout) of
// MT m-tiles (a thread holds 2 MT rows: lane / 4 and lane / 4 + 8 of each m-tile, columns
// 2 (lane % 4) + {0, 1} of each n8 block): the prefill kernels' and the Hopper MLA decode
// scorer's. Kept on its own so the common path can be read (and its SASS counted): no softcap
// and no masking is straight-line code of one max, one fma, one exp2 and one add per element.
#pragma once

#include <cmath>

#include "cuda/common/log2.cuh"
#include "cuda/common/visible.cuh"

namespace flashback::cuda {

// 2^x. The libdevice exp2f adds a denormal range fix-up (a compare and two multiplies) around
// MUFU.EX2; the probabilities it feeds are rounded to 16 bits for P V, so flushing results
// below 2^-126 to zero changes nothing. ex2(-inf) = +0, which masking relies on.
__device__ __forceinline__ float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);  // the CPU emulation test (tests/cuda/prefill_emu)
#endif
}

// How raw q.k becomes a base-2 logit: `mul` = scale * k_descale * log2e without softcap;
// with softcap c, logit2 = out * tanh(q.k * in), in = scale * k_descale / c, out = c * log2e.
struct LogitMap {
  float mul, in, out;
};

/// The probabilities of a tile against per-row maxima m_use, in place of its scores, added to
/// per-row sums: exp2(fma(s, mul, -m_use)) from raw scores (RAW), else exp2(s - m_use) from
/// scores already scaled.
template <int MT, int N, bool RAW>
__device__ __forceinline__ void exp_and_sum(float (&s)[MT][N / 8][4], const float (&m_use)[2 * MT],
                                            float (&sum)[2 * MT], float mul) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int u = 0; u < N / 8; ++u)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int ri = 2 * mt + (x >> 1);
        const float pr = RAW ? fast_exp2(fmaf(s[mt][u][x], mul, -m_use[ri]))
                             : fast_exp2(s[mt][u][x] - m_use[ri]);
        s[mt][u][x] = pr;
        sum[ri] += pr;
      }
}

/// Turns the warp's S tile (raw q.k of keys [t0, t0 + N)) into P in place and updates the
/// running max and (per-thread partial) sums; alpha[ri] is the factor the O rows must be
/// rescaled by (rescale_rows below), left to the caller so that an MMA still accumulating into O
/// can run meanwhile. MASK: some key of the tile is outside some row's range `rr` (only tiles on
/// a range edge); CAP: logit softcap. Without either, the caller guarantees lm.mul >= 0, so the
/// row max is taken on raw q.k and scaled once per row, and each probability is
/// exp2(fma(s, mul, -max)) (FlashAttention-2's form): one multiply per element fewer. A negative
/// k_descale takes the MASK body instead.
/// MASK_LO = false (with MASK, without CAP): no row's range starts inside the tile (every
/// rr.lo <= t0; a row with no key passes hi < t0), so only the end is tested, one compare per
/// element, and the arithmetic stays on raw q.k as without a mask; the caller guarantees
/// lm.mul > 0 (a masked -inf times 0 would be NaN). The Hopper prefill kernel's causal diagonal
/// tiles (wgmma_kernel.cuh, probs).
/// LAZY: while no row of the warp has a max more than kLazyRescaleLog2 (cuda/common/log2.cuh)
/// above its running one, the running maxima stay as they are and alpha is exactly 1, so the
/// caller can skip O's rescale (most tiles once the maxima settle). The decision is
/// warp-uniform: a row's rounding now depends on the other rows of its warp (the same entry's
/// neighbouring queries of one head), never on other entries, so the deterministic mode's
/// batch invariance holds; the same token can round differently when its entry is cut into
/// chunks differently (as the tile alignment already made it). Tested on the CPU against double
/// precision by tests/cuda/test_softmax_emu.cc.
template <int MT, int N, bool MASK, bool CAP, bool LAZY = false, bool MASK_LO = true>
__device__ __forceinline__ void softmax_probs(float (&s)[MT][N / 8][4], float (&m_run)[2 * MT],
                                              float (&l_run)[2 * MT], float (&alpha)[2 * MT],
                                              const KeyRange (&rr)[2 * MT], int t0, int lane,
                                              const LogitMap& lm) {
  static_assert(MASK_LO || (MASK && !CAP), "an ends-only mask is a mask without softcap");
  constexpr bool RAW = !CAP && (!MASK || !MASK_LO);
  float mx[2 * MT];
  // Row bounds relative to this thread's first column of the tile, so the per-element test
  // compares against compile-time offsets u * 8 + (x & 1).
  int lo_rel[2 * MT], hi_rel[2 * MT];
#pragma unroll
  for (int ri = 0; ri < 2 * MT; ++ri) {
    mx[ri] = -INFINITY;
    if constexpr (MASK) {
      const int c0 = t0 + 2 * (lane & 3);
      lo_rel[ri] = rr[ri].lo - c0;
      hi_rel[ri] = rr[ri].hi - c0;
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int u = 0; u < N / 8; ++u)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int ri = 2 * mt + (x >> 1);
        float v;
        if constexpr (CAP)
          v = lm.out * tanhf(s[mt][u][x] * lm.in);
        else if constexpr (RAW)
          v = s[mt][u][x];
        else
          v = s[mt][u][x] * lm.mul;
        if constexpr (MASK && MASK_LO) {
          const int k = u * 8 + (x & 1);
          if (k < lo_rel[ri] || k > hi_rel[ri]) v = -INFINITY;
        } else if constexpr (MASK) {
          if (u * 8 + (x & 1) > hi_rel[ri]) v = -INFINITY;
        }
        s[mt][u][x] = v;
        mx[ri] = fmaxf(mx[ri], v);
      }
  // A row that has seen no key keeps m_run = -inf; subtracting 0 instead leaves its
  // probabilities exp2(-inf) = 0 and alpha exp2(-inf) = 0 (its sums are 0 anyway), with no
  // per-element test and no inf - inf.
  float m_use[2 * MT];
  bool keep = LAZY;  // every row's max within kLazyRescaleLog2 of its (finite) running max
#pragma unroll
  for (int ri = 0; ri < 2 * MT; ++ri) {
    mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 1));
    mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 2));
    if constexpr (RAW) mx[ri] *= lm.mul;
    mx[ri] = fmaxf(m_run[ri], mx[ri]);  // the new running max
    // False for a row that has seen no key (-inf - -inf is NaN, x - -inf is +inf).
    if constexpr (LAZY) keep = keep && lazy_keeps(mx[ri], m_run[ri]);
  }
  if constexpr (LAZY) keep = __all_sync(0xffffffffu, keep);
  if (keep) {
#pragma unroll
    for (int ri = 0; ri < 2 * MT; ++ri) {
      m_use[ri] = m_run[ri];
      alpha[ri] = 1.f;
    }
  } else {
#pragma unroll
    for (int ri = 0; ri < 2 * MT; ++ri) {
      m_use[ri] = mx[ri] == -INFINITY ? 0.f : mx[ri];
      alpha[ri] = fast_exp2(m_run[ri] - m_use[ri]);
      m_run[ri] = mx[ri];
      l_run[ri] *= alpha[ri];  // per-thread partial sums; the quad is reduced at the end
    }
  }
  exp_and_sum<MT, N, RAW>(s, m_use, l_run, lm.mul);
}

/// The lazy softmax's common case without the row max (the Hopper prefill kernel's whole tiles
/// after a block's first): each probability is exp2(fma(s, mul, -m_run)) against the running
/// maxima as they stand, and the tile is accepted when every row's partial sum over this thread's
/// elements is at most kLazyMaxProb (2^kLazyRescaleLog2), which bounds every probability as the
/// lazy rule does (a sum bounds its terms). An accepted tile is exactly what softmax_probs's lazy
/// branch would have kept, P and m_run alike (alpha 1), with its sums added per row at once; it
/// costs three instructions per element instead of four (no max, no shuffles). Returns false,
/// warp-uniform, when some row of the warp fails (a grown max, a row that has seen no key: inf or
/// NaN sums fail the test too): `s` then holds no scores, and the caller recomputes them and runs
/// softmax_probs. Needs mul >= 0 and no softcap or mask, as softmax_probs's RAW form.
template <int MT, int N>
__device__ __forceinline__ bool softmax_probs_stale(float (&s)[MT][N / 8][4],
                                                    const float (&m_run)[2 * MT],
                                                    float (&l_run)[2 * MT], float mul) {
  float lt[2 * MT];
#pragma unroll
  for (int ri = 0; ri < 2 * MT; ++ri) lt[ri] = 0.f;
  exp_and_sum<MT, N, true>(s, m_run, lt, mul);
  bool ok = true;
#pragma unroll
  for (int ri = 0; ri < 2 * MT; ++ri) ok = ok && lt[ri] <= kLazyMaxProb;
  ok = __all_sync(0xffffffffu, ok);
  if (ok) {
#pragma unroll
    for (int ri = 0; ri < 2 * MT; ++ri) l_run[ri] += lt[ri];
  }
  return ok;
}

/// O rows times the factors softmax_probs returned (2 rows per m-tile per thread); skipped when
/// they are exactly 1 for every row of the warp (the lazy softmax kept every max; a
/// warp-uniform branch, so the whole warp calls it).
template <int MT, int DV>
__device__ __forceinline__ void rescale_rows(float (&acc)[MT][DV / 8][4],
                                             const float (&alpha)[2 * MT]) {
  bool any = false;
#pragma unroll
  for (int ri = 0; ri < 2 * MT; ++ri) any = any || alpha[ri] != 1.f;
  if (!__any_sync(0xffffffffu, any)) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int u = 0; u < DV / 8; ++u) {
      acc[mt][u][0] *= alpha[2 * mt];
      acc[mt][u][1] *= alpha[2 * mt];
      acc[mt][u][2] *= alpha[2 * mt + 1];
      acc[mt][u][3] *= alpha[2 * mt + 1];
    }
}

/// softmax_probs (lazy), then the O rescale at once (the mma.sync kernel, whose MMAs are
/// synchronous).
template <int MT, int N, int DV, bool MASK, bool CAP>
__device__ __forceinline__ void online_softmax(float (&s)[MT][N / 8][4], float (&m_run)[2 * MT],
                                               float (&l_run)[2 * MT], float (&acc)[MT][DV / 8][4],
                                               const KeyRange (&rr)[2 * MT], int t0, int lane,
                                               const LogitMap& lm) {
  float alpha[2 * MT];
  softmax_probs<MT, N, MASK, CAP, true>(s, m_run, l_run, alpha, rr, t0, lane, lm);
  rescale_rows<MT, DV>(acc, alpha);
}

}  // namespace flashback::cuda

// Many rows per KV head (prefill, extend, MLA): scores are computed transposed, ST[j][r], with
// rows along the vector lanes from a transposed q (qT[d][r], built once per task) and each key
// element broadcast (bf16 K read in place as element pairs; other dtypes from an fp32 tile).
// Every score is a plain sequential MulAdd over d (no horizontal sums) and the online softmax
// runs on whole vectors of rows; P·V is decode-inl.h's accumulate. A Highway "-inl.h" header,
// included by attention_kernel.cc once per target.
#if defined(FLASHBACK_CPU_FAST_PREFILL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHBACK_CPU_FAST_PREFILL_INL_H_
#undef FLASHBACK_CPU_FAST_PREFILL_INL_H_
#else
#define FLASHBACK_CPU_FAST_PREFILL_INL_H_
#endif

#include <cstring>

#include "cpu/fast/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashback::cpu_fast::HWY_NAMESPACE {

// ST[j][r] for KJ keys × RV vectors of rows. T = float: key rows from the fp32 tile, one
// broadcast per element. T = Bf16Pairs: key rows read in place as bf16, one 32-bit broadcast
// giving elements d and d + 1 (a shift and a mask), so no fp32 tile is built; the MulAdd
// sequence per score is the same either way.
template <int KJ, int RV, class T>
HWY_INLINE void wide_block(const float* qt, int64_t rp, Rows k, int64_t len, float* st) {
  const DF df;
  const int64_t N = lanes();
  VF acc[KJ][RV];
  for (int j = 0; j < KJ; ++j)
    for (int v = 0; v < RV; ++v) acc[j][v] = hn::Zero(df);
  if constexpr (std::is_same_v<T, Bf16Pairs>) {
    const hn::RebindToUnsigned<DF> du;
    const auto mask = hn::Set(du, 0xFFFF0000u);
    for (int64_t d = 0; d < len; d += 2) {
      // The q vectors of d and d + 1, loaded once for the KJ keys (in registers where they fit).
      VF qe[RV], qo[RV];
      for (int v = 0; v < RV; ++v) {
        qe[v] = hn::LoadU(df, qt + d * rp + v * N);
        qo[v] = hn::LoadU(df, qt + (d + 1) * rp + v * N);
        in_register(qe[v]);
        in_register(qo[v]);
      }
      for (int j = 0; j < KJ; ++j) {
        uint32_t bits;
        std::memcpy(&bits, static_cast<const uint16_t*>(k[j]) + d, sizeof bits);
        const auto u = hn::Set(du, bits);
        const VF ke = hn::BitCast(df, hn::ShiftLeft<16>(u)), ko = hn::BitCast(df, hn::And(u, mask));
        for (int v = 0; v < RV; ++v)
          acc[j][v] = hn::MulAdd(ko, qo[v], hn::MulAdd(ke, qe[v], acc[j][v]));
      }
    }
  } else {
    const float* kr[KJ];
    for (int j = 0; j < KJ; ++j) kr[j] = static_cast<const float*>(k[j]);
    for (int64_t d = 0; d < len; ++d) {
      VF qv[RV];
      for (int v = 0; v < RV; ++v) {
        qv[v] = hn::LoadU(df, qt + d * rp + v * N);
        in_register(qv[v]);
      }
      for (int j = 0; j < KJ; ++j) {
        const VF kb = hn::Set(df, kr[j][d]);
        for (int v = 0; v < RV; ++v) acc[j][v] = hn::MulAdd(kb, qv[v], acc[j][v]);
      }
    }
  }
  for (int j = 0; j < KJ; ++j)
    for (int v = 0; v < RV; ++v) hn::StoreU(acc[j][v], df, st + j * rp + v * N);
}

template <class T>
void wide_scores(const float* qt, int64_t rp, Rows k, int64_t len, int64_t j0, int64_t j1,
                 float* st) {
  const int64_t N = lanes();
  const int64_t nrv = rp / N;
  for (int64_t v0 = 0; v0 < nrv;) {
    const float* q = qt + v0 * N;
    float* s = st + v0 * N;
    int64_t j = j0;
    if (nrv - v0 >= 4) {
      // 3 keys × 4 row vectors: 12 accumulator chains cover the FMA latency on two pipes; with
      // 32 registers 4 keys (16 chains, the q vectors in registers: 4-8 % faster on AVX-512).
      if constexpr (kWideRegs)
        for (; j + 4 <= j1; j += 4) wide_block<4, 4, T>(q, rp, k + j, len, s + j * rp);
      for (; j + 3 <= j1; j += 3) wide_block<3, 4, T>(q, rp, k + j, len, s + j * rp);
      for (; j + 2 <= j1; j += 2) wide_block<2, 4, T>(q, rp, k + j, len, s + j * rp);
      for (; j < j1; ++j) wide_block<1, 4, T>(q, rp, k + j, len, s + j * rp);
      v0 += 4;
    } else if (nrv - v0 >= 2) {
      for (; j + 4 <= j1; j += 4) wide_block<4, 2, T>(q, rp, k + j, len, s + j * rp);
      for (; j < j1; ++j) wide_block<1, 2, T>(q, rp, k + j, len, s + j * rp);
      v0 += 2;
    } else {
      for (; j + 8 <= j1; j += 8) wide_block<8, 1, T>(q, rp, k + j, len, s + j * rp);
      for (; j < j1; ++j) wide_block<1, 1, T>(q, rp, k + j, len, s + j * rp);
      v0 += 1;
    }
  }
}

// Online softmax of transposed scores ST[j][r] over tile keys [j0, j1) at absolute key
// positions ts + j. Row r sees keys [lo[r], hi[r]]; m, l (rp entries) are updated in place and
// alpha[r] receives the factor its output must be rescaled by (exactly 1 when the tile adds
// nothing to the row). Weights overwrite the scores. kFull: every key of [j0, j1) is visible to
// every row of this vector (tiles below the causal diagonal), so no key mask is built.
template <bool kFull>
HWY_INLINE void wide_softmax_vec(float* st, int64_t rp, int64_t j0, int64_t j1, int64_t ts, VF vlo,
                                 VF vhi, float softcap, float* m, float* l, float* alpha,
                                 NextRows* next) {
  const DF df;
  const VF neg_inf = hn::Set(df, kNegInf), cap = hn::Set(df, softcap), zero = hn::Zero(df);
  VF mt = neg_inf;
  for (int64_t j = j0; j < j1; ++j) {
    VF v = hn::LoadU(df, st + j * rp);
    if (softcap > 0) v = hn::Mul(cap, tanh_f32(v));  // q was pre-divided by softcap
    if constexpr (!kFull) {
      const VF key = hn::Set(df, static_cast<float>(ts + j));
      v = hn::IfThenElse(hn::And(hn::Ge(key, vlo), hn::Le(key, vhi)), v, neg_inf);
    }
    if (!kFull || softcap > 0) hn::StoreU(v, df, st + j * rp);  // else unchanged
    mt = hn::Max(mt, v);
  }
  const VF mo = hn::LoadU(df, m);
  const VF mn = hn::Max(mo, mt);
  // Rows still empty keep m = -inf; subtracting 0 there keeps every exponent finite or -inf.
  const VF msub = hn::IfThenElse(hn::Eq(mn, neg_inf), zero, mn);
  const VF a = hn::Exp(df, hn::Sub(mo, msub));
  VF sum = zero;
  auto weight = [&](int64_t j) {
    VF p = exp_nonpos(hn::Sub(hn::LoadU(df, st + j * rp), msub));
    if constexpr (!kFull) {
      const VF key = hn::Set(df, static_cast<float>(ts + j));
      p = hn::IfThenElseZero(hn::And(hn::Ge(key, vlo), hn::Le(key, vhi)), p);
    }
    hn::StoreU(p, df, st + j * rp);
    return p;
  };
  // Four keys' exponentials side by side: each is a chain of ~15 dependent operations, and one
  // at a time left the pipes waiting on it. The sum still adds them key by key.
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    // Decode: the next tile's prefetches go on here too (next_rows.h), a row per 4 keys, so the
    // fill buffers do not drain between the scores and P·V.
    if (next != nullptr) next->step(1);
    const VF p0 = weight(j), p1 = weight(j + 1), p2 = weight(j + 2), p3 = weight(j + 3);
    sum = hn::Add(hn::Add(hn::Add(hn::Add(sum, p0), p1), p2), p3);
  }
  for (; j < j1; ++j) sum = hn::Add(sum, weight(j));
  hn::StoreU(hn::MulAdd(hn::LoadU(df, l), a, sum), df, l);
  hn::StoreU(mn, df, m);
  hn::StoreU(a, df, alpha);
}

inline void wide_softmax(float* st, int64_t rp, int64_t j0, int64_t j1, int64_t ts, const float* lo,
                         const float* hi, float softcap, float* m, float* l, float* alpha,
                         NextRows* next = nullptr) {
  const DF df;
  const int64_t N = lanes();
  const float first = static_cast<float>(ts + j0), last = static_cast<float>(ts + j1 - 1);
  for (int64_t x = 0; x < rp; x += N) {
    const VF vlo = hn::LoadU(df, lo + x), vhi = hn::LoadU(df, hi + x);
    const bool full = hn::GetLane(hn::MaxOfLanes(df, vlo)) <= first &&
                      hn::GetLane(hn::MinOfLanes(df, vhi)) >= last;
    if (full)
      wide_softmax_vec<true>(st + x, rp, j0, j1, ts, vlo, vhi, softcap, m + x, l + x, alpha + x,
                             next);
    else
      wide_softmax_vec<false>(st + x, rp, j0, j1, ts, vlo, vhi, softcap, m + x, l + x, alpha + x,
                              next);
  }
}

}  // namespace flashback::cpu_fast::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHBACK_CPU_FAST_PREFILL_INL_H_ toggle

// SIMD kernels of the fast CPU attention, compiled once per Highway target (SSE4, AVX2,
// AVX-512, ...) and picked at run time. A task's rows (q token × q head of one KV group) are
// scored against tiles of kTileKeys keys: the K/V rows of a tile are converted to fp32 once and
// shared by every q head of the group (GQA), the softmax is online in fp32, and each split of
// kSplitKeys keys yields a partial state (m, l, unnormalised O) merged in split order. The
// per-element operation order never depends on which rows share a task or on threads, so results
// are bitwise reproducible.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fast/attention_kernel.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

#ifndef FLASHBACK_CPU_FAST_ATTENTION_KERNEL_ONCE
#define FLASHBACK_CPU_FAST_ATTENTION_KERNEL_ONCE
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/fast/attention.h"
#include "cpu/fast/convert.h"
#include "cpu/reference.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace flashback::cpu_fast::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Converts n elements at `src` (any cache/activation dtype) to fp32 and zero-fills to `padded`.
void convert_row(const void* src, DType dt, int64_t n, int64_t padded, float* dst) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  if (dt == DType::kF32) {
    const float* s = static_cast<const float*>(src);
    for (; i + N <= n; i += N) hn::StoreU(hn::LoadU(df, s + i), df, dst + i);
  } else if (dt == DType::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    const auto* s = static_cast<const hwy::bfloat16_t*>(src);
    for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(db, s + i)), df, dst + i);
  } else if (dt == DType::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto* s = static_cast<const hwy::float16_t*>(src);
    for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, s + i)), df, dst + i);
  }
  // Tails and fp8 (no SIMD fp8 in this Highway version: a 256-entry table).
  for (; i < n; ++i) dst[i] = load_f32(src, dt, i);
  for (; i < padded; ++i) dst[i] = 0.0f;
}

// tanh from Exp alone: Highway 1.0.3's Tanh returns wrong values on its AVX-512 target (found
// by test_fast_targets on a Sapphire Rapids host), while Exp is right on every target. For
// small |x| the cancellation in 1 - e^(-2|x|) costs ~3e-8 absolute, far below the tolerances.
HWY_INLINE hn::Vec<DF> tanh_f32(hn::Vec<DF> x) {
  const DF df;
  const auto zero = hn::Zero(df), one = hn::Set(df, 1.0f);
  const auto ax = hn::Max(x, hn::Sub(zero, x));
  const auto t = hn::Exp(df, hn::Mul(hn::Set(df, -2.0f), ax));
  const auto z = hn::Div(hn::Sub(one, t), hn::Add(one, t));
  return hn::IfThenElse(hn::Lt(x, zero), hn::Sub(zero, z), z);
}

// fp32 vector from N elements of a row stored as float, bf16 or fp16 (exact widening).
template <class T>
HWY_INLINE hn::Vec<DF> load_f32v(const T* p) {
  const DF df;
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else {
    return hn::PromoteTo(df, hn::LoadU(hn::Rebind<T, DF>(), p));
  }
}

// out[i] = Σ lanes of a_i for four vectors. On x86 a horizontal-add tree reduces all four at
// once (5 shuffles/adds instead of ~4 each); elsewhere Highway's per-vector reduction. Either
// way the order depends only on the target, never on the data or the batch.
HWY_INLINE void sum4(hn::Vec<DF> a0, hn::Vec<DF> a1, hn::Vec<DF> a2, hn::Vec<DF> a3, float* out) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#if HWY_TARGET == HWY_AVX2
  const __m256 b0 = a0.raw, b1 = a1.raw, b2 = a2.raw, b3 = a3.raw;
#else
  auto fold = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  };
  const __m256 b0 = fold(a0.raw), b1 = fold(a1.raw), b2 = fold(a2.raw), b3 = fold(a3.raw);
#endif
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(b0, b1), _mm256_hadd_ps(b2, b3));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
#else
  const DF df;
  out[0] = hn::GetLane(hn::SumOfLanes(df, a0));
  out[1] = hn::GetLane(hn::SumOfLanes(df, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(df, a2));
  out[3] = hn::GetLane(hn::SumOfLanes(df, a3));
#endif
}

// S[i][j] = q_i · k_j for R rows × K keys (key j's row at k[j]); one accumulator chain per
// element, summed over the vectors of the row in order and then across lanes, whichever R, K
// and key storage are used, so every path gives the same bits.
template <int R, int K, class T>
HWY_INLINE void dot_block(const float* q, int64_t qs, const void* const* k, int64_t len, float* s,
                          int64_t ss) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  using V = hn::Vec<DF>;
  V acc[R][K];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < K; ++j) acc[i][j] = hn::Zero(df);
  for (int64_t x = 0; x < len; x += N) {
    V kv[K];
    for (int j = 0; j < K; ++j) kv[j] = load_f32v(static_cast<const T*>(k[j]) + x);
    for (int i = 0; i < R; ++i) {
      const V qv = hn::LoadU(df, q + i * qs + x);
      for (int j = 0; j < K; ++j) acc[i][j] = hn::MulAdd(qv, kv[j], acc[i][j]);
    }
  }
  float t[4];
  if constexpr (R == 4) {
    for (int j = 0; j < K; ++j) {
      sum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j], t);
      for (int i = 0; i < 4; ++i) s[i * ss + j] = t[i];
    }
  } else if constexpr (R == 1 && K % 4 == 0) {
    for (int j = 0; j < K; j += 4) {
      sum4(acc[0][j], acc[0][j + 1], acc[0][j + 2], acc[0][j + 3], t);
      for (int x = 0; x < 4; ++x) s[j + x] = t[x];
    }
  } else {
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < K; ++j) s[i * ss + j] = hn::GetLane(hn::SumOfLanes(df, acc[i][j]));
  }
}

// Scores of `rows` rows against tile keys [j0, j1) (key j's row at k[j]).
template <class T>
void scores(const float* q, int64_t qs, int64_t rows, const void* const* k, int64_t len, int64_t j0,
            int64_t j1, float* s) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    int64_t j = j0;
    for (; j + 2 <= j1; j += 2)
      dot_block<4, 2, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
    for (; j < j1; ++j)
      dot_block<4, 1, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
  }
  for (; r < rows; ++r) {  // a single row (MHA decode): more keys per pass keep FMAs busy
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8)
      dot_block<1, 8, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
    for (; j < j1; ++j)
      dot_block<1, 1, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
  }
}

// O[i] += Σ_j p[i][j] · v_j over keys [j0, j1) for R rows, W vectors of O at a time; each
// element sees the same MulAdd sequence whichever R, W and value storage are used.
template <int R, int W, class T>
HWY_INLINE void pv_block(const float* p, int64_t prow, int64_t pkey, const void* const* v,
                         int64_t j0, int64_t j1, float* o, int64_t os, int64_t x) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  using V = hn::Vec<DF>;
  V acc[R][W];
  for (int i = 0; i < R; ++i)
    for (int w = 0; w < W; ++w) acc[i][w] = hn::LoadU(df, o + i * os + x + w * N);
  for (int64_t j = j0; j < j1; ++j) {
    V vv[W];
    for (int w = 0; w < W; ++w) vv[w] = load_f32v(static_cast<const T*>(v[j]) + x + w * N);
    for (int i = 0; i < R; ++i) {
      const V pb = hn::Set(df, p[i * prow + j * pkey]);
      for (int w = 0; w < W; ++w) acc[i][w] = hn::MulAdd(pb, vv[w], acc[i][w]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int w = 0; w < W; ++w) hn::StoreU(acc[i][w], df, o + i * os + x + w * N);
}

// Weights of row i, key j at p[i · prow + j · pkey] (row-major scores or their transpose).
template <class T>
void accumulate(const float* p, int64_t prow, int64_t pkey, int64_t rows, const void* const* v,
                int64_t j0, int64_t j1, float* o, int64_t os, int64_t len) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    int64_t x = 0;
    for (; x + 2 * N <= len; x += 2 * N)
      pv_block<4, 2, T>(p + r * prow, prow, pkey, v, j0, j1, o + r * os, os, x);
    for (; x < len; x += N)
      pv_block<4, 1, T>(p + r * prow, prow, pkey, v, j0, j1, o + r * os, os, x);
  }
  for (; r < rows; ++r) {
    int64_t x = 0;
    for (; x + 4 * N <= len; x += 4 * N)
      pv_block<1, 4, T>(p + r * prow, prow, pkey, v, j0, j1, o + r * os, os, x);
    for (; x < len; x += N)
      pv_block<1, 1, T>(p + r * prow, prow, pkey, v, j0, j1, o + r * os, os, x);
  }
}

// Many rows per KV head (prefill, MLA): scores are computed transposed, ST[j][r], with rows
// along the vector lanes from a transposed q (qT[d][r], built once per task). Each element is a
// plain sequential MulAdd over d — no horizontal sums — and the online softmax below runs on
// whole vectors of rows.
template <int KJ, int RV>
HWY_INLINE void wide_block(const float* qt, int64_t rp, const void* const* k, int64_t len,
                           float* st) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  using V = hn::Vec<DF>;
  V acc[KJ][RV];
  for (int j = 0; j < KJ; ++j)
    for (int v = 0; v < RV; ++v) acc[j][v] = hn::Zero(df);
  const float* kr[KJ];
  for (int j = 0; j < KJ; ++j) kr[j] = static_cast<const float*>(k[j]);
  for (int64_t d = 0; d < len; ++d) {
    V qv[RV];
    for (int v = 0; v < RV; ++v) qv[v] = hn::LoadU(df, qt + d * rp + v * N);
    for (int j = 0; j < KJ; ++j) {
      const V kb = hn::Set(df, kr[j][d]);
      for (int v = 0; v < RV; ++v) acc[j][v] = hn::MulAdd(kb, qv[v], acc[j][v]);
    }
  }
  for (int j = 0; j < KJ; ++j)
    for (int v = 0; v < RV; ++v) hn::StoreU(acc[j][v], df, st + j * rp + v * N);
}

void wide_scores(const float* qt, int64_t rp, const void* const* k, int64_t len, int64_t j0,
                 int64_t j1, float* st) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t nrv = rp / N;
  for (int64_t v0 = 0; v0 < nrv;) {
    const float* q = qt + v0 * N;
    float* s = st + v0 * N;
    int64_t j = j0;
    if (nrv - v0 >= 4) {
      for (; j + 2 <= j1; j += 2) wide_block<2, 4>(q, rp, k + j, len, s + j * rp);
      for (; j < j1; ++j) wide_block<1, 4>(q, rp, k + j, len, s + j * rp);
      v0 += 4;
    } else if (nrv - v0 >= 2) {
      for (; j + 4 <= j1; j += 4) wide_block<4, 2>(q, rp, k + j, len, s + j * rp);
      for (; j < j1; ++j) wide_block<1, 2>(q, rp, k + j, len, s + j * rp);
      v0 += 2;
    } else {
      for (; j + 8 <= j1; j += 8) wide_block<8, 1>(q, rp, k + j, len, s + j * rp);
      for (; j < j1; ++j) wide_block<1, 1>(q, rp, k + j, len, s + j * rp);
      v0 += 1;
    }
  }
}

// Online softmax of transposed scores ST[j][r] over tile keys [j0, j1) at absolute key
// positions ts + j. Row r sees keys [lo[r], hi[r]]; m, l (rp entries) are updated in place and
// alpha[r] receives the factor its output must be rescaled by (exactly 1 when the tile adds
// nothing to the row). Weights overwrite the scores.
void wide_softmax(float* st, int64_t rp, int64_t j0, int64_t j1, int64_t ts, const float* lo,
                  const float* hi, float softcap, float* m, float* l, float* alpha) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  using V = hn::Vec<DF>;
  const V neg_inf = hn::Set(df, kNegInf), cap = hn::Set(df, softcap), zero = hn::Zero(df);
  for (int64_t x = 0; x < rp; x += N) {
    const V vlo = hn::LoadU(df, lo + x), vhi = hn::LoadU(df, hi + x);
    V mt = neg_inf;
    for (int64_t j = j0; j < j1; ++j) {
      const V key = hn::Set(df, static_cast<float>(ts + j));
      const auto in = hn::And(hn::Ge(key, vlo), hn::Le(key, vhi));
      V v = hn::LoadU(df, st + j * rp + x);
      if (softcap > 0) v = hn::Mul(cap, tanh_f32(v));  // q was pre-divided by softcap
      v = hn::IfThenElse(in, v, neg_inf);
      hn::StoreU(v, df, st + j * rp + x);
      mt = hn::Max(mt, v);
    }
    const V mo = hn::LoadU(df, m + x);
    const V mn = hn::Max(mo, mt);
    // Rows still empty keep m = -inf; subtracting 0 there keeps every exponent finite or -inf.
    const V msub = hn::IfThenElse(hn::Eq(mn, neg_inf), zero, mn);
    const V a = hn::Exp(df, hn::Sub(mo, msub));
    V sum = zero;
    for (int64_t j = j0; j < j1; ++j) {
      const V key = hn::Set(df, static_cast<float>(ts + j));
      const auto in = hn::And(hn::Ge(key, vlo), hn::Le(key, vhi));
      const V p =
          hn::IfThenElseZero(in, hn::Exp(df, hn::Sub(hn::LoadU(df, st + j * rp + x), msub)));
      hn::StoreU(p, df, st + j * rp + x);
      sum = hn::Add(sum, p);
    }
    hn::StoreU(hn::MulAdd(hn::LoadU(df, l + x), a, sum), df, l + x);
    hn::StoreU(mn, df, m + x);
    hn::StoreU(a, df, alpha + x);
  }
}

void scale_row(float* o, int64_t len, float alpha) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto a = hn::Set(df, alpha);
  for (int64_t x = 0; x < len; x += N) hn::StoreU(hn::Mul(hn::LoadU(df, o + x), a), df, o + x);
}

// Online softmax of one row over tile keys [a, e] (tile-local, inclusive, non-empty): turns the
// row's scores into weights p (zero outside [a, e]) and rescales its running m, l, O.
void softmax_row(float* s, int64_t a, int64_t e, float softcap, float& m, float& l, float* o,
                 int64_t dv) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  using V = hn::Vec<DF>;
  const V lo = hn::Set(df, static_cast<float>(a)), hi = hn::Set(df, static_cast<float>(e));
  const V neg_inf = hn::Set(df, kNegInf), cap = hn::Set(df, softcap);
  V mx = neg_inf;
  for (int64_t x = 0; x < kTileKeys; x += N) {
    const V j = hn::Iota(df, static_cast<float>(x));
    const auto in = hn::And(hn::Ge(j, lo), hn::Le(j, hi));
    V v = hn::LoadU(df, s + x);
    if (softcap > 0) v = hn::Mul(cap, tanh_f32(v));  // q was pre-divided by softcap
    v = hn::IfThenElse(in, v, neg_inf);
    hn::StoreU(v, df, s + x);
    mx = hn::Max(mx, v);
  }
  const float m_new = std::max(m, hn::GetLane(hn::MaxOfLanes(df, mx)));
  const float alpha = m == kNegInf ? 0.0f : std::exp(m - m_new);
  const V mv = hn::Set(df, m_new);
  V sum = hn::Zero(df);
  for (int64_t x = 0; x < kTileKeys; x += N) {
    const V j = hn::Iota(df, static_cast<float>(x));
    const auto in = hn::And(hn::Ge(j, lo), hn::Le(j, hi));
    const V p = hn::IfThenElseZero(in, hn::Exp(df, hn::Sub(hn::LoadU(df, s + x), mv)));
    hn::StoreU(p, df, s + x);
    sum = hn::Add(sum, p);
  }
  l = l * alpha + hn::GetLane(hn::SumOfLanes(df, sum));
  m = m_new;
  if (alpha != 1.0f) scale_row(o, dv, alpha);
}

// state = [m × kMaxRows][l × kMaxRows][O × kMaxRows × dvp].
void clear_state(float* st, int64_t rows, int64_t dvp) {
  std::fill(st, st + kMaxRows, kNegInf);
  std::fill(st + kMaxRows, st + 2 * kMaxRows, 0.0f);
  std::fill(st + 2 * kMaxRows, st + 2 * kMaxRows + rows * dvp, 0.0f);
}

// run = merge(run, part): the log-sum-exp combination of two partial softmax states.
void merge_state_rows(float* run, const float* part, int64_t rows, int64_t dvp) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const float pm = part[r];
    if (pm == kNegInf) continue;
    float* o = run + 2 * kMaxRows + r * dvp;
    const float* po = part + 2 * kMaxRows + r * dvp;
    const float rm = run[r];
    if (rm == kNegInf) {
      run[r] = pm;
      run[kMaxRows + r] = part[kMaxRows + r];
      std::copy(po, po + dvp, o);
      continue;
    }
    const float m = std::max(rm, pm);
    const float ar = std::exp(rm - m), ap = std::exp(pm - m);
    run[r] = m;
    run[kMaxRows + r] = run[kMaxRows + r] * ar + part[kMaxRows + r] * ap;
    const auto va = hn::Set(df, ar), vb = hn::Set(df, ap);
    for (int64_t x = 0; x < dvp; x += N)
      hn::StoreU(hn::MulAdd(hn::LoadU(df, po + x), vb, hn::Mul(hn::LoadU(df, o + x), va)), df,
                 o + x);
  }
}

void prefetch_row(const char* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
}

struct Scratch {
  std::vector<float> q, k, v, s, part;
  std::vector<int64_t> k_off, v_off;
  std::vector<const void*> kp, vp;  // row of tile key j of KV head gi at [gi · kTileKeys + j]
  std::vector<float> qt, st, wm, row_lo, row_hi;  // transposed (wide) path
};

Scratch& scratch() {
  thread_local Scratch sc;
  return sc;
}

float descale(const float* d, int64_t s0, int64_t s1, int64_t b, int64_t g) {
  return d ? d[b * s0 + g * s1] : 1.0f;
}

void RunSplits(const AttnArgs& a, const Task& t, int64_t s_lo, int64_t s_hi, float* state) {
  const int64_t rows = t.rows(), head_rows = t.nt * t.nh;  // rows per KV head
  const int64_t dp = pad(a.head_dim), dqvp = a.qv ? pad(a.head_dim_qv) : 0;
  const int64_t dvp = pad(a.head_dim_v);
  const bool mla = a.qv != nullptr;
  // MLA: the tile row is [k_rope | c_kv] so one dot gives q_rope·k_rope + q_nope·c_kv, and the
  // values are read from the c_kv part of the same buffer (converted once).
  const int64_t qs = dp + dqvp, ks = mla ? dp + dvp : dp;
  Scratch& sc = scratch();
  sc.q.resize(static_cast<size_t>(kMaxRows * qs));
  sc.k.resize(static_cast<size_t>(t.ng * kTileKeys * ks));
  if (!mla) sc.v.resize(static_cast<size_t>(t.ng * kTileKeys * dvp));
  sc.s.resize(static_cast<size_t>(kMaxRows * kTileKeys));
  sc.part.resize(static_cast<size_t>(state_floats(a)));
  sc.k_off.resize(2 * kTileKeys);
  sc.v_off.resize(2 * kTileKeys);
  // Tile buffers hold KV head gi's keys at [gi · kTileKeys · stride].
  float* vbuf = mla ? sc.k.data() + dp : sc.v.data();
  const int64_t vs = mla ? ks : dvp;

  // Fold scale, the fp8 key descale and 1/softcap into q so scores come out as logits (or as
  // logit / softcap, the argument of tanh).
  const float pre = a.scale / (a.softcap > 0 ? a.softcap : 1.0f);
  const auto* qb = static_cast<const char*>(a.q);
  const auto* qvb = static_cast<const char*>(a.qv);
  for (int64_t gi = 0; gi < t.ng; ++gi) {
    const float kd = descale(a.k_descale, a.kd_s0, a.kd_s1, t.b, t.g + gi);
    const float vd = descale(a.v_descale, a.vd_s0, a.vd_s1, t.b, t.g + gi);
    for (int64_t ti = 0; ti < t.nt; ++ti)
      for (int64_t hi = 0; hi < t.nh; ++hi) {
        float* qr = sc.q.data() + (gi * head_rows + ti * t.nh + hi) * qs;
        const int64_t tok = t.q0 + t.t0 + ti, h = (t.g + gi) * a.group + t.h0 + hi;
        convert_row(qb + (tok * a.q_s0 + h * a.q_s1) * dtype_size(a.q_dtype), a.q_dtype, a.head_dim,
                    dp, qr);
        for (int64_t d = 0; d < a.head_dim; ++d) qr[d] *= pre * kd;
        if (mla) {
          convert_row(qvb + (tok * a.qv_s0 + h * a.qv_s1) * dtype_size(a.q_dtype), a.q_dtype,
                      a.head_dim_qv, dqvp, qr + dp);
          for (int64_t d = 0; d < a.head_dim_qv; ++d) qr[dp + d] *= pre * vd;
        }
      }
  }

  // Key range of each token of the task.
  int64_t lo[kMaxRows], hi[kMaxRows];
  int64_t u_lo = t.kv_len, u_hi = -1;
  for (int64_t ti = 0; ti < t.nt; ++ti) {
    const auto kr = reference::visible_keys(t.t0 + ti, t.q_len, t.kv_len, a.causal, a.window_left,
                                            a.window_right);
    lo[ti] = kr.lo;
    hi[ti] = kr.hi;
    if (kr.lo <= kr.hi) {
      u_lo = std::min(u_lo, kr.lo);
      u_hi = std::max(u_hi, kr.hi);
    }
  }

  clear_state(state, rows, dvp);
  const auto* kbase = static_cast<const char*>(a.k);
  const auto* vbase = static_cast<const char*>(a.v);
  const int64_t esz = dtype_size(a.kv_dtype);
  // Reading K/V in place (no fp32 copy) pays when few rows share each key: the copy would be
  // read back only a few times. Needs whole vectors per row (no reads past a row's end).
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  const bool direct =
      !mla && !is_fp8(a.kv_dtype) && head_rows <= 8 && a.head_dim % N == 0 && a.head_dim_v % N == 0;
  const int64_t qk_len = direct ? a.head_dim : qs, pv_len = direct ? a.head_dim_v : dvp;
  // More than a vector's worth of rows per KV head: the transposed (rows-in-lanes) path.
  const bool wide = head_rows > 8;
  const int64_t rp = (head_rows + N - 1) / N * N;
  if (wide) {
    sc.qt.assign(static_cast<size_t>(t.ng * qs * rp), 0.0f);
    for (int64_t gi = 0; gi < t.ng; ++gi)
      for (int64_t r = 0; r < head_rows; ++r)
        for (int64_t d = 0; d < qs; ++d)
          sc.qt[(gi * qs + d) * rp + r] = sc.q[(gi * head_rows + r) * qs + d];
    sc.st.resize(static_cast<size_t>(kTileKeys * rp));
    sc.wm.assign(static_cast<size_t>(3 * rp), kNegInf);
    std::fill(sc.wm.begin() + rp, sc.wm.end(), 0.0f);
    // Key range of each row as floats (exact below 2^24); padding rows see nothing.
    sc.row_lo.assign(static_cast<size_t>(rp), 1.0f);
    sc.row_hi.assign(static_cast<size_t>(rp), 0.0f);
    for (int64_t r = 0; r < head_rows; ++r) {
      sc.row_lo[r] = static_cast<float>(lo[r / t.nh]);
      sc.row_hi[r] = static_cast<float>(hi[r / t.nh]);
    }
  }
  sc.kp.resize(static_cast<size_t>(t.ng * kTileKeys));
  sc.vp.resize(static_cast<size_t>(t.ng * kTileKeys));
  const void** kp = sc.kp.data();
  const void** vp = sc.vp.data();
  float* part = sc.part.data();
  for (int64_t sp = s_lo; sp < s_hi; ++sp) {
    const int64_t k_lo = std::max(u_lo, sp * kSplitKeys);
    const int64_t k_hi = std::min(u_hi, (sp + 1) * kSplitKeys - 1);
    if (k_lo > k_hi) continue;
    clear_state(part, rows, dvp);
    float* pm = part;
    float* pl = part + kMaxRows;
    float* po = part + 2 * kMaxRows;
    // Offsets of tile ts's keys go to (ko, vo); the next tile's are computed one step ahead and
    // its rows prefetched, because with random page placement the hardware prefetcher cannot
    // follow the key rows and each tile would otherwise wait on memory latency.
    auto tile_range = [&](int64_t ts, int64_t& j0, int64_t& j1) {
      j0 = std::max(k_lo, ts) - ts;
      j1 = std::min(k_hi, ts + kTileKeys - 1) - ts + 1;
    };
    auto load_offsets = [&](int64_t ts, int64_t* ko, int64_t* vo) {
      int64_t j0, j1;
      tile_range(ts, j0, j1);
      key_offsets(a, t, ts + j0, j1 - j0, ko, vo);
      return j1 - j0;
    };
    int64_t* ko = sc.k_off.data();
    int64_t* vo = sc.v_off.data();
    int64_t* ko_next = ko + kTileKeys;
    int64_t* vo_next = vo + kTileKeys;
    const int64_t first_tile = k_lo / kTileKeys * kTileKeys;
    load_offsets(first_tile, ko, vo);
    for (int64_t ts = first_tile; ts <= k_hi; ts += kTileKeys) {
      // Tile-local loaded range [j0, j1).
      int64_t j0, j1;
      tile_range(ts, j0, j1);
      const int64_t nn =
          ts + kTileKeys <= k_hi ? load_offsets(ts + kTileKeys, ko_next, vo_next) : 0;
      if (direct) {
        // Few rows per KV head (decode): read K/V rows in place, widening as they load.
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t gi = 0; gi < t.ng; ++gi) {
            kp[gi * kTileKeys + j] = kbase + (ko[j - j0] + gi * a.k_head) * esz;
            vp[gi * kTileKeys + j] = vbase + (vo[j - j0] + gi * a.v_head) * esz;
          }
      } else {
        // Many rows (prefill) or fp8/MLA/odd dims: convert each K/V row to fp32 once.
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t gi = 0; gi < t.ng; ++gi) {
            const int64_t jb = gi * kTileKeys + j;
            convert_row(kbase + (ko[j - j0] + gi * a.k_head) * esz, a.kv_dtype, a.head_dim, dp,
                        sc.k.data() + jb * ks);
            convert_row(vbase + (vo[j - j0] + gi * a.v_head) * esz, a.kv_dtype, a.head_dim_v, dvp,
                        vbuf + jb * vs);
            kp[jb] = sc.k.data() + jb * ks;
            vp[jb] = vbuf + jb * vs;
          }
      }
      std::swap(ko, ko_next);
      std::swap(vo, vo_next);
      for (int64_t gi = 0; gi < t.ng; ++gi) {
        // Prefetch this head's rows of the next tile while computing this one: spread over the
        // heads, the prefetches overlap compute instead of stalling in one burst.
        for (int64_t i = 0; i < nn; ++i) {
          prefetch_row(kbase + (ko[i] + gi * a.k_head) * esz, a.head_dim * esz);
          prefetch_row(vbase + (vo[i] + gi * a.v_head) * esz, a.head_dim_v * esz);
        }
        const int64_t r0 = gi * head_rows;
        const void* const* kg = kp + gi * kTileKeys;
        const void* const* vg = vp + gi * kTileKeys;
        float* s0 = sc.s.data() + r0 * kTileKeys;
        float* o0 = po + r0 * dvp;
        auto run = [&](auto tag) {
          using T = decltype(tag);
          scores<T>(sc.q.data() + r0 * qs, qs, head_rows, kg, qk_len, j0, j1, s0);
          for (int64_t ti = 0; ti < t.nt; ++ti) {
            const int64_t ra = std::max(lo[ti], ts + j0) - ts;
            const int64_t re = std::min(hi[ti], ts + j1 - 1) - ts;
            for (int64_t hi2 = 0; hi2 < t.nh; ++hi2) {
              const int64_t r = r0 + ti * t.nh + hi2;
              float* srow = sc.s.data() + r * kTileKeys;
              if (ra > re) {  // nothing visible here: weights 0, state untouched
                std::fill(srow, srow + kTileKeys, 0.0f);
                continue;
              }
              softmax_row(srow, ra, re, a.softcap, pm[r], pl[r], po + r * dvp, dvp);
            }
          }
          accumulate<T>(s0, kTileKeys, 1, head_rows, vg, j0, j1, o0, dvp, pv_len);
        };
        if (wide) {
          // Transposed path: m, l of this head's rows as whole vectors (padding lanes empty).
          float* wm = sc.wm.data();
          float* wl = wm + rp;
          float* wa = wl + rp;
          std::copy(pm + r0, pm + r0 + head_rows, wm);
          std::copy(pl + r0, pl + r0 + head_rows, wl);
          wide_scores(sc.qt.data() + gi * qs * rp, rp, kg, qs, j0, j1, sc.st.data());
          wide_softmax(sc.st.data(), rp, j0, j1, ts, sc.row_lo.data(), sc.row_hi.data(), a.softcap,
                       wm, wl, wa);
          std::copy(wm, wm + head_rows, pm + r0);
          std::copy(wl, wl + head_rows, pl + r0);
          for (int64_t r = 0; r < head_rows; ++r)
            if (wa[r] != 1.0f) scale_row(o0 + r * dvp, dvp, wa[r]);
          accumulate<float>(sc.st.data(), 1, rp, head_rows, vg, j0, j1, o0, dvp, dvp);
        } else if (!direct || a.kv_dtype == DType::kF32) {
          run(float{});
        } else if (a.kv_dtype == DType::kBF16) {
          run(hwy::bfloat16_t{});
        } else {
          run(hwy::float16_t{});
        }
      }
    }
    merge_state_rows(state, part, rows, dvp);
  }
}

void Finish(const AttnArgs& a, const Task& t, const float* states, int64_t n) {
  const int64_t rows = t.rows(), dvp = pad(a.head_dim_v), sf = state_floats(a);
  Scratch& sc = scratch();
  sc.part.resize(static_cast<size_t>(sf));
  float* run = sc.part.data();
  clear_state(run, rows, dvp);
  for (int64_t i = 0; i < n; ++i) merge_state_rows(run, states + i * sf, rows, dvp);
  auto* out = static_cast<char*>(a.out);
  const int64_t osz = dtype_size(a.out_dtype);
  for (int64_t gi = 0; gi < t.ng; ++gi) {
    const float vd = descale(a.v_descale, a.vd_s0, a.vd_s1, t.b, t.g + gi);
    for (int64_t ti = 0; ti < t.nt; ++ti)
      for (int64_t hi = 0; hi < t.nh; ++hi) {
        const int64_t r = (gi * t.nt + ti) * t.nh + hi;
        const int64_t tok = t.q0 + t.t0 + ti, h = (t.g + gi) * a.group + t.h0 + hi;
        const float m = run[r], l = run[kMaxRows + r];
        const bool empty = m == kNegInf || !(l > 0);
        const float inv = empty ? 0.0f : vd / l;
        float* o = run + 2 * kMaxRows + r * dvp;
        for (int64_t d = 0; d < a.head_dim_v; ++d) o[d] = empty ? 0.0f : o[d] * inv;
        store_f32_row(o, a.head_dim_v, out + (tok * a.out_s0 + h * a.out_s1) * osz, a.out_dtype);
        if (a.lse) a.lse[tok * a.lse_s0 + h * a.lse_s1] = empty ? kNegInf : m + std::log(l);
      }
  }
}

}  // namespace flashback::cpu_fast::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashback::cpu_fast {

HWY_EXPORT(RunSplits);
HWY_EXPORT(Finish);

void run_splits(const AttnArgs& a, const Task& t, int64_t s_lo, int64_t s_hi, float* state) {
  HWY_DYNAMIC_DISPATCH(RunSplits)(a, t, s_lo, s_hi, state);
}

void finish(const AttnArgs& a, const Task& t, const float* states, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Finish)(a, t, states, n);
}

}  // namespace flashback::cpu_fast
#endif  // HWY_ONCE

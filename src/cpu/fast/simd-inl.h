// SIMD helpers shared by the fast CPU attention kernels: element conversion, bf16 pairs, tanh,
// horizontal sums, partial-state merging, key-row views and prefetching. A Highway "-inl.h" header:
// attention_kernel.cc includes it once per target (the guard below flips with HWY_TARGET_TOGGLE).
#if defined(FLASHBACK_CPU_FAST_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHBACK_CPU_FAST_SIMD_INL_H_
#undef FLASHBACK_CPU_FAST_SIMD_INL_H_
#else
#define FLASHBACK_CPU_FAST_SIMD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/fast/attention.h"
#include "cpu/fast/convert.h"
#include "cpu/fast/next_rows.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashback::cpu_fast::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

HWY_INLINE int64_t lanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

// 32 vector registers (AVX-512; NEON and SVE too) hold the larger register blocks below; AVX2
// and SSE4 have 16, where those blocks would spill.
inline constexpr bool kWideRegs = !HWY_ARCH_X86 || HWY_TARGET <= HWY_AVX3;

// Pins v to a register (x86): GCC folds a vector reused by several FMAs into each of them as a
// memory operand, one load per FMA, and a register-blocked loop then waits on the load ports
// instead of the FMA pipes. For blocks that fit 16 registers.
HWY_INLINE void pin_register(VF& v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  asm("" : "+v"(v.raw));
#endif
  (void)v;
}
// pin_register where kWideRegs only, for the larger blocks: with 16 registers their folded loads
// are what keeps them from spilling.
HWY_INLINE void in_register(VF& v) {
  if constexpr (kWideRegs) pin_register(v);
}

// Converts n elements at `src` (any cache/activation dtype) to fp32 and zero-fills to `padded`.
inline void convert_row(const void* src, DType dt, int64_t n, int64_t padded, float* dst) {
  const DF df;
  const int64_t N = lanes();
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
// Out of line: inlined into the softmax loops, this too came out wrong on the AVX-512 target
// with GCC 12 (Zen 4, session 13: relative L2 0.16-0.39 on every softcap case of the decode
// path in test_fast_targets), while the same code out of line, or inlined with its intermediate
// vectors stored, matched the oracle; the cause was not found. The call costs little next to
// the Exp, on softcap rows only.
HWY_NOINLINE VF tanh_f32(VF x) {
  const DF df;
  const auto zero = hn::Zero(df), one = hn::Set(df, 1.0f);
  const auto ax = hn::Max(x, hn::Sub(zero, x));
  const auto t = hn::Exp(df, hn::Mul(hn::Set(df, -2.0f), ax));
  const auto z = hn::Div(hn::Sub(one, t), hn::Add(one, t));
  // A NaN stays NaN (Exp does not keep it).
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElse(hn::Lt(x, zero), hn::Sub(zero, z), z));
}

// e^x for x <= 0 (softmax weights, x = score - row maximum): 2^(x · log2 e) as 2^n · 2^f, n the
// nearest integer, f in [-1/2, 1/2] by its degree-6 Taylor polynomial. Relative error 1-2 ulp
// for x in [-1, 0], growing with |x| (the rounding of x · log2 e; 1.1e-6 at x = -20, where the
// weight is 2e-9 of the largest): the weights that shape the output are as exact as Exp's,
// at about half its instructions (prefill 3-10 %, decode 2 % less time in cache; session 41).
// Clamped at 2^-125 (x below -86.6 weighs ~2e-38 instead of less or 0), so callers zero the
// weights of masked keys themselves, as both softmax loops do. A NaN stays NaN (a NaN score
// makes the row NaN: ARCHITECTURE.md, "NaN inputs"): the clamp's Max has x second (x86's max
// returns its second operand when either is NaN), and 2^n multiplies the polynomial as a float;
// added into its exponent bits as an integer, n (a NaN converted) turned the NaN into 2.6e38.
HWY_INLINE VF exp_nonpos(VF x) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const VF t = hn::Max(hn::Set(df, -125.0f), hn::Mul(x, hn::Set(df, 1.44269504088896341f)));
  // r = t + 1.5 · 2^23 + 127 lies in [2^23, 2^24), where floats are the integers: its addition
  // rounds t to the nearest (even) integer n, r - magic gives n exactly, and r's low mantissa
  // bits hold n + 127 + 2^22, i.e. (shifted into the exponent field) 2^n as a float.
  const VF magic = hn::Set(df, 12583039.0f);
  const VF r = hn::Add(t, magic);
  const VF n = hn::Sub(r, magic);
  const VF f = hn::Sub(t, n);
  VF p = hn::Set(df, 1.5403530393381608e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.3333558146428443e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.6181291076284772e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.5504108664821580e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.24022650695910071f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.69314718055994531f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  // 2^n for n in [-125, 0] is a normal float, so p · 2^n is exact (the bits integer exponent
  // arithmetic would give).
  const VF e = hn::BitCast(df, hn::ShiftLeft<23>(hn::BitCast(di, r)));
  return hn::Mul(p, e);
}

// fp32 vector from N elements of a row stored as float, bf16 or fp16 (exact widening).
template <class T>
HWY_INLINE VF load_f32v(const T* p) {
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
HWY_INLINE void sum4(VF a0, VF a1, VF a2, VF a3, float* out) {
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

// Tag for bf16 K/V read as pairs: 2N bf16 elements load as N 32-bit lanes, and a shift and a
// mask give the even and the odd elements as two fp32 vectors (a bf16 is the top half of its
// fp32). One load and two integer ops per 2N elements, against two loads and four ops for
// PromoteTo. q rows and O rows are kept de-interleaved to match: in each chunk of 2N, the N even
// elements, then the N odd ones (permute_pairs / unpermute_pairs).
struct Bf16Pairs {};

HWY_INLINE void load_pair(const void* row, int64_t x, VF& even, VF& odd) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  auto u = hn::LoadU(du, reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(row) + x));
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // One load for both halves: without this GCC folds the load into the And as well and loads
  // the row twice (decode ran 3-4 % faster with one load).
  asm("" : "+v"(u.raw));
#endif
  even = hn::BitCast(df, hn::ShiftLeft<16>(u));
  odd = hn::BitCast(df, hn::And(u, hn::Set(du, 0xFFFF0000u)));
}

// Row x (len elements, a multiple of 2N) to / from the de-interleaved pair order.
inline void permute_pairs(float* x, int64_t len, bool forward) {
  const int64_t N = lanes();
  float t[2 * 16];
  for (int64_t c = 0; c < len; c += 2 * N) {
    for (int64_t i = 0; i < N; ++i) {
      if (forward) {
        t[i] = x[c + 2 * i];
        t[N + i] = x[c + 2 * i + 1];
      } else {
        t[2 * i] = x[c + i];
        t[2 * i + 1] = x[c + N + i];
      }
    }
    std::copy(t, t + 2 * N, x + c);
  }
}

inline void scale_row(float* o, int64_t len, float alpha) {
  const DF df;
  const int64_t N = lanes();
  const auto a = hn::Set(df, alpha);
  for (int64_t x = 0; x < len; x += N) hn::StoreU(hn::Mul(hn::LoadU(df, o + x), a), df, o + x);
}

// state = [m × kMaxRows][l × kMaxRows][O × kMaxRows × dvp].
inline void clear_state(float* st, int64_t rows, int64_t dvp) {
  std::fill(st, st + kMaxRows, kNegInf);
  std::fill(st + kMaxRows, st + 2 * kMaxRows, 0.0f);
  std::fill(st + 2 * kMaxRows, st + 2 * kMaxRows + rows * dvp, 0.0f);
}

// run = merge(run, part): the log-sum-exp combination of two partial softmax states. A state
// that saw no key has l = 0 (one that saw any has l >= 1: its largest score weighs 1); a NaN
// score leaves l NaN and m what the max made of it (-inf if every score was NaN), so l, not m,
// says which states are empty, and a NaN carries through.
inline void merge_state_rows(float* run, const float* part, int64_t rows, int64_t dvp) {
  const DF df;
  const int64_t N = lanes();
  for (int64_t r = 0; r < rows; ++r) {
    const float pm = part[r];
    if (part[kMaxRows + r] == 0.0f) continue;
    float* o = run + 2 * kMaxRows + r * dvp;
    const float* po = part + 2 * kMaxRows + r * dvp;
    const float rm = run[r];
    if (run[kMaxRows + r] == 0.0f) {
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

// Key rows of a tile: row j at p[j] + off bytes. In-place K/V keep one pointer per key (its
// slot's first KV head of the task) and put the KV head in `off`, so a tile's pointers are
// built once for all the task's KV heads.
struct Rows {
  const void* const* p = nullptr;
  int64_t off = 0;
  HWY_INLINE const void* operator[](int64_t j) const {
    return static_cast<const char*>(p[j]) + off;
  }
  HWY_INLINE Rows operator+(int64_t j) const { return {p + j, off}; }
};

// Rows of the next tile, to be prefetched into L2 a few at a time while this tile computes. One
// burst per tile fills the core's miss buffers and stalls the loads the FMAs wait on; spread
// over the key loop the prefetches overlap compute. L2, not L1: with several KV heads per task
// a row is used only after the other heads' tiles, long after L1 would have evicted it.
struct Prefetch {
  Rows k, v;  // row i of the next tile at k[i], v[i]
  int64_t n = 0, k_bytes = 0, v_bytes = 0;

  HWY_INLINE void rows(int64_t i0, int64_t i1) const {
    for (int64_t i = i0; i < std::min(i1, n); ++i) {
      const auto* kr = static_cast<const char*>(k[i]);
      const auto* vr = static_cast<const char*>(v[i]);
      for (int64_t b = 0; b < k_bytes; b += 64) __builtin_prefetch(kr + b, 0, 2);
      for (int64_t b = 0; b < v_bytes; b += 64) __builtin_prefetch(vr + b, 0, 2);
    }
  }
};

}  // namespace flashback::cpu_fast::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHBACK_CPU_FAST_SIMD_INL_H_ toggle

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

using DU16 = hn::Rebind<uint16_t, DF>;

// fp32 of N fp16 bit patterns, exactly, inf and NaN kept. x86 with F16C (the AVX2 and AVX-512
// targets): its widening. Elsewhere by integer operations: Highway 1.0.3's emulated PromoteTo
// (SSE4, SCALAR) turns inf and NaN into finite values (test_fast_targets found it). There the
// exponent and mantissa move up 13 bits and a multiply by 2^112 rebiases them (fp16 subnormals
// become fp32 subnormals first, exact unless the thread flushes denormals); the all-ones
// exponent becomes fp32's.
HWY_INLINE VF half_to_f32(hn::Vec<DU16> h) {
  const DF df;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), h));
#else
  const hn::RebindToSigned<DF> di;
  const auto w = hn::PromoteTo(di, hn::BitCast(hn::Rebind<int16_t, DF>(), h));
  const auto em = hn::And(w, hn::Set(di, 0x7FFF));
  const auto sign = hn::BitCast(df, hn::ShiftLeft<16>(hn::And(w, hn::Set(di, 0x8000))));
  const auto up = hn::ShiftLeft<13>(em);
  const VF finite = hn::Mul(hn::BitCast(df, up), hn::Set(df, 0x1p112f));
  const VF special = hn::BitCast(df, hn::Or(up, hn::Set(di, 0x7F800000)));
  const auto is_special = hn::RebindMask(df, hn::Gt(em, hn::Set(di, 0x7BFF)));
  return hn::Or(hn::IfThenElse(is_special, special, finite), sign);
#endif
}

// N fp8 values (e4m3 when kE4M3, else e5m2) as fp32, exactly, through fp16 (this Highway
// version has no fp8 vectors). e5m2 is the top byte of an fp16. An e4m3 byte with its exponent
// and mantissa moved down one bit (and the sign kept) is an fp16 with the same mantissa and an
// exponent 8 smaller (bias 7 against 15), subnormals included: times 2^8 it is the value; its
// NaN codes (0x7F, 0xFF) get fp16's all-ones exponent. ~10 operations per N values against a
// table lookup each.
template <bool kE4M3>
HWY_INLINE VF fp8_to_f32(const uint8_t* p) {
  const DF df;
  const DU16 du;
  const auto w = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, DF>(), p));
  if constexpr (!kE4M3) {
    return half_to_f32(hn::ShiftLeft<8>(w));
  } else {
    const auto mag = hn::And(w, hn::Set(du, 0x7F));
    auto h = hn::Or(hn::ShiftLeft<8>(hn::And(w, hn::Set(du, 0x80))), hn::ShiftLeft<7>(mag));
    h = hn::Or(h, hn::IfThenElseZero(hn::Eq(mag, hn::Set(du, 0x7F)), hn::Set(du, 0x7C00)));
    return hn::Mul(half_to_f32(h), hn::Set(df, 256.0f));
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// 32 fp8 bytes as 32 bf16, exactly, by byte table lookups (AVX2; ~0.75 instructions a value,
// against ~2 through fp8_to_f32). A bf16's high byte is the sign and the top 7 exponent bits,
// its low byte the exponent's last bit and the mantissa. For a normal fp8 the high byte
// depends only on the byte's high nibble (sign and top exponent bits; e5m2 adds its exponent's
// bit 1, in the low nibble) and the low byte only on the low nibble. Subnormals (exponent 0)
// take both bytes from tables of the mantissa; the all-ones exponent (e4m3's NaN mantissa 7,
// e5m2's inf and NaN) sets the high byte's 7 low bits, and the low byte already has the
// exponent's last bit and a mantissa that tells inf from NaN.
template <bool kE4M3>
HWY_INLINE void fp8x32_to_bf16(const uint8_t* src, uint16_t* dst) {
  auto bytes16 = [](int a, int b, int c, int d, int e, int f, int g, int h, int i, int j, int k,
                    int l, int m, int n, int o, int p) {
    return _mm256_setr_epi8(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, a, b, c, d, e, f, g, h,
                            i, j, k, l, m, n, o, p);
  };
  // Quads 0 2 1 3: the per-128-bit unpacks at the end put the values back in order.
  const __m256i b =
      _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), 0xD8);
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i hn = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
  const __m256i ln = _mm256_and_si256(b, nib);
  const __m256i sign = _mm256_and_si256(b, _mm256_set1_epi8(static_cast<char>(0x80)));
  __m256i hi, lo, sub, special;
  if constexpr (kE4M3) {
    // Bias 7 against 127: high byte s | (E + 120) >> 1 = 60 + E3E2E1; low byte E0 M << 4.
    hi = _mm256_shuffle_epi8(
        bytes16(60, 61, 62, 63, 64, 65, 66, 67, 0xBC, 0xBD, 0xBE, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3),
        hn);
    lo = _mm256_slli_epi16(ln, 4);  // ln <= 15: no bit crosses into the next byte
    // Subnormal m · 2^-9, m = 0..7 (the low nibble when the exponent is 0).
    const __m256i shi =
        bytes16(0, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i slo = bytes16(0, 0, 0x80, 0xC0, 0, 0x20, 0x40, 0x60, 0, 0, 0, 0, 0, 0, 0, 0);
    sub = _mm256_cmpeq_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x78)), _mm256_setzero_si256());
    hi = _mm256_blendv_epi8(hi, _mm256_or_si256(_mm256_shuffle_epi8(shi, ln), sign), sub);
    lo = _mm256_blendv_epi8(lo, _mm256_shuffle_epi8(slo, ln), sub);
    const __m256i m7f = _mm256_set1_epi8(0x7F);
    special = _mm256_cmpeq_epi8(_mm256_and_si256(b, m7f), m7f);
  } else {
    // Bias 15 against 127: high byte s | (E + 112) >> 1 = 56 + E4E3E2E1; low byte E0 M << 5.
    hi = _mm256_add_epi8(
        _mm256_shuffle_epi8(
            bytes16(56, 58, 60, 62, 64, 66, 68, 70, 0xB8, 0xBA, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6),
            hn),
        _mm256_shuffle_epi8(bytes16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), ln));
    lo = _mm256_shuffle_epi8(bytes16(0, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0, 0x20, 0x40,
                                     0x60, 0x80, 0xA0, 0xC0, 0xE0),
                             ln);
    // Subnormal m · 2^-16, m = 0..3.
    const __m256i shi = bytes16(0, 0x37, 0x38, 0x38, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i slo = bytes16(0, 0x80, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i e = _mm256_and_si256(b, _mm256_set1_epi8(0x7C));
    sub = _mm256_cmpeq_epi8(e, _mm256_setzero_si256());
    hi = _mm256_blendv_epi8(hi, _mm256_or_si256(_mm256_shuffle_epi8(shi, ln), sign), sub);
    lo = _mm256_blendv_epi8(lo, _mm256_shuffle_epi8(slo, ln), sub);
    special = _mm256_cmpeq_epi8(e, _mm256_set1_epi8(0x7C));
  }
  hi = _mm256_or_si256(hi, _mm256_and_si256(special, _mm256_set1_epi8(0x7F)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_unpacklo_epi8(lo, hi));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), _mm256_unpackhi_epi8(lo, hi));
}
#endif

// n fp8 values at src as bf16 (exact: every e4m3 and e5m2 value is a bf16, NaN codes NaN), n a
// multiple of N: 32 at a time by fp8x32_to_bf16 where there is AVX2, the rest through
// fp8_to_f32 (whose fp32 has 16 zero low bits).
template <bool kE4M3>
HWY_INLINE void fp8_row_to_bf16(const uint8_t* src, int64_t n, uint16_t* dst) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  int64_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  for (; i + 32 <= n; i += 32) fp8x32_to_bf16<kE4M3>(src + i, dst + i);
#endif
  for (; i < n; i += lanes()) {
    const auto hi =
        hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, fp8_to_f32<kE4M3>(src + i))));
    hn::StoreU(hn::DemoteTo(DU16(), hi), DU16(), dst + i);
  }
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
    const auto* s = static_cast<const uint16_t*>(src);
    for (; i + N <= n; i += N) hn::StoreU(half_to_f32(hn::LoadU(DU16(), s + i)), df, dst + i);
  } else if (dt == DType::kF8E4M3) {
    const auto* s = static_cast<const uint8_t*>(src);
    for (; i + N <= n; i += N) hn::StoreU(fp8_to_f32<true>(s + i), df, dst + i);
  } else if (dt == DType::kF8E5M2) {
    const auto* s = static_cast<const uint8_t*>(src);
    for (; i + N <= n; i += N) hn::StoreU(fp8_to_f32<false>(s + i), df, dst + i);
  }
  // Tails (fp8: a 256-entry table).
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
inline HWY_NOINLINE VF tanh_f32(VF x) {
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
  } else if constexpr (std::is_same_v<T, hwy::float16_t>) {
    return half_to_f32(hn::LoadU(DU16(), reinterpret_cast<const uint16_t*>(p)));
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

// Tag for fp16 K/V on the same tile kernels as Bf16Pairs: 2N fp16 elements as two fp32 vectors
// in order (half_to_f32, F16C's widening on x86), so q and O rows keep their order.
struct F16Halves {};

template <class P>
inline constexpr bool kPairTag = std::is_same_v<P, Bf16Pairs> || std::is_same_v<P, F16Halves>;

// Elements [x, x + 2N) of a bf16 (Bf16Pairs: even and odd elements) or fp16 (F16Halves: the
// first N and the next N) row as two fp32 vectors.
template <class P>
HWY_INLINE void load_two(const void* row, int64_t x, VF& a, VF& b) {
  if constexpr (std::is_same_v<P, Bf16Pairs>) {
    load_pair(row, x, a, b);
  } else {
    const auto* h = static_cast<const uint16_t*>(row) + x;
    a = half_to_f32(hn::LoadU(DU16(), h));
    b = half_to_f32(hn::LoadU(DU16(), h + lanes()));
  }
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

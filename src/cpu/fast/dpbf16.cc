#include "cpu/fast/dpbf16.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHBACK_CPU_DPBF16 1
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace flashback::cpu_fast::dpbf16 {

#ifdef FLASHBACK_CPU_DPBF16
namespace {

bool detect() {
  const char* env = std::getenv("FLASHBACK_CPU_DPBF16");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(1, 0, &a, &b, &c, &d) == 0 || ((c >> 27) & 1u) == 0)
    return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xE6u) != 0xE6u) return false;  // XMM, YMM, opmask, ZMM state enabled by the OS
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool f = (b >> 16) & 1u, bw = (b >> 30) & 1u;
  if (!f || !bw) return false;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return (a >> 5) & 1u;  // AVX512_BF16
}

#define FLASHBACK_DPBF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// All lanes: the masked forms of the intrinsics below, as GCC 12's unmasked ones start from an
// undefined vector and warn (-Wuninitialized).
constexpr __mmask16 kAll = 0xFFFF;

FLASHBACK_DPBF16_TARGET inline __m512 dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

// Lane sums of acc[i][0] (q row i, key a) to sa[i] and of acc[i][1] to sb[i], times scale[i]
// (sb - 4 must be addressable). In-lane shuffles first, which run beside the dot products on Zen
// 4, then three across 128-bit blocks, which take the dot products' pipes (a tree of the latter
// throughout, ~17 per 8 scores, cost as much as a third of the dot products). Every sum adds its 16
// lanes in the same order whatever its row and key, so a score's bits do not depend on its partner.
FLASHBACK_DPBF16_TARGET __attribute__((always_inline)) inline void sums_4x2(
    const __m512 (&acc)[4][2], const float* scale, float* sa, float* sb) {
  __m512 s[4];  // row i, each block: (a 0 + 2, a 1 + 3, b 0 + 2, b 1 + 3) of the block's lanes
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    s[i] = _mm512_add_ps(_mm512_shuffle_ps(acc[i][0], acc[i][1], 0x44),
                         _mm512_shuffle_ps(acc[i][0], acc[i][1], 0xEE));
  // Rows 2 m and 2 m + 1, each block: (a r0, b r0, a r1, b r1).
  const __m512 t0 =
      _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], 0x88), _mm512_shuffle_ps(s[0], s[1], 0xDD));
  const __m512 t1 =
      _mm512_add_ps(_mm512_shuffle_ps(s[2], s[3], 0x88), _mm512_shuffle_ps(s[2], s[3], 0xDD));
  // Blocks (t0 0 + 1, t0 2 + 3, t1 0 + 1, t1 2 + 3); then block 0 is t0's sums, block 2 t1's.
  const __m512 x = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, t0, t1, 0x88),
                                 _mm512_maskz_shuffle_f32x4(kAll, t0, t1, 0xDD));
  const __m512 y = _mm512_add_ps(x, _mm512_maskz_shuffle_f32x4(kAll, x, x, 0xB1));
  const __m512i order = _mm512_setr_epi32(0, 2, 8, 10, 1, 3, 9, 11, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 f = _mm512_maskz_broadcast_f32x4(kAll, _mm_loadu_ps(scale));
  const __m512 v = _mm512_mul_ps(_mm512_maskz_permutexvar_ps(kAll, order, y), f);
  _mm512_mask_storeu_ps(sa, 0x000F, v);
  _mm512_mask_storeu_ps(sb - 4, 0x00F0, v);  // lanes 4-7 to sb[0 .. 3]
}

// Scores of one group of 4 q rows (raw bf16, row i at q + i * dims) against keys ka and kb, times
// scale[i], to sa[i] and sb[i] (sb - 4 addressable); a line of pa and of pb prefetched per 32
// dims (the stream's rows, 2 dims bytes each). Each loaded K vector serves 4 dot products, each
// q vector 2.
FLASHBACK_DPBF16_TARGET __attribute__((always_inline)) inline void dot_rows_2keys(
    const uint16_t* q, int64_t dims, const char* ka, const char* kb, float* sa, float* sb,
    const float* scale, const char* pa, const char* pb) {
  const __m512 z = _mm512_setzero_ps();
  __m512 acc[4][2] = {{z, z}, {z, z}, {z, z}, {z, z}};  // a loop here became a memset
  for (int64_t c = 0; c < dims / 32; ++c) {
    __builtin_prefetch(pa + 64 * c, 0, 2);
    __builtin_prefetch(pb + 64 * c, 0, 2);
    const __m512i av = _mm512_loadu_si512(ka + 64 * c), bv = _mm512_loadu_si512(kb + 64 * c);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512i qv = _mm512_loadu_si512(q + i * dims + 32 * c);
      acc[i][0] = dot(acc[i][0], qv, av);
      acc[i][1] = dot(acc[i][1], qv, bv);
    }
  }
  sums_4x2(acc, scale, sa, sb);
}

// O rows i < 4 (at o + i * os), 64 columns in this path's order, += the weights of np key pairs
// (pair p: rows vg[2 p], vg[2 p + 1] at byte offset off; row i's word at pw[p * pws + i]). Out of
// line: inlined into pv_tile, GCC 12 spilled an accumulator in the key loop.
FLASHBACK_DPBF16_TARGET __attribute__((noinline)) void pv_rows4(const char* const* vg, int64_t np,
                                                                int64_t off, const uint32_t* pw,
                                                                int64_t pws, float* o, int64_t os) {
  __m512 acc[4][4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[i][c] = _mm512_loadu_ps(o + i * os + 16 * c);
#pragma GCC unroll 1
  for (int64_t p = 0; p < np; ++p, pw += pws) {
    const char* va = vg[2 * p] + off;
    const char* vb = vg[2 * p + 1] + off;
    __m512i a0 = _mm512_loadu_si512(va), a1 = _mm512_loadu_si512(va + 64);
    __m512i b0 = _mm512_loadu_si512(vb), b1 = _mm512_loadu_si512(vb + 64);
    // Each row once in a register (an unpack's memory operand loaded it twice).
    __asm__("" : "+v"(a0), "+v"(a1), "+v"(b0), "+v"(b1));
    const __m512i x[4] = {_mm512_unpacklo_epi16(a0, b0), _mm512_unpackhi_epi16(a0, b0),
                          _mm512_unpacklo_epi16(a1, b1), _mm512_unpackhi_epi16(a1, b1)};
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512i wt = _mm512_set1_epi32(static_cast<int>(pw[i]));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[i][c] = dot(acc[i][c], x[c], wt);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o + i * os + 16 * c, acc[i][c]);
}

}  // namespace

bool usable() {
  static const bool ok = detect();
  return ok;
}

FLASHBACK_DPBF16_TARGET void scores_tile(const uint16_t* q, int64_t dims, int64_t head_rows,
                                         int64_t heads, const void* const* k, int64_t k_head_bytes,
                                         int64_t j0, int64_t j1, float* st, int64_t ra,
                                         const float* row_scale, NextRows& next) {
  const int64_t groups = head_rows / 4, per_key = heads * groups;
  // The stream's share: 2 heads rows per key pair, i.e. 2 / groups per (pair, group) (1 or 2),
  // a line per 32 dims inside the dot products when the rows are 2 dims bytes (as
  // scores_tile_pairs), else stepped before each group; an odd key's heads rows first.
  const bool inner = groups <= 2 && next.k_bytes() == 2 * dims && next.v_bytes() == 2 * dims &&
                     2 * dims <= NextRows::kSpareBytes;
  if ((j1 - j0) % 2 != 0) next.step(heads);
  const int64_t half = (j1 - j0) / 2;
  float dummy[8];  // an odd key's second sums, at dummy + 4
  for (int64_t w = 0; w < half + (j1 - j0) % 2; ++w) {
    // Key w of the tile's first half with key w of its second (K read as two address-ordered
    // runs, as in scores_tile_pairs); an odd last key alone (scored twice, the second sums
    // dropped: its bits as in a pair).
    const bool single = w == half;
    const int64_t ja = single ? j0 + 2 * half : j0 + w, jb = single ? ja : ja + half;
    const char* ka = static_cast<const char*>(k[ja]);
    const char* kb = static_cast<const char*>(k[jb]);
    const uint16_t* qc = q;
    const float* sc = row_scale;
    float* sa = st + ja * ra;
    float* sb = single ? dummy + 4 : st + jb * ra;
    int64_t c = 0;
    for (int64_t g = 0; g < heads; ++g, ka += k_head_bytes, kb += k_head_bytes)
      for (int64_t i = 0; i < groups; ++i, ++c, qc += 4 * dims, sc += 4, sa += 4) {
        const char* pa = NextRows::spare();
        const char* pb = NextRows::spare();
        if (!single && inner) {
          pa = next.take();
          if (groups == 1) pb = next.take();
        } else if (!single) {
          next.step(even_share(2 * heads, c, per_key));
        }
        dot_rows_2keys(qc, dims, ka, kb, sa, sb, sc, pa, pb);
        if (!single) sb += 4;
      }
  }
}

FLASHBACK_DPBF16_TARGET void pv_tile(const float* st, int64_t ra, int64_t head_rows, int64_t heads,
                                     const void* const* v, int64_t v_head_bytes, int64_t j0,
                                     int64_t j1, float* o, int64_t os, int64_t dv, uint32_t* pstage,
                                     NextRows& next) {
  const int64_t n = j1 - j0, rows = heads * head_rows;
  const int64_t S = (n + 2 * kBlockPairs - 1) / (2 * kBlockPairs);  // blocks, the key step
  // Pairs in block w: its keys j0 + w + m S below j1, two at a time.
  const auto pairs_in = [&](int64_t w) { return ((n - w + S - 1) / S + 1) / 2; };
  // The weights of pair p of block w (keys j0 + w + 2 p S and the one S after it, if any) as
  // 32-bit words, the first key's bf16 in the low half, at pstage[(w * kBlockPairs + p) * ra + r].
  for (int64_t w = 0; w < S; ++w)
    for (int64_t p = 0; p < pairs_in(w); ++p) {
      const int64_t ka = j0 + w + 2 * p * S, kb = ka + S;
      uint32_t* dst = pstage + (w * kBlockPairs + p) * ra;
      for (int64_t x = 0; x < rows; x += 16) {
        const __mmask16 m =
            static_cast<__mmask16>(rows - x >= 16 ? 0xFFFF : (1u << (rows - x)) - 1);
        const __m512 a = _mm512_maskz_loadu_ps(m, st + ka * ra + x);
        const __m512 b = kb < j1 ? _mm512_maskz_loadu_ps(m, st + kb * ra + x) : _mm512_setzero_ps();
        const __m512i lo =
            _mm512_maskz_cvtepu16_epi32(kAll, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(a)));
        const __m512i hi =
            _mm512_maskz_cvtepu16_epi32(kAll, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(b)));
        _mm512_mask_storeu_epi32(dst + x, m,
                                 _mm512_or_si512(lo, _mm512_maskz_slli_epi32(kAll, hi, 16)));
      }
    }
  const int64_t per = (next.slots() - next.at + S * heads - 1) / (S * heads);
  for (int64_t w = 0; w < S; ++w) {
    const int64_t np = pairs_in(w);
    // The block's rows of head 0, as pairs (a missing second key: a row of zeros).
    const char* vr[2 * kBlockPairs];
    for (int64_t p = 0; p < np; ++p) {
      const int64_t ka = j0 + w + 2 * p * S, kb = ka + S;
      vr[2 * p] = static_cast<const char*>(v[ka]);
      vr[2 * p + 1] = kb < j1 ? static_cast<const char*>(v[kb]) : nullptr;
    }
    for (int64_t g = 0; g < heads; ++g) {
      next.step(per);
      const char* vg[2 * kBlockPairs];
      for (int64_t x = 0; x < 2 * np; ++x)
        vg[x] = vr[x] != nullptr ? vr[x] + g * v_head_bytes : NextRows::spare();
      for (int64_t r0 = g * head_rows; r0 < (g + 1) * head_rows; r0 += 4)
        for (int64_t h = 0; h < dv / 64; ++h)
          pv_rows4(vg, np, 128 * h, pstage + w * kBlockPairs * ra + r0, ra, o + r0 * os + 64 * h,
                   os);
    }
  }
}

#undef FLASHBACK_DPBF16_TARGET

#else  // not x86-64

bool usable() { return false; }
void scores_tile(const uint16_t*, int64_t, int64_t, int64_t, const void* const*, int64_t, int64_t,
                 int64_t, float*, int64_t, const float*, NextRows&) {}
void pv_tile(const float*, int64_t, int64_t, int64_t, const void* const*, int64_t, int64_t, int64_t,
             float*, int64_t, int64_t, uint32_t*, NextRows&) {}

#endif

void unsplit_columns(float* o, int64_t dv) {
  float t[32];
  for (int64_t c0 = 0; c0 < dv; c0 += 32) {
    for (int64_t L = 0; L < 4; ++L)
      for (int64_t i = 0; i < 4; ++i) {
        t[8 * L + i] = o[c0 + 4 * L + i];
        t[8 * L + 4 + i] = o[c0 + 16 + 4 * L + i];
      }
    std::copy(t, t + 32, o + c0);
  }
}

}  // namespace flashback::cpu_fast::dpbf16

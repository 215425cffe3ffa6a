#include "cpu/fast/amx.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHBACK_CPU_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace flashback::cpu_fast::amx {

#ifdef FLASHBACK_CPU_AMX
namespace {

bool detect() {
  const char* env = std::getenv("FLASHBACK_CPU_AMX");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u;
  if (!tile || !bf16) return false;
  // Linux keeps the tile data state off until the process asks for it (5.16+); without the
  // grant the first tile instruction faults.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The 64-byte LDTILECFG operand (palette 1): bytes/row and rows of tiles 0-15.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Rows of keys [gb, gb + kKeys) as a tile operand: key i's `heads` rows (`row_bytes` each, head
// g's at rows[gb + i] + off + g * head_bytes). In place when all 16 keys are in the loaded range
// [lo, hi) and evenly spaced (a page of 16 or more keys, the tile aligned to it); else copied to
// `stage`, a key's heads side by side and zero rows outside [lo, hi) (a zero weight or q times
// uninitialised memory could be NaN). Returns head 0's first row; `stride` (between keys) and
// `head_bytes` (between heads) as the operand has them.
struct Operand {
  const char* base;
  int64_t stride, head_bytes;
};
Operand operand_rows(const void* const* rows, int64_t off, int64_t heads, int64_t head_bytes,
                     int64_t row_bytes, int64_t gb, int64_t lo, int64_t hi, char* stage) {
  const auto at = [&](int64_t j) { return static_cast<const char*>(rows[j]) + off; };
  if (lo == gb && hi == gb + kKeys) {
    const int64_t stride = at(gb + 1) - at(gb);
    bool even = true;
    for (int64_t i = 2; i < kKeys && even; ++i) even = at(gb + i) == at(gb) + i * stride;
    if (even) return {at(gb), stride, head_bytes};
  }
  const int64_t stride = heads * row_bytes;
  for (int64_t i = 0; i < kKeys; ++i) {
    char* dst = stage + i * stride;
    const int64_t j = gb + i;
    if (j < lo || j >= hi) {
      std::memset(dst, 0, static_cast<size_t>(stride));
      continue;
    }
    for (int64_t g = 0; g < heads; ++g)
      std::memcpy(dst + g * row_bytes, at(j) + g * head_bytes, static_cast<size_t>(row_bytes));
  }
  return {stage, stride, row_bytes};
}

// Tiles: 0 scores (C: 16 keys x head_rows fp32), 1 K (A: 16 keys x 32 bf16), 2 q (B: 16 dim
// pairs x head_rows x 2 bf16); P·V: 3-6 O (C: 2 head_rows rows x 16 column pairs each), 7 P (A:
// 2 head_rows rows x 16 keys x 2), 1 V (B: 16 keys x 16 column pairs x 2, V's rows as they are).
#define FLASHBACK_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))

}  // namespace

bool usable() {
  static const bool ok = detect();
  return ok;
}

FLASHBACK_AMX_TARGET void begin(int64_t head_rows) {
  TileConfig cfg;
  const auto q_cols = static_cast<uint16_t>(head_rows * 4);
  const auto m = static_cast<uint8_t>(2 * head_rows);
  cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = 16;  // scores: C, A (K) / P·V: B (V rows), B (q)
  cfg.colsb[0] = cfg.colsb[2] = q_cols;
  cfg.colsb[1] = 64;
  for (int t = 3; t <= 7; ++t) {  // P·V: C (O, 4 blocks of 32 columns) and A (P): 2 rows per row
    cfg.rows[t] = m;
    cfg.colsb[t] = 64;
  }
  // Through asm with the whole struct as its operand: GCC 12 dropped the rows/colsb stores ahead
  // of _tile_loadconfig (it loaded palette 1 with no tiles, so the first tile op faulted).
  asm volatile("ldtilecfg %0" ::"m"(cfg));
}

FLASHBACK_AMX_TARGET void end() { _tile_release(); }

void pack_q(const uint16_t* const* q, int64_t head_rows, int64_t dims, uint16_t* qb) {
  for (int64_t c = 0; c < dims / 32; ++c)
    for (int64_t p = 0; p < 16; ++p)
      for (int64_t r = 0; r < head_rows; ++r)
        for (int64_t e = 0; e < 2; ++e)
          qb[((c * 16 + p) * head_rows + r) * 2 + e] = q[r][c * 32 + 2 * p + e];
}

FLASHBACK_AMX_TARGET void scores_tile(const uint16_t* qb, int64_t heads, int64_t head_rows,
                                      int64_t dims, const void* const* k, int64_t k_head_bytes,
                                      int64_t j0, int64_t j1, float* st, int64_t ra,
                                      const float* row_scale, uint16_t* stage, NextRows* next) {
  const int64_t row_bytes = dims * 2, steps = dims / 32, b_step = 32 * head_rows;  // elements
  const int64_t b_stride = head_rows * 4, q_head = dims * head_rows;
  for (int64_t gb = j0 / kKeys * kKeys; gb < j1; gb += kKeys) {
    const int64_t lo = std::max(gb, j0), hi = std::min(gb + kKeys, j1);
    const Operand a = operand_rows(k, 0, heads, k_head_bytes, row_bytes, gb, lo, hi,
                                   reinterpret_cast<char*>(stage));
    float* s = st + gb * ra;
    for (int64_t g = 0; g < heads; ++g) {
      const char* ag = a.base + g * a.head_bytes;
      const uint16_t* bg = qb + g * q_head;
      _tile_zero(0);
      const int64_t n = hi - lo;  // rows of K this head's steps consume, prefetched in step
      for (int64_t c = 0; c < steps; ++c) {
        const int64_t m = even_share(n, c, steps);
        next->step(m / 2);
        _tile_loadd(1, ag + c * 64, a.stride);
        _tile_loadd(2, bg + c * b_step, b_stride);
        next->step(m - m / 2);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, s + g * head_rows, ra * 4);
    }
    const int64_t rows = heads * head_rows;
    for (int64_t j = lo; j < hi; ++j)
      for (int64_t r = 0; r < rows; ++r) st[j * ra + r] *= row_scale[r];
  }
}

// The weights of 4 q rows for 16 keys (row r, key k at st[k * ra + r]), one vector per row with
// the keys in lanes: 16 loads of a key's 4 rows and two rounds of two-source permutes (four
// gathers of 16 lanes each took ~4x the instructions).
FLASHBACK_AMX_TARGET void weights4(const float* st, int64_t ra, __m512 (&w)[4]) {
  __m512 z[4];  // keys 4q .. 4q + 3, rows 0-3 of each
  for (int64_t q = 0; q < 4; ++q) {
    const float* p = st + 4 * q * ra;
    __m512 v = _mm512_zextps128_ps512(_mm_loadu_ps(p));
    v = _mm512_insertf32x4(v, _mm_loadu_ps(p + ra), 1);
    v = _mm512_insertf32x4(v, _mm_loadu_ps(p + 2 * ra), 2);
    z[q] = _mm512_insertf32x4(v, _mm_loadu_ps(p + 3 * ra), 3);
  }
  // Rows r and r + 1 of keys 0-7 (from z[0], z[1]) or 8-15 (z[2], z[3]): lane l holds row
  // r + l / 8 of key l % 8, element (l % 8 / 4) * 16 + (l % 4) * 4 + l / 8 + r of the pair; then
  // lanes 0-7 (lo) or 8-15 (hi) of each half put together.
  const __m512i x01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i x23 = _mm512_add_epi32(x01, _mm512_set1_epi32(2));
  const __m512i xlo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  const __m512i xhi = _mm512_add_epi32(xlo, _mm512_set1_epi32(8));
  const __m512 a = _mm512_permutex2var_ps(z[0], x01, z[1]),
               b = _mm512_permutex2var_ps(z[0], x23, z[1]);
  const __m512 c = _mm512_permutex2var_ps(z[2], x01, z[3]),
               d = _mm512_permutex2var_ps(z[2], x23, z[3]);
  w[0] = _mm512_permutex2var_ps(a, xlo, c);
  w[1] = _mm512_permutex2var_ps(a, xhi, c);
  w[2] = _mm512_permutex2var_ps(b, xlo, d);
  w[3] = _mm512_permutex2var_ps(b, xhi, d);
}

FLASHBACK_AMX_TARGET void pv_tile(const float* st, int64_t ra, int64_t head_rows,
                                  const void* const* v, int64_t v_off, int64_t j0, int64_t j1,
                                  float* o, int64_t os, int64_t dv, uint16_t* vstage,
                                  uint16_t* pstage, NextRows* next) {
  const int64_t row_bytes = dv * 2;
  // B: each half tile's 16 V rows (operand_rows); null for a half without keys.
  const char* vb[2] = {nullptr, nullptr};
  int64_t vstride[2] = {0, 0}, rows = 0, loads = 0;
  for (int64_t hf = 0; hf < 2; ++hf) {
    const int64_t gb = hf * kKeys, lo = std::max(gb, j0), hi = std::min(gb + kKeys, j1);
    if (lo >= hi) continue;
    rows += hi - lo;
    loads += dv / 32;
    const Operand b = operand_rows(v, v_off, 1, 0, row_bytes, gb, lo, hi,
                                   reinterpret_cast<char*>(vstage) + hf * kKeys * row_bytes);
    vb[hf] = b.base;
    vstride[hf] = b.stride;
  }
  uint32_t keys = 0;
  for (int64_t j = j0; j < j1; ++j) keys |= 1u << j;
  const __mmask16 mask[2] = {static_cast<__mmask16>(keys & 0xFFFF),
                             static_cast<__mmask16>(keys >> 16)};
  // A of each half: rows 2i and 2i + 1 hold row i's 16 weights (bf16, round to nearest even) in
  // the even and in the odd element of each pair, the other element zero; with V's rows as B
  // (pairs of adjacent columns), row 2i accumulates O's even columns and row 2i + 1 its odd ones.
  for (int64_t hf = 0; hf < 2; ++hf) {
    if (vb[hf] == nullptr) continue;
    uint16_t* pa = pstage + hf * 2 * kMaxRows * 32;
    for (int64_t i0 = 0; i0 < head_rows; i0 += 4) {
      __m512 w[4];
      weights4(st + hf * kKeys * ra + i0, ra, w);
      for (int64_t i = 0; i < 4; ++i) {
        const __m512i even = _mm512_maskz_cvtepu16_epi32(
            0xFFFF,
            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_mov_ps(mask[hf], w[i]))));
        _mm512_storeu_si512(pa + 2 * (i0 + i) * 32, even);
        _mm512_storeu_si512(pa + (2 * (i0 + i) + 1) * 32,
                            _mm512_maskz_slli_epi32(0xFFFF, even, 16));
      }
    }
  }
  // O as C tiles of 2 head_rows rows, four blocks of 32 columns at a time (dv a multiple of 64:
  // a last group of two): row 2i + e of block b (columns 32 b + 2 n + e, n < 16) at
  // o + i * os + e * os / 2 + 16 b, a stride of os / 2 floats.
  const int64_t cs = os * 2;  // bytes
  // The prefetch stream takes this head's V rows' worth of steps spread over its V loads (a
  // burst of 32 rows at once, 128 lines, queued the loads behind them).
  int64_t load = 0;
  const auto step = [&] {
    next->step(even_share(rows, load, loads));
    ++load;
  };
  for (int64_t b0 = 0; b0 < dv / 32; b0 += 4) {
    const bool four = b0 + 4 <= dv / 32;
    _tile_loadd(3, o + (b0 + 0) * 16, cs);
    _tile_loadd(4, o + (b0 + 1) * 16, cs);
    if (four) {
      _tile_loadd(5, o + (b0 + 2) * 16, cs);
      _tile_loadd(6, o + (b0 + 3) * 16, cs);
    }
    for (int64_t hf = 0; hf < 2; ++hf) {
      if (vb[hf] == nullptr) continue;
      _tile_loadd(7, pstage + hf * 2 * kMaxRows * 32, 64);
      const char* vh = vb[hf] + b0 * 64;
      step();
      _tile_loadd(1, vh, vstride[hf]);
      _tile_dpbf16ps(3, 7, 1);
      step();
      _tile_loadd(1, vh + 64, vstride[hf]);
      _tile_dpbf16ps(4, 7, 1);
      if (four) {
        step();
        _tile_loadd(1, vh + 128, vstride[hf]);
        _tile_dpbf16ps(5, 7, 1);
        step();
        _tile_loadd(1, vh + 192, vstride[hf]);
        _tile_dpbf16ps(6, 7, 1);
      }
    }
    _tile_stored(3, o + (b0 + 0) * 16, cs);
    _tile_stored(4, o + (b0 + 1) * 16, cs);
    if (four) {
      _tile_stored(5, o + (b0 + 2) * 16, cs);
      _tile_stored(6, o + (b0 + 3) * 16, cs);
    }
  }
}

#undef FLASHBACK_AMX_TARGET

#else  // no AMX here

bool usable() { return false; }
void begin(int64_t) {}
void end() {}
void pack_q(const uint16_t* const*, int64_t, int64_t, uint16_t*) {}
void scores_tile(const uint16_t*, int64_t, int64_t, int64_t, const void* const*, int64_t, int64_t,
                 int64_t, float*, int64_t, const float*, uint16_t*, NextRows*) {}
void pv_tile(const float*, int64_t, int64_t, const void* const*, int64_t, int64_t, int64_t, float*,
             int64_t, int64_t, uint16_t*, uint16_t*, NextRows*) {}

#endif

void unsplit_columns(float* o, int64_t os, int64_t dv) {
  float t[1024];
  for (int64_t c = 0; c < dv; ++c) t[c] = o[(c & 1) * (os / 2) + c / 2];
  std::copy(t, t + dv, o);
  std::fill(o + dv, o + os, 0.0f);
}

}  // namespace flashback::cpu_fast::amx

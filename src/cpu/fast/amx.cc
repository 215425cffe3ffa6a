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

// Tiles: 0 scores (C: 16 keys x head_rows fp32), 1 K (A: 16 keys x 32 bf16), 2 q (B: 16 dim
// pairs x head_rows x 2 bf16); P·V: 3-6 O (C: head_rows x 16 columns each), 7 P (A:
// head_rows x 32 keys), 1 V (B: 16 key pairs x 16 columns x 2).
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
  const auto m = static_cast<uint8_t>(head_rows);
  cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = 16;  // scores: C, A (K) / P·V: B (V pairs), B (q)
  cfg.colsb[0] = cfg.colsb[2] = q_cols;
  cfg.colsb[1] = 64;
  for (int t = 3; t <= 7; ++t) {  // P·V: C (O, 4 blocks of 16 columns) and A (P)
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
    // In place when the 16 keys' rows are evenly spaced (a page of 16 or more keys, the tile
    // aligned to it); else the range's rows, zero-padded, through the stage.
    const auto* base = static_cast<const char*>(k[lo]);
    int64_t stride = 0, head_bytes = k_head_bytes;
    bool direct = lo == gb && hi == gb + kKeys;
    if (direct) {
      stride = static_cast<const char*>(k[gb + 1]) - base;
      for (int64_t i = 2; i < kKeys && direct; ++i)
        direct = static_cast<const char*>(k[gb + i]) == base + i * stride;
    }
    if (!direct) {
      auto* sb = reinterpret_cast<char*>(stage);
      stride = heads * row_bytes;
      head_bytes = row_bytes;
      for (int64_t i = 0; i < kKeys; ++i) {
        char* dst = sb + i * stride;
        const int64_t j = gb + i;
        if (j < lo || j >= hi) {
          std::memset(dst, 0, static_cast<size_t>(stride));
          continue;
        }
        for (int64_t g = 0; g < heads; ++g)
          std::memcpy(dst + g * row_bytes, static_cast<const char*>(k[j]) + g * k_head_bytes,
                      static_cast<size_t>(row_bytes));
      }
      base = sb;
    }
    float* s = st + gb * ra;
    for (int64_t g = 0; g < heads; ++g) {
      const char* ag = base + g * head_bytes;
      const uint16_t* bg = qb + g * q_head;
      _tile_zero(0);
      const int64_t n = hi - lo;  // rows of K this head's steps consume, prefetched in step
      for (int64_t c = 0; c < steps; ++c) {
        next->step(n * (c + 1) / steps - n * c / steps);
        _tile_loadd(1, ag + c * 64, stride);
        _tile_loadd(2, bg + c * b_step, b_stride);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, s + g * head_rows, ra * 4);
    }
    const int64_t rows = heads * head_rows;
    for (int64_t j = lo; j < hi; ++j)
      for (int64_t r = 0; r < rows; ++r) st[j * ra + r] *= row_scale[r];
  }
}

FLASHBACK_AMX_TARGET void pv_tile(const float* st, int64_t ra, int64_t head_rows,
                                  const void* const* v, int64_t v_off, int64_t j0, int64_t j1,
                                  float* o, int64_t os, int64_t dv, uint16_t* vstage,
                                  uint16_t* pstage, NextRows* next) {
  // Element i of each pair of rows: (row 2k, i) then (row 2k + 1, i).
  alignas(64) uint16_t lo_idx[32], hi_idx[32];
  for (int i = 0; i < 16; ++i) {
    lo_idx[2 * i] = static_cast<uint16_t>(i);
    lo_idx[2 * i + 1] = static_cast<uint16_t>(32 + i);
    hi_idx[2 * i] = static_cast<uint16_t>(16 + i);
    hi_idx[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const __m512i ilo = _mm512_load_si512(lo_idx), ihi = _mm512_load_si512(hi_idx);
  const int64_t row_bytes = dv * 2, vrow = dv * 4;  // a V row; a staged pair of rows
  {
    // V's 32 tile keys as 16 interleaved pairs (rows outside [j0, j1) zero).
    auto* vs = reinterpret_cast<char*>(vstage);
    for (int64_t p = 0; p < 16; ++p) {
      const int64_t ja = 2 * p, jb = 2 * p + 1;
      const bool ina = ja >= j0 && ja < j1, inb = jb >= j0 && jb < j1;
      const char* ra_ = ina ? static_cast<const char*>(v[ja]) + v_off : nullptr;
      const char* rb_ = inb ? static_cast<const char*>(v[jb]) + v_off : nullptr;
      char* dst = vs + p * vrow;
      next->step(static_cast<int64_t>(ina) + static_cast<int64_t>(inb));
      for (int64_t c = 0; c < row_bytes; c += 64) {
        const __m512i x = ina ? _mm512_loadu_si512(ra_ + c) : _mm512_setzero_si512();
        const __m512i y = inb ? _mm512_loadu_si512(rb_ + c) : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi16(x, ilo, y));
        _mm512_storeu_si512(dst + 2 * c + 64, _mm512_permutex2var_epi16(x, ihi, y));
      }
    }
    // P: the rows x 32 keys in bf16, gathered from the key-major weights (those outside
    // [j0, j1) zero; round to nearest even).
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(ra)));
    uint32_t keys = 0;
    for (int64_t j = j0; j < j1; ++j) keys |= 1u << j;
    const auto m0 = static_cast<__mmask16>(keys & 0xFFFF), m1 = static_cast<__mmask16>(keys >> 16);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < head_rows; ++i) {
      const __m512 lo = _mm512_mask_i32gather_ps(zero, m0, idx, st + i, 4);
      const __m512 hi = _mm512_mask_i32gather_ps(zero, m1, idx, st + 16 * ra + i, 4);
      _mm512_storeu_si512(pstage + i * 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
    _tile_loadd(7, pstage, 64);
    float* og = o;
    for (int64_t b0 = 0; b0 < dv / 16; b0 += 4) {
      _tile_loadd(3, og + (b0 + 0) * 16, os * 4);
      _tile_loadd(4, og + (b0 + 1) * 16, os * 4);
      _tile_loadd(5, og + (b0 + 2) * 16, os * 4);
      _tile_loadd(6, og + (b0 + 3) * 16, os * 4);
      _tile_loadd(1, vs + (b0 + 0) * 64, vrow);
      _tile_dpbf16ps(3, 7, 1);
      _tile_loadd(1, vs + (b0 + 1) * 64, vrow);
      _tile_dpbf16ps(4, 7, 1);
      _tile_loadd(1, vs + (b0 + 2) * 64, vrow);
      _tile_dpbf16ps(5, 7, 1);
      _tile_loadd(1, vs + (b0 + 3) * 64, vrow);
      _tile_dpbf16ps(6, 7, 1);
      _tile_stored(3, og + (b0 + 0) * 16, os * 4);
      _tile_stored(4, og + (b0 + 1) * 16, os * 4);
      _tile_stored(5, og + (b0 + 2) * 16, os * 4);
      _tile_stored(6, og + (b0 + 3) * 16, os * 4);
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

}  // namespace flashback::cpu_fast::amx

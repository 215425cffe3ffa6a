// Few rows per KV head (decode, verify, short extends: up to 16): q rows in memory, K/V rows read
// in place (fp8: from a bf16 stage) and widened as they load, each loaded K/V vector shared by up
// to 4 rows held in registers. Scores
// are dot products (summed across lanes once per row and key), the online softmax runs per row
// over a tile, and P·V broadcasts each weight against the value vectors. A Highway "-inl.h"
// header, included by attention_kernel.cc once per target.
#if defined(FLASHBACK_CPU_FAST_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHBACK_CPU_FAST_DECODE_INL_H_
#undef FLASHBACK_CPU_FAST_DECODE_INL_H_
#else
#define FLASHBACK_CPU_FAST_DECODE_INL_H_
#endif

#include "cpu/fast/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashback::cpu_fast::HWY_NAMESPACE {

// Lane sums of acc[i][j] to s[i · ss + j], in an order that depends only on R, K and the target.
template <int R, int K>
HWY_INLINE void store_sums(VF (&acc)[R][K], float* s, int64_t ss) {
  const DF df;
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

// S[i][j] = q_i · k_j for R rows × K keys (key j's row at k[j]), R × K accumulators in registers,
// each loaded K vector widened once and shared by the R rows (the q heads of a GQA group).
template <int R, int K, class T>
HWY_INLINE void dot_block(const float* q, int64_t qs, Rows k, int64_t len, float* s, int64_t ss) {
  const DF df;
  const int64_t N = lanes();
  VF acc[R][K];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < K; ++j) acc[i][j] = hn::Zero(df);
  if constexpr (std::is_same_v<T, Bf16Pairs>) {
    // Key-major: one key's pair of vectors live at a time, so R × K accumulators fit.
    for (int64_t x = 0; x < len; x += 2 * N)
      for (int j = 0; j < K; ++j) {
        VF ke, ko;
        load_pair(k[j], x, ke, ko);
        for (int i = 0; i < R; ++i)
          acc[i][j] = hn::MulAdd(hn::LoadU(df, q + i * qs + x + N), ko,
                                 hn::MulAdd(hn::LoadU(df, q + i * qs + x), ke, acc[i][j]));
      }
  } else {
    for (int64_t x = 0; x < len; x += N) {
      VF kv[K];
      for (int j = 0; j < K; ++j) kv[j] = load_f32v(static_cast<const T*>(k[j]) + x);
      for (int i = 0; i < R; ++i) {
        const VF qv = hn::LoadU(df, q + i * qs + x);
        for (int j = 0; j < K; ++j) acc[i][j] = hn::MulAdd(qv, kv[j], acc[i][j]);
      }
    }
  }
  store_sums<R, K>(acc, s, ss);
}

// KV head of row i (0..3) of a group of 4 rows, counted from the group's first row's: bit i of
// kMask (i = 1..3) is set where row i starts the next KV head's rows. 1: one head (4 or more
// rows per KV head); 0xF: four (MHA); 0x5: two (2 rows per head); others where heads of 3, 5, 6
// or 7 rows straddle the group.
constexpr int group_head(int mask, int i) {
  int h = 0;
  for (int b = 1; b <= i; ++b) h += (mask >> b) & 1;
  return h;
}

// S = q · k for the 4 rows at q (stride qs) against one key's row k (bf16 pairs), into
// s[0 .. 3]. Each accumulator sees the MulAdd sequence of dot_block<4, K, Bf16Pairs> and the same
// lane sums, so a score has the same bits whichever keys share a block. Row i's K row is at
// k + group_head(kMask, i) · k_row bytes, loaded once per head of the group.
template <int kMask = 1, class P = Bf16Pairs>
HWY_INLINE void dot_rows_1key(const float* q, int64_t qs, const void* k, int64_t len, float* s,
                              int64_t k_row = 0) {
  const DF df;
  const int64_t N = lanes();
  VF acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = hn::Zero(df);
  for (int64_t x = 0; x < len; x += 2 * N) {
    VF ke, ko;
    for (int i = 0; i < 4; ++i) {
      if (i == 0 || ((kMask >> i) & 1))
        load_two<P>(static_cast<const char*>(k) + group_head(kMask, i) * k_row, x, ke, ko);
      acc[i] = hn::MulAdd(hn::LoadU(df, q + i * qs + x + N), ko,
                          hn::MulAdd(hn::LoadU(df, q + i * qs + x), ke, acc[i]));
    }
  }
  sum4(acc[0], acc[1], acc[2], acc[3], s);
}

// S = q · k for the 4 rows at q (stride qs) against two keys' rows k0 and k1 (bf16 pairs), into
// s0[0 .. 3] and s1[0 .. 3]: each loaded q vector serves both keys (dot_rows_1key twice loads
// q twice; each accumulator repeats its MulAdd sequence and lane sums, so a score has the same
// bits either way). 8 accumulators, 4 key and 2 q vectors: fits 16 registers. kPf: the lines
// of the two stream rows at pa and pb (2 · len bytes each) are prefetched N / 8 a chunk, which
// covers both rows exactly when len is a multiple of 32. kMask: row i's K rows are at
// k0 + group_head(kMask, i) · k_row and k1 + ... bytes, loaded once per head of the group.
template <bool kPf, int kMask = 1, class P = Bf16Pairs>
HWY_INLINE void dot_rows_2keys(const float* q, int64_t qs, const void* k0, const void* k1,
                               int64_t len, float* s0, float* s1, const char* pa = nullptr,
                               const char* pb = nullptr, int64_t k_row = 0) {
  const DF df;
  const int64_t N = lanes();
  VF acc[4][2];
  for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = hn::Zero(df);
  const char* line = pa;
  const char* const pa_end = pa + 2 * len;
  for (int64_t x = 0; x < len; x += 2 * N) {
    if constexpr (kPf) {
      for (int64_t l = 0; l < N / 8; ++l) {
        __builtin_prefetch(line, 0, 2);
        line += 64;
        line = line == pa_end ? pb : line;
      }
    }
    VF ae, ao, be, bo;
    for (int i = 0; i < 4; ++i) {
      if (i == 0 || ((kMask >> i) & 1)) {
        const int64_t off = group_head(kMask, i) * k_row;
        load_two<P>(static_cast<const char*>(k0) + off, x, ae, ao);
        load_two<P>(static_cast<const char*>(k1) + off, x, be, bo);
      }
      VF qe = hn::LoadU(df, q + i * qs + x), qo = hn::LoadU(df, q + i * qs + x + N);
      pin_register(qe);
      pin_register(qo);
      acc[i][0] = hn::MulAdd(qo, ao, hn::MulAdd(qe, ae, acc[i][0]));
      acc[i][1] = hn::MulAdd(qo, bo, hn::MulAdd(qe, be, acc[i][1]));
    }
  }
  sum4(acc[0][0], acc[1][0], acc[2][0], acc[3][0], s0);
  sum4(acc[0][1], acc[1][1], acc[2][1], acc[3][1], s1);
}

// Calls f(std::integral_constant<int, mask>{}) for a group mask (group_head). The masks that
// occur: 1 row per head gives 15, or 7, 3, 1 in a last group of 3, 2, 1 rows; 2 rows give 5 (or
// 1); 3 or more rows at most one head start per group, 3, 5 or 9. 11 and 13 (two starts one
// row apart without the one between, or a start at row 2 and 3 alone) never do, so they are not
// instantiated: each mask is a copy of the dot products for every target and loader.
template <class F>
HWY_INLINE void with_group_mask(int mask, F&& f) {
  switch (mask) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    case 9:
      return f(std::integral_constant<int, 9>{});
    default:
      return f(std::integral_constant<int, 15>{});
  }
}

// scores_tile_pairs for rows per KV head not a multiple of 4 (MHA's 1; GQA 2, 3, 6, 7; an
// extend's tokens × group): the task's rows, head after head, in groups of 4 consecutive rows
// that may span up to 4 KV heads, each group scored against its heads' K rows of both keys of
// a pair (dot_rows_2keys with the group's mask), so each head's K row is loaded once per group
// it touches and K is still read slot by slot in address order. Rows past the task's (the last
// group's padding, up to `ra`) score q rows the caller zeroed against the last head's K rows;
// the softmax masks them. The stream takes an even share of `heads` rows per key before each
// group. An odd last key goes alone.
template <class P>
void scores_tile_groups(const float* q, int64_t qs, int64_t head_rows, int64_t heads, Rows k,
                        int64_t k_head_bytes, int64_t len, int64_t j0, int64_t j1, float* s,
                        int64_t skey, NextRows& next) {
  const int64_t rows = heads * head_rows, groups = (rows + 3) / 4;
  int mask[kMaxRows / 4];
  int64_t first[kMaxRows / 4];  // byte offset of the group's first row's K row
  for (int64_t c = 0; c < groups; ++c) {
    first[c] = 4 * c / head_rows * k_head_bytes;
    mask[c] = 1;
    for (int64_t i = 1; i < 4; ++i)
      if (4 * c + i < rows && (4 * c + i) % head_rows == 0) mask[c] |= 1 << i;
  }
  // Group c's dot products with its mask: kUniform where every group has that mask (one dispatch
  // per tile; per group, GQA 2 decode took 14 % more time in cache), 0 to dispatch per group.
  auto walk = [&](auto uniform) {
    constexpr int kUniform = decltype(uniform)::value;
    auto group = [&](int64_t c, auto dot) {
      if constexpr (kUniform != 0)
        dot(std::integral_constant<int, kUniform>{});
      else
        with_group_mask(mask[c], dot);
    };
    const int64_t half = (j1 - j0) / 2;
    for (int64_t ja = j0; ja < j0 + half; ++ja) {
      const int64_t jb = ja + half;
      const char* ka = static_cast<const char*>(k[ja]);
      const char* kb = static_cast<const char*>(k[jb]);
      for (int64_t c = 0; c < groups; ++c) {
        next.step(even_share(2 * heads, c, groups));
        group(c, [&](auto m) {
          dot_rows_2keys<false, decltype(m)::value, P>(
              q + 4 * c * qs, qs, ka + first[c], kb + first[c], len, s + ja * skey + 4 * c,
              s + jb * skey + 4 * c, nullptr, nullptr, k_head_bytes);
        });
      }
    }
    const int64_t j = j0 + 2 * half;
    if (j == j1) return;
    next.step(heads);
    const char* kr = static_cast<const char*>(k[j]);
    for (int64_t c = 0; c < groups; ++c)
      group(c, [&](auto m) {
        dot_rows_1key<decltype(m)::value, P>(q + 4 * c * qs, qs, kr + first[c], len,
                                             s + j * skey + 4 * c, k_head_bytes);
      });
  };
  // Every group alike happens with 1 or 2 rows per head (MHA, GQA 2) and an even head count
  // (else the last group differs); only those two masks get a walk of their own.
  bool uniform = true;
  for (int64_t c = 1; c < groups; ++c) uniform = uniform && mask[c] == mask[0];
  if (uniform && mask[0] == 15)
    walk(std::integral_constant<int, 15>{});
  else if (uniform && mask[0] == 5)
    walk(std::integral_constant<int, 5>{});
  else
    walk(std::integral_constant<int, 0>{});
}

// Scores of a whole tile for all `heads` KV heads of a task (bf16 pairs, rows per head a
// multiple of 4), walked two keys at a time and, within a pair, head by head (each group of 4
// q rows scored against both keys' rows of its head at once, dot_rows_2keys). A pair is key w
// of the tile's first half and key w of its second half: with the heads of a slot adjacent in
// memory ([pages, P, H, D]) K is read as two address-ordered runs, one in each half (with
// 16-key pages, one in each page), which the hardware prefetchers follow; pairs of adjacent
// keys read both runs from the same 4 KB pages, and decode took 3-5 % more time from DRAM (Zen
// 3, session 41; with this pairing the stream's K rows could even be left out at equal speed).
// Head g's rows are q + g · head_rows · qs, its K row of key j at k[j] + g · k_head_bytes; the
// scores go out transposed, row r of key j at s[r + j · skey]. `next` (the next tile's rows)
// takes `heads` rows per key, spread over the pair's groups: with rows of 2 · len bytes (len a
// multiple of 32, e.g. D = 128) a group's rows (two with 4 q heads per KV head, one with 8) are
// prefetched a line per chunk inside its dot products (dot_rows_2keys), else a step before
// each group. A line per chunk took 6-7 % less time in cache than the step's
// loop (~25 instructions a row) and equal or 1-3 % less from DRAM (Zen 3, session 41). An odd
// last key goes alone. Rows per KV head not a multiple of 4: scores_tile_groups. Out of line:
// inlined into RunSplits (as GCC 12 did once the function shrank) decode ran 2-4 % slower.
template <class P>
HWY_NOINLINE void scores_tile_pairs(const float* q, int64_t qs, int64_t head_rows, int64_t heads,
                                    Rows k, int64_t k_head_bytes, int64_t len, int64_t j0,
                                    int64_t j1, float* s, int64_t skey, NextRows& next) {
  if (head_rows % 4 != 0) {
    scores_tile_groups<P>(q, qs, head_rows, heads, k, k_head_bytes, len, j0, j1, s, skey, next);
    return;
  }
  const int64_t groups = head_rows / 4, per_key = heads * groups;  // groups of 4 rows
  // The stream's rows before each group's dot products (a task holds at most kMaxRows rows).
  int64_t share[kMaxRows / 4];
  for (int64_t c = 0; c < per_key; ++c) share[c] = even_share(2 * heads, c, per_key);
  // With 1 or 2 groups per head each group's share is 2 / groups rows (with one row, the spare
  // row stands in for the second), taken inside its dot products; with 3 or 4 (12-16 rows per
  // head) a step before each group.
  const bool inner = groups <= 2 && lanes() >= 8 && len % 32 == 0 && next.k_bytes() == 2 * len &&
                     next.v_bytes() == 2 * len && 2 * len <= NextRows::kSpareBytes;
  // Key w of the tile's first half goes with key w of its second half.
  const int64_t half = (j1 - j0) / 2;
  for (int64_t ja = j0; ja < j0 + half; ++ja) {
    const int64_t jb = ja + half;
    const char* ka = static_cast<const char*>(k[ja]);
    const char* kb = static_cast<const char*>(k[jb]);
    const float* qc = q;
    float* sa = s + ja * skey;
    float* sb = s + jb * skey;
    // Two loops rather than one with the choice inside: merged, decode took 2-3 % more time in
    // cache (session 41).
    if (inner) {
      for (int64_t g = 0; g < heads; ++g, ka += k_head_bytes, kb += k_head_bytes)
        for (int64_t i = 0; i < groups; ++i, qc += 4 * qs, sa += 4, sb += 4) {
          const char* pa = next.take();
          const char* pb = groups == 1 ? next.take() : NextRows::spare();
          dot_rows_2keys<true, 1, P>(qc, qs, ka, kb, len, sa, sb, pa, pb);
        }
      continue;
    }
    const int64_t* sh = share;
    for (int64_t g = 0; g < heads; ++g, ka += k_head_bytes, kb += k_head_bytes)
      for (int64_t i = 0; i < groups; ++i, qc += 4 * qs, sa += 4, sb += 4) {
        next.step(*sh++);
        dot_rows_2keys<false, 1, P>(qc, qs, ka, kb, len, sa, sb);
      }
  }
  const int64_t j = j0 + 2 * half;
  if (j == j1) return;
  // The odd key: each group's rows against its head's row alone.
  next.step(heads);
  const char* kr = static_cast<const char*>(k[j]);
  const float* qc = q;
  float* sc = s + j * skey;
  for (int64_t g = 0; g < heads; ++g, kr += k_head_bytes)
    for (int64_t i = 0; i < groups; ++i, qc += 4 * qs, sc += 4)
      dot_rows_1key<1, P>(qc, qs, kr, len, sc);
}

// Scores of `rows` rows against tile keys [j0, j1) (key j's row at k[j]); the next tile's rows
// are prefetched along the way, in step with the keys.
template <class T>
void scores(const float* q, int64_t qs, int64_t rows, Rows k, int64_t len, int64_t j0, int64_t j1,
            float* s, const Prefetch& pf) {
  int64_t r = 0;
  // Pairs: 12 accumulator chains (4 rows × 3 keys) cover the FMA latency on two pipes.
  constexpr int kBlock = std::is_same_v<T, Bf16Pairs> ? 3 : 2;
  for (; r + 4 <= rows; r += 4) {
    const bool fetch = r == 0;
    int64_t j = j0;
    for (; j + kBlock <= j1; j += kBlock) {
      if (fetch) pf.rows(j - j0, j - j0 + kBlock);
      dot_block<4, kBlock, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
    }
    for (; j + 2 <= j1; j += 2) {
      if (fetch) pf.rows(j - j0, j - j0 + 2);
      dot_block<4, 2, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
    }
    for (; j < j1; ++j) {
      if (fetch) pf.rows(j - j0, j - j0 + 1);
      dot_block<4, 1, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
    }
  }
  // A single row (MHA decode): more keys per pass keep FMAs busy (pairs: half, for registers).
  constexpr int kKeys = std::is_same_v<T, Bf16Pairs> ? 4 : 8;
  for (; r < rows; ++r) {
    const bool fetch = r == 0;
    int64_t j = j0;
    for (; j + kKeys <= j1; j += kKeys) {
      if (fetch) pf.rows(j - j0, j - j0 + kKeys);
      dot_block<1, kKeys, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
    }
    for (; j < j1; ++j) {
      if (fetch) pf.rows(j - j0, j - j0 + 1);
      dot_block<1, 1, T>(q + r * qs, qs, k + j, len, s + r * kTileKeys + j, kTileKeys);
    }
  }
  pf.rows(j1 - j0, kTileKeys);  // the next tile may hold more keys than this one
}

// O[i] += Σ_j p[i][j] · v_j over keys j0, j0 + step, ... below j1 for R rows, W vectors of O
// at a time (W pairs of vectors for Bf16Pairs, O de-interleaved); each element sees the same
// MulAdd sequence whichever R and W are used. The key loop is unrolled by two: less loop
// overhead per key, 2-3 % less time from DRAM (session 40).
template <int R, int W, class T, int64_t PROW>
HWY_INLINE void pv_block(const float* p, int64_t pkey, Rows v, int64_t j0, int64_t j1, float* o,
                         int64_t os, int64_t x, int64_t step = 1) {
  const DF df;
  const int64_t N = lanes();
  constexpr int kV = kPairTag<T> ? 2 * W : W;  // vectors of O per row
  VF acc[R][kV];
  for (int i = 0; i < R; ++i)
    for (int w = 0; w < kV; ++w) acc[i][w] = hn::LoadU(df, o + i * os + x + w * N);
#pragma GCC unroll 2
  for (int64_t j = j0; j < j1; j += step) {
    VF vv[kV];
    for (int w = 0; w < W; ++w) {
      if constexpr (kPairTag<T>) {
        load_two<T>(v[j], x + 2 * w * N, vv[2 * w], vv[2 * w + 1]);
      } else {
        vv[w] = load_f32v(static_cast<const T*>(v[j]) + x + w * N);
      }
    }
    for (int w = 0; w < kV; ++w) in_register(vv[w]);
    for (int i = 0; i < R; ++i) {
      const VF pb = hn::Set(df, p[i * PROW + j * pkey]);
      for (int w = 0; w < kV; ++w) acc[i][w] = hn::MulAdd(pb, vv[w], acc[i][w]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int w = 0; w < kV; ++w) hn::StoreU(acc[i][w], df, o + i * os + x + w * N);
}

// pv_block<4, 1, Bf16Pairs, 1> over exactly 8 keys (j0, j0 + step, ..., j0 + 7 · step), unrolled:
// the 8 V row pointers stay in registers and the block's weights (4 rows of each key, adjacent
// in the transposed P) are staged in one array first, so a key costs its 4 weight broadcasts, its
// V load and widening and its 8 FMAs, without pv_block's row-pointer load, weight-pointer step
// and loop test (20 -> 15 instructions a key and column chunk). The same MulAdd sequence per
// element as pv_block, so the same bits.
template <class P>
HWY_INLINE void pv_rows4_keys8(const float* p, int64_t pkey, Rows v, int64_t j0, int64_t step,
                               float* o, int64_t os, int64_t len) {
  const DF df;
  const int64_t N = lanes();
  alignas(64) float w[8][4];
  const void* vk[8];
  for (int k = 0; k < 8; ++k) {
    std::memcpy(w[k], p + (j0 + k * step) * pkey, sizeof(w[k]));
    vk[k] = v[j0 + k * step];
  }
  for (int64_t x = 0; x < len; x += 2 * N) {
    // Broadcast in the loop: hoisted (GCC keeps the 32 broadcast vectors on the stack, as FMA
    // memory operands) it is 9 vector loads per key and chunk instead of 5.
    const float* wp = &w[0][0];
    asm("" : "+r"(wp));
    VF acc[4][2];
    for (int i = 0; i < 4; ++i) {
      acc[i][0] = hn::LoadU(df, o + i * os + x);
      acc[i][1] = hn::LoadU(df, o + i * os + x + N);
    }
    for (int k = 0; k < 8; ++k) {
      VF ve, vo;
      load_two<P>(vk[k], x, ve, vo);
      for (int i = 0; i < 4; ++i) {
        const VF pb = hn::Set(df, wp[4 * k + i]);
        acc[i][0] = hn::MulAdd(pb, ve, acc[i][0]);
        acc[i][1] = hn::MulAdd(pb, vo, acc[i][1]);
      }
    }
    for (int i = 0; i < 4; ++i) {
      hn::StoreU(acc[i][0], df, o + i * os + x);
      hn::StoreU(acc[i][1], df, o + i * os + x + N);
    }
  }
}

// P·V of R (1..4) rows of one KV head over a block of keys j0, j0 + step, ... below j1 (at most
// 8), all `len` columns: 4 rows of a full block of 8 unrolled (pv_rows4_keys8), else pv_block,
// W column pairs at a time for 8 accumulator chains where the rows are fewer than 4 (1 row
// unrolled as pv_rows4_keys8 is took 3-4 % more time in cache in MHA decode; 2 or 3 equal).
template <int R, class P>
HWY_INLINE void pv_rows(const float* p, int64_t pkey, Rows v, int64_t j0, int64_t j1, int64_t step,
                        float* o, int64_t os, int64_t len) {
  if (R == 4 && j0 + 7 * step < j1) {
    pv_rows4_keys8<P>(p, pkey, v, j0, step, o, os, len);
    return;
  }
  constexpr int W = R == 1 ? 4 : R == 2 ? 2 : 1;
  const int64_t N = lanes();
  int64_t x = 0;
  for (; x + 2 * N * W <= len; x += 2 * N * W)
    pv_block<R, W, P, 1>(p, pkey, v, j0, j1, o, os, x, step);
  for (; x < len; x += 2 * N) pv_block<R, 1, P, 1>(p, pkey, v, j0, j1, o, os, x, step);
}

// Weights of row i, key j at p[i · PROW + j · pkey]: PROW = kTileKeys and pkey = 1 for row-major
// scores, PROW = 1 for their transpose. The row stride is a template argument so the weights'
// addresses in P·V's inner loop are a base plus constants: as a run-time argument GCC 12 kept
// the row offsets on the stack, four more loads per key (it had specialised them before by
// chance, as a constprop clone).
template <class T, int64_t PROW>
void accumulate(const float* p, int64_t pkey, int64_t rows, Rows v, int64_t j0, int64_t j1,
                float* o, int64_t os, int64_t len) {
  const int64_t N = lanes();
  int64_t r = 0;
  if constexpr (std::is_same_v<T, Bf16Pairs>) {  // len is a multiple of 2N
    // With 32 registers, 12 rows (24 accumulator chains) share each widened V vector pair.
    if constexpr (kWideRegs)
      for (; r + 12 <= rows; r += 12)
        for (int64_t x = 0; x < len; x += 2 * N)
          pv_block<12, 1, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
    for (; r + 6 <= rows; r += 6)  // 12 accumulator chains
      for (int64_t x = 0; x < len; x += 2 * N)
        pv_block<6, 1, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
    for (; r + 4 <= rows; r += 4)
      for (int64_t x = 0; x < len; x += 2 * N)
        pv_block<4, 1, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
    for (; r < rows; ++r) {
      int64_t x = 0;
      for (; x + 4 * N <= len; x += 4 * N)
        pv_block<1, 2, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
      for (; x < len; x += 2 * N)
        pv_block<1, 1, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
    }
    return;
  }
  for (; r + 6 <= rows; r += 6) {  // 6 rows × 2 vectors: 12 accumulator chains
    int64_t x = 0;
    for (; x + 2 * N <= len; x += 2 * N)
      pv_block<6, 2, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
    for (; x < len; x += N)
      pv_block<6, 1, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
  }
  for (; r + 4 <= rows; r += 4) {
    int64_t x = 0;
    for (; x + 2 * N <= len; x += 2 * N)
      pv_block<4, 2, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
    for (; x < len; x += N)
      pv_block<4, 1, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
  }
  for (; r < rows; ++r) {
    int64_t x = 0;
    for (; x + 4 * N <= len; x += 4 * N)
      pv_block<1, 4, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
    for (; x < len; x += N)
      pv_block<1, 1, T, PROW>(p + r * PROW, pkey, v, j0, j1, o + r * os, os, x);
  }
}

// P·V of a whole tile for all `heads` KV heads (bf16 pairs; a head's rows 4 at a time, then the
// 1-3 left, pv_rows; weights transposed: row r, key j at p[r + j · ra]), walked in S = ceil(n / 8)
// blocks of at most 8 keys (n keys in the tile) and, within a block, head by head. Block w holds
// keys j0 + w, j0 + w + S, j0 + w + 2S, ...: with the heads of a slot adjacent in memory ([pages,
// P, H, D]) V is read as 8 address-ordered runs side by side, run k through slots j0 + kS .. j0 +
// kS + S - 1 (8 KB for a full tile of 2 KB slots), each 4 KB page by one run, which the hardware
// prefetchers follow. Blocks of 8 adjacent keys read each 4 KB page as two interleaved runs
// (its two slots, a line column at a time), and decode took 3-7 % more time from DRAM on a Zen 3
// host (same compute: equal in cache; session 42), as the scores did with pairs of adjacent
// keys (scores_tile_pairs). Within a block each of its lines serves both of its column chunks
// while it sits in L1, and O (all the task's rows, stride os) goes through L1 once per block;
// blocks of 8: half as often as with 4 (2-6 % less time in cache, session 39; blocks of 16 were
// 5-8 % slower from DRAM: a block's V across the heads, 32 KB, is all of L1). Each element's
// MulAdd sequence depends only on n (keys in the order of the blocks). Head by head over the
// whole tile instead, a head's 32 V rows, 2 KB apart, fall in two L1 sets per line column and
// decode ran 0-5 % slower from DRAM (session 37). `next` takes an even share of its remaining
// slots before each (block, head).
template <class P>
void pv_tile_pairs(const float* p, int64_t ra, int64_t head_rows, int64_t heads, Rows v,
                   int64_t v_head_bytes, int64_t j0, int64_t j1, float* o, int64_t os, int64_t len,
                   NextRows& next) {
  constexpr int64_t kKeyBlock = 8;
  const int64_t S = (j1 - j0 + kKeyBlock - 1) / kKeyBlock;  // blocks, and the key step in one
  const int64_t per = (next.slots() - next.at + S * heads - 1) / (S * heads);
  for (int64_t w = 0; w < S; ++w)
    for (int64_t g = 0; g < heads; ++g) {
      next.step(per);
      const Rows vg{v.p, v.off + g * v_head_bytes};
      if (head_rows == 1) {  // MHA: no per-row dispatch (through it, 1-2 % more time in cache)
        pv_rows<1, P>(p + g, ra, vg, j0 + w, j1, S, o + g * os, os, len);
        continue;
      }
      const int64_t end = (g + 1) * head_rows;
      for (int64_t r = g * head_rows; r < end; r += 4) {
        const float* pr = p + r;
        float* orow = o + r * os;
        switch (std::min<int64_t>(4, end - r)) {
          case 1:
            pv_rows<1, P>(pr, ra, vg, j0 + w, j1, S, orow, os, len);
            break;
          case 2:
            pv_rows<2, P>(pr, ra, vg, j0 + w, j1, S, orow, os, len);
            break;
          case 3:
            pv_rows<3, P>(pr, ra, vg, j0 + w, j1, S, orow, os, len);
            break;
          default:
            pv_rows<4, P>(pr, ra, vg, j0 + w, j1, S, orow, os, len);
            break;
        }
      }
    }
}

// Online softmax of one row over tile keys [a, e] (tile-local, inclusive, non-empty): turns the
// row's scores into weights p (zero outside [a, e]) and rescales its running m, l, O. kFull: the
// whole tile is visible (most tiles), so no key mask is built.
template <bool kFull>
HWY_INLINE void softmax_row_t(float* s, int64_t a, int64_t e, float softcap, float& m, float& l,
                              float* o, int64_t dv) {
  const DF df;
  const int64_t N = lanes();
  const VF lo = hn::Set(df, static_cast<float>(a)), hi = hn::Set(df, static_cast<float>(e));
  const VF neg_inf = hn::Set(df, kNegInf), cap = hn::Set(df, softcap);
  VF mx = neg_inf;
  for (int64_t x = 0; x < kTileKeys; x += N) {
    VF v = hn::LoadU(df, s + x);
    if (softcap > 0) v = hn::Mul(cap, tanh_f32(v));  // q was pre-divided by softcap
    if constexpr (!kFull) {
      const VF j = hn::Iota(df, static_cast<float>(x));
      v = hn::IfThenElse(hn::And(hn::Ge(j, lo), hn::Le(j, hi)), v, neg_inf);
    }
    hn::StoreU(v, df, s + x);
    mx = hn::Max(mx, v);
  }
  const float m_new = std::max(m, hn::GetLane(hn::MaxOfLanes(df, mx)));
  const float alpha = m == kNegInf ? 0.0f : std::exp(m - m_new);
  const VF mv = hn::Set(df, m_new);
  VF sum = hn::Zero(df);
  for (int64_t x = 0; x < kTileKeys; x += N) {
    VF p = exp_nonpos(hn::Sub(hn::LoadU(df, s + x), mv));
    if constexpr (!kFull) {
      const VF j = hn::Iota(df, static_cast<float>(x));
      p = hn::IfThenElseZero(hn::And(hn::Ge(j, lo), hn::Le(j, hi)), p);
    }
    hn::StoreU(p, df, s + x);
    sum = hn::Add(sum, p);
  }
  l = l * alpha + hn::GetLane(hn::SumOfLanes(df, sum));
  m = m_new;
  if (alpha != 1.0f) scale_row(o, dv, alpha);
}

inline void softmax_row(float* s, int64_t a, int64_t e, float softcap, float& m, float& l, float* o,
                        int64_t dv) {
  if (a == 0 && e == kTileKeys - 1)
    softmax_row_t<true>(s, a, e, softcap, m, l, o, dv);
  else
    softmax_row_t<false>(s, a, e, softcap, m, l, o, dv);
}

// scores_tile_pairs and pv_tile_pairs for bf16 pairs (tile_bf16.cc) and fp16 halves
// (tile_f16.cc), each instantiated in a translation unit of its own, per target, so that a build
// compiles them beside attention_kernel.cc (under ASan the three in one file took 2.8x its time).
void scores_tile_bf16(const float* q, int64_t qs, int64_t head_rows, int64_t heads, Rows k,
                      int64_t k_head_bytes, int64_t len, int64_t j0, int64_t j1, float* s,
                      int64_t skey, NextRows& next);
void scores_tile_f16(const float* q, int64_t qs, int64_t head_rows, int64_t heads, Rows k,
                     int64_t k_head_bytes, int64_t len, int64_t j0, int64_t j1, float* s,
                     int64_t skey, NextRows& next);
void pv_tile_bf16(const float* p, int64_t ra, int64_t head_rows, int64_t heads, Rows v,
                  int64_t v_head_bytes, int64_t j0, int64_t j1, float* o, int64_t os, int64_t len,
                  NextRows& next);
void pv_tile_f16(const float* p, int64_t ra, int64_t head_rows, int64_t heads, Rows v,
                 int64_t v_head_bytes, int64_t j0, int64_t j1, float* o, int64_t os, int64_t len,
                 NextRows& next);

}  // namespace flashback::cpu_fast::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHBACK_CPU_FAST_DECODE_INL_H_ toggle

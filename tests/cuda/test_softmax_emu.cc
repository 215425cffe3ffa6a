// The long-query kernels' online softmax (src/cuda/common/softmax.cuh), eager and lazy, run on
// the CPU under prefill_emu's warp emulation (one warp of 32 host threads, the S fragment layout
// of m16n8k16) over many tiles, with O's rescale done as the Hopper kernel does it (skipped on a
// warp vote when every alpha is 1) and one V column, against double precision. The lazy form
// keeps a warp's running maxima while no row's grows by more than kLazyRescaleLog2: the data
// below has jumps above that after many kept tiles, jumps just under it, a slow drift that
// crosses it, rows that see no key for the first tiles, and a row that sees none at all.
#include <cuda_runtime.h>  // prefill_emu's stand-in (include path), before the kernel headers
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/common/log2.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/common/sw128.h"
#include "cuda/prefill/warp_s.cuh"

namespace flashback::cuda::prefill {
namespace {

constexpr int N = 64, TILES = 12, ROWS = 16, KEYS = N * TILES;

struct Data {
  std::vector<float> s;         // [ROWS][KEYS] raw q.k
  std::vector<float> v;         // [KEYS] one V column
  std::vector<KeyRange> range;  // [ROWS]
  float mul = 0.5f;             // raw q.k -> base-2 logit
};

struct Result {
  std::vector<double> o, lse;  // [ROWS]; lse in base 2, -inf for a row that saw no key
  float p_max = 0.f;           // the largest probability any tile produced
};

Data make_data(uint64_t seed, bool staggered) {
  Data d;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 4.f);
  d.s.resize(ROWS * KEYS);
  d.v.resize(KEYS);
  for (auto& x : d.s) x = nd(rng);
  for (auto& x : d.v) x = nd(rng);
  auto at = [&](int r, int k) -> float& { return d.s[r * KEYS + k]; };
  at(3, 6 * N + 10) += 50.f;  // +25 in base 2 after six kept tiles: the warp must rescale
  at(5, 9 * N + 33) += 20.f;  // +10: just over the threshold
  at(9, 4 * N + 7) += 14.f;   // +7: kept, probabilities up to ~2^7 and more
  for (int k = 0; k < KEYS; ++k) at(12, k) += 0.05f * static_cast<float>(k);  // drifts past it
  d.range.assign(ROWS, KeyRange{0, KEYS - 1});
  d.range[2] = {0, 300};
  d.range[14] = {100, KEYS - 1};
  if (staggered) {
    d.range[1] = {3 * N + 5, 7 * N};  // sees no key in tiles 0-2
    d.range[0] = {1, 0};              // sees none at all: the warp never keeps then
  }
  return d;
}

Result reference(const Data& d, bool mask) {
  Result r;
  for (int row = 0; row < ROWS; ++row) {
    const KeyRange rr = mask ? d.range[row] : KeyRange{0, KEYS - 1};
    double m = -INFINITY;
    for (int k = rr.lo; k <= rr.hi; ++k) m = std::max(m, double{d.s[row * KEYS + k]} * d.mul);
    double l = 0, o = 0;
    for (int k = rr.lo; k <= rr.hi; ++k) {
      const double p = std::exp2(double{d.s[row * KEYS + k]} * d.mul - m);
      l += p;
      o += p * d.v[k];
    }
    r.lse.push_back(l > 0 ? m + std::log2(l) : -INFINITY);
    r.o.push_back(l > 0 ? o / l : 0.);
  }
  return r;
}

// STALE: as the Hopper prefill kernel with Q in registers, a tile after the first that lies inside
// every row's range goes through softmax_probs_stale first, and where that fails the scores are
// loaded again (the kernel recomputes them) for softmax_probs; `stale` counts both outcomes.
struct StaleCount {
  std::atomic<int> kept{0}, redone{0};
};

template <bool MASK, bool LAZY, bool MASK_LO = true, bool STALE = false>
Result run(const Data& d, StaleCount* stale = nullptr) {
  Result r;
  r.o.assign(ROWS, 0.);
  r.lse.assign(ROWS, 0.);
  std::vector<float> p_max(32, 0.f);
  LogitMap lm;
  lm.mul = d.mul;
  lm.in = lm.out = 0.f;
  emu::launch({1, 1, 1}, 32, [&] {
    const int lane = threadIdx.x & 31;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f}, o_part[2] = {0.f, 0.f};
    const KeyRange rr[2] = {d.range[lane / 4], d.range[lane / 4 + 8]};
    for (int t = 0; t < TILES; ++t) {
      float s[1][N / 8][4];
      const auto load = [&] {
        for (int u = 0; u < N / 8; ++u)
          for (int x = 0; x < 4; ++x) {
            const int row = lane / 4 + 8 * (x >> 1);
            const int key = t * N + u * 8 + 2 * (lane & 3) + (x & 1);
            s[0][u][x] = d.s[row * KEYS + key];
          }
      };
      load();
      float alpha[2];
      bool whole = true;  // every row of the warp sees every key of the tile
      for (int row = 0; row < ROWS; ++row)
        whole = whole && (!MASK || (d.range[row].lo <= t * N && d.range[row].hi >= t * N + N - 1));
      bool done = false;
      if constexpr (STALE) {
        if (t > 0 && whole) {
          alpha[0] = alpha[1] = 1.f;
          done = softmax_probs_stale<1, N>(s, m_run, l_run, lm.mul);
          if (lane == 0) ++(done ? stale->kept : stale->redone);
          if (!done) load();
        }
      }
      if (!done)
        softmax_probs<1, N, MASK, false, LAZY, MASK_LO>(s, m_run, l_run, alpha, rr, t * N, lane,
                                                        lm);
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
        o_part[0] *= alpha[0];
        o_part[1] *= alpha[1];
      }
      for (int u = 0; u < N / 8; ++u)
        for (int x = 0; x < 4; ++x) {
          const int key = t * N + u * 8 + 2 * (lane & 3) + (x & 1);
          o_part[x >> 1] += s[0][u][x] * d.v[key];
          p_max[lane] = std::max(p_max[lane], s[0][u][x]);
        }
    }
    for (int i = 0; i < 2; ++i) {
      float l = l_run[i], o = o_part[i];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      o += __shfl_xor_sync(0xffffffffu, o, 1);
      o += __shfl_xor_sync(0xffffffffu, o, 2);
      if ((lane & 3) == 0) {
        const int row = lane / 4 + 8 * i;
        r.lse[row] = l > 0.f ? double{m_run[i]} + std::log2(double{l}) : -INFINITY;
        r.o[row] = l > 0.f ? double{o} / l : 0.;
      }
    }
  });
  r.p_max = *std::max_element(p_max.begin(), p_max.end());
  return r;
}

void expect_close(const Result& got, const Result& ref, const char* what) {
  for (int row = 0; row < ROWS; ++row) {
    if (std::isinf(ref.lse[row])) {
      EXPECT_TRUE(std::isinf(got.lse[row]) && got.lse[row] < 0) << what << " row " << row;
      EXPECT_EQ(got.o[row], 0.) << what << " row " << row;
      continue;
    }
    EXPECT_NEAR(got.lse[row], ref.lse[row], 1e-4) << what << " row " << row;
    EXPECT_NEAR(got.o[row], ref.o[row], 1e-4 * (1. + std::abs(ref.o[row])))
        << what << " row " << row;
  }
}

TEST(SoftmaxEmu, LazyAndEagerMatchDoublePrecision) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Data d = make_data(seed, false);
    const Result ref_all = reference(d, false), ref_mask = reference(d, true);
    const Result eager = run<false, false>(d), lazy = run<false, true>(d);
    expect_close(eager, ref_all, "eager");
    expect_close(lazy, ref_all, "lazy");
    const Result eager_m = run<true, false>(d), lazy_m = run<true, true>(d);
    expect_close(eager_m, ref_mask, "eager, masked");
    expect_close(lazy_m, ref_mask, "lazy, masked");
    EXPECT_LE(eager.p_max, 1.f + 1e-6f);
    // Kept maxima let probabilities grow, never past 2^kLazyRescaleLog2 (up to rounding), and
    // this data does make them grow (so the kept path ran).
    EXPECT_LE(lazy.p_max, std::exp2(kLazyRescaleLog2) * (1.f + 1e-5f));
    EXPECT_GT(lazy.p_max, 2.f);

    const Data st = make_data(seed, true);
    expect_close(run<true, true>(st), reference(st, true), "lazy, staggered ranges");
    expect_close(run<true, false>(st), reference(st, true), "eager, staggered ranges");
  }
}

// The stale form (softmax_probs_stale, no row max) on the lazy path's data: it keeps most tiles,
// and the jumps above the bound, rows whose sums pass 2^kLazyRescaleLog2 and rows that have seen
// no key yet (ranges starting at tile 2, so m_run is -inf at the first tile it may take) fall back
// to softmax_probs on the same scores; the results against double precision.
TEST(SoftmaxEmu, StaleMaxMatchesDoublePrecision) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Data d = make_data(seed, false);
    StaleCount c;
    const Result st = run<false, true, true, true>(d, &c);
    expect_close(st, reference(d, false), "stale");
    EXPECT_LE(st.p_max, std::exp2(kLazyRescaleLog2) * (1.f + 1e-5f));
    EXPECT_GT(c.kept.load(), TILES / 2);
    EXPECT_GT(c.redone.load(), 0);

    Data late = make_data(seed, false);
    for (int row = 0; row < ROWS; row += 3) late.range[row] = {2 * N, KEYS - 1};
    for (int row = 1; row < ROWS; row += 3) late.range[row] = {0, KEYS - 1};
    for (int row = 2; row < ROWS; row += 3) late.range[row] = {N / 2, KEYS - 1};
    StaleCount cl;
    expect_close(run<true, true, true, true>(late, &cl), reference(late, true),
                 "stale, rows that see their first key at tile 2");
    EXPECT_GT(cl.kept.load(), 0);
    EXPECT_GT(cl.redone.load(), 0);
  }
}

// warp_s_sw128, the stale softmax's fallback in the Hopper prefill kernel: one warp's S of 16
// rows against a tile of 128 keys stored 128-byte-swizzled (as TMA and the producer's copies
// lay K out), with Q as m16n8k16 A fragments, against the product in double precision.
TEST(WarpSEmu, SwizzledTileMatchesProduct) {
  constexpr int D = 128, NK = 128;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> q(16 * D), k(NK * D);
  for (auto& x : q) x = from_float<bf16>(nd(rng)).x;
  for (auto& x : k) x = from_float<bf16>(nd(rng)).x;
  std::vector<unsigned char> tile(NK * D * 2);  // [D / 64][NK][128 B], chunks swizzled by row
  for (int key = 0; key < NK; ++key)
    for (int c = 0; c < D / 8; ++c)
      std::memcpy(&tile[sw128_offset(key, c, NK)], &k[key * D + c * 8], 16);
  std::vector<float> got(16 * NK, NAN);
  emu::launch({1, 1, 1}, 32, [&] {
    const int lane = threadIdx.x & 31, g = lane / 4, tq = lane % 4;
    uint32_t qf[D / 16][4];
    const auto pair = [&](int row, int col) {
      return uint32_t{q[row * D + col]} | (uint32_t{q[row * D + col + 1]} << 16);
    };
    for (int ks = 0; ks < D / 16; ++ks) {
      qf[ks][0] = pair(g, 16 * ks + 2 * tq);
      qf[ks][1] = pair(g + 8, 16 * ks + 2 * tq);
      qf[ks][2] = pair(g, 16 * ks + 8 + 2 * tq);
      qf[ks][3] = pair(g + 8, 16 * ks + 8 + 2 * tq);
    }
    float s[1][NK / 8][4];
    warp_s_sw128<bf16, D, NK>(s, qf, tile.data(), lane);
    for (int u = 0; u < NK / 8; ++u)
      for (int x = 0; x < 4; ++x)
        got[(g + 8 * (x >> 1)) * NK + u * 8 + 2 * tq + (x & 1)] = s[0][u][x];
  });
  for (int row = 0; row < 16; ++row)
    for (int key = 0; key < NK; ++key) {
      double ref = 0;
      for (int x = 0; x < D; ++x)
        ref += double{to_float(bf16{q[row * D + x]})} * to_float(bf16{k[key * D + x]});
      EXPECT_NEAR(got[row * NK + key], ref, 1e-3 * (1 + std::abs(ref)))
          << "row " << row << " key " << key;
    }
}

// The ends-only mask (MASK_LO = false: every range starts at or before each tile, as on a causal
// diagonal without a window) against the same reference: ranges ending in the first tile, on a
// tile's last key, one key past a tile, at the end; a row that sees no key at all (hi < 0).
TEST(SoftmaxEmu, EndsOnlyMaskMatchesDoublePrecision) {
  for (uint64_t seed : {4u, 5u}) {
    Data d = make_data(seed, false);
    for (int row = 0; row < ROWS; ++row) d.range[row] = {0, 37 * row + 3 * N + 11};
    d.range[0] = {0, 5};
    d.range[4] = {0, 4 * N - 1};
    d.range[6] = {0, 5 * N};
    d.range[11] = {0, KEYS - 1};
    d.range[13] = {0, -1};
    const Result ref = reference(d, true);
    expect_close(run<true, true, false>(d), ref, "lazy, ends only");
    expect_close(run<true, false, false>(d), ref, "eager, ends only");
  }
}

}  // namespace
}  // namespace flashback::cuda::prefill

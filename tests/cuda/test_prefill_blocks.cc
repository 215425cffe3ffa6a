// The Hopper prefill kernel's block dealing (src/cuda/prefill/blocks.h): every query block of an
// entry goes to exactly one CTA, whatever the grid (half the blocks, all of them, or fewer from
// a short max_seqlen_q hint), a halved grid balances causal work, and the persistent schedule
// covers every (entry, head, block) of ragged batches exactly once with balanced causal work.
// Plain C++ (label cpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cuda/prefill/blocks.h"

namespace flashback::cuda::prefill {
namespace {

TEST(PrefillBlocks, EveryBlockExactlyOnce) {
  for (int nblocks = 0; nblocks <= 40; ++nblocks)
    for (int ctas = 1; ctas <= 45; ++ctas) {
      std::vector<int> seen(static_cast<size_t>(nblocks), 0);
      for (int x = 0; x < ctas; ++x) {
        int k = 0;
        for (int b; (b = snake_block(k, nblocks, ctas, x)) >= 0; ++k) {
          ASSERT_LT(b, nblocks);
          ++seen[static_cast<size_t>(b)];
        }
        // Once a CTA runs out it stays out (the kernel's loop stops at the first -1).
        for (int later = k; later < k + 4; ++later)
          EXPECT_EQ(snake_block(later, nblocks, ctas, x), -1) << nblocks << " " << ctas << " " << x;
      }
      for (int b = 0; b < nblocks; ++b)
        EXPECT_EQ(seen[static_cast<size_t>(b)], 1)
            << "block " << b << " of " << nblocks << ", ctas " << ctas;
    }
}

TEST(PrefillBlocks, HalfGridBalancesCausalWork) {
  // Block b of a causal self-attention entry costs b + 1 key tiles; with ctas = ceil(n / 2)
  // every CTA gets the same work: n + 1 tiles for even n, n for odd n (CTA 0 then takes the
  // longest block alone).
  for (int nblocks = 2; nblocks <= 64; ++nblocks) {
    const int ctas = (nblocks + 1) / 2;
    for (int x = 0; x < ctas; ++x) {
      int work = 0;
      for (int k = 0, b; (b = snake_block(k, nblocks, ctas, x)) >= 0; ++k) work += b + 1;
      EXPECT_EQ(work, nblocks + (nblocks % 2 == 0 ? 1 : 0)) << nblocks << " blocks, CTA " << x;
    }
  }
  // The first block of every CTA is the longest it will see (the grid starts long work first).
  EXPECT_EQ(snake_block(0, 10, 5, 0), 9);
  EXPECT_EQ(snake_block(1, 10, 5, 0), 0);
}

// Every CTA's blocks by BlockCursor: (entry, head, block) -> times taken, and per-CTA causal work
// (block i of an entry costs i + 1 tiles).
struct Dealt {
  std::vector<int> seen;   // [entry][head][block]
  std::vector<long> work;  // per CTA
};
Dealt deal(const std::vector<int>& nblocks, int heads, int R, int ctas, bool persistent,
           int band = 1) {
  const int batch = static_cast<int>(nblocks.size());
  int maxb = 0;
  for (int n : nblocks) maxb = std::max(maxb, n);
  Dealt d;
  d.seen.assign(static_cast<size_t>(batch * heads * maxb), 0);
  auto count = [&](BlockCursor c, size_t cta) {
    int calls = 0, last_b = -1, last_h = -1;
    bool bad = false;
    auto nblocks_of = [&](int b, int h) {
      ++calls;
      if (b < 0 || b >= batch || h < 0 || h >= heads) {
        bad = true;
        return 0;
      }
      last_b = b;  // the device's producer runs each block on the entry it loaded last
      last_h = h;
      return nblocks[static_cast<size_t>(b)];
    };
    for (int blk; !bad && (blk = c.next(nblocks_of)) >= 0;) {
      if (c.b != last_b || c.h != last_h || blk >= nblocks[static_cast<size_t>(c.b)]) {
        ADD_FAILURE() << "block " << blk << " of (" << c.b << ", " << c.h
                      << ") after loading entry (" << last_b << ", " << last_h << ")";
        return;
      }
      ++d.seen[static_cast<size_t>((c.b * heads + c.h) * maxb + blk)];
      d.work[cta] += blk + 1;
    }
    if (bad) {
      ADD_FAILURE() << "nblocks_of called outside the batch";
      return;
    }
    // Once out, a cursor stays out without loading another entry.
    const int before = calls;
    EXPECT_EQ(c.next([&](int, int) { return ++calls, 1; }), -1);
    EXPECT_EQ(calls, before);
  };
  if (persistent) {
    d.work.assign(static_cast<size_t>(ctas), 0);
    for (int x = 0; x < ctas; ++x) {
      BlockCursor c{.persistent = true,
                    .ctas = ctas,
                    .x = x,
                    .R = R,
                    .batch = batch,
                    .heads = heads,
                    .band = band};
      count(c, static_cast<size_t>(x));
    }
  } else {
    d.work.assign(static_cast<size_t>(ctas * heads * batch), 0);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int x = 0; x < ctas; ++x)
          count(BlockCursor{.ctas = ctas, .x = x, .b = b, .h = h},
                static_cast<size_t>((b * heads + h) * ctas + x));
  }
  return d;
}

TEST(PrefillBlocks, CursorTakesEveryBlockOnce) {
  // Ragged entries (empty, one block, shorter and longer than the R the host assumed).
  const std::vector<std::vector<int>> batches = {
      {1}, {3}, {0, 5, 1}, {7, 7, 7, 7}, {2, 0, 0, 9, 4}, {16, 1, 3, 16, 16, 15}};
  for (const auto& nb : batches)
    for (int heads : {1, 3, 4})
      for (int R : {1, 2, 5, 16}) {
        for (int ctas : {1, 2, 3, 7, 13, 64, 200})
          for (int band : {1, 2, 3, 6, 16}) {
            const Dealt d = deal(nb, heads, R, ctas, true, band);
            int maxb = 0;
            for (int n : nb) maxb = std::max(maxb, n);
            for (size_t b = 0; b < nb.size(); ++b)
              for (int h = 0; h < heads; ++h)
                for (int i = 0; i < maxb; ++i)
                  EXPECT_EQ(d.seen[(b * static_cast<size_t>(heads) + h) * maxb + i],
                            i < nb[b] ? 1 : 0)
                      << "persistent, entry " << b << " head " << h << " block " << i << ", R " << R
                      << ", ctas " << ctas << ", band " << band;
          }
        for (int ctas : {1, 2, 3, 8}) {
          const Dealt d = deal(nb, heads, R, ctas, false);
          int maxb = 0;
          for (int n : nb) maxb = std::max(maxb, n);
          for (int v : d.seen) EXPECT_LE(v, 1);
          long total = 0;
          for (int v : d.seen) total += v;
          long want = 0;
          for (int n : nb) want += static_cast<long>(n) * heads;
          EXPECT_EQ(total, want) << "grid, ctas " << ctas;
        }
      }
}

TEST(PrefillBlocks, PersistentBalancesUniformCausalWork) {
  // prefill_8x2k's shape: 8 entries of 16 blocks, 32 heads, on 132 CTAs. Ideal: 34816 tiles /
  // 132 = 263.8 per CTA; the snake over bands of 6 ranks, longest first, stays within a block
  // of it (256..272, as the grid of two-block CTAs; an LPT deal would reach 264).
  const Dealt d = deal(std::vector<int>(8, 16), 32, 16, 132, true, 6);
  long lo = d.work[0], hi = d.work[0], total = 0;
  for (long w : d.work) lo = std::min(lo, w), hi = std::max(hi, w), total += w;
  EXPECT_EQ(total, 8L * 32 * 16 * 17 / 2);
  EXPECT_LE(hi - lo, 16) << "per-CTA tiles " << lo << ".." << hi;
  // prefill_1x16k's: 1 entry of 128 blocks, 32 heads.
  const Dealt e = deal(std::vector<int>(1, 128), 32, 128, 132, true, 6);
  lo = e.work[0], hi = e.work[0];
  for (long w : e.work) lo = std::min(lo, w), hi = std::max(hi, w);
  EXPECT_LE(hi - lo, 128) << "per-CTA tiles " << lo << ".." << hi;
}

}  // namespace
}  // namespace flashback::cuda::prefill

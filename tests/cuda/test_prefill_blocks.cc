// The Hopper prefill kernel's block dealing (src/cuda/prefill/blocks.h): every query block of an
// entry goes to exactly one CTA, whatever the grid (half the blocks, all of them, or fewer from
// a short max_seqlen_q hint), and a halved grid balances causal work. Plain C++ (label cpu).
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

}  // namespace
}  // namespace flashback::cuda::prefill

// Split-KV planning (src/cuda/plan/split_plan.h), the host-only rules that size the short-query
// grid. Plain C++ (label cpu).
#include <gtest/gtest.h>

#include "cuda/plan/split_plan.h"

namespace flashback::cuda {
namespace {

double busy(int64_t ctas, int64_t sms, int64_t k) {
  const int64_t waves = (ctas * k + sms - 1) / sms;
  return static_cast<double>(ctas * k) / static_cast<double>(waves * sms);
}

TEST(SplitPlan, OneWaveKeepsSmsBusyWithFewSplits) {
  // 64 requests x 2 row blocks of 128 MLA heads on 132 SMs: one wave is 97 % busy already.
  EXPECT_EQ(one_wave_splits(128, 132, 8), 1);
  // Half the SMs busy with one split: two fill 97 %.
  EXPECT_EQ(one_wave_splits(64, 132, 8), 2);
  // One long request, two row blocks: 60 splits fill 120 of 132 SMs (91 %).
  EXPECT_EQ(one_wave_splits(2, 132, 256), 60);
  // Capped: the best there is.
  EXPECT_EQ(one_wave_splits(2, 132, 4), 4);
  for (int64_t ctas = 1; ctas <= 300; ++ctas)
    for (int64_t cap : {1, 3, 16, 256}) {
      const int64_t k = one_wave_splits(ctas, 132, cap);
      ASSERT_GE(k, 1);
      ASSERT_LE(k, cap);
      double best = 0;
      for (int64_t j = 1; j <= cap; ++j) best = std::max(best, busy(ctas, 132, j));
      // At least 90 % busy (or the best available), and no smaller count is.
      EXPECT_GE(busy(ctas, 132, k), std::min(0.9, best) - 1e-9) << ctas << " " << cap;
      for (int64_t j = 1; j < k; ++j)
        EXPECT_LT(busy(ctas, 132, j), std::min(0.9, best) - 1e-9) << ctas << " " << cap << " " << j;
    }
}

TEST(SplitPlan, LongestFirstOnlyWhenTheGridIsDeeperThanItsSlots) {
  // decode_b128_ragged: 128 entries x 8 KV heads, one split each, 132 SMs x 2 CTAs.
  EXPECT_TRUE(order_longest_first(128, 1024, 264));
  // One wave (decode_b8_L32k: 64 CTAs x 4 splits): no tail to shape.
  EXPECT_FALSE(order_longest_first(8, 256, 264));
  EXPECT_FALSE(order_longest_first(1, 1024, 264));  // nothing to order
  EXPECT_TRUE(order_longest_first(kLongestFirstMax, 4 * kLongestFirstMax, 264));
  EXPECT_FALSE(
      order_longest_first(kLongestFirstMax + 1, 8 * kLongestFirstMax, 264));  // too many to rank
}

TEST(SplitPlan, RulesAndModes) {
  // Deterministic: fixed chunks whatever the rule.
  const SplitPlan d = plan_splits(128, 4096, 132, 0, true, SplitRule::kOneWave);
  EXPECT_EQ(d.split_chunk, kDeterministicSplitKeys);
  EXPECT_EQ(d.num_splits, 4);
  EXPECT_TRUE(d.use_workspace);
  // A request wins over either rule, capped.
  EXPECT_EQ(plan_splits(128, 4096, 132, 5, false, SplitRule::kOneWave).num_splits, 5);
  EXPECT_EQ(plan_splits(1, 1 << 20, 132, 100000, false).num_splits, kMaxSplits);
  // Many waves: about eight CTAs per SM, never splits shorter than kMinSplitKeys.
  EXPECT_EQ(plan_splits(64, 8192, 132, 0, false).num_splits, 16);
  EXPECT_EQ(plan_splits(64, 1024, 132, 0, false).num_splits, 2);
  const SplitPlan one = plan_splits(128, 4096, 132, 0, false, SplitRule::kOneWave);
  EXPECT_EQ(one.num_splits, 1);
  EXPECT_FALSE(one.use_workspace);
  // kOneWave counts every resident CTA as a slot: one 128k-key request over 8 KV heads on
  // 132 SMs x 3 takes the fewest splits with >= 90 % of the 396 slots busy (45: 360 of 396).
  EXPECT_EQ(plan_splits(8, 131072, 132, 0, false, SplitRule::kOneWave, 3).num_splits, 45);
  EXPECT_EQ(plan_splits(8, 131072, 132, 0, false, SplitRule::kOneWave, 1).num_splits, 15);
}

}  // namespace
}  // namespace flashback::cuda

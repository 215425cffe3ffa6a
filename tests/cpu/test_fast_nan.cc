// NaN in the inputs (SPEC.md is silent; ARCHITECTURE.md, "NaN inputs"; the rule and the check
// are testing/nan.h's): a NaN in q, K or V reaches the rows that see it, in the oracle and in
// every fast path, and no other request's or KV head's rows; every other element matches the
// oracle. Outputs are filled with a finite value before each run (make_paged's poison is NaN),
// so a NaN in the result is the kernel's own.
#include <string>
#include <vector>

#include "test_fast_common.h"
#include "testing/nan.h"

namespace flashback {
namespace {

using fast_test::fast;
using fast_test::kRef;
using testing::AttentionCase;
using testing::check_nan_where_seen;
using testing::fill_all;
using testing::NanIn;
using testing::NanPoison;
using testing::NanShape;
using testing::PagedData;

// Runs `exec` on d (outputs filled with kFilled) and checks every row against ref (the oracle's
// results on the same inputs; testing/nan.h).
void expect_nan_where_seen(PagedData& d, const PagedData& ref, const AttentionCase& c,
                           const NanPoison& p, const Exec& exec, bool oracle,
                           const std::string& what) {
  fill_all(d.params.out, testing::kFilled);
  if (d.params.lse.defined()) fill_all(d.params.lse, testing::kFilled);
  paged_attention(d.params, exec);
  const std::string failure = check_nan_where_seen(d, ref, c, p, oracle);
  EXPECT_EQ(failure, "") << what;
}

// Decode (the tile path), extend (many rows per KV head), MHA, fp8 and f32 caches, a window,
// a key past the first split; each with a NaN in q, in K and in V.
TEST(FastNan, ReachesTheRowsThatSeeItAndNoOthers) {
  const DType f32 = DType::kF32, bf16 = DType::kBF16, f16 = DType::kF16;
  const NanShape shapes[] = {
      {"decode gqa 4", {1, 1, 1}, {40, 100, 7}, 8, 2, 128, 16, f32, bf16},
      {"decode gqa 8", {1, 1}, {70, 33}, 16, 2, 64, 16, f32, bf16},
      {"extend gqa 4", {1, 5, 3}, {40, 100, 60}, 8, 2, 64, 16, f32, bf16},
      {"decode mha f16", {1, 1}, {40, 100}, 2, 2, 64, 1, f32, f16},
      {"decode fp8", {1, 1}, {40, 100}, 8, 2, 64, 16, f32, DType::kF8E4M3},
      {"extend f32 window", {2, 6}, {40, 100}, 8, 2, 64, 16, f32, f32, 20},
      {"decode across splits", {1, 1}, {40, 1100}, 8, 2, 64, 16, f32, bf16},
  };
  uint64_t seed = 5000;
  for (const NanShape& s : shapes) {
    const AttentionCase c = s.to_case();
    for (const NanPoison& p : s.poisons()) {
      PagedData d = testing::make_paged(c, ++seed);
      testing::put_nan(d, c, p);
      const std::string what = std::string(s.name) + ", " + p.describe();
      PagedData ref = testing::with_fresh_outputs(d);
      expect_nan_where_seen(ref, ref, c, p, kRef, true, what + " (oracle)");
      for (int threads : {1, 2})
        expect_nan_where_seen(d, ref, c, p, fast(threads), false, what + " (fast)");
    }
  }
}

}  // namespace
}  // namespace flashback

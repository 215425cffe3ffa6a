// Batch invariance of the fast CPU paged attention: a request's output and LSE bits are the same
// alone or inside a bigger batch, with 1, 2, 3 or 5 threads — i.e. whether its fixed-size key
// splits run in parallel and merge afterwards (small batch, several threads) or run in one task.
#include <cstring>
#include <string>
#include <vector>

#include "test_fast_common.h"

namespace flashback {
namespace {

using testing::AttentionCase;
using testing::make_paged;
using testing::PagedData;

struct Result {
  std::vector<char> out, lse;
};

// Runs entry x of d's batch alone (views into the same inputs) with `threads`.
Result run_alone(const PagedData& d, int64_t x, int threads, int num_splits) {
  PagedAttentionParams p = d.params;
  p.num_splits = num_splits;
  const int32_t* cu = d.cu_seqlens_q.ptr<int32_t>();
  const int64_t q0 = cu[x], qn = cu[x + 1] - cu[x];
  p.q = d.params.q.slice(0, q0, q0 + qn);
  if (p.qv.defined()) p.qv = d.params.qv.slice(0, q0, q0 + qn);
  p.page_table = d.params.page_table.slice(0, x, x + 1);
  p.cache_seqlens = d.params.cache_seqlens.slice(0, x, x + 1);
  if (p.k_descale.defined()) p.k_descale = d.params.k_descale.slice(0, x, x + 1);
  if (p.v_descale.defined()) p.v_descale = d.params.v_descale.slice(0, x, x + 1);
  Tensor cu1(DType::kI32, {2});
  cu1.ptr<int32_t>()[0] = 0;
  cu1.ptr<int32_t>()[1] = static_cast<int32_t>(qn);
  p.cu_seqlens_q = cu1;
  const TensorView o = d.params.out;
  Tensor out(o.dtype, {qn, o.shape[1], o.shape[2]}), lse(DType::kF32, {qn, o.shape[1]});
  out.poison();
  lse.poison();
  p.out = out;
  p.lse = lse;
  paged_attention(p, fast_test::fast(threads));
  Result r;
  r.out.assign(static_cast<char*>(out.data()), static_cast<char*>(out.data()) + out.nbytes());
  r.lse.assign(static_cast<char*>(lse.data()), static_cast<char*>(lse.data()) + lse.nbytes());
  return r;
}

// Runs the whole batch with `threads` and extracts entry x's rows.
Result run_batch(const PagedData& src, int64_t x, int threads) {
  PagedData d = testing::with_fresh_outputs(src);
  paged_attention(d.params, fast_test::fast(threads));
  const int32_t* cu = d.cu_seqlens_q.ptr<int32_t>();
  const int64_t row_out = d.out.nbytes() / d.total_q, row_lse = d.lse.nbytes() / d.total_q;
  Result r;
  const char* o = static_cast<char*>(d.out.data());
  const char* l = static_cast<char*>(d.lse.data());
  r.out.assign(o + cu[x] * row_out, o + cu[x + 1] * row_out);
  r.lse.assign(l + cu[x] * row_lse, l + cu[x + 1] * row_lse);
  return r;
}

void expect_invariant(const AttentionCase& c, int64_t x) {
  PagedData d = make_paged(c, 77);
  const Result ref = run_alone(d, x, 1, 0);
  // The oracle agrees, so the bits compared below are right, not just stable.
  PagedData o = testing::with_fresh_outputs(d);
  paged_attention(o.params, fast_test::kRef);
  PagedData f = testing::with_fresh_outputs(d);
  paged_attention(f.params, fast_test::fast(2));
  EXPECT_CLOSE(testing::compare(f.params.out, o.params.out, f.params.lse, o.params.lse),
               c.describe());
  // 3 and 5 threads oversubscribe a 2-core host: threads finish their runs at different times
  // and take the rest of others' runs (StealingRuns), often mid-range.
  for (int threads : {1, 2, 3, 5}) {
    for (bool alone : {true, false}) {
      if (alone && threads == 1) continue;
      const Result r = alone ? run_alone(d, x, threads, 0) : run_batch(d, x, threads);
      const std::string what = c.describe() + (alone ? " alone" : " in batch") + ", " +
                               std::to_string(threads) + " threads";
      EXPECT_TRUE(r.out == ref.out) << what << ": output bits differ";
      EXPECT_TRUE(r.lse == ref.lse) << what << ": LSE bits differ";
    }
  }
  // num_splits = 1 (no split-KV) only changes the parallelism, never the bits.
  const Result one = run_alone(d, x, 2, 1);
  EXPECT_TRUE(one.out == ref.out && one.lse == ref.lse) << c.describe() << ": num_splits = 1";
}

// GQA 4, MHA with 8 KV heads (the tile path, 4 KV heads per scoring pass), GQA 3 with 3 KV
// heads and GQA 2 with 5 (groups of 4 rows that span KV heads, the last one padded).
TEST(FastInvariance, LongDecodeAloneOrBatchedAnyThreadCount) {
  const int shapes[][2] = {{8, 2}, {8, 8}, {9, 3}, {10, 5}};  // q heads, KV heads
  for (const auto& [heads_q, heads_kv] : shapes) {
    AttentionCase c;
    c.heads_q = heads_q;
    c.heads_kv = heads_kv;
    c.head_dim = 128;
    c.page_size = 16;
    c.q_lens = {1, 1, 1, 1, 1, 1};
    c.kv_lens = {300, 1500, 17, 900, 2000, 1};
    expect_invariant(c, 1);
  }
}

// Many splits of 512 keys (18 and 19): on one thread they run in one call, each split's first
// tile prefetched by the split before; on two or three they run one per work item.
TEST(FastInvariance, SplitGroupsWithAndWithoutWindow) {
  AttentionCase c;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.page_size = 16;
  c.q_lens = {1, 1};
  c.kv_lens = {9000, 700};
  expect_invariant(c, 0);
  c.kv_lens = {12000, 300};
  c.window_left = 9500;  // starts mid-tile, mid-split
  expect_invariant(c, 0);
}

TEST(FastInvariance, ExtendWindowSoftcap) {
  AttentionCase c;
  c.heads_q = 4;
  c.heads_kv = 1;
  c.page_size = 1;
  c.q_lens = {3, 40, 1};
  c.kv_lens = {50, 1200, 700};
  c.window_left = 700;
  c.softcap = 5.0f;
  c.dtype = DType::kF32;
  expect_invariant(c, 1);
}

TEST(FastInvariance, MlaFp8Decode) {
  AttentionCase c;
  c.mla = true;
  c.heads_q = 16;
  c.heads_kv = 1;
  c.head_dim = 64;
  c.head_dim_v = 512;
  c.page_size = 16;
  c.kv_dtype = DType::kF8E4M3;
  c.q_lens = {1, 1, 1};
  c.kv_lens = {1100, 40, 600};
  expect_invariant(c, 0);
}

}  // namespace
}  // namespace flashback

// The bench's inputs: workloads map onto the shared case as SPEC.md says (chunked-local virtual
// requests, MLA widths, cross-attention), values are filled (not zeros, not poison), and the
// kernels the bench times agree with the oracle on exactly those inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/inputs.h"
#include "bench/timing.h"
#include "test_workloads.h"
#include "testing/case.h"

namespace flashback::bench {
namespace {

Workload base(Mode mode, int q, std::vector<int> kv) {
  return test::make_workload(mode, q, std::move(kv), 4, 2, 32, 4);
}

TEST(Inputs, ChunkedLocalBecomesVirtualRequests) {
  // SPEC.md §4 with P = 1 and C = 4: R0 (prefix 3, extend 3) and R1 (prefix 8, extend 1). The
  // workload has one q_len for all requests, so check R0's shape and a decode-like R1 separately.
  Workload r0 = base(Mode::kExtend, 3, {6});
  r0.chunk = 4;
  auto c = to_case(r0);
  EXPECT_EQ(c.q_lens, std::vector<int>({1, 2}));
  EXPECT_EQ(c.kv_lens, std::vector<int>({4, 2}));
  Workload r1 = base(Mode::kDecode, 1, {9});
  r1.chunk = 4;
  c = to_case(r1);
  EXPECT_EQ(c.q_lens, std::vector<int>({1}));
  EXPECT_EQ(c.kv_lens, std::vector<int>({1}));
  Workload prefill = base(Mode::kExtend, 32, {32, 32});
  prefill.chunk = 8;
  c = to_case(prefill);
  EXPECT_EQ(c.q_lens, std::vector<int>(8, 8));
  EXPECT_EQ(c.kv_lens, std::vector<int>(8, 8));
}

TEST(Inputs, CaseFields) {
  Workload m = base(Mode::kDecode, 1, {10});
  m.mla = true;
  m.heads_kv = 1;
  m.head_dim = 576;
  m.head_dim_v = 512;
  auto c = to_case(m);
  EXPECT_TRUE(c.mla);
  EXPECT_EQ(c.head_dim, 64);  // the rope part
  EXPECT_EQ(c.head_dim_v, 512);
  Workload x = base(Mode::kDecode, 1, {10});
  x.cross = true;
  EXPECT_FALSE(to_case(x).causal);
  Workload s = base(Mode::kTargetVerify, 4, {10, 20});
  s.window_left = 7;
  s.softcap = 30;
  c = to_case(s);
  EXPECT_TRUE(c.causal);
  EXPECT_EQ(c.window_left, 7);
  EXPECT_EQ(c.softcap, 30);
  EXPECT_EQ(c.q_lens, std::vector<int>({4, 4}));
  EXPECT_EQ(c.page_size, 4);
}

TEST(Inputs, FillLooksNormalAndDependsOnSeed) {
  Tensor a(DType::kBF16, {1 << 16}), b(DType::kBF16, {1 << 16});
  fill_random(a, 7, 1.0);
  fill_random(b, 8, 1.0);
  double sum = 0, sq = 0;
  int same = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(i);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += x * x;
    same += x == b.get(i);
  }
  const double mean = sum / a.numel(), sd = std::sqrt(sq / a.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 1.0, 0.03);
  EXPECT_LT(same, a.numel() / 20);  // different seeds give different values
  Tensor a2(DType::kBF16, {1 << 16});
  fill_random(a2, 7, 1.0);
  for (int64_t i = 0; i < a.numel(); i += 997) ASSERT_EQ(a.get(i), a2.get(i));
  Tensor f8(DType::kF8E4M3, {1 << 14});
  fill_random(f8, 3, 24.0);
  double sq8 = 0;
  for (int64_t i = 0; i < f8.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(f8.get(i)));
    sq8 += f8.get(i) * f8.get(i);
  }
  EXPECT_NEAR(std::sqrt(sq8 / f8.numel()), 24.0, 1.5);
}

// Runs the bench's inputs through the kernels the bench times (Exec::kFast) and the oracle;
// both outputs start poisoned, so an unwritten element fails.
void expect_agrees(const Workload& w) {
  SCOPED_TRACE(w.name);
  const Inputs in = make_inputs(w, 5);
  const Exec fast{nullptr, 0, Exec::CpuImpl::kFast};
  const Exec ref{nullptr, 1, Exec::CpuImpl::kReference};
  if (in.ragged) {
    RaggedData a = in.rag;  // shares inputs; fresh poisoned outputs below
    Tensor out_a(a.out.dtype(), a.out.view().shape.data(), a.out.view().ndim);
    Tensor out_r(a.out.dtype(), a.out.view().shape.data(), a.out.view().ndim);
    Tensor lse_a(DType::kF32, a.lse.view().shape.data(), 2),
        lse_r(DType::kF32, a.lse.view().shape.data(), 2);
    for (Tensor* t : {&out_a, &out_r, &lse_a, &lse_r}) t->poison();
    RaggedAttentionParams pa = a.params, pr = a.params;
    pa.out = out_a;
    pa.lse = lse_a;
    pr.out = out_r;
    pr.lse = lse_r;
    ragged_attention(pa, fast);
    ragged_attention(pr, ref);
    const auto cmp = testing::compare(out_a, out_r, lse_a, lse_r);
    EXPECT_TRUE(cmp.ok) << cmp.why;
  } else {
    const testing::PagedData a = testing::with_fresh_outputs(in.paged);
    const testing::PagedData r = testing::with_fresh_outputs(in.paged);
    paged_attention(a.params, fast);
    paged_attention(r.params, ref);
    const auto cmp = testing::compare(a.out, r.out);
    EXPECT_TRUE(cmp.ok) << cmp.why;
    // The oracle output is real data: not all zeros (an all-zero fill would pass compare).
    double norm = 0;
    for (int64_t i = 0; i < r.out.numel(); ++i) norm += std::abs(r.out.get(i));
    if (r.out.numel() > 0) EXPECT_GT(norm, 0.0);
  }
}

TEST(Inputs, KernelsAgreeWithOracleOnBenchInputs) {
  // Lengths cover 0, 1 and page boundaries (P = 4).
  expect_agrees(base(Mode::kDecode, 1, {0, 1, 4, 5, 17}));
  Workload v = base(Mode::kTargetVerify, 3, {3, 8, 13});
  expect_agrees(v);
  Workload e = base(Mode::kExtend, 5, {5, 12});
  e.page_size = 1;
  expect_agrees(e);
  Workload win = base(Mode::kDecode, 1, {1, 16, 30});
  win.window_left = 7;
  win.softcap = 20;
  expect_agrees(win);
  Workload f8 = base(Mode::kDecode, 1, {9, 4});
  f8.kv_dtype = DType::kF8E4M3;
  expect_agrees(f8);
  Workload x = base(Mode::kDecode, 1, {7, 1});
  x.cross = true;
  expect_agrees(x);
  Workload local = base(Mode::kExtend, 12, {12, 16});
  local.chunk = 8;
  expect_agrees(local);
  Workload mla = base(Mode::kDecode, 1, {1, 9, 16});
  mla.mla = true;
  mla.heads_kv = 1;
  mla.head_dim = 48;
  mla.head_dim_v = 32;
  expect_agrees(mla);
  Workload rag = base(Mode::kRagged, 6, {0, 6, 9});
  rag.causal = false;
  rag.head_dim = 48;
  rag.page_size = 0;
  expect_agrees(rag);
}

TEST(Inputs, FootprintCountsTheCaches) {
  const Inputs in = make_inputs(base(Mode::kDecode, 1, {64, 64}), 1);
  EXPECT_GE(in.nbytes(), int64_t{2} * 64 * 2 * (32 + 32) * 2);
}

TEST(Timing, Helpers) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  // Copies exceed the cache twice over, at least 2, within the memory budget, at most 64.
  EXPECT_EQ(copies_for(10 << 20, 32 << 20, int64_t{1} << 40), 7);
  EXPECT_EQ(copies_for(int64_t{1} << 30, 32 << 20, int64_t{1} << 40), 2);
  EXPECT_EQ(copies_for(1 << 20, 32 << 20, 8 << 20), 8);
  EXPECT_EQ(copies_for(int64_t{1} << 30, 32 << 20, 1 << 20), 1);
  EXPECT_EQ(copies_for(100, int64_t{1} << 30, int64_t{1} << 40), 64);
  RunOptions o;
  o.budget_s = 1.0;
  o.min_runs = 3;
  o.max_runs = 50;
  EXPECT_EQ(runs_for(0.1, o), 10);
  EXPECT_EQ(runs_for(5.0, o), 3);
  EXPECT_EQ(runs_for(1e-6, o), 50);
}

}  // namespace
}  // namespace flashback::bench

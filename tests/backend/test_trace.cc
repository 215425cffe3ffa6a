// The serving trace (src/backend/trace) as a test: a short run per page size must check every
// mode and layer kind against the oracle with no mismatch, and a run whose cache is damaged
// behind the backend's back must fail (so the trace's checks can fail at all).
#include <gtest/gtest.h>

#include <string>

#include "backend/trace/trace.h"
#include "flashback/error.h"

namespace flashback::trace {
namespace {

class TraceTest : public ::testing::TestWithParam<int> {};

TEST_P(TraceTest, EveryModeAndLayerKindMatchesTheOracle) {
  TraceOptions o;
  o.page_size = GetParam();
  o.seed = 7;
  o.steps = 100;
  const TraceReport rep = run_trace(o);
  EXPECT_EQ(rep.failures(), 0) << rep.describe();
  EXPECT_TRUE(rep.missing().empty()) << rep.describe();
  EXPECT_GE(rep.forward_passes, 2 * o.steps);  // two models, at least one pass per step
  EXPECT_GT(rep.shared_prefix, 0);
  EXPECT_GT(rep.finished, 0);
  EXPECT_GT(rep.reused_rows, 0);
  int64_t tokens = 0;
  for (const KindStats& k : rep.rows) tokens += k.tokens;
  EXPECT_GT(tokens, 1000);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, TraceTest, ::testing::Values(1, 16),
                         [](const auto& info) { return "P" + std::to_string(info.param); });

// The models `flashback check --device cuda` runs (the head dims the CUDA kernels are built
// for: 64, 128, 256, MLA 512 + 64, the 192/128 chunked prefix), here on the CPU backend: the
// GPU trace then differs from this one only in where the backend runs.
TEST(TraceTest, GpuModelsOnTheCpu) {
  TraceOptions o;
  o.page_size = 16;
  o.seed = 5;
  o.steps = 60;
  o.gpu_dims = true;
  const TraceReport rep = run_trace(o);
  EXPECT_EQ(rep.failures(), 0) << rep.describe();
  EXPECT_TRUE(rep.missing().empty()) << rep.describe();
}

TEST(TraceTest, CudaWithoutCudaIsAnError) {
#ifndef FLASHBACK_WITH_CUDA
  TraceOptions o;
  o.device = Device{DeviceType::kCUDA, 0};
  o.steps = 1;
  EXPECT_THROW(run_trace(o), Error);
#else
  GTEST_SKIP() << "a CUDA build: the GPU trace runs in tests/cuda (cuda_test_trace)";
#endif
}

TEST(TraceTest, DamagedCacheIsCaught) {
  for (int P : {1, 16}) {
    TraceOptions o;
    o.page_size = P;
    o.seed = 11;
    o.steps = 24;
    o.corrupt_at_step = 12;
    const TraceReport rep = run_trace(o);
    EXPECT_GT(rep.failures(), 0) << "P=" << P;
    // Only the damaged layer (layer 0: full / mla) may disagree.
    for (const KindStats& k : rep.rows)
      if (k.failures) EXPECT_TRUE(k.kind == "full" || k.kind == "mla") << k.kind;
  }
}

TEST(TraceTest, BadOptionsAreErrors) {
  TraceOptions o;
  o.page_size = 0;
  EXPECT_THROW(run_trace(o), Error);
  o.page_size = 1;
  o.steps = -1;
  EXPECT_THROW(run_trace(o), Error);
}

}  // namespace
}  // namespace flashback::trace

// The serving trace with the backend on the GPU (what `flashback check --device cuda` runs):
// every forward mode and layer kind — chunked prefill mixed with decode, EAGLE draft / verify /
// draft extend, CUDA-graph replay with padded rows, prefix sharing, sliding-window, chunked-local,
// softcap, cross attention, FP8 caches, MLA absorbed and its chunked prefix with merge_state —
// each output brought back and checked against the oracle's recomputation from the request's
// history.
#include <gtest/gtest.h>

#include <string>

#include "backend/trace/trace.h"

namespace flashback::trace {
namespace {

bool built(const std::string& dims, const std::string& d) {
  return ("," + dims + ",").find("," + d + ",") != std::string::npos;
}

class CudaTrace : public ::testing::TestWithParam<int> {};

TEST_P(CudaTrace, EveryModeAndLayerKindMatchesTheOracle) {
  const std::string dims = FLASHBACK_TEST_HEAD_DIMS;
  if (!built(dims, "64") || !built(dims, "128") || !built(dims, "256") || !FLASHBACK_TEST_MLA)
    GTEST_SKIP() << "the trace's GPU models need head dims 64, 128, 256 and MLA; built: " << dims
                 << (FLASHBACK_TEST_MLA ? " + MLA" : "");
  TraceOptions o;
  o.page_size = GetParam();
  o.seed = 3;
  o.steps = 60;
  o.device = Device{DeviceType::kCUDA, 0};
  const TraceReport rep = run_trace(o);
  EXPECT_EQ(rep.failures(), 0) << rep.describe();
  EXPECT_TRUE(rep.missing().empty()) << rep.describe();
  int64_t tokens = 0;
  for (const KindStats& k : rep.rows) tokens += k.tokens;
  EXPECT_GT(tokens, 500);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, CudaTrace, ::testing::Values(1, 16),
                         [](const auto& info) { return "P" + std::to_string(info.param); });

}  // namespace
}  // namespace flashback::trace

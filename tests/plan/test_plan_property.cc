// Property test (issue #3 acceptance): over >= 1,000 random batches per mode, the key slots every
// query token sees through the plan equal those computed directly from req_to_token and SPEC.md's
// definition of the mode — for P = 1 and P > 1, with and without chunked-local layers, encoders
// and sliding windows, through req_to_token and through the explicit page table.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "check.h"
#include "host_batch.h"
#include "plan/plan.h"

namespace flashback {
namespace {

using plan_test::HostBatch;

struct ModeCase {
  std::string name;
  ForwardMode mode;
  int32_t draft_step = -1;       // -2: random step
  int32_t num_draft_tokens = 0;  // -1: random N
  bool extend_with_prefix = true;
};

class PlanProperty : public ::testing::TestWithParam<ModeCase> {};

TEST_P(PlanProperty, VisibleSlotsMatchDirectComputation) {
  const ModeCase& mc = GetParam();
  std::mt19937_64 rng(std::hash<std::string>{}(mc.name));
  auto uni = [&](int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
  };
  constexpr int kBatches = 1000;
  int64_t compared = 0, local_entries = 0, straddles = 0;
  for (int it = 0; it < kBatches; ++it) {
    HostBatch hb;
    const int32_t pages[] = {1, 1, 2, 4, 16};
    hb.page_size = pages[uni(0, 4)];
    hb.spec.draft_step = mc.draft_step == -2 ? uni(0, 4) : mc.draft_step;
    hb.spec.num_draft_tokens = mc.num_draft_tokens == -1 ? uni(1, 8) : mc.num_draft_tokens;
    hb.extend_with_prefix = mc.extend_with_prefix;
    hb.int64_arrays = uni(0, 3) == 0;
    make_req_to_token(hb, /*max_reqs=*/12, /*width=*/96, rng);
    plan_test::RandomSpec rs;
    rs.encoder = uni(0, 3) == 0;
    rs.max_enc = 16;
    random_batch(hb, mc.mode, rs, rng);

    plan::PlanConfig cfg;
    cfg.page_size = hb.page_size;
    cfg.attention_chunk_size = uni(0, 4) == 0 ? 0 : hb.page_size * uni(1, 16 / hb.page_size + 2);
    cfg.materialize_page_table = uni(0, 1) == 1;
    plan::Planner planner(cfg);
    const ForwardBatch fb = hb.view();
    const ForwardMetadata& m = planner.plan(fb);
    ASSERT_EQ(m.has_local, cfg.attention_chunk_size > 0);
    ASSERT_EQ(m.has_cross, rs.encoder);
    const int32_t window = uni(0, 2) == 0 ? -1 : uni(0, 12);
    compared += plan_test::expect_plan_matches(hb, m, cfg.attention_chunk_size, window);
    if (HasFailure()) {
      ADD_FAILURE() << mc.name << " batch " << it << ": P " << hb.page_size << " chunk "
                    << cfg.attention_chunk_size << " B " << hb.batch_size();
      return;
    }
    if (m.has_local) {
      local_entries += m.local.size;
      for (int32_t e = 0; e + 1 < m.local.size; ++e)
        straddles += m.local.source_row[e] == m.local.source_row[e + 1] &&
                     m.local.cu_seqlens_q[e + 1] > m.local.cu_seqlens_q[e] &&
                     m.local.cu_seqlens_q[e + 2] > m.local.cu_seqlens_q[e + 1];
    }
  }
  // The comparisons are the test; make sure they actually happened (not a vacuous pass).
  if (mc.mode == ForwardMode::kIdle) {
    EXPECT_EQ(compared, 0);
  } else {
    EXPECT_GT(compared, 10 * kBatches);
    EXPECT_GT(local_entries, kBatches);
  }
  if (mc.mode == ForwardMode::kTargetVerify || mc.mode == ForwardMode::kExtend)
    EXPECT_GT(straddles, 0) << "no request straddled a chunk boundary";
  RecordProperty("comparisons", std::to_string(compared));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, PlanProperty,
    ::testing::Values(ModeCase{"Decode", ForwardMode::kDecode},
                      ModeCase{"Idle", ForwardMode::kIdle},
                      ModeCase{"DraftDecode", ForwardMode::kDecode, -2},
                      ModeCase{"TargetVerify", ForwardMode::kTargetVerify, -1, -1},
                      ModeCase{"ExtendNoPrefix", ForwardMode::kExtend, -1, 0, false},
                      ModeCase{"ExtendWithPrefix", ForwardMode::kExtend},
                      ModeCase{"DraftExtend", ForwardMode::kDraftExtend},
                      ModeCase{"Mixed", ForwardMode::kMixed}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flashback

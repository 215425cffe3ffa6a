// CUDA-graph plan state: 100 random updates per configuration equal a fresh build of the same
// (padded) batch, with unchanged buffer pointers; padded rows carry the fill length and the
// padding row; the multi-step draft planner binds and updates every step.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "host_batch.h"
#include "plan/plan.h"

namespace flashback {
namespace {

using plan_test::HostBatch;

struct GraphCase {
  std::string name;
  ForwardMode mode;
  int32_t draft_step = -1;
  int32_t num_draft_tokens = 0;
  int32_t page_size = 1;
  int32_t chunk = 0;
  bool encoder = false;
  bool page_table = false;
};

std::vector<const int32_t*> pointers(const ForwardMetadata& m) {
  std::vector<const int32_t*> p;
  for (const EntryList* l : {&m.self, &m.local, &m.cross})
    p.insert(p.end(), {l->table_rows, l->kv_start, l->cache_seqlens, l->cu_seqlens_q,
                       l->cu_seqlens_k, l->source_row, l->page_table});
  return p;
}

void expect_same_list(const EntryList& g, const EntryList& f, const char* what) {
  ASSERT_EQ(g.size, f.size) << what;
  auto same = [&](const int32_t* a, const int32_t* b, int32_t n, const char* field) {
    EXPECT_EQ(std::vector<int32_t>(a, a + n), std::vector<int32_t>(b, b + n)) << what << field;
  };
  same(g.table_rows, f.table_rows, f.size, ".table_rows");
  same(g.kv_start, f.kv_start, f.size, ".kv_start");
  same(g.cache_seqlens, f.cache_seqlens, f.size, ".cache_seqlens");
  same(g.source_row, f.source_row, f.size, ".source_row");
  same(g.cu_seqlens_q, f.cu_seqlens_q, f.size + 1, ".cu_seqlens_q");
  same(g.cu_seqlens_k, f.cu_seqlens_k, f.size + 1, ".cu_seqlens_k");
  EXPECT_EQ(g.max_seqlen_q, f.max_seqlen_q) << what;
  EXPECT_EQ(g.max_seqlen_k, f.max_seqlen_k) << what;
  EXPECT_EQ(g.causal, f.causal) << what;
  ASSERT_EQ(g.page_table != nullptr, f.page_table != nullptr) << what;
  if (f.page_table == nullptr) return;
  ASSERT_GE(g.page_table_width, f.page_table_width) << what;
  for (int32_t e = 0; e < f.size; ++e) {
    const int32_t* gr = g.page_table + int64_t{e} * g.page_table_width;
    const int32_t* fr = f.page_table + int64_t{e} * f.page_table_width;
    EXPECT_EQ(std::vector<int32_t>(gr, gr + f.page_table_width),
              std::vector<int32_t>(fr, fr + f.page_table_width))
        << what << " table row " << e;
    for (int32_t j = f.page_table_width; j < g.page_table_width; ++j)
      ASSERT_EQ(gr[j], 0) << what << " table row " << e << " col " << j;
  }
}

// The batch a replay of `hb` at bound size `bs` describes: real rows, then padding rows.
HostBatch padded(const HostBatch& hb, int32_t bs, const plan::PlanConfig& cfg) {
  HostBatch p = hb;
  p.int64_arrays = false;
  while (p.batch_size() < bs) {
    p.rows.push_back(cfg.cuda_graph_padding_row);
    p.seq.push_back(cfg.cuda_graph_fill_seq_len);
    p.enc.push_back(0);
    p.ext.push_back(0);
    p.prefix.push_back(0);
  }
  return p;
}

class PlanGraph : public ::testing::TestWithParam<GraphCase> {};

TEST_P(PlanGraph, UpdatesEqualFreshBuildsWithStablePointers) {
  const GraphCase& gc = GetParam();
  std::mt19937_64 rng(std::hash<std::string>{}(gc.name));
  auto uni = [&](int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
  };
  plan::PlanConfig cfg;
  cfg.page_size = gc.page_size;
  cfg.attention_chunk_size = gc.chunk;
  cfg.materialize_page_table = gc.page_table;
  cfg.max_draft_tokens = 6;
  constexpr int32_t kMaxBs = 16, kWidth = 96;
  plan::CudaGraphPlanState graph(cfg, kMaxBs, kWidth);
  plan::Planner fresh(cfg);

  HostBatch hb;
  hb.page_size = gc.page_size;
  hb.spec.draft_step = gc.draft_step;
  hb.spec.num_draft_tokens = gc.num_draft_tokens;
  plan_test::make_req_to_token(hb, 24, kWidth, rng);
  plan_test::RandomSpec rs;
  rs.encoder = gc.encoder;
  rs.max_seq = 60;
  rs.max_enc = 16;

  for (int32_t bound : {1, 7, kMaxBs}) {
    rs.max_bs = bound;
    do random_batch(hb, gc.mode, rs, rng);
    while (hb.batch_size() != bound);
    ForwardMetadata m = graph.bind(hb.view());
    ASSERT_EQ(m.batch_size, bound);
    const std::vector<const int32_t*> ptrs = pointers(m);
    int64_t padded_rows = 0;
    for (int it = 0; it < 100; ++it) {
      random_batch(hb, gc.mode, rs, rng);
      hb.int64_arrays = uni(0, 1) == 1;
      graph.update(m, hb.view());
      ASSERT_EQ(pointers(m), ptrs) << "update " << it << " moved a buffer";
      HostBatch want = padded(hb, bound, cfg);
      padded_rows += bound - hb.batch_size();
      const ForwardMetadata& f = fresh.plan(want.view());
      expect_same_list(m.self, f.self, "self");
      ASSERT_EQ(m.has_local, f.has_local);
      ASSERT_EQ(m.has_cross, f.has_cross);
      if (m.has_local) expect_same_list(m.local, f.local, "local");
      if (m.has_cross) expect_same_list(m.cross, f.cross, "cross");
      // And the replayed metadata is right by the mode's definition, padded rows included.
      plan_test::expect_plan_matches(want, m, cfg.attention_chunk_size, uni(-1, 8));
      ASSERT_FALSE(HasFailure()) << gc.name << " bound " << bound << " update " << it;
    }
    if (bound > 1) EXPECT_GT(padded_rows, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, PlanGraph,
    ::testing::Values(
        GraphCase{"Decode", ForwardMode::kDecode},
        GraphCase{"DecodeP4Table", ForwardMode::kDecode, -1, 0, 4, 0, false, true},
        GraphCase{"DecodeLocalP4", ForwardMode::kDecode, -1, 0, 4, 8, false, true},
        GraphCase{"DecodeCross", ForwardMode::kDecode, -1, 0, 2, 0, true, true},
        GraphCase{"DraftDecodeStep2", ForwardMode::kDecode, 2, 0, 1, 4, false, true},
        GraphCase{"DraftDecodeP16Cross", ForwardMode::kDecode, 0, 0, 16, 16, true, true},
        GraphCase{"VerifyLocal", ForwardMode::kTargetVerify, -1, 4, 1, 4, false, true},
        GraphCase{"VerifyLocalP2N5", ForwardMode::kTargetVerify, -1, 5, 2, 6},
        GraphCase{"VerifyP8Cross", ForwardMode::kTargetVerify, -1, 6, 8, 16, true, true}),
    [](const auto& info) { return info.param.name; });

TEST(PlanGraph, MultiStepDraft) {
  std::mt19937_64 rng(7);
  plan::PlanConfig cfg{.page_size = 2, .attention_chunk_size = 4, .materialize_page_table = true};
  plan::MultiStepDraftPlanner multi(cfg, 3);
  multi.init_cuda_graph_state(8, 64);
  HostBatch hb;
  hb.page_size = 2;
  plan_test::make_req_to_token(hb, 12, 64, rng);
  plan_test::RandomSpec rs;
  rs.max_bs = 8;
  do random_batch(hb, ForwardMode::kDecode, rs, rng);
  while (hb.batch_size() != 8);
  std::vector<ForwardMetadata> steps = multi.bind(hb.view());
  ASSERT_EQ(steps.size(), 2u);
  for (int it = 0; it < 20; ++it) {
    random_batch(hb, ForwardMode::kDecode, rs, rng);
    multi.update(steps, hb.view());
    for (int32_t s = 0; s < 2; ++s) {
      HostBatch want = padded(hb, 8, cfg);
      want.spec.draft_step = s;
      EXPECT_EQ(steps[s].spec.draft_step, s);
      plan_test::expect_plan_matches(want, steps[s], 4, -1);
    }
    ASSERT_FALSE(HasFailure());
  }
}

}  // namespace
}  // namespace flashback

// Bad batches raise flashback::Error naming the field — never an out-of-bounds read.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "host_batch.h"
#include "plan/plan.h"
#include "plan/visible.h"

namespace flashback {
namespace {

using plan_test::HostBatch;

void expect_error(const std::function<void()>& f, const std::string& arg, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
  }
}

HostBatch base(ForwardMode mode) {
  HostBatch hb;
  std::mt19937_64 rng(3);
  plan_test::make_req_to_token(hb, 4, 32, rng);
  hb.mode = mode;
  hb.rows = {1, 3};
  hb.seq = {5, 9};
  hb.ext = {2, 9};
  hb.prefix = {3, 0};
  hb.has_prefix = is_extend_like(mode);
  if (mode == ForwardMode::kTargetVerify) hb.spec.num_draft_tokens = 3;
  return hb;
}

struct Bad {
  std::string arg, what;
  ForwardMode mode;
  std::function<void(HostBatch&, ForwardBatch&)> mutate;
};

TEST(PlanValidation, BadBatchesNameTheField) {
  const ForwardMode D = ForwardMode::kDecode, E = ForwardMode::kExtend,
                    V = ForwardMode::kTargetVerify;
  const std::vector<Bad> bad = {
      {"req_pool_indices", "row past req_to_token", D,
       [](HostBatch& h, ForwardBatch&) { h.rows[1] = 4; }},
      {"req_pool_indices", "negative row", D, [](HostBatch& h, ForwardBatch&) { h.rows[0] = -1; }},
      {"seq_lens", "negative length", D, [](HostBatch& h, ForwardBatch&) { h.seq[0] = -1; }},
      {"seq_lens", "beyond req_to_token's width", D,
       [](HostBatch& h, ForwardBatch&) { h.seq[1] = 33; }},
      {"seq_lens", "verify past the context wall", V,
       [](HostBatch& h, ForwardBatch&) { h.seq[1] = 30; }},
      {"seq_lens", "draft step past the wall", D,
       [](HostBatch& h, ForwardBatch&) {
         h.seq[1] = 30;
         h.spec.draft_step = 2;
       }},
      {"extend_seq_lens", "extend longer than the sequence", E,
       [](HostBatch& h, ForwardBatch&) {
         h.ext[0] = 6;
         h.prefix[0] = -1;
       }},
      {"extend_seq_lens", "negative extend", E, [](HostBatch& h, ForwardBatch&) { h.ext[0] = -1; }},
      {"extend_prefix_lens", "prefix + extend != seq", E,
       [](HostBatch& h, ForwardBatch&) { h.prefix[0] = 2; }},
      {"extend_seq_lens", "missing in EXTEND", E,
       [](HostBatch&, ForwardBatch& f) { f.extend_seq_lens = {}; }},
      {"seq_lens", "inconsistent batch size", D,
       [](HostBatch&, ForwardBatch& f) { f.seq_lens.shape[0] = 1; }},
      {"req_pool_indices", "inconsistent batch size", D,
       [](HostBatch&, ForwardBatch& f) {
         f.batch_size = 3;
         f.seq_lens.shape[0] = 3;
       }},
      {"batch_size", "negative", D, [](HostBatch&, ForwardBatch& f) { f.batch_size = -1; }},
      {"encoder_lens", "negative encoder", D,
       [](HostBatch& h, ForwardBatch&) {
         h.has_enc = true;
         h.enc = {-1, 0};
       }},
      {"seq_lens", "encoder + decoder past the width", D,
       [](HostBatch& h, ForwardBatch&) {
         h.has_enc = true;
         h.enc = {0, 24};
       }},
      {"spec.draft_step", "draft step outside DECODE", V,
       [](HostBatch& h, ForwardBatch&) { h.spec.draft_step = 0; }},
      {"spec.num_draft_tokens", "verify without draft tokens", V,
       [](HostBatch& h, ForwardBatch&) { h.spec.num_draft_tokens = 0; }},
      {"req_to_token", "wrong dtype", D,
       [](HostBatch&, ForwardBatch& f) { f.req_to_token.dtype = DType::kI64; }},
      {"req_to_token", "absent", D, [](HostBatch&, ForwardBatch& f) { f.req_to_token = {}; }},
      {"seq_lens", "device array without a host copy", D,
       [](HostBatch&, ForwardBatch& f) {
         f.seq_lens.device = {DeviceType::kCUDA, 0};
       }},
      {"seq_lens", "float lengths", D,
       [](HostBatch&, ForwardBatch& f) { f.seq_lens.dtype = DType::kF32; }},
  };
  for (const Bad& b : bad) {
    // Array edits must land in hb before its views are taken; view edits in the final view.
    HostBatch hb = base(b.mode);
    ForwardBatch scratch = hb.view();
    b.mutate(hb, scratch);
    ForwardBatch fb = hb.view();
    HostBatch throwaway = hb;
    b.mutate(throwaway, fb);
    plan::Planner planner({});
    expect_error([&] { planner.plan(fb); }, b.arg, b.what);
  }
  // A good batch passes (the table above is not vacuous).
  for (ForwardMode mode :
       {ForwardMode::kDecode, ForwardMode::kExtend, ForwardMode::kTargetVerify}) {
    HostBatch hb = base(mode);
    plan::Planner planner({});
    EXPECT_NO_THROW(planner.plan(hb.view())) << forward_mode_name(mode);
  }
}

TEST(PlanValidation, ConfigLayerAndTokenErrors) {
  expect_error([] { plan::Planner p({.page_size = 0}); }, "page_size", "page size 0");
  expect_error([] { plan::Planner p({.page_size = 4, .attention_chunk_size = 6}); },
               "attention_chunk_size", "chunk not a multiple of P");
  expect_error([] { plan::Planner p({.attention_chunk_size = -1}); }, "attention_chunk_size",
               "negative chunk");
  HostBatch hb = base(ForwardMode::kDecode);
  plan::Planner planner({});
  const ForwardBatch fb = hb.view();
  const ForwardMetadata& m = planner.plan(fb);
  expect_error([&] { plan_for_layer(m, Layer{.uses_chunked_local_attention = true}); },
               "layer.uses_chunked_local_attention", "local layer without a chunk");
  expect_error([&] { plan_for_layer(m, Layer{.is_cross_attention = true}); },
               "layer.is_cross_attention", "cross layer without encoder lengths");
  const LayerPlan lp = plan_for_layer(m, Layer{});
  expect_error([&] { plan::visible_slots(lp, 1, fb.req_to_token, 2); }, "token", "token 2 of 2");
  PagedAttentionParams p;
  expect_error([&] { bind_params(p, lp, fb.req_to_token, true); }, "use_page_table",
               "no materialised table");
}

TEST(PlanValidation, GraphState) {
  plan::PlanConfig cfg{.attention_chunk_size = 4, .max_draft_tokens = 3};
  plan::CudaGraphPlanState graph(cfg, 4, 20);
  HostBatch hb = base(ForwardMode::kDecode);
  expect_error([&] { graph.bind(base(ForwardMode::kExtend).view()); }, "forward_mode",
               "binding EXTEND");
  HostBatch big = base(ForwardMode::kDecode);
  big.rows = {0, 1, 2, 3, 0};
  big.seq = {1, 1, 1, 1, 1};
  expect_error([&] { graph.bind(big.view()); }, "batch_size", "bs > max_bs");
  HostBatch v = base(ForwardMode::kTargetVerify);
  v.spec.num_draft_tokens = 4;
  v.seq = {1, 1};
  expect_error([&] { graph.bind(v.view()); }, "spec.num_draft_tokens", "N > max_draft_tokens");

  hb.rows = {1};
  hb.seq = {5};
  ForwardMetadata m = graph.bind(hb.view());
  expect_error([&] { graph.update(m, base(ForwardMode::kDecode).view()); }, "batch_size",
               "update with more rows than bound");
  hb.seq = {21};  // inside req_to_token (32) but past the graph's max_context_len (20)
  expect_error([&] { graph.update(m, hb.view()); }, "seq_lens", "past max_context_len");
  hb.seq = {5};
  hb.has_enc = true;
  hb.enc = {2};
  expect_error([&] { graph.update(m, hb.view()); }, "encoder_lens", "encoder appears");
  hb.has_enc = false;
  hb.spec.draft_step = 1;
  expect_error([&] { graph.update(m, hb.view()); }, "spec.draft_step", "different step");
  hb.spec.draft_step = -1;
  EXPECT_NO_THROW(graph.update(m, hb.view()));
  ForwardMetadata other = m;
  other.self.table_rows = nullptr;
  expect_error([&] { graph.update(other, hb.view()); }, "metadata", "foreign metadata");
  expect_error([] { plan::CudaGraphPlanState g({}, -1, 8); }, "max_bs", "negative max_bs");
}

}  // namespace
}  // namespace flashback

// Worked examples: SPEC.md §4's local-attention example reproduced exactly, a decode and a
// verify local example, a P = 4 local example, and the per-mode metadata of SPEC.md §3.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "host_batch.h"
#include "plan/plan.h"

namespace flashback {
namespace {

using plan_test::HostBatch;
using V = std::vector<int32_t>;

V vec(const int32_t* p, int32_t n) { return V(p, p + n); }
V cu_q(const EntryList& l) { return vec(l.cu_seqlens_q, l.size + 1); }
V cu_k(const EntryList& l) { return vec(l.cu_seqlens_k, l.size + 1); }
V kv(const EntryList& l) { return vec(l.cache_seqlens, l.size); }
V start(const EntryList& l) { return vec(l.kv_start, l.size); }
V src(const EntryList& l) { return vec(l.source_row, l.size); }
V qlens(const EntryList& l) {
  V q;
  for (int32_t e = 0; e < l.size; ++e) q.push_back(l.cu_seqlens_q[e + 1] - l.cu_seqlens_q[e]);
  return q;
}
V table_row(const EntryList& l, int32_t e, int32_t n) {
  return vec(l.page_table + int64_t{e} * l.page_table_width, n);
}
V r2t(const HostBatch& hb, int32_t row, int32_t from, int32_t n, int32_t P = 1) {
  V v;
  for (int32_t j = 0; j < n; ++j) v.push_back(hb.r2t[row * hb.width + from + j * P] / P);
  return v;
}

HostBatch make(int32_t P, ForwardMode mode, V rows, V seq, uint64_t seed = 1) {
  HostBatch hb;
  hb.page_size = P;
  hb.mode = mode;
  std::mt19937_64 rng(seed);
  plan_test::make_req_to_token(hb, 8, 64, rng);
  hb.rows = std::move(rows);
  hb.seq = std::move(seq);
  return hb;
}

// SPEC.md §4: C = 4, P = 1; R0 prefix 3 + extend 3, R1 prefix 8 + extend 1.
TEST(PlanExamples, SpecLocalAttentionExample) {
  HostBatch hb = make(1, ForwardMode::kExtend, {5, 2}, {6, 9});
  hb.ext = {3, 1};
  hb.prefix = {3, 8};
  hb.has_prefix = true;
  plan::Planner planner(
      {.page_size = 1, .attention_chunk_size = 4, .materialize_page_table = true});
  const ForwardMetadata& m = planner.plan(hb.view());
  ASSERT_TRUE(m.has_local);
  const EntryList& l = m.local;
  EXPECT_EQ(qlens(l), (V{1, 2, 1}));
  EXPECT_EQ(cu_q(l), (V{0, 1, 3, 4}));
  EXPECT_EQ(kv(l), (V{4, 2, 1}));
  EXPECT_EQ(start(l), (V{0, 4, 8}));
  EXPECT_EQ(vec(l.table_rows, 3), (V{5, 5, 2}));
  EXPECT_EQ(src(l), (V{0, 0, 1}));
  EXPECT_EQ(l.max_seqlen_q, 2);
  EXPECT_EQ(l.max_seqlen_k, 4);
  // Page tables [[a0..a3], [a4..a7], [b8..]]: entries past kv length are never read; here they
  // hold the reserved page 0.
  ASSERT_EQ(l.page_table_width, 4);
  EXPECT_EQ(table_row(l, 0, 4), r2t(hb, 5, 0, 4));
  EXPECT_EQ(table_row(l, 1, 2), r2t(hb, 5, 4, 2));
  EXPECT_EQ(table_row(l, 2, 1), r2t(hb, 2, 8, 1));
  EXPECT_EQ(table_row(l, 1, 4)[2], 0);
  // The global entries are untouched by the local split.
  EXPECT_EQ(cu_q(m.self), (V{0, 3, 4}));
  EXPECT_EQ(kv(m.self), (V{6, 9}));
  EXPECT_EQ(cu_k(m.self), (V{0, 6, 15}));
}

// Decode: one virtual request per request, kv length ((seq - 1) mod C) + 1, 0 for seq 0.
TEST(PlanExamples, DecodeLocal) {
  HostBatch hb = make(1, ForwardMode::kDecode, {1, 2, 3, 4, 5}, {1, 4, 5, 9, 0});
  plan::Planner planner({.attention_chunk_size = 4});
  const ForwardMetadata& m = planner.plan(hb.view());
  EXPECT_EQ(kv(m.local), (V{1, 4, 1, 1, 0}));
  EXPECT_EQ(start(m.local), (V{0, 0, 4, 8, 0}));
  EXPECT_EQ(cu_q(m.local), (V{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(kv(m.self), (V{1, 4, 5, 9, 0}));
}

// Verify (N = 3, C = 4): a request can straddle a chunk boundary and give two virtual requests;
// every request keeps two entries so the layout is fixed for CUDA graphs.
TEST(PlanExamples, VerifyLocalStraddles) {
  HostBatch hb = make(1, ForwardMode::kTargetVerify, {1, 2}, {2, 5});
  hb.spec.num_draft_tokens = 3;
  plan::Planner planner({.attention_chunk_size = 4});
  const ForwardMetadata& m = planner.plan(hb.view());
  // R0: kv 5, queries at 2, 3 | 4. R1: kv 8, queries at 5, 6, 7 (one chunk) + an empty entry.
  EXPECT_EQ(qlens(m.local), (V{2, 1, 3, 0}));
  EXPECT_EQ(kv(m.local), (V{4, 1, 4, 0}));
  EXPECT_EQ(start(m.local), (V{0, 4, 4, 0}));
  EXPECT_EQ(src(m.local), (V{0, 0, 1, 1}));
  EXPECT_EQ(cu_q(m.self), (V{0, 3, 6}));
  EXPECT_EQ(kv(m.self), (V{5, 8}));
  EXPECT_EQ(m.self.max_seqlen_q, 3);
}

// P = 4, C = 8: R0 has prefix 5 and extends 7 (queries at 5..11): chunks [0, 8) and [8, 12).
TEST(PlanExamples, PageSize4Local) {
  HostBatch hb = make(4, ForwardMode::kExtend, {3}, {12});
  hb.ext = {7};
  plan::Planner planner(
      {.page_size = 4, .attention_chunk_size = 8, .materialize_page_table = true});
  const ForwardMetadata& m = planner.plan(hb.view());
  EXPECT_EQ(qlens(m.local), (V{3, 4}));
  EXPECT_EQ(kv(m.local), (V{8, 4}));
  EXPECT_EQ(start(m.local), (V{0, 8}));
  EXPECT_EQ(table_row(m.local, 0, 2), r2t(hb, 3, 0, 2, 4));  // pages 0, 1 of the request
  EXPECT_EQ(table_row(m.local, 1, 1), r2t(hb, 3, 8, 1, 4));  // page 2
  EXPECT_EQ(table_row(m.self, 0, 3), r2t(hb, 3, 0, 3, 4));
  // A chunk that is not a multiple of the page size is a clear error.
  try {
    plan::Planner bad({.page_size = 4, .attention_chunk_size = 6});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "attention_chunk_size");
  }
}

TEST(PlanExamples, DecodeAndDraftDecode) {
  HostBatch hb = make(1, ForwardMode::kDecode, {4, 1, 7}, {10, 0, 3});
  plan::Planner planner({.materialize_page_table = true});
  const ForwardMetadata& m = planner.plan(hb.view());
  EXPECT_EQ(kv(m.self), (V{10, 0, 3}));
  EXPECT_EQ(cu_q(m.self), (V{0, 1, 2, 3}));
  EXPECT_EQ(cu_k(m.self), (V{0, 10, 10, 13}));
  EXPECT_EQ(m.self.max_seqlen_k, 10);
  EXPECT_EQ(m.self.page_table_width, 10);
  EXPECT_EQ(table_row(m.self, 0, 10), r2t(hb, 4, 0, 10));
  EXPECT_FALSE(m.has_local);
  EXPECT_FALSE(m.has_cross);

  hb.spec.draft_step = 2;  // step s sees seq + s + 1 keys
  const ForwardMetadata& d = planner.plan(hb.view());
  EXPECT_EQ(kv(d.self), (V{13, 3, 6}));
  EXPECT_EQ(d.self.max_seqlen_k, 13);

  plan::MultiStepDraftPlanner multi({}, 4);
  hb.spec.draft_step = -1;
  const auto steps = multi.plan(hb.view());
  ASSERT_EQ(steps.size(), 3u);  // the last step runs no attention
  for (int32_t s = 0; s < 3; ++s)
    EXPECT_EQ(kv(steps[s].self), (V{10 + s + 1, s + 1, 3 + s + 1})) << "step " << s;
}

TEST(PlanExamples, IdleIsEmpty) {
  HostBatch hb = make(1, ForwardMode::kIdle, {}, {});
  plan::Planner planner({.attention_chunk_size = 4, .materialize_page_table = true});
  const ForwardMetadata& m = planner.plan(hb.view());
  EXPECT_EQ(m.self.size, 0);
  EXPECT_EQ(cu_q(m.self), (V{0}));
  EXPECT_EQ(m.local.size, 0);
  EXPECT_EQ(m.self.max_seqlen_k, 0);
}

TEST(PlanExamples, ExtendWithAndWithoutPrefix) {
  HostBatch hb = make(1, ForwardMode::kExtend, {0, 1, 2}, {5, 0, 3});
  hb.ext = {5, 0, 3};
  plan::Planner planner({});
  const ForwardMetadata& m = planner.plan(hb.view());
  EXPECT_EQ(cu_q(m.self), cu_k(m.self));  // no prefix anywhere: cu_q = cu_k
  EXPECT_EQ(m.self.max_seqlen_q, 5);

  hb.ext = {2, 0, 1};
  hb.prefix = {3, 0, 2};
  hb.has_prefix = true;
  const ForwardMetadata& p = planner.plan(hb.view());
  EXPECT_EQ(cu_q(p.self), (V{0, 2, 2, 3}));
  EXPECT_EQ(cu_k(p.self), (V{0, 5, 5, 8}));
  EXPECT_EQ(p.self.max_seqlen_q, 2);
  EXPECT_EQ(p.self.max_seqlen_k, 5);

  hb.mode = ForwardMode::kMixed;  // a decode request (extend 1) among extends
  hb.ext = {2, 0, 1};
  EXPECT_EQ(cu_q(planner.plan(hb.view()).self), (V{0, 2, 2, 3}));
}

// Cross attention, batch > 1: every request has its own encoder length; decoder keys start
// after the encoder's (P = 2: encoder regions end on a page).
TEST(PlanExamples, CrossAttentionPerRequestEncoder) {
  HostBatch hb = make(2, ForwardMode::kDecode, {6, 3, 0}, {3, 1, 5});
  hb.enc = {4, 0, 10};
  hb.has_enc = true;
  plan::Planner planner({.page_size = 2, .materialize_page_table = true});
  const ForwardMetadata& m = planner.plan(hb.view());
  ASSERT_TRUE(m.has_cross);
  EXPECT_EQ(kv(m.cross), (V{4, 0, 10}));
  EXPECT_EQ(start(m.cross), (V{0, 0, 0}));
  EXPECT_EQ(cu_k(m.cross), (V{0, 4, 4, 14}));
  EXPECT_EQ(m.cross.max_seqlen_k, 10);
  EXPECT_FALSE(m.cross.causal);
  EXPECT_EQ(start(m.self), (V{4, 0, 10}));
  EXPECT_EQ(kv(m.self), (V{3, 1, 5}));
  EXPECT_EQ(table_row(m.cross, 2, 5), r2t(hb, 0, 0, 5, 2));
  EXPECT_EQ(table_row(m.self, 0, 2), r2t(hb, 6, 4, 2, 2));
  const LayerPlan lp = plan_for_layer(m, Layer{.is_cross_attention = true});
  EXPECT_EQ(lp.entries, &m.cross);
  EXPECT_FALSE(lp.causal);

  hb.enc = {4, 1, 10};  // not on a page boundary
  try {
    planner.plan(hb.view());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "encoder_lens");
  }
}

TEST(PlanExamples, BindParams) {
  HostBatch hb = make(1, ForwardMode::kDecode, {1, 2}, {5, 9});
  plan::Planner planner({.attention_chunk_size = 4, .materialize_page_table = true});
  const ForwardBatch fb = hb.view();
  const ForwardMetadata& m = planner.plan(fb);
  PagedAttentionParams p;
  const LayerPlan lp =
      plan_for_layer(m, Layer{.sliding_window_size = 3, .uses_chunked_local_attention = true});
  bind_params(p, lp, fb.req_to_token);
  EXPECT_TRUE(p.table_holds_slots);
  EXPECT_EQ(p.page_table.data, fb.req_to_token.data);
  EXPECT_EQ(p.cache_seqlens.data, m.local.cache_seqlens);
  EXPECT_EQ(p.kv_start.shape[0], 2);
  EXPECT_EQ(p.window_left, 3);
  EXPECT_EQ(p.window_right, 0);
  bind_params(p, lp, fb.req_to_token, /*use_page_table=*/true);
  EXPECT_FALSE(p.table_holds_slots);
  EXPECT_FALSE(p.kv_start.defined());
  EXPECT_EQ(p.page_table.shape[0], 2);
}

}  // namespace
}  // namespace flashback

// End to end: the plan, bound into PagedAttentionParams with bind_params (req_to_token form and
// explicit page-table form), run through the oracle, gives the attention SPEC.md defines —
// computed here directly from the slots `direct_visible_slots` lists. This checks that the
// plan's conventions (kv_start, bottom-right alignment, table rows, page ids) are the kernels'.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "host_batch.h"
#include "plan/plan.h"
#include "testing/case.h"

namespace flashback {
namespace {

using plan_test::HostBatch;

constexpr int64_t kHq = 2, kHk = 1, kD = 8;

// Softmax attention of query row (token, head) over `slots`, in double.
void direct_attention(const Tensor& q, const Tensor& k, const Tensor& v, int32_t token, int64_t h,
                      const std::vector<int32_t>& slots, double scale, std::vector<double>& out,
                      double& lse) {
  out.assign(kD, 0.0);
  if (slots.empty()) {
    lse = -std::numeric_limits<double>::infinity();
    return;
  }
  std::vector<double> logits;
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t s : slots) {
    double dot = 0;
    for (int64_t d = 0; d < kD; ++d)
      dot += q.get((token * kHq + h) * kD + d) * k.get(int64_t{s} * kHk * kD + d);
    logits.push_back(scale * dot);
    m = std::max(m, logits.back());
  }
  double denom = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const double w = std::exp(logits[i] - m);
    denom += w;
    for (int64_t d = 0; d < kD; ++d) out[d] += w * v.get(int64_t{slots[i]} * kHk * kD + d);
  }
  for (double& o : out) o /= denom;
  lse = m + std::log(denom);
}

class PlanAttention : public ::testing::TestWithParam<ForwardMode> {};

TEST_P(PlanAttention, OracleThroughPlanEqualsDirectAttention) {
  const ForwardMode mode = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(mode) + 11);
  auto uni = [&](int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
  };
  int64_t rows_checked = 0;
  for (int it = 0; it < 100; ++it) {
    HostBatch hb;
    const int32_t pages[] = {1, 2, 4};
    hb.page_size = pages[uni(0, 2)];
    if (mode == ForwardMode::kTargetVerify) hb.spec.num_draft_tokens = uni(1, 5);
    if (mode == ForwardMode::kDecode) hb.spec.draft_step = uni(-1, 2);
    const int32_t max_reqs = 6, width = 48;
    make_req_to_token(hb, max_reqs, width, rng);
    plan_test::RandomSpec rs;
    rs.max_bs = 4;
    rs.max_seq = 30;
    rs.encoder = uni(0, 2) == 0;
    random_batch(hb, mode, rs, rng);
    plan::PlanConfig cfg;
    cfg.page_size = hb.page_size;
    cfg.attention_chunk_size = hb.page_size * uni(1, 8 / hb.page_size + 1);
    cfg.materialize_page_table = true;
    plan::Planner planner(cfg);
    const ForwardBatch fb = hb.view();
    const ForwardMetadata& m = planner.plan(fb);

    const int64_t total_q = hb.total_q();
    const int64_t num_pages = int64_t{max_reqs} * ((width + hb.page_size - 1) / hb.page_size) + 1;
    Tensor q(DType::kF32, {std::max<int64_t>(total_q, 1), kHq, kD});
    Tensor k(DType::kF32, {num_pages, hb.page_size, kHk, kD});
    Tensor v(DType::kF32, {num_pages, hb.page_size, kHk, kD});
    testing::fill_normal(q, rng);
    testing::fill_normal(k, rng);
    testing::fill_normal(v, rng);

    std::vector<Layer> layers = {Layer{}, Layer{.sliding_window_size = uni(0, 6)},
                                 Layer{.uses_chunked_local_attention = true}};
    if (rs.encoder) layers.push_back(Layer{.is_cross_attention = true});
    for (const Layer& layer : layers) {
      for (bool use_table : {false, true}) {
        Tensor out(DType::kF32, {std::max<int64_t>(total_q, 1), kHq, kD});
        Tensor lse(DType::kF32, {std::max<int64_t>(total_q, 1), kHq});
        out.poison();
        lse.poison();
        PagedAttentionParams p;
        p.q = q.view().slice(0, 0, total_q);
        p.k_cache = k;
        p.v_cache = v;
        p.out = out.view().slice(0, 0, total_q);
        p.lse = lse.view().slice(0, 0, total_q);
        bind_params(p, plan_for_layer(m, layer), fb.req_to_token, use_table);
        paged_attention(p, Exec{.cpu_impl = Exec::CpuImpl::kReference});
        const double scale = 1.0 / std::sqrt(double(kD));
        for (int32_t t = 0; t < total_q; ++t) {
          const std::vector<int32_t> slots =
              plan_test::direct_visible_slots(hb, layer, cfg.attention_chunk_size, t);
          for (int64_t h = 0; h < kHq; ++h) {
            std::vector<double> want;
            double want_lse;
            direct_attention(q, k, v, t, h, slots, scale, want, want_lse);
            for (int64_t d = 0; d < kD; ++d)
              ASSERT_NEAR(out.get((t * kHq + h) * kD + d), want[d], 1e-5)
                  << "batch " << it << " token " << t << " head " << h << " table " << use_table
                  << " window " << layer.sliding_window_size << " local "
                  << layer.uses_chunked_local_attention << " cross " << layer.is_cross_attention;
            if (std::isinf(want_lse))
              ASSERT_EQ(lse.get(t * kHq + h), want_lse) << "empty row, token " << t;
            else
              ASSERT_NEAR(lse.get(t * kHq + h), want_lse, 1e-4) << "token " << t;
            ++rows_checked;
          }
        }
      }
    }
  }
  EXPECT_GT(rows_checked, 1000);
}

INSTANTIATE_TEST_SUITE_P(Modes, PlanAttention,
                         ::testing::Values(ForwardMode::kDecode, ForwardMode::kTargetVerify,
                                           ForwardMode::kExtend, ForwardMode::kMixed),
                         [](const auto& info) {
                           std::string n = forward_mode_name(info.param);
                           std::erase(n, '_');
                           return n;
                         });

}  // namespace
}  // namespace flashback

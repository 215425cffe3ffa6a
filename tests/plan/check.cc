#include "check.h"

#include <gtest/gtest.h>

#include <vector>

#include "plan/visible.h"

namespace flashback::plan_test {
namespace {

void expect_list_sane(const HostBatch& hb, const EntryList& l, const char* what, int32_t chunk,
                      bool local) {
  const int32_t P = hb.page_size;
  for (int32_t e = 0; e < l.size; ++e) {
    const int32_t b = l.source_row[e];
    ASSERT_TRUE(b >= 0 && b < hb.batch_size()) << what << " entry " << e;
    EXPECT_EQ(l.table_rows[e], hb.rows[b]) << what << " entry " << e;
    EXPECT_GE(l.kv_start[e], 0) << what;
    EXPECT_GE(l.cache_seqlens[e], 0) << what;
    EXPECT_LE(l.kv_start[e] + l.cache_seqlens[e], hb.width) << what << " entry " << e;
    EXPECT_EQ(l.kv_start[e] % P, 0) << what << " entry " << e;
    EXPECT_LE(l.cu_seqlens_q[e], l.cu_seqlens_q[e + 1]) << what;
    EXPECT_EQ(l.cu_seqlens_k[e + 1] - l.cu_seqlens_k[e], l.cache_seqlens[e]) << what;
    EXPECT_LE(l.cu_seqlens_q[e + 1] - l.cu_seqlens_q[e], l.max_seqlen_q) << what;
    EXPECT_LE(l.cache_seqlens[e], l.max_seqlen_k) << what;
    if (local) EXPECT_LE(l.cache_seqlens[e], chunk) << what << " entry " << e;
    if (l.page_table != nullptr)
      EXPECT_LE((l.cache_seqlens[e] + P - 1) / P, l.page_table_width) << what << " entry " << e;
  }
  EXPECT_EQ(l.total_q(), hb.total_q()) << what;
}

}  // namespace

int64_t expect_plan_matches(HostBatch& hb, const ForwardMetadata& m, int32_t chunk,
                            int32_t window) {
  const ForwardBatch fb = hb.view();
  expect_list_sane(hb, m.self, "self", chunk, false);
  if (m.has_local) expect_list_sane(hb, m.local, "local", chunk, true);
  if (m.has_cross) expect_list_sane(hb, m.cross, "cross", chunk, false);
  EXPECT_EQ(m.self.size, hb.batch_size());

  std::vector<Layer> layers(1);
  if (window >= 0) layers.push_back(Layer{.sliding_window_size = window});
  if (m.has_local) layers.push_back(Layer{.uses_chunked_local_attention = true});
  if (m.has_cross) layers.push_back(Layer{.is_cross_attention = true});
  int64_t compared = 0;
  for (const Layer& layer : layers) {
    const LayerPlan lp = plan_for_layer(m, layer);
    for (int32_t t = 0; t < hb.total_q(); ++t) {
      const std::vector<int32_t> want = direct_visible_slots(hb, layer, chunk, t);
      EXPECT_EQ(plan::visible_slots(lp, hb.page_size, fb.req_to_token, t), want)
          << "token " << t << " window " << layer.sliding_window_size << " local "
          << layer.uses_chunked_local_attention << " cross " << layer.is_cross_attention;
      ++compared;
      if (lp.entries->page_table != nullptr) {
        EXPECT_EQ(plan::visible_slots(lp, hb.page_size, fb.req_to_token, t, true), want)
            << "page-table form, token " << t;
        ++compared;
      }
      if (::testing::Test::HasFailure()) return compared;  // one failure is enough to debug
    }
  }
  return compared;
}

}  // namespace flashback::plan_test

#include "plan/visible.h"

#include <algorithm>

#include "cpu/reference.h"

namespace flashback::plan {

std::vector<int32_t> visible_slots(const LayerPlan& lp, int32_t page_size,
                                   const TensorView& req_to_token, int32_t token,
                                   bool use_page_table) {
  const EntryList& l = *lp.entries;
  FLASHBACK_CHECK(token >= 0 && token < l.total_q(), "token",
                  detail::concat("a query in [0, ", l.total_q(), ")"), detail::concat(token));
  // Last entry starting at or before the token; empty entries share its start and are skipped.
  const int32_t* cu = l.cu_seqlens_q;
  const int32_t e = static_cast<int32_t>(std::upper_bound(cu, cu + l.size + 1, token) - cu) - 1;
  const int64_t q_len = cu[e + 1] - cu[e], kv_len = l.cache_seqlens[e];
  const auto kr = reference::visible_keys(token - cu[e], q_len, kv_len, lp.causal, lp.window_left,
                                          lp.window_right);
  std::vector<int32_t> slots;
  for (int64_t t = std::max<int64_t>(kr.lo, 0); t <= kr.hi; ++t) {
    if (use_page_table) {
      const int32_t page = l.page_table[int64_t{e} * l.page_table_width + t / page_size];
      slots.push_back(static_cast<int32_t>(int64_t{page} * page_size + t % page_size));
    } else {
      const int64_t pos = l.kv_start[e] + t;
      slots.push_back(req_to_token.ptr<const int32_t>()[l.table_rows[e] * req_to_token.strides[0] +
                                                        pos * req_to_token.strides[1]]);
    }
  }
  return slots;
}

}  // namespace flashback::plan

// The oracle: plain loops with fp64 accumulation implementing SPEC.md §2 completely. Every fast
// path (CPU or GPU) is tested against these. Inputs are assumed validated (common/validate.h).
#pragma once

#include "common/validate.h"
#include "flashback/ops.h"

namespace flashback::reference {

void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s);
void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s);
void merge_state(const MergeStateParams& p, const detail::MergeShape& s);
void kv_store(const KVStoreParams& p, const detail::StoreShape& s);

/// The visible key range [lo, hi] (inclusive; empty when hi < lo) of query i of q_len over
/// kv_len keys, bottom-right aligned (SPEC.md §2). Shared by the oracle and the fast kernels.
struct KeyRange {
  int64_t lo, hi;
};
inline KeyRange visible_keys(int64_t i, int64_t q_len, int64_t kv_len, bool causal, int window_left,
                             int window_right) {
  const int64_t pos = kv_len - q_len + i;
  int64_t lo = 0, hi = kv_len - 1;
  if (causal && pos < hi) hi = pos;
  if (window_left >= 0 && pos - window_left > lo) lo = pos - window_left;
  if (window_right >= 0 && pos + window_right < hi) hi = pos + window_right;
  return {lo, hi};
}

}  // namespace flashback::reference

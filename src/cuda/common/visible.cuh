// The key range a query sees (SPEC.md §2), on the device: the oracle's rule
// (reference::visible_keys), shared by every kernel. Bottom-right aligned: query i of an entry
// with q_len queries and kv_len keys sits at position kv_len - q_len + i.
#pragma once

namespace flashback::cuda {

struct KeyRange {
  int lo, hi;  // inclusive; empty when hi < lo
};

/// P: any kernel params struct with `causal`, `window_left`, `window_right` (-1: unbounded).
template <typename P>
__device__ __forceinline__ KeyRange visible_keys(const P& p, int i, int q_len, int kv_len) {
  const int pos = kv_len - q_len + i;
  int lo = 0, hi = kv_len - 1;
  if (p.causal && pos < hi) hi = pos;
  if (p.window_left >= 0 && pos - p.window_left > lo) lo = pos - p.window_left;
  if (p.window_right >= 0 && pos + p.window_right < hi) hi = pos + p.window_right;
  return {lo, hi};
}

}  // namespace flashback::cuda

#include "bench/cost.h"

#include <algorithm>

namespace flashback::bench {

int64_t visible_key_count(const Workload& w, int64_t i, int64_t kv_len) {
  // peers.py counts without clamping at 0: with kv_len < q_len a causal query "sees" p + 1 <= 0
  // keys. Workloads never have that shape; keep the count identical anyway.
  const int64_t p = kv_len - w.q_len + i;
  int64_t lo = w.window_left >= 0 ? std::max<int64_t>(0, p - w.window_left) : 0;
  if (w.chunk > 0) lo = std::max(lo, p / w.chunk * w.chunk);
  return w.effective_causal() ? p - lo + 1 : kv_len;
}

Cost cost(const Workload& w) {
  // peers.py counts fp8 as 1 byte and everything else as 2; dtype_size agrees on every dtype
  // peers.py runs (bf16, fp16, fp8) and stays right for the CPU's fp32.
  const int64_t kv_bytes = dtype_size(w.kv_dtype);
  const int64_t row = w.mla ? w.head_dim : int64_t{w.heads_kv} * (w.head_dim + w.head_dim_v);
  Cost c;
  for (int l : w.kv_lens) {
    const int64_t touched =
        w.window_left >= 0 ? std::min<int64_t>(l, int64_t{w.window_left} + w.q_len) : l;
    c.bytes += touched * row * kv_bytes;
    int64_t vis = 0;
    for (int64_t i = 0; i < w.q_len; ++i) vis += visible_key_count(w, i, l);
    c.flops += 2 * int64_t{w.heads_q} * vis * (w.head_dim + w.head_dim_v);
  }
  return c;
}

}  // namespace flashback::bench

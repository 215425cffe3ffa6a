// A small Workload for the bench tests: one q length for every request, given KV lengths and
// shapes (the cost tests use 1 head of 2 dims, the input tests 4/2 heads of 32 dims).
#pragma once

#include <utility>
#include <vector>

#include "bench/workload.h"

namespace flashback::bench::test {

inline Workload make_workload(Mode mode, int q, std::vector<int> kv, int heads_q, int heads_kv,
                              int head_dim, int page_size) {
  Workload w;
  w.name = "t";
  w.mode = mode;
  w.batch = static_cast<int>(kv.size());
  w.q_len = q;
  w.kv_lens = std::move(kv);
  w.heads_q = heads_q;
  w.heads_kv = heads_kv;
  w.head_dim = w.head_dim_v = head_dim;
  w.page_size = page_size;
  return w;
}

}  // namespace flashback::bench::test

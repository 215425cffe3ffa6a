// Bytes and FLOPs a workload must move and do, counted exactly as shared/bench/peers.py's cost()
// and the workloads file's "about" say, so flashback's TB/s and TFLOP/s compare 1:1 with the peers.
#pragma once

#include <cstdint>

#include "bench/workload.h"

namespace flashback::bench {

struct Cost {
  int64_t bytes = 0;  // K/V read once: window = keys some query can see; MLA = one latent row
  int64_t flops = 0;  // 2 * Hq * (visible keys) * (D + Dv) per query token
};

Cost cost(const Workload& w);

/// Keys visible to query i (of q_len) of a request with kv_len keys, under the workload's
/// causal / window / chunk rules (bottom-right aligned, as peers.py counts them).
int64_t visible_key_count(const Workload& w, int64_t i, int64_t kv_len);

}  // namespace flashback::bench

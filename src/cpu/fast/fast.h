// Fast CPU kernels (issue #4): the same semantics as the oracle in cpu/reference.h, with
// OpenMP threads over fixed-size work items and Highway SIMD chosen at run time. Inputs are
// validated by common/validate.h before these are called.
#pragma once

#include "common/validate.h"
#include "flashback/ops.h"

namespace flashback::cpu_fast {

void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec);
void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                      const Exec& exec);
void merge_state(const MergeStateParams& p, const detail::MergeShape& s, const Exec& exec);
void kv_store(const KVStoreParams& p, const detail::StoreShape& s, const Exec& exec);

/// Threads an entry point uses: exec.num_threads, or every available one when 0.
int thread_count(const Exec& exec);

}  // namespace flashback::cpu_fast

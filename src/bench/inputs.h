// Builds the inputs of one timed call from a workload: paged modes go through the shared case
// description (testing::AttentionCase / make_paged: random page placement, poisoned outputs);
// ragged mode gets contiguous varlen K/V. Values are filled by a fast parallel generator because
// the standard workloads hold GiBs of K/V and make_paged's per-element fill would take minutes.
#pragma once

#include <cstdint>

#include "bench/workload.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback::bench {

/// The shared case for a paged workload. Chunked-local workloads become their virtual requests
/// (SPEC.md §4), each one a plain causal attention over its chunk's keys.
testing::AttentionCase to_case(const Workload& w);

/// Contiguous varlen inputs for ragged_attention.
struct RaggedData {
  Tensor q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse;
  RaggedAttentionParams params;
};

/// One copy of a workload's inputs (host tensors, values filled).
struct Inputs {
  bool ragged = false;
  testing::PagedData paged;
  RaggedData rag;
  int64_t nbytes() const;  // host footprint of every tensor
};

Inputs make_inputs(const Workload& w, uint64_t seed);

/// Asks for transparent huge pages on the whole 2 MiB pages of [p, p + bytes), before first touch:
/// engines allocate KV pools that way, and with 4 KiB pages a head-strided K/V walk pays a TLB miss
/// per row. The ceilings' read buffer gets the same advice so both are measured alike.
void advise_huge_pages(void* p, int64_t bytes);

/// Fills a float tensor with values of mean 0 and the given standard deviation (sum of four
/// uniforms: close enough to normal for timing), in parallel, deterministic for a seed.
void fill_random(Tensor& t, uint64_t seed, double stddev);

}  // namespace flashback::bench

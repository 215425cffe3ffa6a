// The CUDA side of the entry points of ops.h, called by src/ops.cc after validation. No CUDA
// headers here. Exec::stream is a cudaStream_t. Device-resident index arrays (page table, table
// rows, kv_start, lengths, cu_seqlens_q, KV-store slots) are trusted: the validator cannot read
// device memory, and the plan builds them from validated engine state.
#pragma once

#include <cstdint>
#include <string>

#include "common/validate.h"
#include "flashback/ops.h"

namespace flashback::cuda {

int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p, const detail::PagedShape& s,
                                        const Exec& exec);
/// Short queries only (q_len <= 16, per max_seqlen_q): longer ones are issue #7 and throw.
void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec);
/// Not yet on CUDA (issue #7): throws flashback::Error.
void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                      const Exec& exec);
void merge_state(const MergeStateParams& p, const detail::MergeShape& s, const Exec& exec);
void kv_store(const KVStoreParams& p, const detail::StoreShape& s, const Exec& exec);

/// "D/DV dtype" strings of the paged-attention instances this library was built with.
std::string built_paged_instances();

}  // namespace flashback::cuda

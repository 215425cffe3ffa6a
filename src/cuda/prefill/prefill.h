// @brief Long-query attention on CUDA (issue #7 part 1): paged attention whose entries have more
// queries than the decode kernel takes (EXTEND, DRAFT_EXTEND, MIXED prefill rows, chunked-local
// and cross-attention prefill) and ragged attention, on mma.sync tensor cores for sm_80+.
// Called by src/cuda/dispatch.cu after validation; no CUDA headers here.
#pragma once

#include <cstdint>
#include <string>

#include "common/validate.h"
#include "flashback/ops.h"

namespace flashback::cuda::prefill {

/// Queries per entry the decode kernel takes; longer ones come here.
constexpr int64_t kDecodeMaxQ = 16;

/// True when this call belongs to the prefill kernel: no `qv` (MLA absorbed attention of any
/// length runs on the decode kernel's MLA instance, whose 64-row blocks cover any number of
/// queries) and the longest entry (max_seqlen_q hint, else the host-read lengths, else total_q
/// as a safe bound) has more than kDecodeMaxQ queries.
bool takes(const PagedAttentionParams& p, const detail::PagedShape& s);

/// Runs paged attention for long queries (throws flashback::Error for what is not built:
/// head dims outside FLASHBACK_HEAD_DIMS, fp32).
void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec);
/// Ragged attention over contiguous K/V with LSE (q/k and v head dims may differ: 192/128).
void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                      const Exec& exec);

/// "D/DV dtype" strings of the prefill instances this library was built with.
std::string built_instances();

}  // namespace flashback::cuda::prefill

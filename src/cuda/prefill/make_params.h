// Validated entry-point params -> the kernel's PrefillParams (plain C++, no CUDA headers), shared
// by launch.cu and the CPU emulation test so both exercise the same mapping.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/validate.h"
#include "cuda/paged_params.h"
#include "cuda/prefill/params.h"
#include "flashback/ops.h"

namespace flashback::cuda::prefill {

// The longest entry: the caller's hint, else the host-read lengths, else total_q (a safe bound).
inline int64_t max_q_of(int hint, int64_t derived, int64_t total_q) {
  return hint > 0 ? hint : derived > 0 ? derived : total_q;
}

// Query blocks per (entry, head): enough for the longest entry; the kernel loops past it, so a
// short hint costs speed, never correctness.
inline int m_blocks_for(int64_t max_q, int rows) {
  const int64_t mb = (std::max<int64_t>(max_q, 1) + rows - 1) / rows;
  return static_cast<int>(std::min<int64_t>(mb, int64_t{1} << 20));
}

inline PrefillParams paged_params(const PagedAttentionParams& p, const detail::PagedShape& s,
                                  int rows) {
  PrefillParams d;
  fill_query_fields(d, p.q, p.out, p.lse, p.cu_seqlens_q, s.batch, s.heads_q, s.heads_kv, s.scale,
                    p.causal, p.window_left, p.window_right, p.softcap);
  fill_paged_kv(d, p, s.page_size);
  d.k_outer = p.k_cache.shape[0];
  d.v_outer = p.v_cache.shape[0];
  d.total_q = s.total_q;
  d.m_blocks = m_blocks_for(max_q_of(p.max_seqlen_q, s.max_seqlen_q, s.total_q), rows);
  return d;
}

inline PrefillParams ragged_params(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                                   int rows) {
  PrefillParams d;
  fill_query_fields(d, p.q, p.out, p.lse, p.cu_seqlens_q, s.batch, s.heads_q, s.heads_kv, s.scale,
                    p.causal, p.window_left, p.window_right, p.softcap);
  d.k = p.k.data;
  d.v = p.v.data;
  d.k_sp = p.k.strides[0];
  d.v_sp = p.v.strides[0];
  d.k_sh = p.k.strides[1];
  d.v_sh = p.v.strides[1];
  d.cu_k = p.cu_seqlens_k.ptr<const int32_t>();
  d.cu_k_s = p.cu_seqlens_k.strides[0];
  d.k_outer = p.k.shape[0];
  d.v_outer = p.v.shape[0];
  d.total_q = s.total_q;
  d.m_blocks = m_blocks_for(max_q_of(p.max_seqlen_q, s.max_seqlen_q, s.total_q), rows);
  return d;
}

}  // namespace flashback::cuda::prefill

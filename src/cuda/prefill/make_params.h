// Validated entry-point params -> the kernel's PrefillParams (plain C++, no CUDA headers), shared
// by launch.cu and the CPU emulation test so both exercise the same mapping.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/validate.h"
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

inline void fill_common(PrefillParams& d, const TensorView& q, const TensorView& out,
                        const TensorView& lse, const TensorView& cu_q, int64_t batch,
                        int64_t heads_q, int64_t heads_kv, float scale, bool causal, int wl, int wr,
                        float softcap) {
  d.q = q.data;
  d.q_st = q.strides[0];
  d.q_sh = q.strides[1];
  d.out = out.data;
  d.out_st = out.strides[0];
  d.out_sh = out.strides[1];
  if (lse.defined()) {
    d.lse = lse.ptr<float>();
    d.lse_st = lse.strides[0];
    d.lse_sh = lse.strides[1];
  }
  d.cu_q = cu_q.ptr<const int32_t>();
  d.cu_q_s = cu_q.strides[0];
  d.batch = static_cast<int>(batch);
  d.heads_q = static_cast<int>(heads_q);
  d.group = static_cast<int>(heads_q / heads_kv);
  d.scale = scale;
  d.softcap = softcap;
  d.causal = causal;
  d.window_left = wl;
  d.window_right = wr;
}

inline PrefillParams paged_params(const PagedAttentionParams& p, const detail::PagedShape& s,
                                  int rows) {
  PrefillParams d;
  fill_common(d, p.q, p.out, p.lse, p.cu_seqlens_q, s.batch, s.heads_q, s.heads_kv, s.scale,
              p.causal, p.window_left, p.window_right, p.softcap);
  const bool paged4 = p.k_cache.ndim == 4;
  d.k = p.k_cache.data;
  d.v = p.v_cache.data;
  d.k_sp = p.k_cache.strides[0];
  d.v_sp = p.v_cache.strides[0];
  d.k_so = paged4 ? p.k_cache.strides[1] : 0;
  d.v_so = paged4 ? p.v_cache.strides[1] : 0;
  d.k_sh = p.k_cache.strides[paged4 ? 2 : 1];
  d.v_sh = p.v_cache.strides[paged4 ? 2 : 1];
  d.table = p.page_table.ptr<const int32_t>();
  d.table_s0 = p.page_table.strides[0];
  d.table_s1 = p.page_table.strides[1];
  d.table_holds_slots = p.table_holds_slots;
  if (p.table_rows.defined()) {
    d.table_rows = p.table_rows.ptr<const int32_t>();
    d.table_rows_s = p.table_rows.strides[0];
  }
  if (p.kv_start.defined()) {
    d.kv_start = p.kv_start.ptr<const int32_t>();
    d.kv_start_s = p.kv_start.strides[0];
  }
  d.seqlens = p.cache_seqlens.ptr<const int32_t>();
  d.seqlens_s = p.cache_seqlens.strides[0];
  if (p.k_descale.defined()) {
    d.k_descale = p.k_descale.ptr<const float>();
    d.kd_s0 = p.k_descale.strides[0];
    d.kd_s1 = p.k_descale.strides[1];
  }
  if (p.v_descale.defined()) {
    d.v_descale = p.v_descale.ptr<const float>();
    d.vd_s0 = p.v_descale.strides[0];
    d.vd_s1 = p.v_descale.strides[1];
  }
  d.page_size = static_cast<int>(s.page_size);
  d.m_blocks = m_blocks_for(max_q_of(p.max_seqlen_q, s.max_seqlen_q, s.total_q), rows);
  return d;
}

inline PrefillParams ragged_params(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                                   int rows) {
  PrefillParams d;
  fill_common(d, p.q, p.out, p.lse, p.cu_seqlens_q, s.batch, s.heads_q, s.heads_kv, s.scale,
              p.causal, p.window_left, p.window_right, p.softcap);
  d.k = p.k.data;
  d.v = p.v.data;
  d.k_sp = p.k.strides[0];
  d.v_sp = p.v.strides[0];
  d.k_sh = p.k.strides[1];
  d.v_sh = p.v.strides[1];
  d.cu_k = p.cu_seqlens_k.ptr<const int32_t>();
  d.cu_k_s = p.cu_seqlens_k.strides[0];
  d.m_blocks = m_blocks_for(max_q_of(p.max_seqlen_q, s.max_seqlen_q, s.total_q), rows);
  return d;
}

}  // namespace flashback::cuda::prefill

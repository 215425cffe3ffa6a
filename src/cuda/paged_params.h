// Validated entry-point params -> the fields the CUDA kernels' parameter structs share
// (DecodeParams, prefill::PrefillParams: the same names for the same things). Plain C++, no CUDA
// headers: dispatch.cu (decode), prefill/make_params.h (prefill; also the CPU emulation test).
#pragma once

#include <cstdint>

#include "flashback/ops.h"

namespace flashback::cuda {

/// q, out, LSE, cu_seqlens_q and the scalar attention settings.
template <typename D>
void fill_query_fields(D& d, const TensorView& q, const TensorView& out, const TensorView& lse,
                       const TensorView& cu_q, int64_t batch, int64_t heads_q, int64_t heads_kv,
                       float scale, bool causal, int wl, int wr, float softcap) {
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

/// The paged K/V caches (as (page, offset in page, head); a [slots, Hk, D] cache is P = 1 with
/// offset stride 0), the page table and its optional row map and start positions, the lengths
/// and the FP8 descales.
template <typename D>
void fill_paged_kv(D& d, const PagedAttentionParams& p, int64_t page_size) {
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
  d.page_size = static_cast<int>(page_size);
}

}  // namespace flashback::cuda

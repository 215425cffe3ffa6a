// The plain parameter struct of the long-query attention kernel (DESIGN.md principle 3): pointers,
// element strides and sizes, filled by launch.cu from validated PagedAttentionParams or
// RaggedAttentionParams. One struct serves both: `cu_k` set selects contiguous (ragged) keys,
// otherwise keys are read through the page table like the decode kernel does.
#pragma once

#include <cstdint>

#include "cuda/common/tensor_map.h"

namespace flashback::cuda {

struct PrefillParams {
  const void* q = nullptr;  // [total_q, Hq, D]
  int64_t q_st = 0, q_sh = 0;
  // Caches addressed as (page, offset in page, head); ragged K/V and [slots, Hk, D] caches are
  // P = 1 with offset stride 0.
  const void* k = nullptr;
  int64_t k_sp = 0, k_so = 0, k_sh = 0;
  const void* v = nullptr;
  int64_t v_sp = 0, v_so = 0, v_sh = 0;
  const int32_t* table = nullptr;  // paged only
  int64_t table_s0 = 0, table_s1 = 0;
  bool table_holds_slots = false;
  const int32_t* table_rows = nullptr;  // optional
  int64_t table_rows_s = 0;
  const int32_t* kv_start = nullptr;  // optional
  int64_t kv_start_s = 0;
  const int32_t* seqlens = nullptr;  // paged: keys per entry
  int64_t seqlens_s = 0;
  const int32_t* cu_k = nullptr;  // ragged: key t of entry b is row cu_k[b] + t of k / v
  int64_t cu_k_s = 0;
  const int32_t* cu_q = nullptr;
  int64_t cu_q_s = 0;
  const float* k_descale = nullptr;  // optional [B, Hk]
  int64_t kd_s0 = 0, kd_s1 = 0;
  const float* v_descale = nullptr;
  int64_t vd_s0 = 0, vd_s1 = 0;
  void* out = nullptr;  // [total_q, Hq, Dv], dtype of q
  int64_t out_st = 0, out_sh = 0;
  float* lse = nullptr;  // optional, natural log
  int64_t lse_st = 0, lse_sh = 0;

  int64_t k_outer = 0, v_outer = 0;  // the rows (ragged) or pages (paged) k and v hold
  // The Hopper kernel's K and V as TMA maps over (column, head, offset in page, page), ragged
  // keys as pages of one row; each box is 64 columns of kv_box keys (a page, or a tile of
  // ragged keys). The kernel takes the tiles whose keys all exist from them; kv_box = 0 where
  // no map could be built (launch.cu, add_kv_maps).
  TensorMap k_map, v_map;
  int kv_box = 0;
  bool pingpong = false;  // Hopper kernel: the consumers take turns issuing their MMAs
  // Hopper kernel: O's rows go out through shared memory in 16-byte pieces (out's rows are
  // 16-byte aligned; wgmma_kernel.cuh, store_staged), else in 4-byte pairs from registers.
  bool staged_out = false;

  bool persistent = false;  // Hopper kernel: about one CTA per SM walks every block (blocks.h)
  int sched_band = 1;       // the persistent schedule's ranks per band (blocks.h)
  // Hopper kernel, persistent: CTAs in clusters of two take q heads 2i and 2i + 1 (one KV group)
  // of the same block, and each loads half of every K/V tile for both (TMA multicast).
  bool head_pairs = false;

  int batch = 0, heads_q = 0, group = 1, page_size = 1;
  int64_t total_q = 0;  // query rows of the whole batch
  int m_blocks = 1;     // query blocks of the longest entry (a hint; longer entries loop)
  float scale = 0, softcap = 0;
  bool causal = true;
  int window_left = -1, window_right = -1;
};

}  // namespace flashback::cuda

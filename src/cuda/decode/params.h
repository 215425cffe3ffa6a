// The plain parameter struct of the short-query paged attention kernel (DESIGN.md principle 3):
// pointers, element strides and sizes, filled by dispatch.cu from validated PagedAttentionParams.
// Device-resident index arrays (page table, rows, lengths, cu_seqlens_q) are trusted: the
// validator cannot read device memory, and the plan builds them from validated engine state.
#pragma once

#include <cstdint>

namespace flashback::cuda {

struct DecodeParams {
  const void* q = nullptr;  // [total_q, Hq, D]
  int64_t q_st = 0, q_sh = 0;
  const void* qv = nullptr;  // MLA q_nope [total_q, Hq, Dv]
  int64_t qv_st = 0, qv_sh = 0;
  // Caches addressed as (page, offset in page, head); a [slots, Hk, D] cache is P = 1.
  const void* k = nullptr;
  int64_t k_sp = 0, k_so = 0, k_sh = 0;
  const void* v = nullptr;
  int64_t v_sp = 0, v_so = 0, v_sh = 0;
  const int32_t* table = nullptr;
  int64_t table_s0 = 0, table_s1 = 0;
  bool table_holds_slots = false;
  const int32_t* table_rows = nullptr;  // optional
  int64_t table_rows_s = 0;
  const int32_t* kv_start = nullptr;  // optional
  int64_t kv_start_s = 0;
  const int32_t* seqlens = nullptr;
  int64_t seqlens_s = 0;
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
  // Split-KV workspace, [splits, total_q, Hq, Dv] partial outputs and [splits, total_q, Hq]
  // partial LSEs; used when use_workspace (more than one split, or deterministic mode).
  float* ws_o = nullptr;
  float* ws_lse = nullptr;
  bool use_workspace = false;
  // MLA absorbed with 16-bit caches on an sm_90a build and a 9.0 device: the Hopper kernel
  // (mla_wgmma.cuh) instead of kernel.cuh's (dispatch.cu decides).
  bool hopper_mla = false;

  int batch = 0, heads_q = 0, heads_kv = 0, group = 1, page_size = 1, total_q = 0;
  int max_q = 1;        // queries per entry the grid covers (the rows of row_blocks)
  int row_blocks = 1;   // CTAs along the (query, head-in-group) rows of one KV head
  int num_splits = 1;   // CTAs along the keys of one entry
  int split_chunk = 0;  // > 0: fixed keys per split (deterministic); 0: ceil(range / splits)
  // blockIdx.z counts entries longest first (entry.cuh, longest_first_entry); the
  // warps-split-keys kernel only, batches of at most kLongestFirstMax entries.
  bool longest_first = false;
  float scale = 0, softcap = 0;
  bool causal = true;
  int window_left = -1, window_right = -1;
  // Host side: whether the warps-split-keys kernel runs narrow (config.h, wk_narrow, unless
  // FLASHBACK_DECODE_NARROW=0): decided once in dispatch.cu, which plans the splits for that
  // form's layout, and read by the launcher (launch.cuh), which picks that form's instance.
  bool narrow = true;
  // Host side: the device's shared memory per block (DeviceFacts::smem_block), for decode_shape
  // (config.h). Last, so the kernels' parameter offsets are those of the fields above alone.
  int smem_block = 227 * 1024;
};

}  // namespace flashback::cuda

/// @brief The kernel entry points: paged attention with a KV cache, ragged attention,
/// merge_state and the KV store. Each takes a plain parameter struct of views; outputs, LSE and
/// workspace are caller-owned; GPU work runs on the caller's stream (an opaque handle).
/// Dispatch is on the device of the tensors (and, on the CPU, on `Exec::cpu_impl`).
#pragma once

#include <cstdint>

#include "flashback/tensor.h"

namespace flashback {

/// How an entry point runs. `stream` is a cudaStream_t for CUDA tensors (nullptr = default
/// stream) and ignored on the CPU.
struct Exec {
  enum class CpuImpl : uint8_t { kFast, kReference };
  void* stream = nullptr;
  int num_threads = 0;  ///< CPU threads; 0 = all available.
  CpuImpl cpu_impl = CpuImpl::kFast;
  bool deterministic = false;  ///< fixed split size: a request's bits do not depend on its batch.
};

/// Attention of varlen queries over a paged KV cache (SPEC.md §2, §8.1).
///
/// Batch entry b (a request, or a chunked-local virtual request) owns queries
/// `cu_seqlens_q[b] .. cu_seqlens_q[b+1]` and `cache_seqlens[b]` keys at key positions
/// `kv_start[b] + t`, t = 0..cache_seqlens[b]-1 (kv_start absent = 0). Queries are aligned
/// bottom-right: query i of q_len sits at position `cache_seqlens[b] - q_len + i` relative to the
/// entry's first key.
///
/// The slot of key position p of entry b is read through `page_table`, row
/// `row = table_rows ? table_rows[b] : b`:
///   - `table_holds_slots == false` (page ids, FA3 style): slot = table[row, p / P]·P + p % P;
///   - `table_holds_slots == true`  (SGLang's req_to_token): slot = table[row, p].
/// With P = 1 both agree. K/V pools are `[num_slots / P, P, Hk, D]` (or `[num_slots, Hk, D]`).
struct PagedAttentionParams {
  TensorView q;        ///< [total_q, Hq, D]; MLA: the rope part (D = 64).
  TensorView qv;       ///< optional [total_q, Hq, Dv]: MLA absorbed q_nope (needs v_cache = c_kv).
  TensorView k_cache;  ///< [num_pages, P, Hk, D] or [num_slots, Hk, D]
  TensorView v_cache;  ///< [num_pages, P, Hk, Dv] or [num_slots, Hk, Dv]
  TensorView page_table;  ///< int32 [rows, width]
  bool table_holds_slots = false;
  TensorView table_rows;     ///< optional int32 [B]: row of page_table for entry b.
  TensorView kv_start;       ///< optional int32 [B]: first key position of entry b.
  TensorView cache_seqlens;  ///< int32 [B]: keys of entry b.
  TensorView cu_seqlens_q;   ///< int32 [B + 1], non-decreasing, starting at 0.
  TensorView k_descale;      ///< optional f32 [B, Hk], any strides (stride 0 broadcasts).
  TensorView v_descale;      ///< optional f32 [B, Hk].
  TensorView out;            ///< [total_q, Hq, Dv], dtype of q.
  TensorView lse;  ///< optional f32 [total_q, Hq], any strides (FA3's [Hq, total_q] transposed).
  float softmax_scale = 0;  ///< 0 = (D + Dqv)^-1/2.
  bool causal = true;
  int window_left = -1;   ///< -1 = unbounded.
  int window_right = -1;  ///< -1 = unbounded (causal bounds it at 0).
  float softcap = 0;      ///< 0 = off.
  int max_seqlen_q = 0;   ///< hint; 0 = derive. When given, it bounds every entry's queries:
                          ///< on a GPU's short-query kernels (hint <= 16, or MLA absorbed),
                          ///< the rows of an entry with more come out NaN.
  int num_splits = 0;     ///< 0 = heuristic; 1 = no split-KV.
  TensorView workspace;   ///< uint8, at least paged_attention_workspace_bytes(); may be absent
                          ///< when that is 0.
};

/// Attention over contiguous varlen K/V (SPEC.md §8.2); q/k head dim may differ from v's.
struct RaggedAttentionParams {
  TensorView q;             ///< [total_q, Hq, D]
  TensorView k;             ///< [total_k, Hk, D]
  TensorView v;             ///< [total_k, Hk, Dv]
  TensorView cu_seqlens_q;  ///< int32 [B + 1]
  TensorView cu_seqlens_k;  ///< int32 [B + 1]
  TensorView out;           ///< [total_q, Hq, Dv]
  TensorView lse;           ///< optional f32 [total_q, Hq], any strides
  float softmax_scale = 0;  ///< 0 = D^-1/2
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0;
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
};

/// out = merge of two partial attention states (SPEC.md §5); out/lse may alias a's.
struct MergeStateParams {
  TensorView out_a, lse_a;  ///< [T, H, D], f32 [T, H]
  TensorView out_b, lse_b;
  TensorView out, lse;  ///< lse optional
};

/// Writes new K/V rows to cache slots (SPEC.md §6). FP8 caches store x / scale rounded to fp8;
/// the caller's tensors are never modified. MLA: pass the latent rows as `k` and leave `v` absent.
struct KVStoreParams {
  TensorView k;        ///< [T, Hk, D]
  TensorView v;        ///< optional [T, Hk, Dv]
  TensorView loc;      ///< int32 or int64 [T]: destination slot of each row
  TensorView k_cache;  ///< [num_slots, Hk, D] or [num_pages, P, Hk, D]
  TensorView v_cache;  ///< like k_cache (absent when v is)
  float k_scale = 1;   ///< used when the cache is fp8
  float v_scale = 1;
};

/// Bytes of workspace paged_attention needs for these params (0 on the CPU reference).
int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p, const Exec& exec = {});

void paged_attention(const PagedAttentionParams& p, const Exec& exec = {});
void ragged_attention(const RaggedAttentionParams& p, const Exec& exec = {});
void merge_state(const MergeStateParams& p, const Exec& exec = {});
void kv_store(const KVStoreParams& p, const Exec& exec = {});

}  // namespace flashback

/// @brief The per-forward-pass metadata (SPEC.md §3, §4, §7): lists of attention entries as flat
/// int32 arrays. An entry is one kernel batch entry — a request, or a chunked-local virtual
/// request — described by its req_to_token row, its query range and its key range; kernels look
/// slots up through req_to_token directly, so no page table is copied per forward pass. The same
/// layout lives on the host (built by src/plan) and on the device (the CUDA plan kernel).
#pragma once

#include <cstdint>

#include "flashback/batch.h"
#include "flashback/ops.h"
#include "flashback/tensor.h"

namespace flashback {

/// Attention entries of one kind (self, chunked-local or cross attention). Entry e owns queries
/// `cu_seqlens_q[e] .. cu_seqlens_q[e+1]` and `cache_seqlens[e]` keys at key positions
/// `kv_start[e] + t` of req_to_token row `table_rows[e]`. Arrays hold `capacity` entries (CUDA
/// graphs bind a prefix); `size` of them are live.
struct EntryList {
  int32_t size = 0;
  int32_t capacity = 0;
  int32_t* table_rows = nullptr;     ///< [capacity] req_to_token row.
  int32_t* kv_start = nullptr;       ///< [capacity] first key position in that row.
  int32_t* cache_seqlens = nullptr;  ///< [capacity] keys of the entry.
  int32_t* cu_seqlens_q = nullptr;   ///< [capacity + 1]
  int32_t* cu_seqlens_k = nullptr;   ///< [capacity + 1]
  int32_t* source_row = nullptr;     ///< [capacity] batch row b the entry comes from (descales).
  /// Optional explicit table (FA3 form), row e for entry e, already offset by kv_start[e]:
  /// page ids `req_to_token[r, kv_start + j·P] / P` (slots when P = 1). Entries past a length
  /// are the reserved page 0. Null unless PlanConfig::materialize_page_table.
  int32_t* page_table = nullptr;  ///< [capacity, page_table_width]
  int32_t page_table_width = 0;
  int32_t max_seqlen_q = 0;
  int32_t max_seqlen_k = 0;
  bool causal = true;
  Device device{};  ///< where the arrays live.

  int32_t total_q() const;  ///< cu_seqlens_q[size] (host lists only).
  TensorView table_rows_view() const;
  TensorView kv_start_view() const;
  TensorView cache_seqlens_view() const;
  TensorView cu_seqlens_q_view() const;
  TensorView cu_seqlens_k_view() const;
  TensorView source_row_view() const;
  TensorView page_table_view() const;  ///< absent when not materialised.
};

/// Metadata of one forward pass, shared by every layer.
struct ForwardMetadata {
  ForwardMode mode = ForwardMode::kDecode;
  int32_t batch_size = 0;
  int32_t page_size = 1;
  SpecInfo spec;
  EntryList self;   ///< one entry per request: decoder self-attention.
  EntryList local;  ///< chunked-local virtual requests (has_local).
  EntryList cross;  ///< encoder keys, non-causal (has_cross).
  bool has_local = false;
  bool has_cross = false;
  int32_t attention_chunk_size = 0;
};

/// The entries, mask and window a layer uses.
struct LayerPlan {
  const EntryList* entries = nullptr;
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
};

/// Picks the entry list of `layer` (cross, chunked-local or self) and its mask. Throws
/// flashback::Error when the metadata lacks what the layer needs.
LayerPlan plan_for_layer(const ForwardMetadata& m, const Layer& layer);

/// Fills the index fields of PagedAttentionParams (page_table, table_holds_slots, table_rows,
/// kv_start, cache_seqlens, cu_seqlens_q, causal, window, max_seqlen_q) for `lp`. With
/// `use_page_table` the explicit page table is used (FA3 form); otherwise req_to_token itself.
void bind_params(PagedAttentionParams& p, const LayerPlan& lp, const TensorView& req_to_token,
                 bool use_page_table = false);

}  // namespace flashback

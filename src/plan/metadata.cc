// EntryList views and the per-layer selection of entries (the glue between the plan and
// PagedAttentionParams).
#include "flashback/metadata.h"

#include <string>

namespace flashback {

const char* forward_mode_name(ForwardMode m) {
  switch (m) {
    case ForwardMode::kDecode:
      return "DECODE";
    case ForwardMode::kIdle:
      return "IDLE";
    case ForwardMode::kTargetVerify:
      return "TARGET_VERIFY";
    case ForwardMode::kExtend:
      return "EXTEND";
    case ForwardMode::kDraftExtend:
      return "DRAFT_EXTEND";
    case ForwardMode::kMixed:
      return "MIXED";
  }
  return "?";
}

namespace {
TensorView i32(int32_t* p, int64_t n, Device d) {
  return p == nullptr ? TensorView{} : TensorView(p, DType::kI32, {n}, d);
}
}  // namespace

int32_t EntryList::total_q() const { return cu_seqlens_q == nullptr ? 0 : cu_seqlens_q[size]; }
TensorView EntryList::table_rows_view() const { return i32(table_rows, size, device); }
TensorView EntryList::kv_start_view() const { return i32(kv_start, size, device); }
TensorView EntryList::cache_seqlens_view() const { return i32(cache_seqlens, size, device); }
TensorView EntryList::cu_seqlens_q_view() const { return i32(cu_seqlens_q, size + 1, device); }
TensorView EntryList::cu_seqlens_k_view() const { return i32(cu_seqlens_k, size + 1, device); }
TensorView EntryList::source_row_view() const { return i32(source_row, size, device); }
TensorView EntryList::page_table_view() const {
  if (page_table == nullptr) return {};
  return TensorView(page_table, DType::kI32, {size, page_table_width}, device);
}

LayerPlan plan_for_layer(const ForwardMetadata& m, const Layer& layer) {
  LayerPlan lp;
  if (layer.is_cross_attention) {
    // Encoder keys: no causal mask, no window (SPEC.md §4).
    FLASHBACK_CHECK(m.has_cross, "layer.is_cross_attention",
                    "encoder metadata (encoder_lens in the forward batch)", "none");
    lp.entries = &m.cross;
    lp.causal = false;
    return lp;
  }
  if (layer.uses_chunked_local_attention) {
    FLASHBACK_CHECK(m.has_local, "layer.uses_chunked_local_attention",
                    "chunked-local metadata (attention_chunk_size > 0 in the plan config)", "none");
    lp.entries = &m.local;
  } else {
    lp.entries = &m.self;
  }
  lp.causal = true;
  FLASHBACK_CHECK(layer.sliding_window_size >= -1, "layer.sliding_window_size", ">= -1 (-1 = off)",
                  std::to_string(layer.sliding_window_size));
  if (layer.sliding_window_size > -1) {
    lp.window_left = layer.sliding_window_size;
    lp.window_right = 0;
  }
  return lp;
}

void bind_params(PagedAttentionParams& p, const LayerPlan& lp, const TensorView& req_to_token,
                 bool use_page_table) {
  const EntryList& l = *lp.entries;
  if (use_page_table) {
    FLASHBACK_CHECK(l.page_table != nullptr, "use_page_table",
                    "a materialised page table (PlanConfig::materialize_page_table)", "none");
    // FA3 form: row e of the table already starts at the entry's first key.
    p.page_table = l.page_table_view();
    p.table_holds_slots = false;
    p.table_rows = {};
    p.kv_start = {};
  } else {
    p.page_table = req_to_token;
    p.table_holds_slots = true;
    p.table_rows = l.table_rows_view();
    p.kv_start = l.kv_start_view();
  }
  p.cache_seqlens = l.cache_seqlens_view();
  p.cu_seqlens_q = l.cu_seqlens_q_view();
  p.max_seqlen_q = l.max_seqlen_q;
  p.causal = lp.causal;
  p.window_left = lp.window_left;
  p.window_right = lp.window_right;
}

}  // namespace flashback

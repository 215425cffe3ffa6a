#include <algorithm>

#include "plan/build.h"
#include "plan/plan.h"
#include "plan/rows.h"

namespace flashback::plan {

using detail::concat;

void validate_config(const PlanConfig& cfg) {
  FLASHBACK_CHECK(cfg.page_size >= 1, "page_size", ">= 1", concat(cfg.page_size));
  FLASHBACK_CHECK(cfg.attention_chunk_size >= 0, "attention_chunk_size", ">= 0 (0 = off)",
                  concat(cfg.attention_chunk_size));
  // A chunk that starts inside a page cannot be described by whole pages (and the kernels'
  // page walk assumes page-aligned starts).
  FLASHBACK_CHECK(cfg.attention_chunk_size % cfg.page_size == 0, "attention_chunk_size",
                  concat("a multiple of page_size ", cfg.page_size),
                  concat(cfg.attention_chunk_size));
  FLASHBACK_CHECK(cfg.cuda_graph_fill_seq_len >= 0, "cuda_graph_fill_seq_len", ">= 0",
                  concat(cfg.cuda_graph_fill_seq_len));
  FLASHBACK_CHECK(cfg.cuda_graph_padding_row >= 0, "cuda_graph_padding_row", ">= 0",
                  concat(cfg.cuda_graph_padding_row));
  FLASHBACK_CHECK(cfg.max_draft_tokens >= 0, "max_draft_tokens", ">= 0",
                  concat(cfg.max_draft_tokens));
}

Planner::Planner(PlanConfig cfg) : cfg_(cfg) { validate_config(cfg_); }

const ForwardMetadata& Planner::plan(const ForwardBatch& batch) {
  const BatchRows rows(cfg_, batch, batch.batch_size);
  const Layout layout = fresh_layout(cfg_, rows);
  const size_t n = arena_elements(layout);
  // Grow only: a steady stream of similar batches plans without allocating.
  if (arena_.size() < n) arena_.resize(std::max(n, arena_.size() * 2));
  carve(layout, arena_.data(), meta_);
  write_metadata(cfg_, rows, meta_);
  return meta_;
}

CudaGraphPlanState::CudaGraphPlanState(PlanConfig cfg, int32_t max_bs, int32_t max_context_len)
    : cfg_(cfg), max_bs_(max_bs), max_context_len_(max_context_len) {
  validate_config(cfg_);
  FLASHBACK_CHECK(max_bs >= 0, "max_bs", ">= 0", concat(max_bs));
  FLASHBACK_CHECK(max_context_len >= 1, "max_context_len", ">= 1", concat(max_context_len));
  const Layout L = graph_layout(cfg_, max_bs, max_context_len);
  arena_.assign(arena_elements(L), 0);
  carve(L, arena_.data(), buffers_);
}

ForwardMetadata CudaGraphPlanState::bind(const ForwardBatch& batch) {
  const ForwardMode mode = batch.forward_mode;
  FLASHBACK_CHECK(is_decode_or_idle(mode) || mode == ForwardMode::kTargetVerify, "forward_mode",
                  "DECODE, IDLE or TARGET_VERIFY (the modes captured in CUDA graphs)",
                  forward_mode_name(mode));
  FLASHBACK_CHECK(batch.batch_size >= 0 && batch.batch_size <= max_bs_, "batch_size",
                  concat("0 ..", max_bs_, " (max_bs of init_cuda_graph_state)"),
                  concat(batch.batch_size));
  if (mode == ForwardMode::kTargetVerify)
    FLASHBACK_CHECK(batch.spec.num_draft_tokens <= cfg_.max_draft_tokens, "spec.num_draft_tokens",
                    concat("<= max_draft_tokens ", cfg_.max_draft_tokens, " of the graph state"),
                    concat(batch.spec.num_draft_tokens));
  ForwardMetadata m = buffers_;
  m.mode = mode;
  m.spec = batch.spec;
  m.batch_size = batch.batch_size;
  m.has_cross = batch.encoder_lens.defined() || batch.encoder_lens_cpu.defined();
  update(m, batch);
  return m;
}

void CudaGraphPlanState::update(ForwardMetadata& m, const ForwardBatch& batch) {
  FLASHBACK_CHECK(m.self.table_rows == buffers_.self.table_rows, "metadata",
                  "metadata bound by this CUDA-graph state", "other metadata");
  FLASHBACK_CHECK(is_decode_or_idle(batch.forward_mode) == is_decode_or_idle(m.mode) &&
                      (is_decode_or_idle(m.mode) || batch.forward_mode == m.mode),
                  "forward_mode", concat(forward_mode_name(m.mode), " (the bound mode)"),
                  forward_mode_name(batch.forward_mode));
  FLASHBACK_CHECK(batch.spec.draft_step == m.spec.draft_step, "spec.draft_step",
                  concat(m.spec.draft_step, " (the bound step)"), concat(batch.spec.draft_step));
  FLASHBACK_CHECK(batch.spec.num_draft_tokens == m.spec.num_draft_tokens ||
                      !(m.mode == ForwardMode::kTargetVerify),
                  "spec.num_draft_tokens", concat(m.spec.num_draft_tokens, " (the bound N)"),
                  concat(batch.spec.num_draft_tokens));
  const bool enc = batch.encoder_lens.defined() || batch.encoder_lens_cpu.defined();
  FLASHBACK_CHECK(enc == m.has_cross, "encoder_lens",
                  m.has_cross ? "encoder lengths (bound with them)" : "none (bound without)",
                  enc ? "encoder lengths" : "none");
  const BatchRows rows(cfg_, batch, m.batch_size, max_context_len_);
  const int32_t bound = m.batch_size;
  write_metadata(cfg_, rows, m);
  m.batch_size = bound;
  m.mode = batch.forward_mode;
}

MultiStepDraftPlanner::MultiStepDraftPlanner(PlanConfig cfg, int32_t num_steps)
    : cfg_(cfg), num_steps_(num_steps) {
  FLASHBACK_CHECK(num_steps >= 1, "num_steps", ">= 1", concat(num_steps));
  validate_config(cfg_);
  // The last step only samples: no attention, so no plan.
  for (int32_t s = 0; s + 1 < num_steps; ++s) planners_.emplace_back(cfg_);
  last_.resize(planners_.size());
}

namespace {
ForwardBatch step_batch(const ForwardBatch& batch, int32_t step) {
  FLASHBACK_CHECK(batch.forward_mode == ForwardMode::kDecode, "forward_mode",
                  "DECODE (a draft decode batch)", forward_mode_name(batch.forward_mode));
  ForwardBatch b = batch;
  b.spec.draft_step = step;
  return b;
}
}  // namespace

std::span<const ForwardMetadata> MultiStepDraftPlanner::plan(const ForwardBatch& batch) {
  for (size_t s = 0; s < planners_.size(); ++s)
    last_[s] = planners_[s].plan(step_batch(batch, static_cast<int32_t>(s)));
  return last_;
}

void MultiStepDraftPlanner::init_cuda_graph_state(int32_t max_bs, int32_t max_context_len) {
  graphs_.clear();
  for (size_t s = 0; s < planners_.size(); ++s)
    graphs_.push_back(std::make_unique<CudaGraphPlanState>(cfg_, max_bs, max_context_len));
}

std::vector<ForwardMetadata> MultiStepDraftPlanner::bind(const ForwardBatch& batch) {
  FLASHBACK_CHECK(graphs_.size() == planners_.size(), "init_cuda_graph_state", "called before bind",
                  "not called");
  std::vector<ForwardMetadata> out;
  for (size_t s = 0; s < graphs_.size(); ++s)
    out.push_back(graphs_[s]->bind(step_batch(batch, static_cast<int32_t>(s))));
  return out;
}

void MultiStepDraftPlanner::update(std::span<ForwardMetadata> steps, const ForwardBatch& batch) {
  FLASHBACK_CHECK(steps.size() == graphs_.size(), "steps",
                  concat(graphs_.size(), " bound step metadata"), concat(steps.size()));
  for (size_t s = 0; s < graphs_.size(); ++s)
    graphs_[s]->update(steps[s], step_batch(batch, static_cast<int32_t>(s)));
}

}  // namespace flashback::plan

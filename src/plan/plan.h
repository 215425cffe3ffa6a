// The plan layer's entry points (SPEC.md §3, §4, §7): from a ForwardBatch, build the
// ForwardMetadata of include/flashback/metadata.h on the host. Three users:
//   - Planner: a fresh build per forward pass (storage reused, so no allocation once warm);
//   - CudaGraphPlanState: buffers preallocated for the worst case, bound to a batch size and
//     rewritten in place on replay (pointers never change);
//   - MultiStepDraftPlanner: one plan per draft step 0..num_steps-2.
// No CUDA headers: the GPU plan kernel fills the same layout on the device.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "flashback/batch.h"
#include "flashback/metadata.h"

namespace flashback::plan {

struct PlanConfig {
  int32_t page_size = 1;                ///< P.
  int32_t attention_chunk_size = 0;     ///< C > 0: build chunked-local virtual requests.
  bool materialize_page_table = false;  ///< also build explicit page tables (FA3 form).
  int32_t cuda_graph_fill_seq_len = 1;  ///< seq_lens of padded graph rows.
  int32_t cuda_graph_padding_row = 0;   ///< req_to_token row of padded graph rows.
  int32_t max_draft_tokens = 0;  ///< CUDA graphs: largest TARGET_VERIFY N to size buffers for.
};

/// Throws flashback::Error when the configuration itself is unusable (e.g. a chunk that is not a
/// multiple of the page size).
void validate_config(const PlanConfig& cfg);

/// Chunked-local entries reserved per request in modes with a fixed layout (decode, draft decode,
/// verify: what N consecutive query positions can touch); 0 = compact layout (extend modes).
int32_t local_entries_per_request(ForwardMode mode, int32_t num_draft_tokens, int32_t chunk);

class Planner {
 public:
  explicit Planner(PlanConfig cfg);
  const PlanConfig& config() const { return cfg_; }
  /// Builds the metadata of `batch`. The result views storage owned by the planner and stays
  /// valid until the next call.
  const ForwardMetadata& plan(const ForwardBatch& batch);
  /// The storage every array of the last plan points into (one block, for a device mirror).
  const std::vector<int32_t>& arena() const { return arena_; }

 private:
  PlanConfig cfg_;
  std::vector<int32_t> arena_;
  ForwardMetadata meta_;
};

class CudaGraphPlanState {
 public:
  /// Preallocates every buffer for up to `max_bs` requests of up to `max_context_len` tokens
  /// (incl. encoder tokens and draft tokens), with `cfg.max_draft_tokens` for verify.
  CudaGraphPlanState(PlanConfig cfg, int32_t max_bs, int32_t max_context_len);
  CudaGraphPlanState(const CudaGraphPlanState&) = delete;
  CudaGraphPlanState& operator=(const CudaGraphPlanState&) = delete;

  /// Capture: fixes mode, batch size (= batch.batch_size), draft step / N and whether encoder
  /// metadata exists, and writes the metadata of `batch` into the buffers.
  ForwardMetadata bind(const ForwardBatch& batch);
  /// Replay: rewrites `m`'s buffers in place from `batch` (batch_size <= the bound size; rows past
  /// it are padded with the fill length and the padding row). Pointers never change.
  void update(ForwardMetadata& m, const ForwardBatch& batch);

  int32_t max_bs() const { return max_bs_; }
  /// The storage every bound array points into (fixed for the state's lifetime).
  const std::vector<int32_t>& arena() const { return arena_; }
  int32_t max_context_len() const { return max_context_len_; }
  const PlanConfig& config() const { return cfg_; }

 private:
  PlanConfig cfg_;
  int32_t max_bs_, max_context_len_;
  std::vector<int32_t> arena_;  // sized once; never resized
  ForwardMetadata buffers_;     // capacity views of the arena
};

/// The multi-step draft backend: one plan per attention-running step 0..num_steps-2.
class MultiStepDraftPlanner {
 public:
  MultiStepDraftPlanner(PlanConfig cfg, int32_t num_steps);
  int32_t num_steps() const { return num_steps_; }
  /// `batch` is the draft decode batch (kDecode); its spec.draft_step is ignored.
  std::span<const ForwardMetadata> plan(const ForwardBatch& batch);

  void init_cuda_graph_state(int32_t max_bs, int32_t max_context_len);
  std::vector<ForwardMetadata> bind(const ForwardBatch& batch);
  void update(std::span<ForwardMetadata> steps, const ForwardBatch& batch);

 private:
  PlanConfig cfg_;
  int32_t num_steps_;
  std::vector<Planner> planners_;
  std::vector<ForwardMetadata> last_;
  std::vector<std::unique_ptr<CudaGraphPlanState>> graphs_;
};

}  // namespace flashback::plan

// The plan's device side (SPEC.md §7, issue #6): for the modes captured in CUDA graphs (DECODE /
// IDLE, draft decode, TARGET_VERIFY) the metadata of a batch is written on the GPU, from device
// req_pool_indices / seq_lens / encoder_lens, in one kernel launch with no host synchronisation,
// into buffers laid out exactly like plan::CudaGraphPlanState's (plan::graph_layout + carve).
// Replay rewrites them in place (same pointers), so a captured graph of plan + attention replays
// with new lengths. Values equal plan::CudaGraphPlanState::update's (tests/cuda/test_device_plan).
// Host-side fields that would need the data (max_seqlen_k) hold the capacity bound instead.
// No CUDA headers.
#pragma once

#include <cstdint>

#include "flashback/batch.h"
#include "flashback/metadata.h"
#include "plan/plan.h"

namespace flashback::cuda {

class DeviceGraphPlanState {
 public:
  /// Allocates (cudaMalloc, current device) every buffer for up to max_bs requests of up to
  /// max_context_len tokens.
  DeviceGraphPlanState(plan::PlanConfig cfg, int32_t max_bs, int32_t max_context_len);
  ~DeviceGraphPlanState();
  DeviceGraphPlanState(const DeviceGraphPlanState&) = delete;
  DeviceGraphPlanState& operator=(const DeviceGraphPlanState&) = delete;

  /// Capture: fixes mode, batch size, draft step / N and encoder presence (host fields), then
  /// writes the device arrays (one launch on `stream`, a cudaStream_t).
  ForwardMetadata bind(const ForwardBatch& batch, void* stream);
  /// Replay: one launch on `stream` rewrites m's device arrays from batch's device views; rows
  /// past batch.batch_size are padded with the fill length and the padding row. Capturable.
  void update(ForwardMetadata& m, const ForwardBatch& batch, void* stream);

 private:
  plan::PlanConfig cfg_;
  int32_t max_bs_, max_context_len_;
  int32_t* arena_ = nullptr;
  ForwardMetadata buffers_;
};

}  // namespace flashback::cuda

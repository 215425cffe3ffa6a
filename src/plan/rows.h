// Validated, per-request view of a ForwardBatch: the mode's definition (SPEC.md §3) turned into
// one (row, q_len, kv_len, encoder_len) per request. Every check that could otherwise lead to an
// out-of-bounds read happens here, before anything is written.
#pragma once

#include <cstdint>

#include "flashback/batch.h"
#include "plan/plan.h"

namespace flashback::plan {

/// A 1-D int32/int64 host array with any stride.
struct IndexArray {
  const void* data = nullptr;
  bool is64 = false;
  int64_t stride = 1;
  int64_t size = 0;
  bool present = false;  // given by the engine (data may be null when empty)
  bool defined() const { return present; }
  int64_t operator[](int64_t i) const {
    return is64 ? static_cast<const int64_t*>(data)[i * stride]
                : static_cast<const int32_t*>(data)[i * stride];
  }
};

/// The host copy (`cpu` when given, else `main`) of an index array of n entries. Throws
/// flashback::Error naming `name` when it is missing (and required), not 1-D int32/int64, not
/// on the host or of the wrong size.
IndexArray host_index(const TensorView& main, const TensorView& cpu, const char* name, int64_t n,
                      bool required);

struct RowInfo {
  int32_t row;     // req_to_token row
  int32_t q_len;   // new tokens (queries)
  int32_t kv_len;  // decoder keys incl. this step's (and draft) tokens
  int32_t enc;     // encoder keys, stored before the decoder's in the row
};

class BatchRows {
 public:
  /// Validates `batch` for planning `padded_bs` >= batch.batch_size rows (rows past the batch are
  /// CUDA-graph padding) with keys limited to `max_context_len` columns (-1: req_to_token width).
  BatchRows(const PlanConfig& cfg, const ForwardBatch& batch, int32_t padded_bs,
            int64_t max_context_len = -1);

  RowInfo operator()(int32_t b) const {
    if (b >= real_bs_) return {cfg_.cuda_graph_padding_row, q_fixed_, pad_kv_, 0};
    const int32_t seq = static_cast<int32_t>(seq_[b]);
    return {static_cast<int32_t>(rows_[b]), q_fixed_ > 0 ? q_fixed_ : static_cast<int32_t>(ext_[b]),
            seq + kv_extra_, enc_.defined() ? static_cast<int32_t>(enc_[b]) : 0};
  }
  int32_t size() const { return padded_bs_; }
  int32_t real_size() const { return real_bs_; }
  bool has_encoder() const { return enc_.defined(); }
  const ForwardBatch& batch() const { return batch_; }
  const TensorView& req_to_token() const { return batch_.req_to_token; }

 private:
  const PlanConfig& cfg_;
  const ForwardBatch& batch_;
  int32_t real_bs_ = 0, padded_bs_ = 0;
  int32_t q_fixed_ = 0;   // q per request for decode/verify; 0 = extend_seq_lens
  int32_t kv_extra_ = 0;  // added to seq_lens: draft step + 1 or N
  int32_t pad_kv_ = 0;
  IndexArray rows_, seq_, ext_, enc_;
};

}  // namespace flashback::plan

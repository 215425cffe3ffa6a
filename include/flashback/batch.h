/// @brief What the engine hands the backend (SPEC.md §1): ForwardMode, ForwardBatch (one forward
/// pass) and Layer (one attention layer). Plain structs of TensorViews and scalars, so an engine
/// can fill them from its own tensors (DLPack) without copying.
#pragma once

#include <cstdint>

#include "flashback/tensor.h"

namespace flashback {

/// The kind of forward pass (SPEC.md §3). A draft decode step is kDecode with
/// `SpecInfo::draft_step >= 0`, as in the engine.
enum class ForwardMode : uint8_t {
  kDecode,
  kIdle,          ///< an empty batch (batch_size may be 0); planned like kDecode.
  kTargetVerify,  ///< N draft tokens per request (chain, topk = 1).
  kExtend,
  kDraftExtend,
  kMixed,  ///< extend and decode requests in one batch; planned like kExtend.
};

const char* forward_mode_name(ForwardMode m);
constexpr bool is_decode_or_idle(ForwardMode m) {
  return m == ForwardMode::kDecode || m == ForwardMode::kIdle;
}
constexpr bool is_extend_like(ForwardMode m) {
  return m == ForwardMode::kExtend || m == ForwardMode::kDraftExtend || m == ForwardMode::kMixed;
}

/// Speculative-decoding parameters of a forward pass (EAGLE chain, topk = 1).
struct SpecInfo {
  int32_t draft_step = -1;       ///< kDecode: step s of a multi-step draft (-1 = plain decode).
  int32_t num_draft_tokens = 0;  ///< kTargetVerify: N draft tokens per request.
};

/// One forward pass. Index arrays are 1-D int32 or int64 views with any stride. The host plan
/// reads the `*_cpu` copies (or the main view when it is already on the CPU); device views are
/// for the GPU plan. Absent optional arrays are default-constructed views.
struct ForwardBatch {
  ForwardMode forward_mode = ForwardMode::kDecode;
  int32_t batch_size = 0;

  TensorView req_to_token;      ///< int32 [max_reqs, max_context_len]: slot of token t of row r.
  TensorView req_pool_indices;  ///< [B]: row of req_to_token of request b.
  TensorView req_pool_indices_cpu;
  TensorView seq_lens;  ///< [B]: committed tokens incl. this step's (draft tokens excluded).
  TensorView seq_lens_cpu;
  TensorView out_cache_loc;  ///< [num_tokens]: slots of this step's new K/V (not read by the plan).

  TensorView extend_seq_lens;  ///< extend modes: [B] new tokens per request.
  TensorView extend_seq_lens_cpu;
  TensorView extend_prefix_lens;  ///< extend modes, optional: [B] cached prefix per request.
  TensorView extend_prefix_lens_cpu;

  TensorView encoder_lens;  ///< encoder-decoder models, optional: [B] encoder tokens.
  TensorView encoder_lens_cpu;
  TensorView encoder_out_cache_loc;

  SpecInfo spec;
};

/// One attention layer (per tensor-parallel rank).
struct Layer {
  int32_t layer_id = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t v_head_dim = 0;
  float scaling = 0;                 ///< softmax scale (0 = kernel default).
  float logit_cap = 0;               ///< 0 = off.
  int32_t sliding_window_size = -1;  ///< -1 = off; W - 1 for a window of W keys.
  bool is_cross_attention = false;
  bool uses_chunked_local_attention = false;
  float k_scale = 1;
  float v_scale = 1;
};

}  // namespace flashback

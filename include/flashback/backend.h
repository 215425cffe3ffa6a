/// @brief AttentionBackend — what an engine calls once per attention layer per forward pass
/// (SGLang's FlashAttentionBackend, SPEC.md §3–§7): metadata once per forward pass
/// (`init_forward_metadata`), then `forward` per layer, which writes this step's K/V into the
/// cache and attends through the kernels of ops.h. Also the CUDA-graph API and the multi-step
/// draft backend. No CUDA headers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "flashback/batch.h"
#include "flashback/metadata.h"
#include "flashback/ops.h"
#include "flashback/tensor.h"

namespace flashback {

namespace plan {
class Planner;
class CudaGraphPlanState;
}  // namespace plan

struct BackendConfig {
  int32_t page_size = 1;                ///< P of the KV pools.
  int32_t attention_chunk_size = 0;     ///< C for chunked-local layers (0 = model has none).
  bool deterministic = false;           ///< batch-invariant kernels (fixed split size).
  int num_threads = 0;                  ///< CPU threads (0 = all).
  void* stream = nullptr;               ///< cudaStream_t for CUDA tensors (see set_stream).
  Device device{};                      ///< where req_to_token, the KV pools and q/k/v live. CUDA:
                                        ///< the host-built metadata is mirrored to the device.
                                        ///< Taken from req_to_token when that is on a GPU.
  bool use_page_table = false;          ///< kernels read an explicit page table (FA3 form) instead
                                        ///< of req_to_token (the default: nothing copied per pass).
  int32_t cuda_graph_fill_seq_len = 1;  ///< seq_len of padded CUDA-graph rows.
  int32_t max_draft_tokens = 0;         ///< largest TARGET_VERIFY N a graph is captured for.
};

/// A layer's KV cache. MHA: `k_cache` `[num_pages, P, Hk, D]`, `v_cache` `[.., Dv]`.
/// MLA: `k_cache` is the latent buffer `[num_pages, P, 1, R + Dr]` and `v_cache` is absent.
/// FP8 caches are stored scaled by the layer's k_scale / v_scale.
struct LayerCache {
  TensorView k_cache;
  TensorView v_cache;
};

/// MLA chunked-prefix: the prefix chunk `chunk` of each request is described by
/// `cu_seq_lens` (int32 [B + 1], keys of this chunk per request) — SPEC.md §5.
struct PrefixChunk {
  TensorView cu_seq_lens;
  int32_t max_seq_len = 0;
};

class AttentionBackend {
 public:
  explicit AttentionBackend(BackendConfig config);
  ~AttentionBackend();
  AttentionBackend(const AttentionBackend&) = delete;
  AttentionBackend& operator=(const AttentionBackend&) = delete;
  const BackendConfig& config() const { return cfg_; }
  /// The stream later calls run on (an engine capturing a CUDA graph on its own stream sets it).
  void set_stream(void* stream) { cfg_.stream = stream; }

  /// Builds the metadata of `batch`, shared by every layer of this forward pass. On the host
  /// from the `*_cpu` copies; with a CUDA device the arrays are then copied to a device mirror
  /// (one asynchronous copy on the stream).
  void init_forward_metadata(const ForwardBatch& batch);
  const ForwardMetadata& metadata() const;  ///< the host copy

  /// One attention layer. `q` `[T, Hq, D]` (MLA absorbed: `[T, Hq, R + Dr]`, q_nope first);
  /// `k`/`v` this step's new rows `[T, Hk, D]` / `[T, Hk, Dv]` (MLA: `k` the latent rows
  /// `[T, 1, R + Dr]`, `v` absent; cross attention: the encoder rows, or absent when already
  /// cached); `out` `[T, Hq, Dv]` (MLA: `[T, Hq, R]`), caller-owned; `lse` optional f32 `[T, Hq]`.
  /// With `save_kv`, k/v are written to `out_cache_loc` (cross: `encoder_out_cache_loc`) first.
  /// DECODE/IDLE go to forward_decode, every other mode to forward_extend.
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const Layer& layer, const ForwardBatch& batch, const LayerCache& cache,
               bool save_kv = true, const TensorView& lse = {});
  void forward_extend(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const Layer& layer, const ForwardBatch& batch,
                      const LayerCache& cache, bool save_kv = true, const TensorView& lse = {});
  void forward_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const Layer& layer, const ForwardBatch& batch,
                      const LayerCache& cache, bool save_kv = true, const TensorView& lse = {});

  /// MLA chunked-prefix MHA (SPEC.md §5). `forward_extend_mha`: the new tokens attend to
  /// themselves causally (q/k `[T, H, 192]`, v `[T, H, 128]`, contiguous per request as
  /// extend_seq_lens says); `forward_prefix_chunk`: the new tokens attend to one decompressed
  /// prefix chunk non-causally (k/v `[chunk tokens, H, ..]`). Both write out and lse `[T, H]`;
  /// the model combines them with merge_state. Neither saves K/V.
  void forward_extend_mha(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const TensorView& lse, const ForwardBatch& batch);
  void forward_prefix_chunk(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const TensorView& lse, const ForwardBatch& batch,
                            const PrefixChunk& chunk);

  /// CUDA graphs (SPEC.md §7): preallocate for `max_bs` requests of `max_context_len` tokens;
  /// capture binds `batch`'s batch size and mode; replay rewrites the same buffers in place.
  void init_cuda_graph_state(int32_t max_bs, int32_t max_context_len);
  void init_forward_metadata_capture_cuda_graph(const ForwardBatch& batch);
  void init_forward_metadata_replay_cuda_graph(const ForwardBatch& batch);

 private:
  void attend(const TensorView& q, const TensorView& out, const TensorView& lse, const Layer& layer,
              const ForwardBatch& batch, const LayerCache& cache);
  void save(const TensorView& k, const TensorView& v, const Layer& layer, const ForwardBatch& batch,
            const LayerCache& cache);

  struct DeviceState;  // device mirror of the metadata + per-layer descales (CUDA builds)
  void mirror(const std::vector<int32_t>& arena);
  void adopt_device(const ForwardBatch& batch);
  TensorView descale(const Layer& layer, bool mla, int64_t entries, int64_t heads_kv);

  BackendConfig cfg_;
  std::unique_ptr<DeviceState> dev_;
  ForwardMetadata dev_meta_;  // meta_ with every array in the device mirror
  std::unique_ptr<plan::Planner> planner_;
  std::unique_ptr<plan::CudaGraphPlanState> graph_;
  ForwardMetadata graph_meta_;
  const ForwardMetadata* meta_ = nullptr;
  Tensor descale_host_;  // {k_scale, v_scale} of the current layer (host tensors)
};

/// The multi-step draft backend: one AttentionBackend per draft step 0..num_steps-1 (the last
/// step runs no attention), planned together.
class MultiStepDraftBackend {
 public:
  MultiStepDraftBackend(BackendConfig config, int32_t num_steps);
  int32_t num_steps() const { return static_cast<int32_t>(steps_.size()) + 1; }
  /// Plans every step from the draft decode batch (its spec.draft_step is set per step).
  void init_forward_metadata(const ForwardBatch& batch);
  AttentionBackend& step(int32_t s);  ///< s in [0, num_steps - 1)
  void init_cuda_graph_state(int32_t max_bs, int32_t max_context_len);
  void init_forward_metadata_capture_cuda_graph(const ForwardBatch& batch);
  void init_forward_metadata_replay_cuda_graph(const ForwardBatch& batch);

 private:
  std::vector<std::unique_ptr<AttentionBackend>> steps_;
};

}  // namespace flashback

// AttentionBackend: metadata once per forward pass (src/plan), then per layer: write this step's
// K/V (kv_store), pick the layer's entries (self / chunked-local / cross), bind them into
// PagedAttentionParams and call the kernels of ops.h. No attention math lives here.
#include "flashback/backend.h"

#include <string>

#include "common/validate.h"
#include "plan/plan.h"

namespace flashback {

using detail::concat;

namespace {

plan::PlanConfig plan_config(const BackendConfig& c) {
  plan::PlanConfig p;
  p.page_size = c.page_size;
  p.attention_chunk_size = c.attention_chunk_size;
  p.materialize_page_table = c.use_page_table;
  p.cuda_graph_fill_seq_len = c.cuda_graph_fill_seq_len;
  p.max_draft_tokens = c.max_draft_tokens;
  return p;
}

void expect_heads(const TensorView& t, const char* name, int64_t heads, int64_t dim,
                  const char* what) {
  detail::expect_rank(t, name, 3);
  FLASHBACK_CHECK(t.shape[1] == heads && t.shape[2] == dim, name,
                  concat("[tokens, ", heads, ", ", dim, "] (", what, ")"), t.shape_str());
}

bool is_mla(const LayerCache& c) { return !c.v_cache.defined(); }

}  // namespace

AttentionBackend::AttentionBackend(BackendConfig config)
    : cfg_(config), planner_(std::make_unique<plan::Planner>(plan_config(config))) {
  FLASHBACK_CHECK(cfg_.num_threads >= 0, "num_threads", ">= 0 (0 = all)",
                  std::to_string(cfg_.num_threads));
}

AttentionBackend::~AttentionBackend() = default;

const ForwardMetadata& AttentionBackend::metadata() const {
  FLASHBACK_CHECK(meta_ != nullptr, "metadata", "init_forward_metadata() called first",
                  "no metadata");
  return *meta_;
}

void AttentionBackend::init_forward_metadata(const ForwardBatch& batch) {
  meta_ = &planner_->plan(batch);
}

void AttentionBackend::init_cuda_graph_state(int32_t max_bs, int32_t max_context_len) {
  graph_ = std::make_unique<plan::CudaGraphPlanState>(plan_config(cfg_), max_bs, max_context_len);
}

void AttentionBackend::init_forward_metadata_capture_cuda_graph(const ForwardBatch& batch) {
  FLASHBACK_CHECK(graph_ != nullptr, "init_forward_metadata_capture_cuda_graph",
                  "init_cuda_graph_state() called first", "no graph state");
  graph_meta_ = graph_->bind(batch);
  meta_ = &graph_meta_;
}

void AttentionBackend::init_forward_metadata_replay_cuda_graph(const ForwardBatch& batch) {
  FLASHBACK_CHECK(graph_ != nullptr && graph_meta_.self.capacity > 0,
                  "init_forward_metadata_replay_cuda_graph", "a captured graph (capture first)",
                  "none");
  graph_->update(graph_meta_, batch);
  meta_ = &graph_meta_;
}

void AttentionBackend::forward(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const Layer& layer, const ForwardBatch& batch,
                               const LayerCache& cache, bool save_kv, const TensorView& lse) {
  if (is_decode_or_idle(batch.forward_mode))
    forward_decode(q, k, v, out, layer, batch, cache, save_kv, lse);
  else
    forward_extend(q, k, v, out, layer, batch, cache, save_kv, lse);
}

void AttentionBackend::forward_extend(const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const Layer& layer,
                                      const ForwardBatch& batch, const LayerCache& cache,
                                      bool save_kv, const TensorView& lse) {
  FLASHBACK_CHECK(!is_decode_or_idle(batch.forward_mode), "forward_mode",
                  "an extend-like mode for forward_extend", forward_mode_name(batch.forward_mode));
  if (save_kv && k.defined()) save(k, v, layer, batch, cache);
  attend(q, out, lse, layer, batch, cache);
}

void AttentionBackend::forward_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const Layer& layer,
                                      const ForwardBatch& batch, const LayerCache& cache,
                                      bool save_kv, const TensorView& lse) {
  FLASHBACK_CHECK(is_decode_or_idle(batch.forward_mode), "forward_mode",
                  "DECODE or IDLE for forward_decode", forward_mode_name(batch.forward_mode));
  if (save_kv && k.defined()) save(k, v, layer, batch, cache);
  attend(q, out, lse, layer, batch, cache);
}

void AttentionBackend::save(const TensorView& k, const TensorView& v, const Layer& layer,
                            const ForwardBatch& batch, const LayerCache& cache) {
  const bool cross = layer.is_cross_attention;
  const TensorView& loc = cross ? batch.encoder_out_cache_loc : batch.out_cache_loc;
  const char* loc_name = cross ? "encoder_out_cache_loc" : "out_cache_loc";
  detail::expect_rank(loc, loc_name, 1);
  detail::expect_rank(k, "k", 3);
  FLASHBACK_CHECK(loc.shape[0] == k.shape[0], loc_name,
                  concat(k.shape[0], " slots (one per new k row)"), std::to_string(loc.shape[0]));
  KVStoreParams s;
  s.k = k;
  s.loc = loc;
  s.k_cache = cache.k_cache;
  s.k_scale = layer.k_scale;
  s.v_scale = layer.v_scale;
  if (is_mla(cache)) {
    FLASHBACK_CHECK(!v.defined(), "v", "absent for an MLA layer (the latent row is k)", "a tensor");
    expect_heads(k, "k", 1, layer.head_dim, "MLA latent rows");
  } else {
    expect_heads(k, "k", layer.num_kv_heads, layer.head_dim, "layer KV heads x head_dim");
    expect_heads(v, "v", layer.num_kv_heads, layer.v_head_dim, "layer KV heads x v_head_dim");
    s.v = v;
    s.v_cache = cache.v_cache;
  }
  kv_store(s, Exec{cfg_.stream, cfg_.num_threads, Exec::CpuImpl::kFast, cfg_.deterministic});
}

void AttentionBackend::attend(const TensorView& q, const TensorView& out, const TensorView& lse,
                              const Layer& layer, const ForwardBatch& batch,
                              const LayerCache& cache) {
  const ForwardMetadata& m = metadata();
  FLASHBACK_CHECK(batch.forward_mode == m.mode, "forward_mode",
                  concat("the planned mode ", forward_mode_name(m.mode)),
                  forward_mode_name(batch.forward_mode));
  FLASHBACK_CHECK(layer.num_q_heads > 0 && layer.num_kv_heads > 0 &&
                      layer.num_q_heads % layer.num_kv_heads == 0,
                  "layer.num_kv_heads", concat("a divisor of num_q_heads ", layer.num_q_heads),
                  std::to_string(layer.num_kv_heads));
  const LayerPlan lp = plan_for_layer(m, layer);
  PagedAttentionParams p;
  bind_params(p, lp, batch.req_to_token, cfg_.use_page_table);
  FLASHBACK_CHECK(q.ndim == 3 && q.shape[0] == lp.entries->total_q(), "q",
                  concat(lp.entries->total_q(), " query tokens (the planned batch)"),
                  q.shape_str());
  detail::expect_defined(cache.k_cache, "k_cache");
  FLASHBACK_CHECK(cache.k_cache.ndim == 4 && cache.k_cache.shape[1] == cfg_.page_size, "k_cache",
                  concat("[num_pages, ", cfg_.page_size, ", Hk, D] (the backend's page size)"),
                  cache.k_cache.shape_str());
  if (is_mla(cache)) {
    // Absorbed MLA: q = [q_nope (R) | q_rope (Dr)], latent = [c_kv (R) | k_rope (Dr)].
    const int64_t R = layer.v_head_dim, W = layer.head_dim;
    FLASHBACK_CHECK(R > 0 && R < W, "layer.v_head_dim",
                    concat("the latent width R in (0, head_dim ", W, ")"), std::to_string(R));
    expect_heads(q, "q", layer.num_q_heads, W, "MLA: [q_nope | q_rope]");
    FLASHBACK_CHECK(cache.k_cache.shape[2] == 1 && cache.k_cache.shape[3] == W, "k_cache",
                    concat("[num_pages, P, 1, ", W, "] (MLA latent rows)"),
                    cache.k_cache.shape_str());
    p.qv = q.slice(2, 0, R);
    p.q = q.slice(2, R, W);
    p.v_cache = cache.k_cache.slice(3, 0, R);
    p.k_cache = cache.k_cache.slice(3, R, W);
  } else {
    expect_heads(q, "q", layer.num_q_heads, layer.head_dim, "layer heads x head_dim");
    FLASHBACK_CHECK(cache.k_cache.shape[2] == layer.num_kv_heads, "k_cache",
                    concat(layer.num_kv_heads, " KV heads (the layer's)"),
                    cache.k_cache.shape_str());
    p.q = q;
    p.k_cache = cache.k_cache;
    p.v_cache = cache.v_cache;
  }
  p.out = out;
  p.lse = lse;
  p.softmax_scale = layer.scaling;
  p.softcap = layer.logit_cap;
  if (is_fp8(cache.k_cache.dtype)) {
    // Per-layer scalars broadcast over [entries, Hk] with stride 0.
    descale_k_ = Tensor(DType::kF32, {1});
    descale_v_ = Tensor(DType::kF32, {1});
    descale_k_.ptr<float>()[0] = layer.k_scale;
    descale_v_.ptr<float>()[0] = is_mla(cache) ? layer.k_scale : layer.v_scale;
    const int64_t B = p.cache_seqlens.shape[0], Hk = p.k_cache.shape[2];
    p.k_descale = TensorView(descale_k_.data(), DType::kF32, {B, Hk}, {0, 0}, q.device);
    p.v_descale = TensorView(descale_v_.data(), DType::kF32, {B, Hk}, {0, 0}, q.device);
  }
  paged_attention(p, Exec{cfg_.stream, cfg_.num_threads, Exec::CpuImpl::kFast, cfg_.deterministic});
}

namespace {
RaggedAttentionParams ragged_params(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const TensorView& lse,
                                    const TensorView& cu_q, const TensorView& cu_k, bool causal) {
  RaggedAttentionParams r;
  r.q = q;
  r.k = k;
  r.v = v;
  r.out = out;
  r.lse = lse;
  r.cu_seqlens_q = cu_q;
  r.cu_seqlens_k = cu_k;
  r.causal = causal;
  return r;
}
}  // namespace

void AttentionBackend::forward_extend_mha(const TensorView& q, const TensorView& k,
                                          const TensorView& v, const TensorView& out,
                                          const TensorView& lse, const ForwardBatch& batch) {
  const ForwardMetadata& m = metadata();
  FLASHBACK_CHECK(is_extend_like(batch.forward_mode) && batch.forward_mode == m.mode,
                  "forward_mode", "the planned extend-like mode",
                  forward_mode_name(batch.forward_mode));
  detail::expect_defined(lse, "lse");
  // The new tokens attend to themselves: keys = queries, so cu_seqlens_k = cu_seqlens_q.
  const TensorView cu_q = m.self.cu_seqlens_q_view();
  ragged_attention(ragged_params(q, k, v, out, lse, cu_q, cu_q, true),
                   Exec{cfg_.stream, cfg_.num_threads, Exec::CpuImpl::kFast, cfg_.deterministic});
}

void AttentionBackend::forward_prefix_chunk(const TensorView& q, const TensorView& k,
                                            const TensorView& v, const TensorView& out,
                                            const TensorView& lse, const ForwardBatch& batch,
                                            const PrefixChunk& chunk) {
  const ForwardMetadata& m = metadata();
  FLASHBACK_CHECK(is_extend_like(batch.forward_mode) && batch.forward_mode == m.mode,
                  "forward_mode", "the planned extend-like mode",
                  forward_mode_name(batch.forward_mode));
  detail::expect_defined(lse, "lse");
  detail::expect_defined(chunk.cu_seq_lens, "chunk.cu_seq_lens");
  ragged_attention(
      ragged_params(q, k, v, out, lse, m.self.cu_seqlens_q_view(), chunk.cu_seq_lens, false),
      Exec{cfg_.stream, cfg_.num_threads, Exec::CpuImpl::kFast, cfg_.deterministic});
}

MultiStepDraftBackend::MultiStepDraftBackend(BackendConfig config, int32_t num_steps) {
  FLASHBACK_CHECK(num_steps >= 1, "num_steps", ">= 1", std::to_string(num_steps));
  for (int32_t s = 0; s + 1 < num_steps; ++s)
    steps_.push_back(std::make_unique<AttentionBackend>(config));
}

AttentionBackend& MultiStepDraftBackend::step(int32_t s) {
  FLASHBACK_CHECK(s >= 0 && s < static_cast<int32_t>(steps_.size()), "step",
                  concat("a step in [0, ", steps_.size(), ") (the last step runs no attention)"),
                  std::to_string(s));
  return *steps_[s];
}

namespace {
ForwardBatch at_step(const ForwardBatch& batch, int32_t s) {
  ForwardBatch b = batch;
  b.spec.draft_step = s;
  return b;
}
}  // namespace

void MultiStepDraftBackend::init_forward_metadata(const ForwardBatch& batch) {
  for (size_t s = 0; s < steps_.size(); ++s)
    steps_[s]->init_forward_metadata(at_step(batch, static_cast<int32_t>(s)));
}

void MultiStepDraftBackend::init_cuda_graph_state(int32_t max_bs, int32_t max_context_len) {
  for (auto& s : steps_) s->init_cuda_graph_state(max_bs, max_context_len);
}

void MultiStepDraftBackend::init_forward_metadata_capture_cuda_graph(const ForwardBatch& batch) {
  for (size_t s = 0; s < steps_.size(); ++s)
    steps_[s]->init_forward_metadata_capture_cuda_graph(at_step(batch, static_cast<int32_t>(s)));
}

void MultiStepDraftBackend::init_forward_metadata_replay_cuda_graph(const ForwardBatch& batch) {
  for (size_t s = 0; s < steps_.size(); ++s)
    steps_[s]->init_forward_metadata_replay_cuda_graph(at_step(batch, static_cast<int32_t>(s)));
}

}  // namespace flashback

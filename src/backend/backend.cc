// AttentionBackend: metadata once per forward pass (src/plan), then per layer: write this step's
// K/V (kv_store), pick the layer's entries (self / chunked-local / cross), bind them into
// PagedAttentionParams and call the kernels of ops.h. No attention math lives here.
#include "flashback/backend.h"

#include <map>
#include <string>

#include "common/validate.h"
#include "plan/plan.h"
#ifdef FLASHBACK_WITH_CUDA
#include "cuda/memory.h"
#endif

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

#ifdef FLASHBACK_WITH_CUDA
// The same list with every array moved from the host arena `from` to its mirror `to`.
EntryList rebase(EntryList l, const int32_t* from, int32_t* to, Device device) {
  for (int32_t** p : {&l.table_rows, &l.kv_start, &l.cache_seqlens, &l.cu_seqlens_q,
                      &l.cu_seqlens_k, &l.source_row, &l.page_table})
    if (*p != nullptr) *p = to + (*p - from);
  l.device = device;
  return l;
}
#endif

}  // namespace

struct AttentionBackend::DeviceState {
#ifdef FLASHBACK_WITH_CUDA
  cuda::DeviceBuffer meta;       // mirror of the plan arena
  cuda::DeviceBuffer workspace;  // split-KV partial results
  // layer_id -> {k_scale, v_scale} on the device, written once (before any graph capture).
  std::map<int32_t, std::unique_ptr<cuda::DeviceBuffer>> scales;
#endif
};

void AttentionBackend::mirror(const std::vector<int32_t>& arena) {
  if (cfg_.device.type != DeviceType::kCUDA) {
    dev_meta_ = *meta_;
    return;
  }
#ifdef FLASHBACK_WITH_CUDA
  if (!dev_) dev_ = std::make_unique<DeviceState>();
  const size_t bytes = arena.size() * sizeof(int32_t);
  dev_->meta.reserve(bytes, cfg_.device);
  cuda::copy_to_device_async(dev_->meta.data(), arena.data(), bytes, cfg_.stream);
  auto* to = static_cast<int32_t*>(dev_->meta.data());
  dev_meta_ = *meta_;
  dev_meta_.self = rebase(meta_->self, arena.data(), to, cfg_.device);
  dev_meta_.local = rebase(meta_->local, arena.data(), to, cfg_.device);
  dev_meta_.cross = rebase(meta_->cross, arena.data(), to, cfg_.device);
#else
  (void)arena;
  throw Error("BackendConfig.device", "cpu (this build of flashback has no CUDA support)",
              to_string(cfg_.device));
#endif
}

TensorView AttentionBackend::descale(const Layer& layer, bool mla, int64_t entries,
                                     int64_t heads_kv) {
  // Per-layer scalars broadcast over [entries, Hk] with stride 0 (MLA: one scale for the row).
  const float k = layer.k_scale, v = mla ? layer.k_scale : layer.v_scale;
  void* base = nullptr;
  if (cfg_.device.type == DeviceType::kCUDA) {
#ifdef FLASHBACK_WITH_CUDA
    if (!dev_) dev_ = std::make_unique<DeviceState>();
    auto& buf = dev_->scales[layer.layer_id];
    if (!buf) {
      buf = std::make_unique<cuda::DeviceBuffer>();
      buf->reserve(2 * sizeof(float), cfg_.device);
      const float kv[2] = {k, v};
      cuda::copy_to_device_async(buf->data(), kv, sizeof(kv), cfg_.stream);
    }
    base = buf->data();
#endif
  } else {
    descale_host_ = Tensor(DType::kF32, {2});
    descale_host_.ptr<float>()[0] = k;
    descale_host_.ptr<float>()[1] = v;
    base = descale_host_.data();
  }
  return TensorView(base, DType::kF32, {2, entries, heads_kv}, {1, 0, 0}, cfg_.device);
}

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

void AttentionBackend::adopt_device(const ForwardBatch& batch) {
  // The kernels run where req_to_token lives; an engine may leave BackendConfig::device unset.
  if (batch.req_to_token.device.type == DeviceType::kCUDA) cfg_.device = batch.req_to_token.device;
}

void AttentionBackend::init_forward_metadata(const ForwardBatch& batch) {
  adopt_device(batch);
  meta_ = &planner_->plan(batch);
  mirror(planner_->arena());
}

void AttentionBackend::init_cuda_graph_state(int32_t max_bs, int32_t max_context_len) {
  graph_ = std::make_unique<plan::CudaGraphPlanState>(plan_config(cfg_), max_bs, max_context_len);
#ifdef FLASHBACK_WITH_CUDA
  // Allocate the mirror now: allocation is not allowed while a graph is being captured.
  if (cfg_.device.type == DeviceType::kCUDA) {
    if (!dev_) dev_ = std::make_unique<DeviceState>();
    dev_->meta.reserve(graph_->arena().size() * sizeof(int32_t), cfg_.device);
  }
#endif
}

void AttentionBackend::init_forward_metadata_capture_cuda_graph(const ForwardBatch& batch) {
  FLASHBACK_CHECK(graph_ != nullptr, "init_forward_metadata_capture_cuda_graph",
                  "init_cuda_graph_state() called first", "no graph state");
  adopt_device(batch);
  graph_meta_ = graph_->bind(batch);
  meta_ = &graph_meta_;
  mirror(graph_->arena());
}

void AttentionBackend::init_forward_metadata_replay_cuda_graph(const ForwardBatch& batch) {
  FLASHBACK_CHECK(graph_ != nullptr && graph_meta_.self.capacity > 0,
                  "init_forward_metadata_replay_cuda_graph", "a captured graph (capture first)",
                  "none");
  graph_->update(graph_meta_, batch);
  meta_ = &graph_meta_;
  mirror(graph_->arena());
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
  const int32_t total_q = plan_for_layer(m, layer).entries->total_q();  // host copy
  PagedAttentionParams p;
  bind_params(p, plan_for_layer(dev_meta_, layer), batch.req_to_token, cfg_.use_page_table);
  FLASHBACK_CHECK(q.ndim == 3 && q.shape[0] == total_q, "q",
                  concat(total_q, " query tokens (the planned batch)"), q.shape_str());
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
    const TensorView d =
        descale(layer, is_mla(cache), p.cache_seqlens.shape[0], p.k_cache.shape[2]);
    p.k_descale = TensorView(d.data, DType::kF32, {d.shape[1], d.shape[2]}, {0, 0}, d.device);
    p.v_descale = TensorView(static_cast<float*>(d.data) + 1, DType::kF32, {d.shape[1], d.shape[2]},
                             {0, 0}, d.device);
  }
  const Exec exec{cfg_.stream, cfg_.num_threads, Exec::CpuImpl::kFast, cfg_.deterministic};
  if (cfg_.device.type == DeviceType::kCUDA) {
#ifdef FLASHBACK_WITH_CUDA
    // Split-KV workspace, grown on demand and never shrunk: engines warm up eagerly before
    // capturing a graph (as SGLang does), so no allocation happens inside a capture.
    const int64_t bytes = paged_attention_workspace_bytes(p, exec);
    if (bytes > 0) {
      dev_->workspace.reserve(static_cast<size_t>(bytes), cfg_.device);
      p.workspace = TensorView(dev_->workspace.data(), DType::kU8,
                               {static_cast<int64_t>(dev_->workspace.size())}, cfg_.device);
    }
#endif
  }
  paged_attention(p, exec);
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
  const TensorView cu_q = dev_meta_.self.cu_seqlens_q_view();
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
  // The queries' offsets from the device mirror (the host plan's on the CPU): the kernels read
  // them where q lives.
  ragged_attention(ragged_params(q, k, v, out, lse, dev_meta_.self.cu_seqlens_q_view(),
                                 chunk.cu_seq_lens, false),
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

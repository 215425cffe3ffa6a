#include "backend/trace/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "flashback/metadata.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback::trace {

KindStats& StatsTable::at(const std::string& model, const std::string& mode,
                          const std::string& kind) {
  for (KindStats& s : rows_)
    if (s.model == model && s.mode == mode && s.kind == kind) return s;
  KindStats s;
  s.model = model;
  s.mode = mode;
  s.kind = kind;
  rows_.push_back(s);
  return rows_.back();
}

Engine::Engine(ModelSpec model, const TraceOptions& o, uint64_t seed, StatsTable& stats)
    : model_(std::move(model)),
      opt_(o),
      rng_(seed),
      stats_(stats),
      chunk_(o.page_size == 1 ? 20 : 2 * o.page_size),
      max_enc_(model_.encoder ? (o.page_size == 1 ? 40 : 3 * o.page_size) : 0),
      capacity_(kMaxPrompt + kMaxGen + kVerifyTokens + 8),
      r2t_(kMaxRows, max_enc_ + capacity_),
      alloc_(int64_t{o.page_size} * (8192 / o.page_size + 64), o.page_size) {
  const int64_t slots = int64_t{o.page_size} * (8192 / o.page_size + 64);
  for (const LayerSpec& s : model_.layers) {
    KVPoolConfig c;
    c.num_layers = 1;
    c.num_slots = slots;
    c.page_size = o.page_size;
    c.heads_kv = s.kv_heads();
    c.head_dim = s.k_dim();
    c.head_dim_v = s.mla() ? 0 : s.layer.v_head_dim;
    c.dtype = s.cache_dtype;
    c.k_scale = s.layer.k_scale;
    c.v_scale = s.layer.v_scale;
    pools_.push_back(std::make_unique<KVPool>(c));
  }
  if (o.device.type == DeviceType::kCUDA) {
    dev_ = std::make_unique<DeviceCopies>(o.device);
    for (const auto& pool : pools_) {
      dev_->put(pool->k_cache(0), true);
      if (!pool->is_mla()) dev_->put(pool->v_cache(0), true);
    }
    dev_->put(r2t_.table(), true);
  }
  backend_ = std::make_unique<AttentionBackend>(backend_config());
  if (model_.draft_layer >= 0) {
    draft_extend_ = std::make_unique<AttentionBackend>(backend_config());
    draft_ = std::make_unique<MultiStepDraftBackend>(backend_config(), kDraftSteps);
  }
  // Row 0 stays unused: padded CUDA-graph rows read it (all slot 0, the reserved slot).
  FLASHBACK_CHECK(r2t_.alloc() == 0, "trace", "row 0 reserved first", "another row");
}

Engine::~Engine() = default;

BackendConfig Engine::backend_config() const {
  BackendConfig c;
  c.page_size = opt_.page_size;
  for (const LayerSpec& s : model_.layers)
    if (s.kind == Kind::kLocal) c.attention_chunk_size = chunk_;
  c.num_threads = opt_.num_threads;
  c.device = opt_.device;
  c.use_page_table = model_.use_page_table;
  c.deterministic = model_.deterministic;
  c.cuda_graph_fill_seq_len = 1;
  c.max_draft_tokens = kVerifyTokens;
  return c;
}

TensorView Engine::on_dev(const TensorView& host) {
  if (!dev_) return host;
  dev_->put(host);
  return dev_->on_device(host);
}

TensorView Engine::dv(const TensorView& host) const { return dev_ ? dev_->on_device(host) : host; }

void Engine::download(const TensorView& host) const {
  if (dev_) dev_->get(host);
}

LayerCache Engine::cache_of(int32_t li) const {
  const KVPool& pool = *pools_[li];
  return {dv(pool.k_cache(0)), pool.is_mla() ? TensorView{} : dv(pool.v_cache(0))};
}

TensorView Engine::req_to_token_view() const {
  // The explicit page-table form builds its table on the host from req_to_token's contents.
  return model_.use_page_table ? r2t_.table() : dv(r2t_.table());
}

void Engine::admit() {
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->row = r2t_.alloc();
  reused_ += row_used_[r->row];
  row_used_[r->row] = 1;
  r->prompt = rng_.uniform(1, kMaxPrompt);
  r->target = r->prompt + rng_.uniform(1, kMaxGen);
  for (const LayerSpec& s : model_.layers) {
    r->hist.push_back(make_history(s, model_.act, capacity_));
    r->enc_hist.push_back(s.kind == Kind::kCross ? make_history(s, model_.act, max_enc_)
                                                 : LayerHistory{});
  }
  const int32_t P = opt_.page_size;
  // Prefix sharing: a later request reuses whole pages of a running request's encoder and
  // prompt (the same image and system prompt), as a radix cache would.
  Request* src = nullptr;
  if (!active_.empty() && rng_.coin(0.4))
    src = active_[rng_.uniform(0, static_cast<int>(active_.size()) - 1)].get();
  const int32_t shared = src ? std::min(src->len, r->prompt - 1) / P * P : 0;
  if (src && src->enc_cached && (shared > 0 || src->enc > 0)) {
    r->enc = src->enc;
    r->len = r->alloc = shared;
    alloc_.share_prefix(r2t_, src->row, r->row, src->enc + shared);
    ++shared_;
    for (size_t l = 0; l < model_.layers.size(); ++l) {
      copy_prefix(r->hist[l], src->hist[l], shared);
      if (model_.layers[l].kind == Kind::kCross)
        copy_prefix(r->enc_hist[l], src->enc_hist[l], src->enc);
    }
  } else {
    // Encoder slots come first in the row; with P > 1 the region ends on a page boundary.
    r->enc = !model_.encoder ? 0 : P == 1 ? rng_.uniform(0, max_enc_) : rng_.uniform(0, 3) * P;
    alloc_.extend(r2t_, r->row, 0, r->enc);
    r->enc_cached = r->enc == 0;
  }
  active_.push_back(std::move(r));
}

void Engine::finish_done() {
  for (size_t i = 0; i < active_.size();) {
    Request& r = *active_[i];
    if (r.len < r.target) {
      ++i;
      continue;
    }
    alloc_.release(r2t_, r.row, r.enc + r.alloc);
    r2t_.free(r.row);
    ++finished_;
    active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void Engine::ensure_slots(Request& r, int32_t positions) {
  FLASHBACK_CHECK(positions <= capacity_, "trace", "positions within the history capacity",
                  std::to_string(positions));
  if (positions <= r.alloc) return;
  alloc_.extend(r2t_, r.row, r.enc + r.alloc, positions - r.alloc);
  r.alloc = positions;
}

std::vector<Engine::Request*> Engine::pick(std::vector<Request*> from, int max_n) {
  std::shuffle(from.begin(), from.end(), rng_.engine());
  const int n = rng_.uniform(1, std::min<int>(max_n, static_cast<int>(from.size())));
  from.resize(static_cast<size_t>(n));
  return from;
}

Engine::Batch Engine::build(const Pass& p) {
  if (dev_) {  // the previous pass's copies go; req_to_token as the allocator left it
    dev_->release();
    dev_->put(r2t_.table(), true);
  }
  Batch b;
  const int64_t B = static_cast<int64_t>(p.rows.size());
  const bool extend = is_extend_like(p.mode);
  b.rows = Tensor(DType::kI64, {B});
  b.seq = Tensor(DType::kI32, {B});
  b.ext = Tensor(DType::kI32, {B});
  b.prefix = Tensor(DType::kI32, {B});
  b.enc = Tensor(DType::kI32, {B});
  for (int64_t i = 0; i < B; ++i) {
    const Row& row = p.rows[i];
    b.rows.ptr<int64_t>()[i] = row.r->row;
    b.seq.ptr<int32_t>()[i] = row.seq;
    b.ext.ptr<int32_t>()[i] = row.q_len;
    b.prefix.ptr<int32_t>()[i] = row.seq - row.q_len;
    b.enc.ptr<int32_t>()[i] = row.r->enc;
    b.q_off.push_back(b.total_q);
    b.total_q += row.q_len;
    if (row.write_enc) b.enc_rows += row.r->enc;
  }
  if (p.padded >= 0) b.total_q += (p.padded - static_cast<int32_t>(B)) * p.q_per_row();
  b.loc = Tensor(DType::kI64, {b.total_q});
  b.loc.zero();  // padded rows write the reserved slot 0
  b.enc_loc = Tensor(DType::kI32, {b.enc_rows});
  for (int64_t i = 0, e = 0; i < B; ++i) {
    const Row& row = p.rows[i];
    const int32_t* slots = r2t_.row(row.r->row);
    for (int32_t j = 0; j < row.q_len; ++j)
      b.loc.ptr<int64_t>()[b.q_off[i] + j] = slots[row.r->enc + row.first + j];
    if (row.write_enc)
      for (int32_t j = 0; j < row.r->enc; ++j) b.enc_loc.ptr<int32_t>()[e++] = slots[j];
  }
  ForwardBatch& fb = b.fb;
  fb.forward_mode = p.mode;
  fb.batch_size = static_cast<int32_t>(B);
  fb.spec = p.spec;
  fb.req_to_token = req_to_token_view();
  // The host copies are optional when the main views are on the host; exercise both forms
  // (on a GPU the main views are device copies and the host ones are required).
  const bool cpu_copies = rng_.coin(0.5) || dev_;
  auto put = [&](TensorView& main, TensorView& cpu, const Tensor& t) {
    main = on_dev(t);
    if (cpu_copies) cpu = t;
  };
  put(fb.req_pool_indices, fb.req_pool_indices_cpu, b.rows);
  put(fb.seq_lens, fb.seq_lens_cpu, b.seq);
  fb.out_cache_loc = on_dev(b.loc);
  if (extend) {
    put(fb.extend_seq_lens, fb.extend_seq_lens_cpu, b.ext);
    if (rng_.coin(0.5)) put(fb.extend_prefix_lens, fb.extend_prefix_lens_cpu, b.prefix);
  }
  if (model_.encoder) {
    put(fb.encoder_lens, fb.encoder_lens_cpu, b.enc);
    fb.encoder_out_cache_loc = on_dev(b.enc_loc);
  }
  return b;
}

template <typename Backend>
void Engine::capture(Backend& slot, int32_t bs, ForwardMode mode, const SpecInfo& spec) {
  slot.init_cuda_graph_state(bs, static_cast<int32_t>(r2t_.max_context_len()));
  Tensor rows(DType::kI64, {bs}), seq(DType::kI32, {bs}), enc(DType::kI32, {bs});
  rows.zero();
  enc.zero();
  for (int32_t i = 0; i < bs; ++i) seq.ptr<int32_t>()[i] = 1;
  ForwardBatch fb;
  fb.forward_mode = mode;
  fb.batch_size = bs;
  fb.spec = spec;
  fb.req_to_token = req_to_token_view();
  fb.req_pool_indices = on_dev(rows);
  fb.seq_lens = on_dev(seq);
  if (model_.encoder) fb.encoder_lens = on_dev(enc);
  if (dev_) {
    fb.req_pool_indices_cpu = rows;
    fb.seq_lens_cpu = seq;
    if (model_.encoder) fb.encoder_lens_cpu = enc;
  }
  slot.init_forward_metadata_capture_cuda_graph(fb);
}

AttentionBackend& Engine::graph_backend(const Pass& p, int32_t bs) {
  const int64_t key = int64_t{p.mode == ForwardMode::kTargetVerify} * 1000 + bs;
  auto& slot = graphs_[key];
  if (!slot) {
    // Captured once per (mode, batch size) and replayed from then on, like a graph runner.
    slot = std::make_unique<AttentionBackend>(backend_config());
    capture(*slot, bs, p.mode, p.spec);
  }
  return *slot;
}

MultiStepDraftBackend& Engine::draft_graph(int32_t bs) {
  auto& slot = draft_graphs_[bs];
  if (!slot) {
    slot = std::make_unique<MultiStepDraftBackend>(backend_config(), kDraftSteps);
    SpecInfo spec;
    spec.draft_step = 0;
    capture(*slot, bs, ForwardMode::kDecode, spec);
  }
  return *slot;
}

void Engine::run_layers(const Pass& p, const Batch& b, AttentionBackend& be) {
  ++passes_;
  const int32_t T = b.total_q;
  for (int32_t li : p.layers) {
    const LayerSpec& s = model_.layers[li];
    if (s.kind == Kind::kMlaChunked && is_extend_like(p.mode)) {
      run_chunked_mla(p, b, be, li);
      continue;
    }
    const Layer& L = s.layer;
    Tensor q(model_.act, {T, L.num_q_heads, s.k_dim()});
    fill_random(q, rng_);
    Tensor k, v;
    if (s.kind == Kind::kCross) {
      // Encoder K/V are written once, by the request's first pass; later passes pass none.
      if (b.enc_rows > 0) {
        k = Tensor(model_.act, {b.enc_rows, s.kv_heads(), s.k_dim()});
        v = Tensor(model_.act, {b.enc_rows, s.kv_heads(), s.out_dim()});
        fill_random(k, rng_);
        fill_random(v, rng_);
      }
    } else {
      k = Tensor(model_.act, {T, s.kv_heads(), s.k_dim()});
      fill_random(k, rng_);
      if (!s.mla()) {
        v = Tensor(model_.act, {T, s.kv_heads(), s.out_dim()});
        fill_random(v, rng_);
      }
    }
    Tensor out(model_.act, {T, L.num_q_heads, s.out_dim()});
    out.poison();
    Tensor lse_t;
    TensorView lse;
    if (rng_.coin(0.5)) {
      const bool transposed = rng_.coin(0.5);  // FA3's [H, T] layout
      lse_t = transposed ? Tensor(DType::kF32, {L.num_q_heads, T})
                         : Tensor(DType::kF32, {T, L.num_q_heads});
      lse_t.poison();
      lse = transposed ? lse_t.view().transposed(0, 1) : lse_t.view();
    }
    for (const Tensor* t : {&q, &k, &v, &out, &lse_t}) on_dev(*t);
    be.forward(dv(q), dv(k), dv(v), dv(out), L, b.fb, cache_of(li), true, dv(lse));
    download(out);
    download(lse_t);
    // Recorded after the call: a backend that modified the caller's k/v would be caught.
    for (size_t i = 0, e = 0; i < p.rows.size(); ++i) {
      const Row& row = p.rows[i];
      if (s.kind != Kind::kCross) {
        for (int32_t j = 0; j < row.q_len; ++j)
          record(row.r->hist[li], s, row.first + j, k, v, b.q_off[i] + j);
      } else if (row.write_enc) {
        for (int32_t j = 0; j < row.r->enc; ++j, ++e) record(row.r->enc_hist[li], s, j, k, v, e);
      }
    }
    check(p, li, b.q_off, q, out, lse);
  }
}

void Engine::run_chunked_mla(const Pass& p, const Batch& b, AttentionBackend& be, int32_t li) {
  const LayerSpec& s = model_.layers[li];
  const int32_t T = b.total_q, H = s.mha_heads;
  // The model stores the latent rows of the new tokens itself (later decodes read them) ...
  Tensor latent(model_.act, {T, 1, s.k_dim()});
  fill_random(latent, rng_);
  KVStoreParams st;
  st.k = on_dev(latent);
  st.loc = dv(b.loc);
  st.k_cache = cache_of(li).k_cache;
  st.k_scale = s.layer.k_scale;
  kv_store(st);
  // ... and attends with decompressed MHA q/k/v: the new tokens to themselves, then each prefix
  // chunk, merged with merge_state.
  Tensor q(model_.act, {T, H, s.mha_qk_dim}), k(model_.act, {T, H, s.mha_qk_dim}),
      v(model_.act, {T, H, s.mha_v_dim});
  fill_random(q, rng_);
  fill_random(k, rng_);
  fill_random(v, rng_);
  for (size_t i = 0; i < p.rows.size(); ++i)
    for (int32_t j = 0; j < p.rows[i].q_len; ++j) {
      record(p.rows[i].r->hist[li], s, p.rows[i].first + j, latent, {}, b.q_off[i] + j);
      record_mha(p.rows[i].r->hist[li], p.rows[i].first + j, k, v, b.q_off[i] + j);
    }
  Tensor out(model_.act, {T, H, s.mha_v_dim}), lse(DType::kF32, {T, H});
  out.poison();
  lse.poison();
  for (const Tensor* t : {&q, &k, &v, &out, &lse}) on_dev(*t);
  be.forward_extend_mha(dv(q), dv(k), dv(v), dv(out), dv(lse), b.fb);

  const int32_t B = static_cast<int32_t>(p.rows.size());
  const int32_t chunk = std::initializer_list<int32_t>{16, 40, 64}.begin()[rng_.uniform(0, 2)];
  int32_t max_prefix = 0;
  for (const Row& row : p.rows) max_prefix = std::max(max_prefix, row.first);
  for (int32_t c0 = 0; c0 < max_prefix; c0 += chunk) {
    Tensor cu(DType::kI32, {B + 1});
    cu.ptr<int32_t>()[0] = 0;
    int32_t max_len = 0;
    for (int32_t i = 0; i < B; ++i) {
      const int32_t n = std::clamp(p.rows[i].first - c0, 0, chunk);
      cu.ptr<int32_t>()[i + 1] = cu.ptr<int32_t>()[i] + n;
      max_len = std::max(max_len, n);
    }
    const int32_t K = cu.ptr<int32_t>()[B];
    Tensor kc(model_.act, {K, H, s.mha_qk_dim}), vc(model_.act, {K, H, s.mha_v_dim});
    const int64_t kw = kc.nbytes() / std::max(K, 1), vw = vc.nbytes() / std::max(K, 1);
    for (int32_t i = 0; i < B; ++i) {
      LayerHistory& h = p.rows[i].r->hist[li];
      for (int32_t t = cu.ptr<int32_t>()[i]; t < cu.ptr<int32_t>()[i + 1]; ++t) {
        const int32_t pos = c0 + t - cu.ptr<int32_t>()[i];
        ensure_mha(h, pos, rng_);
        std::memcpy(static_cast<char*>(kc.data()) + t * kw,
                    static_cast<const char*>(h.mha_k.data()) + pos * kw, static_cast<size_t>(kw));
        std::memcpy(static_cast<char*>(vc.data()) + t * vw,
                    static_cast<const char*>(h.mha_v.data()) + pos * vw, static_cast<size_t>(vw));
      }
    }
    Tensor oc(model_.act, {T, H, s.mha_v_dim}), lc(DType::kF32, {T, H});
    oc.poison();
    lc.poison();
    for (const Tensor* t : {&cu, &kc, &vc, &oc, &lc}) on_dev(*t);
    be.forward_prefix_chunk(dv(q), dv(kc), dv(vc), dv(oc), dv(lc), b.fb,
                            PrefixChunk{dv(cu), max_len});
    merge_state(MergeStateParams{dv(out), dv(lse), dv(oc), dv(lc), dv(out), dv(lse)});
  }
  download(out);
  download(lse);

  KindStats& ks = stats_.at(model_.name, p.label(), kind_name(s.kind));
  ++ks.calls;
  Layer mha;  // the MHA path: default scale Dqk^-1/2, causal, no window or cap
  for (int32_t i = 0; i < B; ++i) {
    const Row& row = p.rows[i];
    if (row.q_len == 0) continue;
    const int32_t kv = row.first + row.q_len, o = b.q_off[i];
    const LayerHistory& h = row.r->hist[li];
    Tensor ro(DType::kF32, {row.q_len, H, s.mha_v_dim}), rl(DType::kF32, {row.q_len, H});
    oracle(q.view().slice(0, o, o + row.q_len), h.mha_k.view().slice(0, 0, kv),
           h.mha_v.view().slice(0, 0, kv), mha, true, 0, ro, rl);
    const testing::Comparison c = testing::compare(out.view().slice(0, o, o + row.q_len), ro,
                                                   lse.view().slice(0, o, o + row.q_len), rl);
    ks.tokens += row.q_len;
    ks.max_abs = std::max(ks.max_abs, c.max_abs);
    ks.max_rel = std::max(ks.max_rel, c.rel_l2);
    ks.max_lse = std::max(ks.max_lse, c.lse_max_abs);
    if (!c.ok && ks.failures++ == 0)
      ks.first_failure = "request " + std::to_string(row.r->id) + " at position " +
                         std::to_string(row.first) + ": " + c.why;
  }
}

void Engine::check(const Pass& p, int32_t li, const std::vector<int32_t>& q_off, const Tensor& q,
                   const Tensor& out, const TensorView& lse) {
  const LayerSpec& s = model_.layers[li];
  const Layer& L = s.layer;
  KindStats& ks = stats_.at(model_.name, p.label(), kind_name(s.kind));
  ++ks.calls;
  // CUDA-graph padding rows: their outputs are ignored but must be finite (SPEC.md §7).
  const int64_t real_q = p.rows.empty() ? 0 : q_off.back() + p.rows.back().q_len;
  const TensorView pad = out.view().slice(0, real_q, out.size(0));
  for (int64_t i = 0; i < pad.numel(); ++i)
    if (!std::isfinite(load_as_double(pad, i)) && ks.failures++ == 0) {
      ks.first_failure = "a padded CUDA-graph row's output is not finite";
      break;
    }
  for (size_t i = 0; i < p.rows.size(); ++i) {
    const Row& row = p.rows[i];
    if (row.q_len == 0) continue;
    const Request& r = *row.r;
    const int32_t off = q_off[i], kv = row.first + row.q_len;
    // The keys this request's queries may see, straight from its own history.
    TensorView K, V;
    bool causal = true;
    int32_t chunk = 0;
    if (s.kind == Kind::kCross) {
      K = r.enc_hist[li].k.view().slice(0, 0, r.enc);
      V = r.enc_hist[li].v.view().slice(0, 0, r.enc);
      causal = false;
    } else if (s.mla()) {
      K = r.hist[li].k.view().slice(0, 0, kv);
      V = K.slice(2, 0, L.v_head_dim);  // the value is the latent's first R columns
    } else {
      K = r.hist[li].k.view().slice(0, 0, kv);
      V = r.hist[li].v.view().slice(0, 0, kv);
      if (s.kind == Kind::kLocal) chunk = chunk_;
    }
    Tensor ro(DType::kF32, {row.q_len, L.num_q_heads, s.out_dim()});
    Tensor rl(DType::kF32, {row.q_len, L.num_q_heads});
    oracle(q.view().slice(0, off, off + row.q_len), K, V, L, causal, chunk, ro, rl);
    const TensorView lse_rows = lse.defined() ? lse.slice(0, off, off + row.q_len) : TensorView{};
    const testing::Comparison c =
        testing::compare(out.view().slice(0, off, off + row.q_len), ro, lse_rows,
                         lse.defined() ? rl.view() : TensorView{});
    ks.tokens += row.q_len;
    ks.max_abs = std::max(ks.max_abs, c.max_abs);
    ks.max_rel = std::max(ks.max_rel, c.rel_l2);
    ks.max_lse = std::max(ks.max_lse, c.lse_max_abs);
    if (!c.ok && ks.failures++ == 0)
      ks.first_failure = "request " + std::to_string(r.id) + " (encoder " + std::to_string(r.enc) +
                         ") positions " + std::to_string(row.first) + "+" +
                         std::to_string(row.q_len) + ": " + c.why;
  }
}

}  // namespace flashback::trace

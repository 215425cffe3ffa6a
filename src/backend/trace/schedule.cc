// The trace's scheduler: what a serving engine does between forward passes — admit requests,
// pick the next batch (chunked prefill, MIXED, decode, a speculative round, an idle pass), give
// every new token a slot, commit accepted tokens and free finished requests.
#include <algorithm>
#include <random>

#include "backend/trace/engine.h"

namespace flashback::trace {

namespace {
constexpr int32_t kGraphSizes[] = {1, 2, 4, 8, 16};  // captured batch sizes

int32_t graph_size(size_t bs) {
  for (int32_t s : kGraphSizes)
    if (static_cast<size_t>(s) >= bs) return s;
  return -1;
}
}  // namespace

void Engine::step() {
  if (active_.empty() || (static_cast<int32_t>(active_.size()) < kMaxActive && rng_.coin(0.3)))
    admit();
  std::vector<Request*> prefilling, decoding;
  for (auto& r : active_) (r->len < r->prompt ? prefilling : decoding).push_back(r.get());
  const double w_extend = prefilling.empty() ? 0 : 3;
  const double w_mixed = prefilling.empty() || decoding.empty() ? 0 : 3;
  const double w_decode = decoding.empty() ? 0 : 5;
  const double w_spec = decoding.empty() ? 0 : 3;
  std::discrete_distribution<int> choice({w_extend, w_mixed, w_decode, w_spec});
  // IDLE (an empty batch) is rare in an engine; scheduled at fixed steps so a short trace has it.
  switch (steps_ % 50 == 7 ? 4 : choice(rng_.engine())) {
    case 0:
      extend_step(false);
      break;
    case 1:
      extend_step(true);
      break;
    case 2:
      decode_step();
      break;
    case 3:
      spec_step();
      break;
    default:
      idle_step();
      break;
  }
  finish_done();
  if (++steps_ == opt_.corrupt_at_step) corrupt();
}

void Engine::corrupt() {
  // The longest-running request's first key in layer 0 becomes huge: every later output of
  // that layer for it must then disagree with the oracle's recomputation from its history.
  Request* victim = nullptr;
  for (auto& r : active_)
    if (r->len > 0 && (!victim || r->target - r->len > victim->target - victim->len))
      victim = r.get();
  if (!victim) return;
  const int64_t P = opt_.page_size, slot = r2t_.row(victim->row)[victim->enc];
  const TensorView k = pools_[0]->k_cache(0);
  for (int64_t d = 0; d < k.shape[3]; ++d)
    store_from_double(k, k.offset(slot / P, slot % P, 0, d), 40.0);
  if (dev_) dev_->put(k, true);
}

void Engine::extend_step(bool mixed) {
  std::vector<Request*> prefilling, decoding;
  for (auto& r : active_) (r->len < r->prompt ? prefilling : decoding).push_back(r.get());
  Pass p;
  p.mode = mixed ? ForwardMode::kMixed : ForwardMode::kExtend;
  for (size_t l = 0; l < model_.layers.size(); ++l) p.layers.push_back(static_cast<int32_t>(l));
  const int32_t P = opt_.page_size;
  for (Request* r : pick(prefilling, 4)) {
    const int32_t left = r->prompt - r->len;
    int32_t n = rng_.uniform(1, kMaxChunk);
    if (rng_.coin(0.2)) n = left;                                    // the whole rest
    if (P > 1 && rng_.coin(0.3)) n = (r->len / P + 1) * P - r->len;  // end on a page boundary
    if (rng_.coin(0.05)) n = 0;                                      // an empty extend
    n = std::min(n, left);
    ensure_slots(*r, r->len + n);
    p.rows.push_back(Row{r, n, r->len, r->len + n, !r->enc_cached});
  }
  if (mixed)
    for (Request* r : pick(decoding, kMaxActive)) {
      ensure_slots(*r, r->len + 1);
      p.rows.push_back(Row{r, 1, r->len, r->len + 1, false});
    }
  Batch b = build(p);
  backend_->init_forward_metadata(b.fb);
  run_layers(p, b, *backend_);
  for (const Row& row : p.rows) {
    row.r->len += row.q_len;
    row.r->enc_cached = true;
  }
}

void Engine::decode_step() {
  std::vector<Request*> decoding;
  for (auto& r : active_)
    if (r->len >= r->prompt) decoding.push_back(r.get());
  Pass p;
  p.mode = ForwardMode::kDecode;
  for (size_t l = 0; l < model_.layers.size(); ++l) p.layers.push_back(static_cast<int32_t>(l));
  for (Request* r : pick(decoding, kMaxActive)) {
    ensure_slots(*r, r->len + 1);
    p.rows.push_back(Row{r, 1, r->len, r->len + 1, false});
  }
  if (rng_.coin(0.5)) p.padded = graph_size(p.rows.size());
  Batch b = build(p);
  AttentionBackend* be = backend_.get();
  if (p.padded > 0) {
    be = &graph_backend(p, p.padded);
    be->init_forward_metadata_replay_cuda_graph(b.fb);
  } else {
    be->init_forward_metadata(b.fb);
  }
  run_layers(p, b, *be);
  for (const Row& row : p.rows) row.r->len += 1;
}

void Engine::spec_step() {
  std::vector<Request*> decoding;
  for (auto& r : active_)
    if (r->len >= r->prompt) decoding.push_back(r.get());
  const std::vector<Request*> sel = pick(decoding, 8);
  for (Request* r : sel) ensure_slots(*r, r->len + std::max(kVerifyTokens, kDraftSteps - 1));

  // 1. EAGLE draft decode: step s writes the draft token at len + s and attends to it.
  if (model_.draft_layer >= 0) {
    Pass d;
    d.mode = ForwardMode::kDecode;
    d.layers = {model_.draft_layer};
    if (rng_.coin(0.5)) d.padded = graph_size(sel.size());
    for (Request* r : sel) d.rows.push_back(Row{r, 1, r->len, r->len, false});
    d.spec.draft_step = 0;
    MultiStepDraftBackend* ms = draft_.get();
    {
      Batch b = build(d);
      if (d.padded > 0) {
        ms = &draft_graph(d.padded);
        ms->init_forward_metadata_replay_cuda_graph(b.fb);
      } else {
        ms->init_forward_metadata(b.fb);
      }
    }
    for (int32_t s = 0; s + 1 < kDraftSteps; ++s) {
      d.spec.draft_step = s;
      for (Row& row : d.rows) row.first = row.r->len + s;
      Batch b = build(d);
      run_layers(d, b, ms->step(s));
    }
  }

  // 2. TARGET_VERIFY of N tokens per request.
  Pass v;
  v.mode = ForwardMode::kTargetVerify;
  v.spec.num_draft_tokens = kVerifyTokens;
  for (size_t l = 0; l < model_.layers.size(); ++l)
    if (static_cast<int32_t>(l) != model_.draft_layer) v.layers.push_back(static_cast<int32_t>(l));
  for (Request* r : sel) v.rows.push_back(Row{r, kVerifyTokens, r->len, r->len, false});
  if (rng_.coin(0.5)) v.padded = graph_size(sel.size());
  {
    Batch b = build(v);
    AttentionBackend* be = backend_.get();
    if (v.padded > 0) {
      be = &graph_backend(v, v.padded);
      be->init_forward_metadata_replay_cuda_graph(b.fb);
    } else {
      be->init_forward_metadata(b.fb);
    }
    run_layers(v, b, *be);
  }

  // 3. Accept a prefix of the chain; 4. DRAFT_EXTEND the draft model with the accepted tokens.
  Pass e;
  e.mode = ForwardMode::kDraftExtend;
  e.layers = {model_.draft_layer};
  for (Request* r : sel) {
    const int32_t a = rng_.uniform(1, kVerifyTokens);
    e.rows.push_back(Row{r, a, r->len, r->len + a, false});
  }
  if (model_.draft_layer >= 0) {
    Batch b = build(e);
    draft_extend_->init_forward_metadata(b.fb);
    run_layers(e, b, *draft_extend_);
  }
  for (const Row& row : e.rows) row.r->len += row.q_len;
}

void Engine::idle_step() {
  Pass p;
  p.mode = ForwardMode::kIdle;
  for (size_t l = 0; l < model_.layers.size(); ++l) p.layers.push_back(static_cast<int32_t>(l));
  Batch b = build(p);
  backend_->init_forward_metadata(b.fb);
  run_layers(p, b, *backend_);
}

}  // namespace flashback::trace

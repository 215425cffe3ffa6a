// Fuzz at the backend boundary (issue #5 acceptance): 10,000 random calls, each a valid call of a
// random mode, layer kind and API (forward, CUDA-graph replay, multi-step draft, chunked-prefix
// MHA) with one defect injected — head counts that don't match the layer, out_cache_loc of the
// wrong length, an unknown mode, cross attention without encoder lengths, MLA tensors of the
// wrong width, lengths beyond the pool, slots/rows out of range, negative lengths, ... — must
// each raise flashback::Error: never another exception, never a crash (CI runs this under ASan +
// UBSan). About one call in ten is left valid and must not raise, so the defects, not a broken
// base case, are what gets rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "flashback/backend.h"
#include "flashback/kv_cache.h"

namespace flashback {
namespace {

constexpr int kSlots = 256, kRows = 4, kWidth = 64;
constexpr int kHq = 4, kHk = 2, kD = 16, kDv = 16, kR = 16, kDr = 8, kMhaD = 24, kMhaDv = 16;

enum class LK { kMha, kWindow, kSoftcap, kLocal, kCross, kFp8, kMla };
enum class Api { kForward, kGraph, kDraft, kMha, kPrefixChunk };

Tensor i32(const std::vector<int>& v) {
  Tensor t(DType::kI32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.ptr<int32_t>()[i] = v[i];
  return t;
}

Tensor act(std::initializer_list<int64_t> shape) {
  Tensor t(DType::kBF16, shape);
  t.zero();  // zeros are valid activations; the fuzz is about shapes and indices
  return t;
}

// req_to_token for P: rows 1..3 hold 64 positions of slots each (row 0 is the padding row).
struct Pools {
  explicit Pools(int p) : P(p), pool(kRows, kWidth), alloc(kSlots, p) {
    for (int r = 1; r < kRows; ++r) {
      pool.alloc();  // row 0 first, then 1..3
      alloc.extend(pool, r, 0, kWidth);
    }
  }
  int P;
  ReqToTokenPool pool;
  PagedAllocator alloc;
};

struct Call {
  int P = 1;
  LK lk = LK::kMha;
  Api api = Api::kForward;
  BackendConfig cfg;
  ForwardMode mode = ForwardMode::kDecode;
  int B = 0, T = 0, q_per = 1;  // T includes CUDA-graph padding rows
  std::vector<int> rows, seq, q_len, enc;
  bool skip_metadata = false, skip_graph_state = false, skip_capture = false;
  int graph_bs = 0;
  ForwardMode capture_mode = ForwardMode::kDecode;
  int draft_steps = 3, draft_call_step = 0;
  enum class Entry { kForward, kDecode, kExtend } entry = Entry::kForward;
  ForwardMode forward_mode_override = ForwardMode::kDecode;
  bool override_mode = false;

  Tensor r2t, rows_t, seq_t, ext_t, prefix_t, enc_t, loc_t, enc_loc_t;
  ForwardBatch fb;
  Layer layer;
  Tensor kc, vc;
  LayerCache cache;
  TensorView q, k, v, out, lse;
  std::vector<Tensor> keep;  // storage behind the views
  bool save_kv = true;
  TensorView chunk_k, chunk_v;
  PrefixChunk chunk;
  Tensor cap_rows, cap_seq, cap_enc;

  TensorView hold(Tensor t) {
    keep.push_back(t);
    return t.view();
  }
  bool extend_like() const { return is_extend_like(mode); }
  bool mla() const { return lk == LK::kMla; }
  bool cross() const { return lk == LK::kCross; }
  int64_t q_dim() const { return mla() ? kR + kDr : kD; }
  int64_t out_dim() const { return mla() ? kR : kDv; }
  int64_t enc_rows() const {
    int64_t e = 0;
    for (int x : enc) e += x;
    return e;
  }
  // Whether some query of this call reads at least one key through req_to_token.
  bool reads_keys() const {
    if (api == Api::kMha || api == Api::kPrefixChunk) return false;
    for (int b = 0; b < B; ++b)
      if (q_len[b] > 0 && (cross() ? enc[b] > 0 : true)) return true;
    return false;
  }
};

Call make_call(std::mt19937_64& rng, const Pools& pools) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Call c;
  c.P = pools.P;
  c.lk = static_cast<LK>(uni(0, 6));
  const int m = uni(0, 11);
  c.mode = m < 3    ? ForwardMode::kDecode
           : m < 5  ? ForwardMode::kExtend
           : m < 7  ? ForwardMode::kMixed
           : m < 9  ? ForwardMode::kTargetVerify
           : m < 11 ? ForwardMode::kDraftExtend
                    : ForwardMode::kIdle;
  c.api = Api::kForward;
  if ((c.mode == ForwardMode::kDecode || c.mode == ForwardMode::kTargetVerify) && uni(0, 2) == 0)
    c.api = Api::kGraph;
  else if (c.mode == ForwardMode::kDecode && uni(0, 3) == 0)
    c.api = Api::kDraft;
  else if (c.extend_like() && uni(0, 3) == 0)
    c.api = uni(0, 1) ? Api::kMha : Api::kPrefixChunk;

  c.cfg.page_size = c.P;
  c.cfg.attention_chunk_size = 2 * std::max(c.P, 4);
  c.cfg.num_threads = 1;
  c.cfg.max_draft_tokens = 4;
  c.cfg.use_page_table = uni(0, 1);

  c.B = c.mode == ForwardMode::kIdle ? 0 : uni(1, 3);
  std::vector<int> rows = {1, 2, 3};
  std::shuffle(rows.begin(), rows.end(), rng);
  const int N = uni(1, 4);
  c.fb.spec.num_draft_tokens = c.mode == ForwardMode::kTargetVerify ? N : 0;
  c.q_per = c.mode == ForwardMode::kTargetVerify ? N : 1;
  const bool with_enc = c.cross() || uni(0, 3) == 0;
  if (c.api == Api::kDraft) c.draft_call_step = uni(0, c.draft_steps - 2);
  std::vector<int> first;
  for (int b = 0; b < c.B; ++b) {
    c.rows.push_back(rows[b]);
    c.enc.push_back(with_enc ? (c.P == 1 ? uni(0, 8) : uni(0, 2) * c.P) : 0);
    int s = 0, q = 0, f = 0;
    if (c.mode == ForwardMode::kDecode) {
      s = uni(c.api == Api::kDraft ? 0 : 1, 40);
      q = 1;
      f = c.api == Api::kDraft ? s + c.draft_call_step : s - 1;
    } else if (c.mode == ForwardMode::kTargetVerify) {
      s = uni(0, 40);
      q = N;
      f = s;
    } else {
      s = uni(0, 40);
      q = uni(0, s);
      f = s - q;
    }
    c.seq.push_back(s);
    c.q_len.push_back(q);
    first.push_back(f);
  }
  if (c.api == Api::kGraph) c.graph_bs = c.B + uni(0, 1);
  c.capture_mode = c.mode;
  for (int x : c.q_len) c.T += x;
  if (c.api == Api::kGraph) c.T += (c.graph_bs - c.B) * c.q_per;

  // Own copy of req_to_token: mutations may damage it.
  c.r2t = Tensor(DType::kI32, {kRows, kWidth});
  std::memcpy(c.r2t.data(), pools.pool.table().data, c.r2t.nbytes());
  std::vector<int> loc(static_cast<size_t>(c.T), 0), enc_loc;
  for (int b = 0, o = 0; b < c.B; ++b) {
    const int32_t* row = c.r2t.ptr<int32_t>() + c.rows[b] * kWidth;
    for (int j = 0; j < c.q_len[b]; ++j) loc[o++] = row[c.enc[b] + first[b] + j];
    for (int j = 0; j < c.enc[b]; ++j) enc_loc.push_back(row[j]);
  }
  c.rows_t = i32(c.rows);
  c.seq_t = i32(c.seq);
  c.ext_t = i32(c.q_len);
  std::vector<int> prefix;
  for (int b = 0; b < c.B; ++b) prefix.push_back(c.seq[b] - c.q_len[b]);
  c.prefix_t = i32(prefix);
  c.enc_t = i32(c.enc);
  c.loc_t = i32(loc);
  c.enc_loc_t = i32(enc_loc);
  ForwardBatch& fb = c.fb;
  fb.forward_mode = c.mode;
  fb.batch_size = c.B;
  fb.req_to_token = c.r2t;
  fb.req_pool_indices = c.rows_t;
  fb.seq_lens = c.seq_t;
  fb.out_cache_loc = c.loc_t;
  if (c.extend_like()) {
    fb.extend_seq_lens = c.ext_t;
    if (uni(0, 1)) fb.extend_prefix_lens = c.prefix_t;
  }
  if (with_enc) {
    fb.encoder_lens = c.enc_t;
    fb.encoder_out_cache_loc = c.enc_loc_t;
  }
  if (c.api == Api::kDraft) fb.spec.draft_step = c.draft_call_step;

  Layer& L = c.layer;
  L.num_q_heads = kHq;
  L.num_kv_heads = c.mla() ? 1 : kHk;
  L.head_dim = static_cast<int32_t>(c.q_dim());
  L.v_head_dim = static_cast<int32_t>(c.out_dim());
  L.sliding_window_size = c.lk == LK::kWindow ? uni(0, 9) : -1;
  L.logit_cap = c.lk == LK::kSoftcap ? 5.0f : 0.0f;
  L.uses_chunked_local_attention = c.lk == LK::kLocal;
  L.is_cross_attention = c.cross();
  if (c.lk == LK::kFp8) L.k_scale = L.v_scale = 0.5f;

  const int64_t pages = kSlots / c.P;
  const DType cache_dtype = c.lk == LK::kFp8 ? DType::kF8E4M3 : DType::kBF16;
  c.kc = Tensor(cache_dtype, {pages, c.P, L.num_kv_heads, c.q_dim()});
  c.kc.zero();
  if (!c.mla()) {
    c.vc = Tensor(cache_dtype, {pages, c.P, L.num_kv_heads, kDv});
    c.vc.zero();
  }
  c.cache = LayerCache{c.kc, c.mla() ? TensorView{} : c.vc.view()};

  if (c.api == Api::kMha || c.api == Api::kPrefixChunk) {
    c.q = c.hold(act({c.T, kHq, kMhaD}));
    c.out = c.hold(act({c.T, kHq, kMhaDv}));
    c.lse = c.hold(Tensor(DType::kF32, {c.T, kHq}));
    if (c.api == Api::kMha) {
      c.k = c.hold(act({c.T, kHq, kMhaD}));
      c.v = c.hold(act({c.T, kHq, kMhaDv}));
    } else {
      std::vector<int> cu = {0};
      int mx = 0;
      for (int b = 0; b < c.B; ++b) {
        const int n = uni(0, 5);
        cu.push_back(cu.back() + n);
        mx = std::max(mx, n);
      }
      c.chunk = PrefixChunk{c.hold(i32(cu)), mx};
      c.k = c.hold(act({cu.back(), kHq, kMhaD}));
      c.v = c.hold(act({cu.back(), kHq, kMhaDv}));
    }
    return c;
  }
  c.q = c.hold(act({c.T, kHq, c.q_dim()}));
  c.out = c.hold(act({c.T, kHq, c.out_dim()}));
  if (uni(0, 1)) c.lse = c.hold(Tensor(DType::kF32, {c.T, kHq}));
  c.save_kv = uni(0, 4) != 0;
  if (c.cross()) {
    if (uni(0, 1)) {
      c.k = c.hold(act({c.enc_rows(), kHk, kD}));
      c.v = c.hold(act({c.enc_rows(), kHk, kDv}));
    }
  } else if (c.mla()) {
    c.k = c.hold(act({c.T, 1, kR + kDr}));
  } else {
    c.k = c.hold(act({c.T, kHk, kD}));
    c.v = c.hold(act({c.T, kHk, kDv}));
  }
  return c;
}

void run(Call& c) {
  AttentionBackend be(c.cfg);
  const ForwardBatch& fb = c.fb;
  auto forward = [&](AttentionBackend& b, const ForwardBatch& batch) {
    ForwardBatch use = batch;
    if (c.override_mode) use.forward_mode = c.forward_mode_override;
    switch (c.entry) {
      case Call::Entry::kForward:
        b.forward(c.q, c.k, c.v, c.out, c.layer, use, c.cache, c.save_kv, c.lse);
        break;
      case Call::Entry::kDecode:
        b.forward_decode(c.q, c.k, c.v, c.out, c.layer, use, c.cache, c.save_kv, c.lse);
        break;
      case Call::Entry::kExtend:
        b.forward_extend(c.q, c.k, c.v, c.out, c.layer, use, c.cache, c.save_kv, c.lse);
        break;
    }
  };
  switch (c.api) {
    case Api::kForward:
      if (!c.skip_metadata) be.init_forward_metadata(fb);
      forward(be, fb);
      break;
    case Api::kGraph: {
      if (!c.skip_graph_state) be.init_cuda_graph_state(std::max(c.graph_bs, 1), kWidth);
      const int bs = c.graph_bs;
      c.cap_rows = Tensor(DType::kI32, {bs});
      c.cap_seq = Tensor(DType::kI32, {bs});
      c.cap_enc = Tensor(DType::kI32, {bs});
      c.cap_rows.zero();
      c.cap_enc.zero();
      for (int i = 0; i < bs; ++i) c.cap_seq.ptr<int32_t>()[i] = 1;
      ForwardBatch cap;
      cap.forward_mode = c.capture_mode;
      cap.batch_size = bs;
      cap.spec.num_draft_tokens = c.capture_mode == ForwardMode::kTargetVerify ? 2 : 0;
      if (c.capture_mode == ForwardMode::kTargetVerify && c.mode == ForwardMode::kTargetVerify)
        cap.spec = fb.spec;
      cap.req_to_token = c.r2t;
      cap.req_pool_indices = c.cap_rows;
      cap.seq_lens = c.cap_seq;
      if (fb.encoder_lens.defined()) cap.encoder_lens = c.cap_enc;
      if (!c.skip_capture) be.init_forward_metadata_capture_cuda_graph(cap);
      be.init_forward_metadata_replay_cuda_graph(fb);
      forward(be, fb);
      break;
    }
    case Api::kDraft: {
      MultiStepDraftBackend ms(c.cfg, c.draft_steps);
      ms.init_forward_metadata(fb);
      forward(ms.step(c.draft_call_step), fb);
      break;
    }
    case Api::kMha:
      if (!c.skip_metadata) be.init_forward_metadata(fb);
      be.forward_extend_mha(c.q, c.k, c.v, c.out, c.lse, fb);
      break;
    case Api::kPrefixChunk:
      if (!c.skip_metadata) be.init_forward_metadata(fb);
      be.forward_prefix_chunk(c.q, c.k, c.v, c.out, c.lse, fb, c.chunk);
      break;
  }
}

struct Mutation {
  const char* name;
  std::function<bool(const Call&)> applies;
  std::function<void(Call&, std::mt19937_64&)> apply;
};

bool attn(const Call& c) {
  return c.api == Api::kForward || c.api == Api::kGraph || c.api == Api::kDraft;
}
bool saves(const Call& c) { return attn(c) && c.save_kv && c.k.defined(); }
bool has_rows(const Call& c) { return c.B > 0; }
int pick_row(const Call& c, std::mt19937_64& rng) {
  return std::uniform_int_distribution<int>(0, c.B - 1)(rng);
}
// Rebinds an index array the batch views after editing its tensor.
void set(Tensor& t, int i, int v) { t.ptr<int32_t>()[i] = v; }

const std::vector<Mutation>& mutations() {
  static const std::vector<Mutation> m = {
      {"q heads != layer.num_q_heads", attn,
       [](Call& c, auto&) {
         c.q = c.hold(act({c.T, kHq + 1, c.q_dim()}));
       }},
      {"q head_dim != layer.head_dim", attn,
       [](Call& c, auto&) {
         c.q = c.hold(act({c.T, kHq, c.q_dim() + 8}));
       }},
      {"q tokens != planned tokens", attn,
       [](Call& c, auto&) {
         c.q = c.hold(act({c.T + 1, kHq, c.q_dim()}));
       }},
      {"q dtype int32", attn,
       [](Call& c, auto&) {
         c.q = c.hold(Tensor(DType::kI32, {c.T, kHq, c.q_dim()}));
       }},
      {"q without data", [](const Call& c) { return attn(c) && c.T > 0; },
       [](Call& c, auto&) { c.q.data = nullptr; }},
      {"q on a CUDA device", attn,
       [](Call& c, auto&) {
         c.q.device = {DeviceType::kCUDA, 0};
       }},
      {"k heads != layer.num_kv_heads", [](const Call& c) { return saves(c) && !c.mla(); },
       [](Call& c, auto&) {
         c.k = c.hold(act({c.k.shape[0], kHk + 1, kD}));
       }},
      {"v head_dim != layer.v_head_dim", [](const Call& c) { return saves(c) && !c.mla(); },
       [](Call& c, auto&) {
         c.v = c.hold(act({c.v.shape[0], kHk, kDv + 4}));
       }},
      {"out_cache_loc of the wrong length", [](const Call& c) { return saves(c) && !c.cross(); },
       [](Call& c, auto&) {
         c.loc_t = Tensor(DType::kI32, {c.T + 1});
         c.loc_t.zero();
         c.fb.out_cache_loc = c.loc_t;
       }},
      {"out_cache_loc slot out of range",
       [](const Call& c) { return saves(c) && !c.cross() && c.T > 0; },
       [](Call& c, auto& rng) {
         set(c.loc_t, std::uniform_int_distribution<int>(0, c.T - 1)(rng),
             rng() % 2 ? kSlots + 3 : -2);
       }},
      {"encoder_out_cache_loc of the wrong length",
       [](const Call& c) { return saves(c) && c.cross(); },
       [](Call& c, auto&) {
         c.enc_loc_t = Tensor(DType::kI32, {c.enc_rows() + 1});
         c.enc_loc_t.zero();
         c.fb.encoder_out_cache_loc = c.enc_loc_t;
       }},
      {"unknown forward mode", [](const Call& c) { return c.api == Api::kForward; },
       [](Call& c, auto&) { c.fb.forward_mode = static_cast<ForwardMode>(9); }},
      {"cross attention without encoder lengths", [](const Call& c) { return attn(c) && !c.mla(); },
       [](Call& c, auto&) {
         c.layer.is_cross_attention = true;
         c.layer.uses_chunked_local_attention = false;
         c.fb.encoder_lens = {};
         c.fb.encoder_out_cache_loc = {};
         c.k = c.v = {};
       }},
      {"MLA q of the wrong width", [](const Call& c) { return attn(c) && c.mla(); },
       [](Call& c, auto&) {
         c.q = c.hold(act({c.T, kHq, kR + kDr + 1}));
       }},
      {"MLA latent rows of the wrong width", [](const Call& c) { return saves(c) && c.mla(); },
       [](Call& c, auto&) {
         c.k = c.hold(act({c.T, 1, kR + kDr + 2}));
       }},
      {"MLA with a v tensor", [](const Call& c) { return saves(c) && c.mla(); },
       [](Call& c, auto&) {
         c.v = c.hold(act({c.T, 1, kR}));
       }},
      {"MLA latent cache of the wrong width", [](const Call& c) { return attn(c) && c.mla(); },
       [](Call& c, auto&) {
         c.kc = Tensor(DType::kBF16, {kSlots / c.P, c.P, 1, kR + kDr + 4});
         c.kc.zero();
         c.cache.k_cache = c.kc;
       }},
      {"seq_lens beyond the pool", has_rows,
       [](Call& c, auto& rng) { set(c.seq_t, pick_row(c, rng), kWidth + 1); }},
      {"negative seq_lens", has_rows,
       [](Call& c, auto& rng) { set(c.seq_t, pick_row(c, rng), -1 - int(rng() % 5)); }},
      {"negative extend_seq_lens", [](const Call& c) { return has_rows(c) && c.extend_like(); },
       [](Call& c, auto& rng) { set(c.ext_t, pick_row(c, rng), -1); }},
      {"extend_seq_lens > seq_lens", [](const Call& c) { return has_rows(c) && c.extend_like(); },
       [](Call& c, auto& rng) {
         const int b = pick_row(c, rng);
         set(c.ext_t, b, c.seq[b] + 1);
       }},
      {"extend_prefix_lens inconsistent",
       [](const Call& c) { return has_rows(c) && c.extend_like(); },
       [](Call& c, auto& rng) {
         const int b = pick_row(c, rng);
         set(c.prefix_t, b, c.seq[b] - c.q_len[b] + 1);
         c.fb.extend_prefix_lens = c.prefix_t;
       }},
      {"extend mode without extend_seq_lens", [](const Call& c) { return c.extend_like(); },
       [](Call& c, auto&) { c.fb.extend_seq_lens = c.fb.extend_seq_lens_cpu = {}; }},
      {"req_pool_indices out of range", has_rows,
       [](Call& c, auto& rng) { set(c.rows_t, pick_row(c, rng), rng() % 2 ? kRows : -1); }},
      {"batch_size != index arrays", [](const Call&) { return true; },
       [](Call& c, auto& rng) { c.fb.batch_size = c.B == 0 || rng() % 2 ? c.B + 1 : c.B - 1; }},
      {"negative batch_size", [](const Call&) { return true; },
       [](Call& c, auto&) { c.fb.batch_size = -1; }},
      {"seq_lens on a device without a host copy", has_rows,
       [](Call& c, auto&) {
         c.fb.seq_lens.device = {DeviceType::kCUDA, 0};
         c.fb.seq_lens_cpu = {};
       }},
      {"out_cache_loc missing", [](const Call& c) { return saves(c) && !c.cross(); },
       [](Call& c, auto&) { c.fb.out_cache_loc = {}; }},
      {"seq_lens of another dtype", has_rows,
       [](Call& c, auto&) { c.fb.seq_lens = c.hold(Tensor(DType::kF32, {c.B})); }},
      {"out heads != layer", attn,
       [](Call& c, auto&) {
         c.out = c.hold(act({c.T, kHq + 1, c.out_dim()}));
       }},
      {"out rows != queries", attn,
       [](Call& c, auto&) {
         c.out = c.hold(act({c.T + 1, kHq, c.out_dim()}));
       }},
      {"out dtype int32", attn,
       [](Call& c, auto&) {
         c.out = c.hold(Tensor(DType::kI32, {c.T, kHq, c.out_dim()}));
       }},
      {"lse of the wrong shape", attn,
       [](Call& c, auto&) {
         c.lse = c.hold(Tensor(DType::kF32, {c.T + 1, kHq}));
       }},
      {"k_cache page size != config", attn,
       [](Call& c, auto&) {
         const int64_t P2 = c.P == 1 ? 2 : 1;
         TensorView kc = c.kc.view();
         c.cache.k_cache =
             TensorView(kc.data, kc.dtype, {kSlots / P2, P2, kc.shape[2], kc.shape[3]});
       }},
      {"k_cache heads != layer", [](const Call& c) { return attn(c) && !c.mla(); },
       [](Call& c, auto&) {
         c.kc = Tensor(c.kc.dtype(), {kSlots / c.P, c.P, kHk + 1, kD});
         c.vc = Tensor(c.vc.dtype(), {kSlots / c.P, c.P, kHk + 1, kDv});
         c.kc.zero();
         c.vc.zero();
         c.cache = LayerCache{c.kc, c.vc};
       }},
      {"missing k_cache", attn, [](Call& c, auto&) { c.cache.k_cache = {}; }},
      {"num_kv_heads not dividing num_q_heads", [](const Call& c) { return attn(c) && !c.mla(); },
       [](Call& c, auto& rng) { c.layer.num_kv_heads = rng() % 2 ? 3 : 0; }},
      {"num_q_heads 0", attn, [](Call& c, auto&) { c.layer.num_q_heads = 0; }},
      {"negative logit_cap", attn, [](Call& c, auto&) { c.layer.logit_cap = -1.0f; }},
      {"NaN scaling", attn,
       [](Call& c, auto&) { c.layer.scaling = std::numeric_limits<float>::quiet_NaN(); }},
      {"sliding_window_size < -1", [](const Call& c) { return attn(c) && !c.cross(); },
       [](Call& c, auto&) { c.layer.sliding_window_size = -5; }},
      {"FP8 k_scale 0", [](const Call& c) { return saves(c) && c.lk == LK::kFp8; },
       [](Call& c, auto&) { c.layer.k_scale = 0.0f; }},
      {"TARGET_VERIFY without draft tokens",
       [](const Call& c) { return c.mode == ForwardMode::kTargetVerify; },
       [](Call& c, auto&) { c.fb.spec.num_draft_tokens = 0; }},
      {"draft_step outside DECODE", [](const Call& c) { return c.mode != ForwardMode::kDecode; },
       [](Call& c, auto&) { c.fb.spec.draft_step = 1; }},
      // (The multi-step draft backend sets each step's draft_step itself.)
      {"draft_step < -1", [](const Call& c) { return c.api != Api::kDraft; },
       [](Call& c, auto&) { c.fb.spec.draft_step = -2; }},
      {"req_to_token of dtype int64", [](const Call&) { return true; },
       [](Call& c, auto&) {
         c.fb.req_to_token = c.hold(Tensor(DType::kI64, {kRows, kWidth}));
       }},
      {"req_to_token 1-D", [](const Call&) { return true; },
       [](Call& c, auto&) {
         c.fb.req_to_token = TensorView(c.r2t.data(), DType::kI32, {kRows * kWidth});
       }},
      {"req_to_token slot out of range", [](const Call& c) { return c.reads_keys(); },
       [](Call& c, auto& rng) {
         const int bad = rng() % 2 ? kSlots + 5 : -5;
         for (int r : c.rows)
           for (int t = 0; t < kWidth; ++t) c.r2t.ptr<int32_t>()[r * kWidth + t] = bad;
       }},
      {"encoder_lens not page-aligned",
       [](const Call& c) { return has_rows(c) && c.P > 1 && c.fb.encoder_lens.defined(); },
       [](Call& c, auto& rng) { set(c.enc_t, pick_row(c, rng), 1); }},
      {"encoder_lens beyond the pool",
       [](const Call& c) { return has_rows(c) && c.fb.encoder_lens.defined(); },
       [](Call& c, auto& rng) { set(c.enc_t, pick_row(c, rng), kWidth + 1); }},
      {"negative encoder_lens",
       [](const Call& c) { return has_rows(c) && c.fb.encoder_lens.defined(); },
       [](Call& c, auto& rng) { set(c.enc_t, pick_row(c, rng), -c.P); }},
      {"forward_decode with an extend batch",
       [](const Call& c) { return c.api == Api::kForward && c.extend_like(); },
       [](Call& c, auto&) { c.entry = Call::Entry::kDecode; }},
      {"forward_extend with a decode batch",
       [](const Call& c) { return c.api == Api::kForward && is_decode_or_idle(c.mode); },
       [](Call& c, auto&) { c.entry = Call::Entry::kExtend; }},
      {"forward before init_forward_metadata",
       [](const Call& c) { return c.api == Api::kForward || c.api == Api::kMha; },
       [](Call& c, auto&) { c.skip_metadata = true; }},
      {"metadata planned for another mode", [](const Call& c) { return c.api == Api::kForward; },
       [](Call& c, auto&) {
         c.override_mode = true;
         c.forward_mode_override =
             c.extend_like() ? ForwardMode::kTargetVerify : ForwardMode::kExtend;
       }},
      {"chunked-prefix MHA without lse",
       [](const Call& c) { return c.api == Api::kMha || c.api == Api::kPrefixChunk; },
       [](Call& c, auto&) { c.lse = {}; }},
      {"chunked-prefix MHA k heads not dividing q heads",
       [](const Call& c) { return c.api == Api::kMha || c.api == Api::kPrefixChunk; },
       [](Call& c, auto&) {
         c.k = c.hold(act({c.k.shape[0], 3, kMhaD}));
       }},
      {"chunked-prefix MHA q rows != extend tokens",
       [](const Call& c) { return c.api == Api::kMha || c.api == Api::kPrefixChunk; },
       [](Call& c, auto&) {
         c.q = c.hold(act({c.T + 2, kHq, kMhaD}));
       }},
      {"chunked-prefix MHA in a decode batch",
       [](const Call& c) { return c.api == Api::kMha || c.api == Api::kPrefixChunk; },
       [](Call& c, auto&) {
         c.fb.forward_mode = ForwardMode::kDecode;
         c.q = c.hold(act({c.B, kHq, kMhaD}));
       }},
      {"prefix chunk cu_seq_lens of the wrong length",
       [](const Call& c) { return c.api == Api::kPrefixChunk; },
       [](Call& c, auto&) {
         std::vector<int> cu(static_cast<size_t>(c.B + 2), 0);
         c.chunk.cu_seq_lens = c.hold(i32(cu));
       }},
      {"prefix chunk keys beyond k rows", [](const Call& c) { return c.api == Api::kPrefixChunk; },
       [](Call& c, auto&) {
         std::vector<int> cu(static_cast<size_t>(c.B + 1), 0);
         for (int b = 1; b <= c.B; ++b) cu[b] = cu[b - 1] + 7;
         cu[c.B] = static_cast<int>(c.k.shape[0]) + 1;
         c.chunk.cu_seq_lens = c.hold(i32(cu));
       }},
      {"prefix chunk without cu_seq_lens", [](const Call& c) { return c.api == Api::kPrefixChunk; },
       [](Call& c, auto&) { c.chunk.cu_seq_lens = {}; }},
      {"graph replay of a larger batch than captured",
       [](const Call& c) { return c.api == Api::kGraph && c.B >= 1; },
       [](Call& c, auto&) { c.graph_bs = c.B - 1; }},
      {"graph replay without capture", [](const Call& c) { return c.api == Api::kGraph; },
       [](Call& c, auto&) { c.skip_capture = true; }},
      {"graph capture without init_cuda_graph_state",
       [](const Call& c) { return c.api == Api::kGraph; },
       [](Call& c, auto&) { c.skip_graph_state = true; }},
      {"graph capture of an EXTEND batch", [](const Call& c) { return c.api == Api::kGraph; },
       [](Call& c, auto&) { c.capture_mode = ForwardMode::kExtend; }},
      {"graph replay of another mode than captured",
       [](const Call& c) { return c.api == Api::kGraph; },
       [](Call& c, auto&) {
         c.capture_mode =
             c.mode == ForwardMode::kDecode ? ForwardMode::kTargetVerify : ForwardMode::kDecode;
       }},
      {"draft step without attention", [](const Call& c) { return c.api == Api::kDraft; },
       [](Call& c, auto& rng) { c.draft_call_step = rng() % 2 ? c.draft_steps - 1 : -1; }},
  };
  return m;
}

TEST(BackendFuzz, MalformedCallsRaiseOnlyError) {
  std::mt19937_64 rng(20261130);
  const Pools pools1(1), pools4(4);
  const auto& muts = mutations();
  std::map<std::string, int> tried;
  std::map<std::string, std::string> not_rejected;
  int valid = 0, malformed = 0;
  std::string valid_rejected;
  for (int it = 0; it < 10000; ++it) {
    Call c = make_call(rng, rng() % 2 ? pools1 : pools4);
    const Mutation* m = nullptr;
    if (rng() % 10 != 0) {
      for (int tries = 0; tries < 50 && !m; ++tries) {
        const Mutation& cand = muts[rng() % muts.size()];
        if (cand.applies(c)) m = &cand;
      }
      if (m) m->apply(c, rng);
    }
    bool threw = false;
    std::string what;
    try {
      run(c);
    } catch (const Error& e) {
      threw = true;
      what = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << it << (m ? m->name : " (valid)")
                    << ": an exception other than flashback::Error: " << e.what();
      threw = true;
    }
    if (m) {
      ++malformed;
      ++tried[m->name];
      if (!threw && !not_rejected.count(m->name))
        not_rejected[m->name] = "iteration " + std::to_string(it) + ", mode " +
                                forward_mode_name(c.mode) + ", P " + std::to_string(c.P);
    } else {
      ++valid;
      if (threw && valid_rejected.empty())
        valid_rejected = "iteration " + std::to_string(it) + ": " + what;
    }
  }
  for (const auto& [name, where] : not_rejected)
    ADD_FAILURE() << "accepted without an Error: " << name << " (first at " << where << ")";
  EXPECT_TRUE(valid_rejected.empty()) << "a valid call was rejected: " << valid_rejected;
  EXPECT_GT(valid, 500);
  EXPECT_GT(malformed, 8000);
  for (const Mutation& m : muts) EXPECT_GT(tried[m.name], 0) << "never tried: " << m.name;
}

}  // namespace
}  // namespace flashback

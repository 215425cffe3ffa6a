// AttentionBackend end to end on small batches: prefill (EXTEND with and without prefix), then
// DECODE, for MHA (full and windowed) and absorbed MLA, P = 1 and P = 4, against the oracle's
// ragged attention over each request's dense history. Also the backend's argument checks.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "flashback/backend.h"
#include "flashback/kv_cache.h"
#include "testing/case.h"

namespace flashback {
namespace {

const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};

struct Batch {
  std::vector<int32_t> rows, seq, ext, prefix, loc;
  ForwardBatch fb;
  void finish(ForwardMode mode, const ReqToTokenPool& pool) {
    const auto B = static_cast<int64_t>(rows.size());
    fb.forward_mode = mode;
    fb.batch_size = static_cast<int32_t>(B);
    fb.req_to_token = pool.table();
    fb.req_pool_indices = TensorView(rows.data(), DType::kI32, {B});
    fb.seq_lens = TensorView(seq.data(), DType::kI32, {B});
    fb.out_cache_loc = TensorView(loc.data(), DType::kI32, {static_cast<int64_t>(loc.size())});
    if (mode != ForwardMode::kDecode) {
      fb.extend_seq_lens = TensorView(ext.data(), DType::kI32, {B});
      fb.extend_prefix_lens = TensorView(prefix.data(), DType::kI32, {B});
    }
  }
};

// One model layer over B requests; keeps each request's dense K/V history to recompute with.
struct Harness {
  int Hq, Hk, D, Dv, P;
  bool mla;
  ReqToTokenPool pool{8, 64};
  PagedAllocator alloc;
  KVPool kv;
  Layer layer;
  std::mt19937_64 rng{42};
  std::vector<int32_t> rows;
  std::vector<std::vector<float>> hist_k, hist_v;  // per request: [t][Hk][D], [t][Hk][Dv]

  Harness(int hq, int hk, int d, int dv, int p, bool is_mla)
      : Hq(hq),
        Hk(hk),
        D(d),
        Dv(dv),
        P(p),
        mla(is_mla),
        alloc(256, p),
        kv(KVPoolConfig{1, 256, p, hk, d, is_mla ? 0 : dv, DType::kF32, 1, 1}) {
    layer.num_q_heads = hq;
    layer.num_kv_heads = hk;
    layer.head_dim = d;
    layer.v_head_dim = dv;
    layer.scaling = 0.3f;
  }

  LayerCache cache() const {
    return mla ? LayerCache{kv.k_cache(0), {}} : LayerCache{kv.k_cache(0), kv.v_cache(0)};
  }

  // Runs one step where request i adds new_tokens[i] tokens; checks outputs against the oracle.
  void step(AttentionBackend& be, ForwardMode mode, const std::vector<int>& new_tokens) {
    Batch b;
    const int B = static_cast<int>(new_tokens.size());
    while (static_cast<int>(rows.size()) < B) {
      rows.push_back(pool.alloc());
      hist_k.emplace_back();
      hist_v.emplace_back();
    }
    int T = 0;
    for (int i = 0; i < B; ++i) {
      const int64_t have = static_cast<int64_t>(hist_k[i].size()) / (Hk * D);
      auto slots = alloc.extend(pool, rows[i], have, new_tokens[i]);
      b.loc.insert(b.loc.end(), slots.begin(), slots.end());
      b.rows.push_back(rows[i]);
      b.seq.push_back(static_cast<int32_t>(have + new_tokens[i]));
      b.ext.push_back(new_tokens[i]);
      b.prefix.push_back(static_cast<int32_t>(have));
      T += new_tokens[i];
    }
    b.finish(mode, pool);
    Tensor q(DType::kF32, {T, Hq, D}), k(DType::kF32, {T, Hk, D}), v(DType::kF32, {T, Hk, Dv});
    testing::fill_normal(q, rng);
    testing::fill_normal(k, rng);
    testing::fill_normal(v, rng);
    if (mla)  // the value is the first Dv columns of the latent row
      for (int64_t t = 0; t < T; ++t)
        for (int d = 0; d < Dv; ++d) v.set(t * Dv + d, k.get(t * D + d));
    Tensor out(DType::kF32, {T, Hq, Dv}), lse(DType::kF32, {T, Hq});
    out.poison();
    lse.poison();
    be.init_forward_metadata(b.fb);
    be.forward(q, k, mla ? TensorView{} : v.view(), out, layer, b.fb, cache(), true, lse);

    // Dense recomputation with the oracle: per request, ragged over its whole history.
    int t0 = 0;
    for (int i = 0; i < B; ++i) {
      for (int64_t t = 0; t < new_tokens[i]; ++t) {
        for (int64_t j = 0; j < Hk * D; ++j)
          hist_k[i].push_back(float(k.get((t0 + t) * Hk * D + j)));
        for (int64_t j = 0; j < Hk * Dv; ++j)
          hist_v[i].push_back(float(v.get((t0 + t) * Hk * Dv + j)));
      }
      const int64_t L = static_cast<int64_t>(hist_k[i].size()) / (Hk * D), n = new_tokens[i];
      Tensor hk(DType::kF32, {L, Hk, D}), hv(DType::kF32, {L, Hk, Dv});
      std::copy(hist_k[i].begin(), hist_k[i].end(), hk.ptr<float>());
      std::copy(hist_v[i].begin(), hist_v[i].end(), hv.ptr<float>());
      Tensor cuq(DType::kI32, {2}), cuk(DType::kI32, {2}), ro(DType::kF32, {n, Hq, Dv}),
          rl(DType::kF32, {n, Hq});
      cuq.ptr<int32_t>()[0] = cuk.ptr<int32_t>()[0] = 0;
      cuq.ptr<int32_t>()[1] = static_cast<int32_t>(n);
      cuk.ptr<int32_t>()[1] = static_cast<int32_t>(L);
      RaggedAttentionParams r;
      r.q = q.view().slice(0, t0, t0 + n);
      r.k = hk;
      r.v = hv;
      // MLA: q·(whole latent row) = q_nope·c_kv + q_rope·k_rope, the absorbed logit.
      r.cu_seqlens_q = cuq;
      r.cu_seqlens_k = cuk;
      r.out = ro;
      r.lse = rl;
      r.softmax_scale = layer.scaling;
      r.window_left = layer.sliding_window_size;
      ragged_attention(r, kRef);
      const auto c = testing::compare(out.view().slice(0, t0, t0 + n), ro,
                                      lse.view().slice(0, t0, t0 + n), rl);
      EXPECT_TRUE(c.ok) << forward_mode_name(mode) << " request " << i << ": " << c.why;
      t0 += static_cast<int>(n);
    }
  }
};

class BackendSteps : public ::testing::TestWithParam<int> {};

TEST_P(BackendSteps, MhaExtendThenDecode) {
  Harness h(4, 2, 16, 8, GetParam(), false);
  AttentionBackend be(BackendConfig{.page_size = GetParam()});
  h.step(be, ForwardMode::kExtend, {5, 1, 9});
  h.step(be, ForwardMode::kExtend, {3, 4, 2});  // with prefixes
  for (int s = 0; s < 5; ++s) h.step(be, ForwardMode::kDecode, {1, 1, 1});
}

TEST_P(BackendSteps, SlidingWindow) {
  Harness h(4, 1, 16, 16, GetParam(), false);
  h.layer.sliding_window_size = 3;
  AttentionBackend be(BackendConfig{.page_size = GetParam()});
  h.step(be, ForwardMode::kExtend, {7, 12});
  for (int s = 0; s < 4; ++s) h.step(be, ForwardMode::kDecode, {1, 1});
}

TEST_P(BackendSteps, MlaAbsorbed) {
  // Latent row 24 wide: c_kv (16) | k_rope (8). q = [q_nope | q_rope] (24).
  Harness h(4, 1, 24, 16, GetParam(), true);
  AttentionBackend be(BackendConfig{.page_size = GetParam()});
  h.step(be, ForwardMode::kExtend, {6, 3});
  for (int s = 0; s < 3; ++s) h.step(be, ForwardMode::kDecode, {1, 1});
}

INSTANTIATE_TEST_SUITE_P(PageSizes, BackendSteps, ::testing::Values(1, 4));

TEST(Backend, RejectsMismatchedInput) {
  Harness h(4, 2, 16, 8, 1, false);
  AttentionBackend be(BackendConfig{});
  h.step(be, ForwardMode::kExtend, {3});
  Batch b;
  b.rows = {h.rows[0]};
  b.seq = {4};
  b.loc = {200, 201};  // two slots for one new token
  b.finish(ForwardMode::kDecode, h.pool);
  be.init_forward_metadata(b.fb);
  Tensor q(DType::kF32, {1, 4, 16}), k(DType::kF32, {1, 2, 16}), v(DType::kF32, {1, 2, 8}),
      out(DType::kF32, {1, 4, 8});
  auto expect_arg = [&](const std::function<void()>& f, const std::string& arg) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one naming " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), arg) << e.what();
    }
  };
  expect_arg([&] { be.forward(q, k, v, out, h.layer, b.fb, h.cache()); }, "out_cache_loc");
  b.loc = {200};
  b.finish(ForwardMode::kDecode, h.pool);
  Layer wrong = h.layer;
  wrong.num_q_heads = 8;
  expect_arg([&] { be.forward(q, k, v, out, wrong, b.fb, h.cache()); }, "q");
  wrong = h.layer;
  wrong.num_kv_heads = 4;
  expect_arg([&] { be.forward(q, k, v, out, wrong, b.fb, h.cache()); }, "k");
  expect_arg([&] { be.forward_extend(q, k, v, out, h.layer, b.fb, h.cache()); }, "forward_mode");
  Tensor q2(DType::kF32, {2, 4, 16});
  expect_arg([&] { be.forward(q2, k, v, out, h.layer, b.fb, h.cache(), false); }, "q");
  AttentionBackend fresh(BackendConfig{});
  expect_arg([&] { fresh.forward(q, k, v, out, h.layer, b.fb, h.cache(), false); }, "metadata");
  expect_arg([&] { fresh.init_forward_metadata_replay_cuda_graph(b.fb); },
             "init_forward_metadata_replay_cuda_graph");
}

}  // namespace
}  // namespace flashback

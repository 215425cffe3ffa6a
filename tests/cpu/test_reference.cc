// The oracle against hand-computed cases: each SPEC.md §2 rule has a test here that fails when
// the rule is broken (tests/oracle_mutations.sh breaks each one and checks).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback {
namespace {

using testing::AttentionCase;
using testing::compare;
using testing::make_paged;
using testing::PagedData;

constexpr double kInf = std::numeric_limits<double>::infinity();
const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};

// One request, f32, P = 1, key t in slot t + 1 (slot 0 reserved). Values are given per
// (token, head, dim) in row-major order.
struct Tiny {
  Tensor q, k, v, table, seqlens, cu_q, out, lse;
  PagedAttentionParams p;
  Tiny(int q_len, int kv_len, int hq, int hk, int d, const std::vector<double>& qs,
       const std::vector<double>& ks, const std::vector<double>& vs, int dv = -1) {
    if (dv < 0) dv = d;
    q = Tensor(DType::kF32, {q_len, hq, d});
    k = Tensor(DType::kF32, {kv_len + 1, hk, d});
    v = Tensor(DType::kF32, {kv_len + 1, hk, dv});
    k.zero();
    v.zero();
    for (size_t i = 0; i < qs.size(); ++i) q.set(static_cast<int64_t>(i), qs[i]);
    for (size_t i = 0; i < ks.size(); ++i) k.set(static_cast<int64_t>(i) + hk * d, ks[i]);
    for (size_t i = 0; i < vs.size(); ++i) v.set(static_cast<int64_t>(i) + hk * dv, vs[i]);
    table = Tensor(DType::kI32, {1, kv_len + 1});
    for (int t = 0; t <= kv_len; ++t) table.ptr<int32_t>()[t] = t + 1;
    seqlens = Tensor(DType::kI32, {1});
    seqlens.ptr<int32_t>()[0] = kv_len;
    cu_q = Tensor(DType::kI32, {2});
    cu_q.ptr<int32_t>()[0] = 0;
    cu_q.ptr<int32_t>()[1] = q_len;
    out = Tensor(DType::kF32, {q_len, hq, dv});
    lse = Tensor(DType::kF32, {q_len, hq});
    out.poison();
    lse.poison();
    p.q = q;
    p.k_cache = k;
    p.v_cache = v;
    p.page_table = table;
    p.cache_seqlens = seqlens;
    p.cu_seqlens_q = cu_q;
    p.out = out;
    p.lse = lse;
    p.softmax_scale = 1.0f;
  }
  void run() { paged_attention(p, kRef); }
  double o(int i, int h = 0, int d = 0) const {
    return load_as_double(out, out.view().offset(i, h, d));
  }
  double l(int i, int h = 0) const { return load_as_double(lse, lse.view().offset(i, h)); }
};

TEST(Reference, CausalTwoQueriesThreeKeys) {
  // q_len 2, kv_len 3, bottom-right: query 0 sits at position 1 (keys 0..1), query 1 at 2.
  Tiny t(2, 3, 1, 1, 1, {1, 2}, {1, 0, -1}, {10, 20, 30});
  t.run();
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  EXPECT_NEAR(t.o(0), (10 * e + 20) / (e + 1), 1e-5);
  EXPECT_NEAR(t.l(0), std::log(e + 1), 1e-6);
  EXPECT_NEAR(t.o(1), (10 * e2 + 20 + 30 / e2) / (e2 + 1 + 1 / e2), 1e-5);
  EXPECT_NEAR(t.l(1), std::log(e2 + 1 + 1 / e2), 1e-6);
}

TEST(Reference, NonCausalSeesEveryKey) {
  Tiny t(2, 3, 1, 1, 1, {0, 0}, {1, 0, -1}, {10, 20, 30});
  t.p.causal = false;
  t.run();
  EXPECT_NEAR(t.o(0), 20, 1e-5);
  EXPECT_NEAR(t.l(0), std::log(3.0), 1e-6);
}

TEST(Reference, WindowLeftCausal) {
  // kv 6, q 1 at position 5, window (2, 0): keys 3, 4, 5. q = 0 → uniform weights.
  Tiny t(1, 6, 1, 1, 1, {0}, {1, 2, 3, 4, 5, 6}, {1, 2, 4, 8, 16, 32});
  t.p.window_left = 2;
  t.run();
  EXPECT_NEAR(t.o(0), (8 + 16 + 32) / 3.0, 1e-5);
  EXPECT_NEAR(t.l(0), std::log(3.0), 1e-6);
}

TEST(Reference, WindowBothSidesNonCausal) {
  // kv 6, q 3 at positions 3, 4, 5, non-causal, window (1, 1): [2,4], [3,5], [4,5].
  Tiny t(3, 6, 1, 1, 1, {0, 0, 0}, {1, 2, 3, 4, 5, 6}, {1, 2, 4, 8, 16, 32});
  t.p.causal = false;
  t.p.window_left = 1;
  t.p.window_right = 1;
  t.run();
  EXPECT_NEAR(t.o(0), (4 + 8 + 16) / 3.0, 1e-5);
  EXPECT_NEAR(t.o(1), (8 + 16 + 32) / 3.0, 1e-5);
  EXPECT_NEAR(t.o(2), (16 + 32) / 2.0, 1e-5);
  EXPECT_NEAR(t.l(2), std::log(2.0), 1e-6);
}

TEST(Reference, Softcap) {
  // logit = c·tanh(scale·q·k / c): q = 3, k = (1, 2), scale 0.5, c = 2.
  Tiny t(1, 2, 1, 1, 1, {3}, {1, 2}, {1, 5});
  t.p.causal = false;
  t.p.softmax_scale = 0.5f;
  t.p.softcap = 2.0f;
  t.run();
  const double a = 2 * std::tanh(1.5 / 2), b = 2 * std::tanh(3.0 / 2);
  EXPECT_NEAR(t.o(0), (std::exp(a) * 1 + std::exp(b) * 5) / (std::exp(a) + std::exp(b)), 1e-5);
  EXPECT_NEAR(t.l(0), std::log(std::exp(a) + std::exp(b)), 1e-6);
}

TEST(Reference, DefaultScaleIsInverseSqrtHeadDim) {
  // D = 4, q = k = (1,1,1,1): q·k = 4, default scale 1/2 → logit 2 vs logit 0 for the zero key.
  Tiny t(1, 2, 1, 1, 4, {1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0, 0}, {1, 1, 1, 1, 0, 0, 0, 0});
  t.p.causal = false;
  t.p.softmax_scale = 0;
  t.run();
  EXPECT_NEAR(t.l(0), std::log(std::exp(2.0) + 1), 1e-6);
}

TEST(Reference, EmptyRowsGiveZerosAndMinusInf) {
  // q_len 2 > kv_len 1 causal: query 0 sits at position -1 and sees nothing.
  Tiny t(2, 1, 1, 1, 2, {1, 1, 1, 1}, {1, 1}, {3, 4});
  t.run();
  EXPECT_EQ(t.o(0, 0, 0), 0.0);
  EXPECT_EQ(t.o(0, 0, 1), 0.0);
  EXPECT_EQ(t.l(0), -kInf);
  EXPECT_NEAR(t.o(1, 0, 1), 4.0, 1e-6);
  // kv_len 0: every row empty.
  Tiny z(1, 0, 2, 1, 2, {1, 1, 1, 1}, {}, {});
  z.run();
  EXPECT_EQ(z.o(0, 1, 1), 0.0);
  EXPECT_EQ(z.l(0, 1), -kInf);
}

TEST(Reference, GqaHeadMapping) {
  // Hq 4, Hk 2: q heads 0,1 use KV head 0; heads 2,3 use KV head 1. q = 0 → uniform.
  Tiny t(1, 2, 4, 2, 1, {0, 0, 0, 0}, {0, 0, 0, 0}, {1, 10, 3, 30});
  t.p.causal = false;
  t.run();
  EXPECT_NEAR(t.o(0, 0), 2, 1e-6);
  EXPECT_NEAR(t.o(0, 1), 2, 1e-6);
  EXPECT_NEAR(t.o(0, 2), 20, 1e-6);
  EXPECT_NEAR(t.o(0, 3), 20, 1e-6);
}

TEST(Reference, Fp8DescalePerBatchRowAndHead) {
  // Two requests, Hk 2, e4m3 cache holding exact values; descale differs per (row, head).
  AttentionCase c;
  c.q_lens = {1, 1};
  c.kv_lens = {2, 2};
  c.heads_q = 2;
  c.heads_kv = 2;
  c.head_dim = 1;
  c.dtype = DType::kF32;
  c.kv_dtype = DType::kF8E4M3;
  c.causal = false;
  c.softmax_scale = 1;
  PagedData d = make_paged(c, 1);
  const auto& p = d.params;
  const float kd[4] = {0.5f, 1.0f, 2.0f, 0.25f}, vd[4] = {1.0f, 2.0f, 0.5f, 4.0f};
  for (int i = 0; i < 4; ++i) {
    d.k_descale.ptr<float>()[i] = kd[i];
    d.v_descale.ptr<float>()[i] = vd[i];
  }
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h) d.q.set(b * 2 + h, 1.0);
  const int32_t* tab = d.page_table.ptr<int32_t>();
  const int64_t w = d.page_table.size(1);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 2; ++t)
      for (int g = 0; g < 2; ++g) {
        const int64_t slot = tab[b * w + t];
        store_from_double(p.k_cache, p.k_cache.offset(slot, 0, g, 0), t == 0 ? 1.0 : 2.0);
        store_from_double(p.v_cache, p.v_cache.offset(slot, 0, g, 0), t == 0 ? 4.0 : 8.0);
      }
  paged_attention(p, kRef);
  for (int b = 0; b < 2; ++b)
    for (int g = 0; g < 2; ++g) {
      const double k = kd[b * 2 + g], v = vd[b * 2 + g];
      const double w0 = std::exp(1 * k), w1 = std::exp(2 * k);
      EXPECT_NEAR(d.out.get(b * 2 + g), v * (4 * w0 + 8 * w1) / (w0 + w1), 1e-4) << b << g;
      EXPECT_NEAR(d.lse.get(b * 2 + g), std::log(w0 + w1), 1e-5);
    }
}

TEST(Reference, QvEqualsConcatenatedAttention) {
  // MLA absorbed: logit = scale·(q_rope·k_rope + q_nope·c_kv) equals plain attention with
  // q = [q_nope | q_rope] against the whole latent row [c_kv | k_rope], values c_kv.
  AttentionCase c;
  c.q_lens = {1, 3};
  c.kv_lens = {5, 9};
  c.heads_q = 4;
  c.heads_kv = 1;
  c.head_dim = 8;
  c.head_dim_v = 16;
  c.mla = true;
  c.page_size = 4;
  c.dtype = DType::kF32;
  c.kv_dtype = DType::kF32;
  PagedData d = make_paged(c, 2);
  paged_attention(d.params, kRef);

  PagedData e = testing::with_fresh_outputs(d);
  e.params.q = d.q;  // [tokens, H, 16 + 8]
  e.params.qv = {};
  e.params.k_cache = d.k_cache;                      // [pages, P, 1, 24]
  e.params.softmax_scale = 1.0f / std::sqrt(24.0f);  // the MLA default (Dqv + D)^-1/2
  paged_attention(e.params, kRef);
  const auto r = compare(d.out, e.out, d.lse, e.lse);
  EXPECT_TRUE(r.ok) << r.why;
}

TEST(Reference, PageSizesAndTableFormsAgree) {
  // The same keys through P = 4 page ids, P = 1 slots (the pool viewed as one-token pages) and
  // a req_to_token-style slot table give identical bits.
  AttentionCase c;
  c.q_lens = {3, 1, 4};
  c.kv_lens = {7, 4, 13};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 8;
  c.page_size = 4;
  c.dtype = DType::kF32;
  c.kv_dtype = DType::kBF16;
  PagedData d = make_paged(c, 3);
  paged_attention(d.params, kRef);

  const int64_t B = 3, P = 4, wp = d.page_table.size(1);
  Tensor slots(DType::kI32, {B, wp * P});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < wp * P; ++t) {
      const int32_t page = d.page_table.ptr<int32_t>()[b * wp + t / P];
      slots.ptr<int32_t>()[b * wp * P + t] = page < 0 ? -1 : static_cast<int32_t>(page * P + t % P);
    }
  // P = 1 view of the same pools.
  PagedData e = testing::with_fresh_outputs(d);
  const TensorView kc = d.k_cache, vc = d.v_cache;
  e.params.k_cache = TensorView(kc.data, kc.dtype, {kc.shape[0] * P, 1, kc.shape[2], kc.shape[3]});
  e.params.v_cache = TensorView(vc.data, vc.dtype, {vc.shape[0] * P, 1, vc.shape[2], vc.shape[3]});
  e.params.page_table = slots;
  paged_attention(e.params, kRef);
  // Slot table with P = 4 pools.
  PagedData f = testing::with_fresh_outputs(d);
  f.params.page_table = slots;
  f.params.table_holds_slots = true;
  paged_attention(f.params, kRef);
  for (int64_t i = 0; i < d.out.numel(); ++i) {
    ASSERT_EQ(d.out.get(i), e.out.get(i)) << i;
    ASSERT_EQ(d.out.get(i), f.out.get(i)) << i;
  }
}

TEST(Reference, KvStartAndTableRowsSelectKeys) {
  // kv_start shifts key positions (chunked-local virtual requests); table_rows picks the row.
  Tiny t(1, 4, 1, 1, 1, {0}, {0, 0, 0, 0}, {1, 2, 4, 8});
  Tensor start(DType::kI32, {1}), rows(DType::kI32, {1});
  start.ptr<int32_t>()[0] = 2;
  rows.ptr<int32_t>()[0] = 0;
  t.seqlens.ptr<int32_t>()[0] = 2;  // keys at positions 2, 3
  t.p.kv_start = start;
  t.p.table_rows = rows;
  t.run();
  EXPECT_NEAR(t.o(0), 6.0, 1e-6);
}

TEST(Reference, LseStridedLayout) {
  AttentionCase c;
  c.q_lens = {2, 5};
  c.kv_lens = {9, 5};
  c.heads_q = 3;
  c.heads_kv = 1;
  c.dtype = DType::kF32;
  c.kv_dtype = DType::kF32;
  PagedData d = make_paged(c, 4);
  paged_attention(d.params, kRef);
  c.lse_transposed = true;
  PagedData e = make_paged(c, 4);
  paged_attention(e.params, kRef);
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t h = 0; h < 3; ++h) EXPECT_EQ(d.lse.get(i * 3 + h), e.lse.get(h * 7 + i));
}

// ---- ragged attention ----

TEST(Reference, RaggedMatchesPagedWithDifferentValueDim) {
  // Ragged on contiguous K/V equals paged attention through a slot table over the same rows.
  const int B = 2, Hq = 4, Hk = 2, D = 12, Dv = 8;
  const std::vector<int> ql = {3, 2}, kl = {5, 2};
  std::mt19937_64 rng(5);
  Tensor q(DType::kF32, {5, Hq, D}), k(DType::kF32, {7, Hk, D}), v(DType::kF32, {7, Hk, Dv});
  testing::fill_normal(q, rng);
  testing::fill_normal(k, rng);
  testing::fill_normal(v, rng);
  Tensor cuq(DType::kI32, {B + 1}), cuk(DType::kI32, {B + 1}), lens(DType::kI32, {B});
  Tensor table(DType::kI32, {B, 5});
  cuq.ptr<int32_t>()[0] = cuk.ptr<int32_t>()[0] = 0;
  for (int b = 0; b < B; ++b) {
    cuq.ptr<int32_t>()[b + 1] = cuq.ptr<int32_t>()[b] + ql[b];
    cuk.ptr<int32_t>()[b + 1] = cuk.ptr<int32_t>()[b] + kl[b];
    lens.ptr<int32_t>()[b] = kl[b];
    for (int t = 0; t < 5; ++t)
      table.ptr<int32_t>()[b * 5 + t] = t < kl[b] ? cuk.ptr<int32_t>()[b] + t : -1;
  }
  for (bool causal : {true, false}) {
    Tensor o1(DType::kF32, {5, Hq, Dv}), l1(DType::kF32, {5, Hq}), o2(DType::kF32, {5, Hq, Dv}),
        l2(DType::kF32, {5, Hq});
    o1.poison();
    o2.poison();
    RaggedAttentionParams r;
    r.q = q;
    r.k = k;
    r.v = v;
    r.cu_seqlens_q = cuq;
    r.cu_seqlens_k = cuk;
    r.out = o1;
    r.lse = l1;
    r.causal = causal;
    ragged_attention(r, kRef);
    PagedAttentionParams p;
    p.q = q;
    p.k_cache = k;
    p.v_cache = v;
    p.page_table = table;
    p.cache_seqlens = lens;
    p.cu_seqlens_q = cuq;
    p.out = o2;
    p.lse = l2;
    p.causal = causal;
    p.softmax_scale = 1.0f / std::sqrt(float(D));
    paged_attention(p, kRef);
    const auto c = compare(o1, o2, l1, l2);
    EXPECT_TRUE(c.ok) << c.why;
  }
}

// ---- merge_state ----

struct Halves {
  Tensor q, k, v, cuq, cuk_a, cuk_b, cuk, out_a, lse_a, out_b, lse_b, out, lse;
};

RaggedAttentionParams ragged(const Tensor& q, const TensorView& k, const TensorView& v,
                             const Tensor& cuq, const Tensor& cuk, const Tensor& out,
                             const Tensor& lse) {
  RaggedAttentionParams r;
  r.q = q;
  r.k = k;
  r.v = v;
  r.cu_seqlens_q = cuq;
  r.cu_seqlens_k = cuk;
  r.out = out;
  r.lse = lse;
  r.causal = false;
  return r;
}

TEST(Reference, MergeHalvesEqualsWhole) {
  const int T = 3, H = 2, D = 8, K = 10;
  std::mt19937_64 rng(6);
  Tensor q(DType::kF32, {T, H, D}), k(DType::kF32, {K, H, D}), v(DType::kF32, {K, H, D});
  testing::fill_normal(q, rng);
  testing::fill_normal(k, rng);
  testing::fill_normal(v, rng);
  auto cu = [](int a, int b) {
    Tensor t(DType::kI32, {2});
    t.ptr<int32_t>()[0] = a;
    t.ptr<int32_t>()[1] = b;
    return t;
  };
  Tensor cuq = cu(0, T), cuk = cu(0, K), cu_a = cu(0, 4), cu_b = cu(0, 6);
  auto outs = [&] {
    Tensor o(DType::kF32, {T, H, D});
    o.poison();
    return o;
  };
  auto lses = [&] {
    Tensor l(DType::kF32, {T, H});
    l.poison();
    return l;
  };
  Tensor ow = outs(), lw = lses(), oa = outs(), la = lses(), ob = outs(), lb = lses(), om = outs(),
         lm = lses();
  ragged_attention(ragged(q, k, v, cuq, cuk, ow, lw), kRef);
  ragged_attention(ragged(q, k.view().slice(0, 0, 4), v.view().slice(0, 0, 4), cuq, cu_a, oa, la),
                   kRef);
  ragged_attention(ragged(q, k.view().slice(0, 4, K), v.view().slice(0, 4, K), cuq, cu_b, ob, lb),
                   kRef);
  merge_state({oa, la, ob, lb, om, lm}, kRef);
  const auto c = compare(om, ow, lm, lw);
  EXPECT_TRUE(c.ok) << c.why << " rel " << c.rel_l2;
  // In place: out aliases out_a.
  merge_state({oa, la, ob, lb, oa, la}, kRef);
  const auto c2 = compare(oa, ow, la, lw);
  EXPECT_TRUE(c2.ok) << c2.why;
}

TEST(Reference, MergeWithEmptyStateIsIdentity) {
  const int T = 2, H = 3, D = 4;
  std::mt19937_64 rng(7);
  Tensor oa(DType::kF32, {T, H, D}), la(DType::kF32, {T, H}), ob(DType::kF32, {T, H, D}),
      lb(DType::kF32, {T, H}), om(DType::kF32, {T, H, D}), lm(DType::kF32, {T, H});
  testing::fill_normal(oa, rng);
  testing::fill_normal(la, rng);
  testing::fill_normal(ob, rng);  // garbage values under an empty LSE must not leak
  for (int i = 0; i < T * H; ++i) lb.set(i, i % 2 ? kInf : -kInf);  // FA's +inf and our -inf
  for (bool swap : {false, true}) {
    om.poison();
    lm.poison();
    if (swap)
      merge_state({ob, lb, oa, la, om, lm}, kRef);
    else
      merge_state({oa, la, ob, lb, om, lm}, kRef);
    for (int i = 0; i < T * H * D; ++i) EXPECT_NEAR(om.get(i), oa.get(i), 1e-6);
    for (int i = 0; i < T * H; ++i) EXPECT_NEAR(lm.get(i), la.get(i), 1e-6);
  }
  // Both empty: zeros and -inf.
  merge_state({ob, lb, ob, lb, om, lm}, kRef);
  for (int i = 0; i < T * H * D; ++i) EXPECT_EQ(om.get(i), 0.0);
  for (int i = 0; i < T * H; ++i) EXPECT_EQ(lm.get(i), -kInf);
}

// ---- KV store ----

TEST(Reference, KvStoreMhaMlaAndFp8) {
  const int T = 3, H = 2, D = 4, Dv = 6, P = 4, pages = 3;
  std::mt19937_64 rng(8);
  Tensor k(DType::kBF16, {T, H, D}), v(DType::kBF16, {T, H, Dv}), loc(DType::kI64, {T});
  testing::fill_normal(k, rng, 100.0);
  testing::fill_normal(v, rng);
  const int64_t slots[T] = {5, 11, 4};
  for (int t = 0; t < T; ++t) loc.ptr<int64_t>()[t] = slots[t];
  const Tensor k_before = [&] {
    Tensor c(DType::kBF16, {T, H, D});
    for (int i = 0; i < T * H * D; ++i) c.set(i, k.get(i));
    return c;
  }();

  for (DType cd : {DType::kBF16, DType::kF32, DType::kF8E4M3, DType::kF8E5M2}) {
    Tensor kc(cd, {pages, P, H, D}), vc(cd, {pages, P, H, Dv});
    kc.zero();
    vc.zero();
    KVStoreParams s{k, v, loc, kc, vc, 0.5f, 2.0f};
    kv_store(s, kRef);
    const bool f8 = is_fp8(cd);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          Tensor expect(cd, {1});
          expect.set(0, float(k.get((t * H + h) * D + d)) / (f8 ? 0.5f : 1.0f));
          EXPECT_EQ(kc.get(((slots[t] / P * P + slots[t] % P) * H + h) * D + d), expect.get(0));
        }
        for (int d = 0; d < Dv; ++d) {
          Tensor expect(cd, {1});
          expect.set(0, float(v.get((t * H + h) * Dv + d)) / (f8 ? 2.0f : 1.0f));
          EXPECT_EQ(vc.get((slots[t] * H + h) * Dv + d), expect.get(0));
        }
      }
    // Untouched slots stay zero; the caller's k is unchanged.
    EXPECT_EQ(kc.get(0), 0.0);
    for (int i = 0; i < T * H * D; ++i) ASSERT_EQ(k.get(i), k_before.get(i));
  }
  // MLA: one latent row per token, no v.
  Tensor lat(DType::kBF16, {T, 1, 10}), cache(DType::kBF16, {16, 1, 10});
  testing::fill_normal(lat, rng);
  cache.zero();
  kv_store({lat, {}, loc, cache, {}}, kRef);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < 10; ++d) EXPECT_EQ(cache.get(slots[t] * 10 + d), lat.get(t * 10 + d));
}

}  // namespace
}  // namespace flashback

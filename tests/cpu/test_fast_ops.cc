// Fast CPU ragged attention (192/128 head dims, LSE), merge_state and KV store against the
// oracle, outputs poisoned before each run.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_fast_common.h"

namespace flashback {
namespace {

using fast_test::fast;
using fast_test::kRef;
using testing::compare;
using testing::fill_normal;

struct Ragged {
  Tensor q, k, v, cu_q, cu_k, out, lse;
  RaggedAttentionParams p;
};

Ragged make_ragged(const std::vector<int>& q_lens, const std::vector<int>& k_lens, int hq, int hk,
                   int d, int dv, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Ragged r;
  const int64_t B = static_cast<int64_t>(q_lens.size());
  r.cu_q = Tensor(DType::kI32, {B + 1});
  r.cu_k = Tensor(DType::kI32, {B + 1});
  r.cu_q.ptr<int32_t>()[0] = r.cu_k.ptr<int32_t>()[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    r.cu_q.ptr<int32_t>()[b + 1] = r.cu_q.ptr<int32_t>()[b] + q_lens[b];
    r.cu_k.ptr<int32_t>()[b + 1] = r.cu_k.ptr<int32_t>()[b] + k_lens[b];
  }
  const int64_t tq = r.cu_q.ptr<int32_t>()[B], tk = r.cu_k.ptr<int32_t>()[B];
  r.q = Tensor(dt, {tq, hq, d});
  r.k = Tensor(dt, {tk, hk, d});
  r.v = Tensor(dt, {tk, hk, dv});
  fill_normal(r.q, rng);
  fill_normal(r.k, rng);
  fill_normal(r.v, rng);
  r.out = Tensor(dt, {tq, hq, dv});
  r.lse = Tensor(DType::kF32, {hq, tq});  // FA3 layout, passed transposed
  r.out.poison();
  r.lse.poison();
  r.p.q = r.q;
  r.p.k = r.k;
  r.p.v = r.v;
  r.p.cu_seqlens_q = r.cu_q;
  r.p.cu_seqlens_k = r.cu_k;
  r.p.out = r.out;
  r.p.lse = r.lse.view().transposed(0, 1);
  return r;
}

TEST(FastRagged, HeadDims192And128EveryDtypeGqaAndMask) {
  uint64_t seed = 500;
  struct Mask {
    bool causal;
    int left, right;
    float cap;
  };
  const Mask masks[] = {{true, -1, -1, 0},
                        {false, -1, -1, 0},
                        {true, 20, -1, 0},
                        {false, 4, 6, 0},
                        {true, -1, -1, 3.0f}};
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
    for (int gqa : {1, 4, 8})
      for (const Mask& m : masks) {
        Ragged f = make_ragged({1, 0, 5, 33, 2, 17}, {1, 3, 0, 40, 600, 17}, 2 * gqa, 2, 192, 128,
                               dt, ++seed);
        f.p.causal = m.causal;
        f.p.window_left = m.left;
        f.p.window_right = m.right;
        f.p.softcap = m.cap;
        Tensor out2(dt, {f.out.size(0), f.out.size(1), f.out.size(2)});
        Tensor lse2(DType::kF32, {f.lse.size(0), f.lse.size(1)});
        out2.poison();
        lse2.poison();
        RaggedAttentionParams ref = f.p;
        ref.out = out2;
        ref.lse = lse2.view().transposed(0, 1);
        ragged_attention(ref, kRef);
        ragged_attention(f.p, fast(2));
        EXPECT_CLOSE(compare(f.p.out, ref.out, f.p.lse, ref.lse),
                     std::string(dtype_name(dt)) + " gqa " + std::to_string(gqa) + " causal " +
                         std::to_string(m.causal) + " win " + std::to_string(m.left) + "," +
                         std::to_string(m.right) + " cap " + std::to_string(m.cap));
      }
}

TEST(FastMerge, MatchesOracleWithEmptyRowsAndAliasing) {
  std::mt19937_64 rng(9);
  const int64_t T = 9, H = 3, D = 80;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
    for (bool alias : {false, true}) {
      Tensor a(dt, {T, H, D}), b(DType::kF32, {T, H, D}), la(DType::kF32, {T, H}),
          lb(DType::kF32, {H, T});
      fill_normal(a, rng);
      fill_normal(b, rng);
      fill_normal(la, rng, 3.0);
      fill_normal(lb, rng, 3.0);
      const float inf = std::numeric_limits<float>::infinity();
      la.ptr<float>()[0] = -inf;         // a empty
      lb.ptr<float>()[1 * T + 1] = inf;  // b empty, FlashAttention style (head 1, token 1)
      la.ptr<float>()[2 * H + 2] = inf;  // both empty (token 2, head 2)
      lb.ptr<float>()[2 * T + 2] = -inf;
      a.ptr<char>()[0] = a.ptr<char>()[1] = static_cast<char>(0xff);  // garbage in an empty row
      const TensorView lbv = lb.view().transposed(0, 1);
      // Oracle on copies.
      Tensor ra(dt, {T, H, D}), rout(dt, {T, H, D}), rlse(DType::kF32, {T, H});
      std::memcpy(ra.data(), a.data(), static_cast<size_t>(a.nbytes()));
      rout.poison();
      rlse.poison();
      merge_state({ra, la, b, lbv, rout, rlse}, kRef);
      Tensor out(dt, {T, H, D}), lse(DType::kF32, {T, H});
      out.poison();
      lse.poison();
      MergeStateParams p{a, la, b, lbv, alias ? a.view() : out.view(), lse};
      merge_state(p, fast(2));
      EXPECT_CLOSE(compare(p.out, rout, lse, rlse),
                   std::string(dtype_name(dt)) + (alias ? " aliased" : ""));
    }
}

TEST(FastKvStore, EveryCacheDtypePageSizeMhaAndMla) {
  std::mt19937_64 rng(11);
  uint64_t n = 0;
  for (DType cdt : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3, DType::kF8E5M2})
    for (int page : {1, 16})
      for (bool mla : {false, true})
        for (DType loc_dt : {DType::kI32, DType::kI64}) {
          ++n;
          const int64_t T = 11, Hk = mla ? 1 : 2, D = mla ? 576 : 128, Dv = 96;
          const int64_t pages = page == 1 ? 32 : 6, slots = pages * page;
          Tensor k(DType::kBF16, {T, Hk, D}), v(DType::kF16, {T, Hk, Dv});
          fill_normal(k, rng, 4.0);
          fill_normal(v, rng, 4.0);
          Tensor loc(loc_dt, {T});
          std::vector<int64_t> perm(static_cast<size_t>(slots - 1));
          for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i) + 1;
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int64_t t = 0; t < T; ++t)  // rows 0 and 5 are padding writing slot 0
            loc.set(t, (t == 0 || t == 5) ? 0 : static_cast<double>(perm[t]));
          auto cache = [&](int64_t dim) {
            Tensor c =
                page == 1 ? Tensor(cdt, {slots, Hk, dim}) : Tensor(cdt, {pages, page, Hk, dim});
            c.zero();
            return c;
          };
          Tensor kc = cache(D), vc = cache(Dv), kc2 = cache(D), vc2 = cache(Dv);
          KVStoreParams p;
          p.k = k;
          p.loc = loc;
          p.k_cache = kc;
          p.k_scale = 0.37f;
          p.v_scale = 1.9f;
          if (!mla) {
            p.v = v;
            p.v_cache = vc;
          }
          KVStoreParams r = p;
          r.k_cache = kc2;
          if (!mla) r.v_cache = vc2;
          kv_store(r, kRef);
          kv_store(p, fast(2));
          const std::string what =
              std::string(dtype_name(cdt)) + " P=" + std::to_string(page) + (mla ? " mla" : " mha");
          EXPECT_EQ(std::memcmp(kc.data(), kc2.data(), static_cast<size_t>(kc.nbytes())), 0)
              << what << ": k cache bytes differ";
          EXPECT_EQ(std::memcmp(vc.data(), vc2.data(), static_cast<size_t>(vc.nbytes())), 0)
              << what << ": v cache bytes differ";
          // The store really wrote something (a zero cache would match a no-op oracle too).
          double sum = 0;
          for (int64_t i = 0; i < kc.numel(); ++i) sum += std::abs(kc.get(i));
          EXPECT_GT(sum, 0) << what;
        }
  EXPECT_EQ(n, 40u);
}

}  // namespace
}  // namespace flashback

// GPU merge_state and KV store against the oracle on fresh random inputs.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "device_data.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback {
namespace {

using testing::DeviceMirror;

const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor clone(const Tensor& t) {
  const TensorView v = t.view();
  Tensor c(v.dtype, v.shape.data(), v.ndim);
  std::memcpy(c.data(), t.data(), static_cast<size_t>(t.nbytes()));
  return c;
}

TEST(CudaMerge, MatchesOracleWithEmptyStatesAndAliasing) {
  std::mt19937_64 rng(11);
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
    for (bool alias : {false, true}) {
      const int64_t T = 37, H = 5, D = 72;
      Tensor a(dt, {T, H, D}), b(dt, {T, H, D}), la(DType::kF32, {T, H}), lb(DType::kF32, {T, H});
      testing::fill_normal(a, rng);
      testing::fill_normal(b, rng);
      testing::fill_normal(la, rng, 3.0);
      testing::fill_normal(lb, rng, 3.0);
      // Empty states: -inf, and FlashAttention's +inf, on one side and on both.
      la.ptr<float>()[0] = -kInf;
      lb.ptr<float>()[1] = kInf;
      la.ptr<float>()[2] = -kInf;
      lb.ptr<float>()[2] = kInf;
      la.ptr<float>()[3] = kInf;
      lb.ptr<float>()[3] = kInf;
      Tensor out(dt, {T, H, D}), lse(DType::kF32, {T, H});
      out.poison();
      lse.poison();
      // Oracle on host copies (aliasing mirrored: out = out_a).
      Tensor ra = clone(a), rout = clone(out), rlse = clone(lse);
      MergeStateParams hp{ra, la, b, lb, alias ? ra.view() : rout.view(), rlse};
      merge_state(hp, kRef);
      DeviceMirror m;
      for (const Tensor* t : {&a, &b, &la, &lb, &out, &lse}) m.add(*t);
      MergeStateParams dp{
          m.rebase(a),  m.rebase(la), m.rebase(b), m.rebase(lb), m.rebase(alias ? a : out),
          m.rebase(lse)};
      merge_state(dp);
      FB_TEST_CUDA(cudaDeviceSynchronize());
      const Tensor& got = alias ? a : out;
      m.download(got);
      m.download(lse);
      const Tensor& want = alias ? ra : rout;
      const auto cmp = testing::compare(got, want, lse, rlse);
      EXPECT_TRUE(cmp.ok) << dtype_name(dt) << (alias ? " aliased" : "") << ": " << cmp.why;
    }
}

struct StoreCase {
  const char* name;
  DType src, cache;
  bool paged, mla, loc64;
  float k_scale, v_scale;
};

TEST(CudaStore, MatchesOracleBitwise) {
  const StoreCase cases[] = {
      {"bf16 paged", DType::kBF16, DType::kBF16, true, false, false, 1, 1},
      {"f16 slots, int64 loc", DType::kF16, DType::kF16, false, false, true, 1, 1},
      {"bf16 -> e4m3", DType::kBF16, DType::kF8E4M3, true, false, false, 0.37f, 1.9f},
      {"f16 -> e5m2", DType::kF16, DType::kF8E5M2, true, false, false, 0.011f, 3.0f},
      {"f32 -> bf16", DType::kF32, DType::kBF16, true, false, false, 1, 1},
      {"mla latent bf16", DType::kBF16, DType::kBF16, true, true, false, 1, 1},
      {"mla latent e4m3", DType::kBF16, DType::kF8E4M3, true, true, true, 0.05f, 0.05f},
  };
  std::mt19937_64 rng(12);
  for (const StoreCase& sc : cases) {
    SCOPED_TRACE(sc.name);
    const int64_t T = 50, P = 16, pages = 9;
    const int64_t H = sc.mla ? 1 : 4, D = sc.mla ? 576 : 64, Dv = 80;
    Tensor k(sc.src, {T, H, D}), v(sc.src, {T, H, Dv});
    testing::fill_normal(k, rng, 8.0);  // wide enough that fp8 saturates now and then
    testing::fill_normal(v, rng, 8.0);
    Tensor kc = sc.paged ? Tensor(sc.cache, {pages, P, H, D}) : Tensor(sc.cache, {pages * P, H, D});
    Tensor vc =
        sc.paged ? Tensor(sc.cache, {pages, P, H, Dv}) : Tensor(sc.cache, {pages * P, H, Dv});
    testing::fill_normal(kc, rng);
    testing::fill_normal(vc, rng);
    std::vector<int64_t> slots(static_cast<size_t>(pages * P));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    Tensor loc(sc.loc64 ? DType::kI64 : DType::kI32, {T});
    for (int64_t t = 0; t < T; ++t) loc.set(t, static_cast<double>(slots[t]));

    Tensor rkc = clone(kc), rvc = clone(vc);
    KVStoreParams hp;
    hp.k = k;
    hp.loc = loc;
    hp.k_cache = rkc;
    hp.k_scale = sc.k_scale;
    hp.v_scale = sc.v_scale;
    if (!sc.mla) {
      hp.v = v;
      hp.v_cache = rvc;
    }
    kv_store(hp, kRef);

    DeviceMirror m;
    for (const Tensor* t : {&k, &v, &kc, &vc, &loc}) m.add(*t);
    KVStoreParams dp = hp;
    dp.k = m.rebase(k);
    dp.loc = m.rebase(loc);
    dp.k_cache = m.rebase(kc);
    if (!sc.mla) {
      dp.v = m.rebase(v);
      dp.v_cache = m.rebase(vc);
    }
    kv_store(dp);
    FB_TEST_CUDA(cudaDeviceSynchronize());
    m.download(kc);
    m.download(vc);
    EXPECT_EQ(std::memcmp(kc.data(), rkc.data(), static_cast<size_t>(kc.nbytes())), 0)
        << "k cache differs from the oracle";
    if (!sc.mla)
      EXPECT_EQ(std::memcmp(vc.data(), rvc.data(), static_cast<size_t>(vc.nbytes())), 0)
          << "v cache differs from the oracle";
  }
}

}  // namespace
}  // namespace flashback

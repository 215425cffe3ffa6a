// A program outside the flashback tree: one decode step over a paged bf16 cache.
#include <flashback/ops.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace flashback;
  const int B = 2, Hq = 4, Hk = 2, D = 8, P = 4, pages = 5;
  Tensor q(DType::kBF16, {B, Hq, D}), k(DType::kBF16, {pages, P, Hk, D}),
      v(DType::kBF16, {pages, P, Hk, D}), out(DType::kBF16, {B, Hq, D}), lse(DType::kF32, {B, Hq});
  for (int64_t i = 0; i < q.numel(); ++i) q.set(i, std::sin(0.1 * i));
  for (int64_t i = 0; i < k.numel(); ++i) k.set(i, std::cos(0.07 * i));
  for (int64_t i = 0; i < v.numel(); ++i) v.set(i, 0.5);
  std::vector<int32_t> table = {1, 2, 3, 4}, lens = {6, 3}, cu = {0, 1, 2};
  PagedAttentionParams p;
  p.q = q;
  p.k_cache = k;
  p.v_cache = v;
  p.page_table = TensorView(table.data(), DType::kI32, {B, 2});
  p.cache_seqlens = TensorView(lens.data(), DType::kI32, {B});
  p.cu_seqlens_q = TensorView(cu.data(), DType::kI32, {B + 1});
  p.out = out;
  p.lse = lse;
  paged_attention(p);
  // Every value is 0.5, so every output element must be 0.5.
  for (int64_t i = 0; i < out.numel(); ++i)
    if (std::abs(out.get(i) - 0.5) > 1e-3) {
      std::printf("consumer: wrong output %g at %lld\n", out.get(i), static_cast<long long>(i));
      return 1;
    }
  try {
    p.cache_seqlens = TensorView(lens.data(), DType::kI32, {1});
    paged_attention(p);
    std::printf("consumer: bad input accepted\n");
    return 1;
  } catch (const Error& e) {
    std::printf("consumer ok (bad input rejected: %s)\n", e.what());
  }
  return 0;
}

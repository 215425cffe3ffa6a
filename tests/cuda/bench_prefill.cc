// Benchmark driver (not a test) for the long-query workloads of workloads.json: prefill_1x16k,
// prefill_8x2k, extend_b16_p4k_e512 (paged, random page placement through the shared case) and
// mla_prefix_chunk_8x4k (ragged 192/128, non-causal). Values are filled on the device; times are
// the median of CUDA-event timed runs after warm-up. FLOPs count visible (q, key) pairs times
// 2 (D + Dv), as peers.py does. Prints one line per workload.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_fill.h"
#include "device_data.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace fb = flashback;

namespace {

template <typename F>
double median_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 2; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void paged(const char* name, int batch, int q_len, int ctx) {
  fb::testing::AttentionCase c;
  c.heads_q = 32;
  c.heads_kv = 8;
  c.head_dim = 128;
  c.page_size = 16;
  c.q_lens.assign(batch, q_len);
  c.kv_lens.assign(batch, ctx);
  c.with_lse = true;
  c.fill_values = false;
  fb::testing::PagedData d = fb::testing::make_paged(c, 7);
  d.params.max_seqlen_q = q_len;
  fb::testing::DevicePaged dp = fb::testing::to_device(d, false);
  fb::testing::fill_random_device(dp.params.q.data, d.q.numel(), d.q.dtype(), 1, 1.f);
  fb::testing::fill_random_device(dp.params.k_cache.data, d.k_cache.numel(), d.k_cache.dtype(), 2,
                                  1.f);
  fb::testing::fill_random_device(dp.params.v_cache.data, d.v_cache.numel(), d.v_cache.dtype(), 3,
                                  1.f);
  fb::testing::attach_workspace(dp, {});
  const double ms = median_ms([&] { fb::paged_attention(dp.params); }, 10);
  double vis = 0;
  for (int i = 0; i < q_len; ++i) vis += ctx - q_len + i + 1;
  const double flops = 2.0 * batch * c.heads_q * vis * 256;
  std::printf("%-24s %9.3f ms %8.1f TFLOP/s\n", name, ms, flops / ms / 1e9);
}

void ragged(const char* name, int batch, int len, int hq, int d, int dv) {
  const int64_t t = int64_t{batch} * len;
  fb::testing::DeviceBuffer q(t * hq * d * 2), k(t * hq * d * 2), v(t * hq * dv * 2),
      o(t * hq * dv * 2), lse(t * hq * 4), cu(4 * (batch + 1));
  std::vector<int32_t> cuh(batch + 1);
  for (int b = 0; b <= batch; ++b) cuh[b] = b * len;
  cudaMemcpy(cu.get(), cuh.data(), cuh.size() * 4, cudaMemcpyHostToDevice);
  fb::testing::fill_random_device(q.get(), t * hq * d, fb::DType::kBF16, 1, 1.f);
  fb::testing::fill_random_device(k.get(), t * hq * d, fb::DType::kBF16, 2, 1.f);
  fb::testing::fill_random_device(v.get(), t * hq * dv, fb::DType::kBF16, 3, 1.f);
  const fb::Device dev{fb::DeviceType::kCUDA, 0};
  fb::RaggedAttentionParams p;
  p.q = fb::TensorView(q.get(), fb::DType::kBF16, {t, hq, d}, dev);
  p.k = fb::TensorView(k.get(), fb::DType::kBF16, {t, hq, d}, dev);
  p.v = fb::TensorView(v.get(), fb::DType::kBF16, {t, hq, dv}, dev);
  p.out = fb::TensorView(o.get(), fb::DType::kBF16, {t, hq, dv}, dev);
  p.lse = fb::TensorView(lse.get(), fb::DType::kF32, {t, hq}, dev);
  p.cu_seqlens_q = fb::TensorView(cu.get(), fb::DType::kI32, {batch + 1}, dev);
  p.cu_seqlens_k = p.cu_seqlens_q;
  p.causal = false;
  p.max_seqlen_q = p.max_seqlen_k = len;
  const double ms = median_ms([&] { fb::ragged_attention(p); }, 10);
  const double flops = 2.0 * batch * hq * double(len) * len * (d + dv);
  std::printf("%-24s %9.3f ms %8.1f TFLOP/s\n", name, ms, flops / ms / 1e9);
}

}  // namespace

int main() {
  paged("prefill_1x16k", 1, 16384, 16384);
  paged("prefill_8x2k", 8, 2048, 2048);
  paged("extend_b16_p4k_e512", 16, 512, 4608);
  ragged("mla_prefix_chunk_8x4k", 8, 4096, 128, 192, 128);
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("%s\n", e == cudaSuccess ? "ok" : cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

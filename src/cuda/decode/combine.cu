// Split-KV combine: one warp per (token, head) merges the partial states of every split in split
// order. Splits that saw no key carry LSE -inf and are skipped, so adding empty splits leaves
// the result bit-identical.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/check.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/decode/launch.h"

namespace flashback::cuda {
namespace {

template <typename T, int DV>
__global__ void __launch_bounds__(128) combine_kernel(const CombineParams p) {
  constexpr int NC = (DV + 31) / 32;
  const int lane = threadIdx.x & 31;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (idx >= static_cast<int64_t>(p.total_q) * p.heads_q) return;
  const int tok = static_cast<int>(idx / p.heads_q), head = static_cast<int>(idx % p.heads_q);
  const int64_t split_stride = static_cast<int64_t>(p.total_q) * p.heads_q;
  float m = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m = fmaxf(m, p.ws_lse[s * split_stride + idx]);
  float acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.f;
  float sum = 0.f;
  if (m != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float l = p.ws_lse[s * split_stride + idx];
      if (l == -INFINITY) continue;
      const float w = expf(l - m);
      sum += w;
      const float* o = p.ws_o + (s * split_stride + idx) * DV;
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (lane + 32 * c < DV) acc[c] += w * o[lane + 32 * c];
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  T* out = static_cast<T*>(p.out) + tok * p.out_st + head * p.out_sh;
#pragma unroll
  for (int c = 0; c < NC; ++c)
    if (lane + 32 * c < DV) out[lane + 32 * c] = from_float<T>(acc[c] * inv);
  if (lane == 0 && p.lse)
    p.lse[tok * p.lse_st + head * p.lse_sh] = sum > 0.f ? m + logf(sum) : -INFINITY;
}

template <typename T>
void launch_t(const CombineParams& p, cudaStream_t stream) {
  const int64_t warps = static_cast<int64_t>(p.total_q) * p.heads_q;
  const dim3 grid(static_cast<unsigned>((warps + 3) / 4));
  switch (p.head_dim_v) {
#define FB_CASE(DV)                                     \
  case DV:                                              \
    combine_kernel<T, DV><<<grid, 128, 0, stream>>>(p); \
    break
    FB_CASE(64);
    FB_CASE(80);
    FB_CASE(96);
    FB_CASE(128);
    FB_CASE(192);
    FB_CASE(256);
    FB_CASE(512);
#undef FB_CASE
    default:
      throw Error("v_cache", "a value head dim of 64, 80, 96, 128, 192, 256 or 512",
                  std::to_string(p.head_dim_v));
  }
  FLASHBACK_CUDA_CHECK_LAUNCH("combine_kernel");
}

}  // namespace

void launch_combine(const CombineParams& p, void* stream) {
  if (static_cast<int64_t>(p.total_q) * p.heads_q == 0) return;
  if (p.bf16)
    launch_t<__nv_bfloat16>(p, static_cast<cudaStream_t>(stream));
  else
    launch_t<__half>(p, static_cast<cudaStream_t>(stream));
}

}  // namespace flashback::cuda

// Split-KV combine: one CTA of 4 warps per (token, head) merges the partial states of every
// split. The first version gave one warp a (token, head) and walked the splits one after
// another: with one request and 132 splits (decode_b1_L128k) that is 132 dependent rounds of
// global latency for 32 warps on the whole GPU, ~100 us. Here warp w takes splits w, w + 4, ...
// (its loads independent, so they overlap), and the four partial sums are added in warp order.
// The grouping depends only on each split's index, and a split that saw no key carries LSE
// -inf and contributes exact zeros, so adding empty splits leaves the result bit-identical
// (the deterministic mode relies on it).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/check.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/decode/launch.h"

namespace flashback::cuda {
namespace {

template <typename T, int DV>
__global__ void __launch_bounds__(128) combine_kernel(const CombineParams p) {
  constexpr int WARPS = 4, NC = (DV + 31) / 32;
  __shared__ float red[WARPS];
  __shared__ float part[WARPS - 1][DV];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t idx = blockIdx.x;  // token * heads_q + head
  const int tok = static_cast<int>(idx / p.heads_q), head = static_cast<int>(idx % p.heads_q);
  const int64_t split_stride = static_cast<int64_t>(p.total_q) * p.heads_q;
  T* out = static_cast<T*>(p.out) + tok * p.out_st + head * p.out_sh;
  // A NaN split-0 LSE: the row's entry was longer than the grid's queries (entry.cuh), loud.
  if (isnan(p.ws_lse[idx])) {
    for (int c = threadIdx.x; c < DV; c += blockDim.x) out[c] = from_float<T>(NAN);
    if (threadIdx.x == 0 && p.lse) p.lse[tok * p.lse_st + head * p.lse_sh] = NAN;
    return;
  }
  float m = -INFINITY;
  for (int s = threadIdx.x; s < p.num_splits; s += blockDim.x)
    m = fmaxf(m, p.ws_lse[s * split_stride + idx]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  float acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.f;
  float sum = 0.f;
  if (m != -INFINITY) {
#pragma unroll 4
    for (int s = warp; s < p.num_splits; s += WARPS) {
      const float l = p.ws_lse[s * split_stride + idx];
      const float w = l == -INFINITY ? 0.f : expf(l - m);
      sum += w;
      const float* o = p.ws_o + (s * split_stride + idx) * DV;
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (lane + 32 * c < DV && w != 0.f) acc[c] += w * o[lane + 32 * c];
    }
  }
  __syncthreads();  // red[] is reused for the sums
  if (lane == 0) red[warp] = sum;
  if (warp > 0) {
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (lane + 32 * c < DV) part[warp - 1][lane + 32 * c] = acc[c];
  }
  __syncthreads();
  if (warp != 0) return;
  sum = ((red[0] + red[1]) + red[2]) + red[3];
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int col = lane + 32 * c;
    if (col < DV)
      out[col] = from_float<T>((((acc[c] + part[0][col]) + part[1][col]) + part[2][col]) * inv);
  }
  if (lane == 0 && p.lse)
    p.lse[tok * p.lse_st + head * p.lse_sh] = sum > 0.f ? m + logf(sum) : -INFINITY;
}

template <typename T>
void launch_t(const CombineParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(static_cast<int64_t>(p.total_q) * p.heads_q));
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

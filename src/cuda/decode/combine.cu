// Split-KV combine: one CTA of 4 warps per (token, head) merges the partial states of every
// split. Warp w takes splits w, w + 4, ... and the four partial sums are added in warp order, so
// the grouping depends only on each split's index; a split that saw no key carries LSE -inf and
// weight 0 (its partial row is not read into the sum), so adding empty splits leaves the result
// bit-identical (the deterministic mode relies on it).
//
// Latency is the cost here, not bytes (decode_b1_L128k: 32 CTAs, 33 splits of 512 bytes each):
// the loads are issued in as few dependent rounds as possible. The first version walked the
// splits one after another (~100 us for 132 splits); the second loaded each split's LSE and then
// its row under a branch, two dependent rounds per split of a warp (6.9 us of a 153 us
// decode_b1_L128k under ncu). Now: one round for the LSEs (every thread one split, maximum
// through shared memory), then each lane of a warp holds the weight of one of the warp's next
// 32 splits, and the rows of those splits are loaded without a branch (the weight comes by
// shuffle; weight 0 selects 0), VEC floats per lane and load.
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/decode/launch.h"

namespace flashback::cuda {
namespace {

template <int DV>
constexpr int combine_vec() {
  return DV % 128 == 0 ? 4 : DV % 64 == 0 ? 2 : 1;
}

template <typename T, int DV>
__global__ void __launch_bounds__(128) combine_kernel(const CombineParams p) {
  constexpr int WARPS = 4, VEC = combine_vec<DV>(), NC = (DV + 32 * VEC - 1) / (32 * VEC);
  // Rows in flight per lane: about 32 floats' worth, a power of two between 2 and 8 rows (so
  // that U divides the 32 splits of a round and k0 + u < 32 names a lane).
  constexpr int U = NC * VEC <= 4 ? 8 : NC * VEC <= 8 ? 4 : 2;
  static_assert(32 % U == 0, "a round's 32 splits in whole groups of U");
  using Vec = std::conditional_t<VEC == 4, float4, std::conditional_t<VEC == 2, float2, float>>;
  // Chunk c of a lane: columns [(lane + 32 c) VEC, + VEC), when inside the row.
  const auto owns = [](int lane, int c) { return (lane + 32 * c) * VEC < DV; };
  __shared__ float red[WARPS];
  __shared__ __align__(16) float part[WARPS - 1][DV];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  pdl_wait();  // launched as the decode kernel's programmatic dependent: its workspace is complete
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
  Vec acc[NC];
  float* a = reinterpret_cast<float*>(acc);
#pragma unroll
  for (int i = 0; i < NC * VEC; ++i) a[i] = 0.f;
  float sum = 0.f;  // this lane's splits' weights
  // Every split empty or NaN (m -inf; NaN LSEs are not in the max): weights relative to 0, so
  // a NaN split still makes the row NaN and empty ones add nothing.
  const float m_use = m == -INFINITY ? 0.f : m;
  // Round r: the warp's splits warp + 4 (32 r + k), k = 0..31; lane k holds split k's weight.
  const int mine = (p.num_splits - warp + WARPS - 1) / WARPS;  // splits of this warp
  for (int r0 = 0; r0 < mine; r0 += 32) {
    const int n = min(32, mine - r0);
    const int64_t s_lane = warp + int64_t{WARPS} * (r0 + lane);
    const float l = lane < n ? p.ws_lse[s_lane * split_stride + idx] : -INFINITY;
    const float wl = l == -INFINITY ? 0.f : expf(l - m_use);
    sum += wl;
    // U splits' rows in flight per lane: loaded first, then added in split order. Slots past
    // n re-read split n - 1 (a valid row) with weight 0 (lanes >= n hold 0).
    for (int k0 = 0; k0 < n; k0 += U) {
      Vec x[U][NC];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t s = warp + int64_t{WARPS} * (r0 + min(k0 + u, n - 1));
        const Vec* o = reinterpret_cast<const Vec*>(p.ws_o + (s * split_stride + idx) * DV);
#pragma unroll
        for (int c = 0; c < NC; ++c)
          if (owns(lane, c)) x[u][c] = o[lane + 32 * c];
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float w = __shfl_sync(0xffffffffu, wl, k0 + u);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          if (!owns(lane, c)) continue;
          const float* xf = reinterpret_cast<const float*>(&x[u][c]);
          float* ac = reinterpret_cast<float*>(&acc[c]);
#pragma unroll
          for (int v = 0; v < VEC; ++v) ac[v] = w != 0.f ? fmaf(w, xf[v], ac[v]) : ac[v];
        }
      }
    }
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  __syncthreads();  // red[] is reused for the sums
  if (lane == 0) red[warp] = sum;
  if (warp > 0) {
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (owns(lane, c)) *reinterpret_cast<Vec*>(&part[warp - 1][(lane + 32 * c) * VEC]) = acc[c];
  }
  __syncthreads();
  if (warp != 0) return;
  sum = ((red[0] + red[1]) + red[2]) + red[3];
  const float inv = sum != 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    if (!owns(lane, c)) continue;
    const int col0 = (lane + 32 * c) * VEC;
    const float* ac = reinterpret_cast<const float*>(&acc[c]);
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const int col = col0 + v;
      out[col] = from_float<T>((((ac[v] + part[0][col]) + part[1][col]) + part[2][col]) * inv);
    }
  }
  if (lane == 0 && p.lse)
    p.lse[tok * p.lse_st + head * p.lse_sh] = sum != 0.f ? m_use + logf(sum) : -INFINITY;
}

// With p.pdl the combine is the decode kernel's programmatic dependent (common/pdl.cuh): its
// CTAs are scheduled while the decode grid's last CTAs run and wait in pdl_wait for its end.
template <typename T, int DV>
void launch_dv(const CombineParams& p, cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(static_cast<int64_t>(p.total_q) * p.heads_q));
  cfg.blockDim = dim3(128);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = p.pdl ? 1 : 0;
  FLASHBACK_CUDA_CHECK(cudaLaunchKernelEx(&cfg, combine_kernel<T, DV>, p));
}

template <typename T>
void launch_t(const CombineParams& p, cudaStream_t stream) {
  switch (p.head_dim_v) {
#define FB_CASE(DV)              \
  case DV:                       \
    launch_dv<T, DV>(p, stream); \
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

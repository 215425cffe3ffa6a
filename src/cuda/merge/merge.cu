// merge_state (SPEC.md §5): lse = log(e^a + e^b), out = e^(a-lse) out_a + e^(b-lse) out_b, with
// ±inf treated as an empty state (-inf). One warp per (token, head); each lane reads its
// elements of both inputs before writing, so out may alias out_a or out_b.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/any_dtype.cuh"
#include "cuda/common/check.cuh"
#include "cuda/merge/merge.h"

namespace flashback::cuda {
namespace {

__global__ void __launch_bounds__(128) merge_kernel(const MergeParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (idx >= static_cast<int64_t>(p.tokens) * p.heads) return;
  const int64_t t = idx / p.heads, h = idx % p.heads;
  float a = p.lse_a[t * p.la_st + h * p.la_sh], b = p.lse_b[t * p.lb_st + h * p.lb_sh];
  if (isinf(a)) a = -INFINITY;  // FlashAttention marks empty rows +inf
  if (isinf(b)) b = -INFINITY;
  const float m = fmaxf(a, b);
  float wa = 0.f, wb = 0.f, lse = -INFINITY;
  if (isnan(a) || isnan(b)) {
    lse = NAN;
    wa = wb = NAN;
  } else if (m != -INFINITY) {
    const float ea = expf(a - m), eb = expf(b - m);
    lse = m + logf(ea + eb);
    wa = expf(a - lse);
    wb = expf(b - lse);
  }
  const auto da = static_cast<DCode>(p.dt_a), db = static_cast<DCode>(p.dt_b),
             dout = static_cast<DCode>(p.dt_out);
  for (int d = lane; d < p.head_dim; d += 32) {
    const float oa = wa == 0.f ? 0.f : load_any(p.out_a, da, t * p.a_st + h * p.a_sh + d);
    const float ob = wb == 0.f ? 0.f : load_any(p.out_b, db, t * p.b_st + h * p.b_sh + d);
    store_any(p.out, dout, t * p.o_st + h * p.o_sh + d, wa * oa + wb * ob);
  }
  if (lane == 0 && p.lse) p.lse[t * p.l_st + h * p.l_sh] = lse;
}

}  // namespace

void launch_merge(const MergeParams& p, void* stream) {
  const int64_t warps = static_cast<int64_t>(p.tokens) * p.heads;
  if (warps == 0) return;
  merge_kernel<<<static_cast<unsigned>((warps + 3) / 4), 128, 0,
                 static_cast<cudaStream_t>(stream)>>>(p);
  FLASHBACK_CUDA_CHECK_LAUNCH("merge_kernel");
}

}  // namespace flashback::cuda

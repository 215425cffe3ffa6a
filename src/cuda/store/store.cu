// KV store (SPEC.md §6): one thread per element; slot indices are trusted device data (the
// validator reads only host memory). FP8: x / scale in fp32 then one saturating rounding, as the
// oracle does; the caller's tensor is never modified.
#include <cuda_runtime.h>

#include "cuda/common/any_dtype.cuh"
#include "cuda/common/check.cuh"
#include "cuda/store/store.h"

namespace flashback::cuda {
namespace {

__global__ void __launch_bounds__(256) store_kernel(const StoreParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_tok = static_cast<int64_t>(p.heads) * p.head_dim;
  if (i >= per_tok * p.tokens) return;
  const int64_t t = i / per_tok, r = i % per_tok, h = r / p.head_dim, d = r % p.head_dim;
  const int64_t slot = p.loc_i64 ? static_cast<const int64_t*>(p.loc)[t * p.loc_s]
                                 : static_cast<const int32_t*>(p.loc)[t * p.loc_s];
  const int64_t page = slot / p.page_size, off = slot % p.page_size;
  float x = load_any(p.src, static_cast<DCode>(p.dt_src), t * p.s_st + h * p.s_sh + d);
  if (p.fp8) x = x / p.scale;
  store_any(p.cache, static_cast<DCode>(p.dt_cache), page * p.c_sp + off * p.c_so + h * p.c_sh + d,
            x);
}

}  // namespace

void launch_store(const StoreParams& p, void* stream) {
  const int64_t n = static_cast<int64_t>(p.tokens) * p.heads * p.head_dim;
  if (n == 0) return;
  store_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                 static_cast<cudaStream_t>(stream)>>>(p);
  FLASHBACK_CUDA_CHECK_LAUNCH("store_kernel");
}

}  // namespace flashback::cuda

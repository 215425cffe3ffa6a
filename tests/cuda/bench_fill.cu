// Device-side random fill for the benchmark: GiBs of K/V filled in place (uploading them from
// the host would dominate the run). Values ~N(0, sd) from a counter hash, never zeros.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "bench_fill.h"

namespace flashback::testing {
namespace {

__device__ float hash_normal(uint64_t i, uint64_t seed) {
  auto mix = [](uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  };
  const uint64_t a = mix(i * 2 + seed), b = mix(i * 2 + 1 + seed * 7);
  const float u1 = (static_cast<float>(a >> 40) + 0.5f) / 16777216.0f;
  const float u2 = static_cast<float>(b >> 40) / 16777216.0f;
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}

__global__ void fill_kernel(void* p, int64_t n, int dtype, uint64_t seed, float sd) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = hash_normal(static_cast<uint64_t>(i), seed) * sd;
    switch (dtype) {
      case 1:
        static_cast<__half*>(p)[i] = __float2half_rn(x);
        break;
      case 2:
        static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
        break;
      case 3:
        static_cast<uint8_t*>(p)[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
        break;
      case 4:
        static_cast<uint8_t*>(p)[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
        break;
      default:
        static_cast<float*>(p)[i] = x;
        break;
    }
  }
}

}  // namespace

void fill_random_device(void* p, int64_t n, DType dtype, uint64_t seed, float sd) {
  if (n == 0) return;
  fill_kernel<<<1024, 256>>>(p, n, static_cast<int>(dtype), seed, sd);
}

}  // namespace flashback::testing

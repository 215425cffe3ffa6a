// The Hopper MMA primitives (src/cuda/common/wgmma.cuh) on their own, against a CPU product:
// S = A B^T with both operands K-major in swizzled shared memory (the Q K^T step), the same S
// with A's fragments loaded into registers by ldmatrix (the prefill kernel's Q) and O = P V
// with P from registers and V MN-major (the P V step), for bf16 and fp16, on random inputs with
// poisoned outputs. A layout or descriptor mistake shows here as a wrong product, which the
// attention tests would only show as a wrong softmax. Needs an sm_90a build on a 9.0 device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common/dtype.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashback::cuda {
namespace {

constexpr int M = 64, N = 128, K = 128;  // S: M x N over K; O: M x 128 over N keys

// Copies a rows x 128 row-major tile into the swizzled layout (two 64-column blocks).
template <typename T>
__device__ void store_swizzled(unsigned char* dst, const T* src, int rows) {
  for (int c = threadIdx.x; c < rows * 16; c += blockDim.x) {
    const int r = c / 16, ch = c % 16;
    *reinterpret_cast<uint4*>(dst + sw128_offset(r, ch, rows)) =
        *reinterpret_cast<const uint4*>(src + r * 128 + ch * 8);
  }
}

template <typename T>
__global__ void mma_kernel(const T* a, const T* b, const T* p, const T* v, float* s_out,
                           float* s2_out, float* o_out) {
#ifdef FLASHBACK_WGMMA
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* sm = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                                       ~static_cast<uintptr_t>(1023));
  unsigned char *sa = sm, *sb = sa + M * K * 2, *sv = sb + N * K * 2;
  store_swizzled(sa, a, M);
  store_swizzled(sb, b, N);
  store_swizzled(sv, v, N);
  fence_proxy_async_smem();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float s[N / 8][4];
  wgmma_fence();
  for (int ks = 0; ks < K / 16; ++ks)
    wgmma_ss_n128<T>(s, sw128_desc(smem_addr(sa) + (ks >> 2) * M * 128 + (ks & 3) * 32, 16, 1024),
                     sw128_desc(smem_addr(sb) + (ks >> 2) * N * 128 + (ks & 3) * 32, 16, 1024),
                     ks > 0);
  wgmma_commit();
  wgmma_wait<0>();
  reg_fence(s);
  const int r0 = warp * 16 + lane / 4, c0 = 2 * (lane % 4);
  for (int u = 0; u < N / 8; ++u)
    for (int x = 0; x < 4; ++x) s_out[(r0 + 8 * (x >> 1)) * N + u * 8 + c0 + (x & 1)] = s[u][x];

  // S again, A from registers: each warp's 16 rows as m16n8k16 A fragments by ldmatrix from the
  // swizzled tile, B K-major (wgmma_rs_n128<T, false>).
  uint32_t qa[K / 16][4];
  const int lrow = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
  for (int ks = 0; ks < K / 16; ++ks)
    ldmatrix_x4(qa[ks], sa + sw128_offset(lrow, 2 * ks + (lane >> 4), M));
  wgmma_fence();
  for (int ks = 0; ks < K / 16; ++ks)
    wgmma_rs_n128<T, false>(
        s, qa[ks], sw128_desc(smem_addr(sb) + (ks >> 2) * N * 128 + (ks & 3) * 32, 16, 1024),
        ks > 0);
  wgmma_commit();
  wgmma_wait<0>();
  reg_fence(s);
  reg_fence(qa);
  for (int u = 0; u < N / 8; ++u)
    for (int x = 0; x < 4; ++x) s2_out[(r0 + 8 * (x >> 1)) * N + u * 8 + c0 + (x & 1)] = s[u][x];

  // P's A fragments straight from global memory, in the m16n8k16 A layout.
  uint32_t pa[N / 16][4];
  auto pair = [&](int r, int c) { return *reinterpret_cast<const uint32_t*>(p + r * N + c); };
  for (int kk = 0; kk < N / 16; ++kk) {
    pa[kk][0] = pair(r0, kk * 16 + c0);
    pa[kk][1] = pair(r0 + 8, kk * 16 + c0);
    pa[kk][2] = pair(r0, kk * 16 + 8 + c0);
    pa[kk][3] = pair(r0 + 8, kk * 16 + 8 + c0);
  }
  float o[16][4] = {};
  wgmma_fence();
  for (int kk = 0; kk < N / 16; ++kk)
    wgmma_rs_n128<T>(o, pa[kk], sw128_desc(smem_addr(sv) + kk * 16 * 128, N * 128, 1024));
  wgmma_commit();
  wgmma_wait<0>();
  reg_fence(o);
  reg_fence(pa);
  for (int u = 0; u < 16; ++u)
    for (int x = 0; x < 4; ++x) o_out[(r0 + 8 * (x >> 1)) * 128 + u * 8 + c0 + (x & 1)] = o[u][x];
#endif
}

bool hopper_device() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

template <typename T>
void run_case(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto fill = [&](std::vector<T>& h, std::vector<float>& f, size_t n) {
    h.resize(n);
    f.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>)
        h[i] = __float2bfloat16(nd(rng));
      else
        h[i] = __float2half(nd(rng));
      f[i] = static_cast<float>(h[i]);
    }
  };
  std::vector<T> ha, hb, hp, hv;
  std::vector<float> fa, fb, fp, fv;
  fill(ha, fa, M * K);
  fill(hb, fb, N * K);
  fill(hp, fp, M * N);
  fill(hv, fv, N * 128);
  T *da, *db, *dp, *dv;
  float *ds, *ds2, *dout;
  ASSERT_EQ(cudaMalloc(&da, ha.size() * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, hb.size() * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dp, hp.size() * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dv, hv.size() * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ds, M * N * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ds2, M * N * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, M * 128 * sizeof(float)), cudaSuccess);
  cudaMemcpy(da, ha.data(), ha.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(db, hb.data(), hb.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(dp, hp.data(), hp.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(dv, hv.data(), hv.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemset(ds, 0xff, M * N * sizeof(float));  // NaN poison
  cudaMemset(ds2, 0xff, M * N * sizeof(float));
  cudaMemset(dout, 0xff, M * 128 * sizeof(float));
  const int smem = 1024 + (M * K + N * K + N * 128) * 2;
  ASSERT_EQ(cudaFuncSetAttribute(mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            cudaSuccess);
  mma_kernel<T><<<1, 128, smem>>>(da, db, dp, dv, ds, ds2, dout);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> s(M * N), s2(M * N), o(M * 128);
  cudaMemcpy(s.data(), ds, s.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(s2.data(), ds2, s2.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(o.data(), dout, o.size() * sizeof(float), cudaMemcpyDeviceToHost);
  int bad_s = 0, bad_s2 = 0, bad_o = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(fa[i * K + k]) * fb[j * K + k];
      if (!(std::fabs(s[i * N + j] - ref) <= 1e-3 * (1 + std::fabs(ref)))) {
        if (bad_s++ < 4)
          ADD_FAILURE() << "S[" << i << "][" << j << "] " << s[i * N + j] << " vs " << ref;
      }
      if (!(std::fabs(s2[i * N + j] - ref) <= 1e-3 * (1 + std::fabs(ref)))) {
        if (bad_s2++ < 4)
          ADD_FAILURE() << "S (A in registers)[" << i << "][" << j << "] " << s2[i * N + j]
                        << " vs " << ref;
      }
    }
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < 128; ++j) {
      double ref = 0;
      for (int k = 0; k < N; ++k) ref += double(fp[i * N + k]) * fv[k * 128 + j];
      if (!(std::fabs(o[i * 128 + j] - ref) <= 1e-3 * (1 + std::fabs(ref)))) {
        if (bad_o++ < 4)
          ADD_FAILURE() << "O[" << i << "][" << j << "] " << o[i * 128 + j] << " vs " << ref;
      }
    }
  EXPECT_EQ(bad_s, 0) << "wrong elements of S = A B^T (K-major, smem x smem)";
  EXPECT_EQ(bad_s2, 0) << "wrong elements of S = A B^T (A in registers, K-major smem B)";
  EXPECT_EQ(bad_o, 0) << "wrong elements of O = P V (registers x MN-major smem)";
  for (void* ptr : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dp),
                    static_cast<void*>(dv), static_cast<void*>(ds), static_cast<void*>(ds2),
                    static_cast<void*>(dout)})
    cudaFree(ptr);
}

TEST(Wgmma, SwizzledOperandsBf16AndFp16) {
  if (!hopper_device()) GTEST_SKIP() << "needs a compute capability 9.0 device (sm_90a code)";
  for (uint32_t seed : {1u, 2u}) {
    run_case<__nv_bfloat16>(seed);
    run_case<__half>(seed + 10);
  }
}

}  // namespace
}  // namespace flashback::cuda

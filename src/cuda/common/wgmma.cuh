// Hopper warpgroup MMA (wgmma, sm_90a), for the tensor-core kernels that have a Hopper path.
// Every instruction here exists only on sm_90a: the wrappers compile to nothing elsewhere, and
// callers guard their kernels with FLASHBACK_WGMMA. The shared-memory layout and the
// descriptors the MMAs read are in sw128.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/mma.cuh"
#include "cuda/common/sw128.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHBACK_WGMMA 1
#endif

namespace flashback::cuda {

__device__ __forceinline__ void wgmma_fence() {
#ifdef FLASHBACK_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef FLASHBACK_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef FLASHBACK_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/// x from lane 0 of the warp. The same value where x already is warp-uniform, but the compiler
/// now knows it is, so descriptors derived from it live in uniform registers (wgmma reads its
/// descriptors from there): derived from threadIdx or from a loop counter it cannot prove
/// uniform, each was built in ordinary registers and moved over per MMA (R2UR).
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(~0u, x, 0); }

/// Pins registers an in-flight wgmma reads or writes: the compiler sees them used here, so it
/// neither moves their uses across the wait nor reuses them while the MMA runs.
template <int U>
__device__ __forceinline__ void reg_fence(float (&r)[U][4]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int x = 0; x < 4; ++x) asm volatile("" : "+f"(r[u][x])::"memory");
}
template <int U>
__device__ __forceinline__ void reg_fence(uint32_t (&r)[U][4]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int x = 0; x < 4; ++x) asm volatile("" : "+r"(r[u][x])::"memory");
}

// The 64 fp32 accumulators of an m64n128 tile, as 16 n8 blocks of 4 (the mma.sync C layout per
// warp: rows lane / 4 and lane / 4 + 8 of the warp's 16, columns 2 (lane % 4) + {0, 1}).
#define FLASHBACK_WG_D128                                                            \
  "{"                                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"   \
  "}"
#define FLASHBACK_WG_ACC128                                                                       \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),       \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),   \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),   \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),   \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),   \
      "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),   \
      "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), \
      "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),             \
      "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),             \
      "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),             \
      "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),             \
      "+f"(d[15][2]), "+f"(d[15][3])

/// d (+)= A B for a 64 x 128 x 16 step, A (K-major) and B from shared memory: B K-major, or
/// MN-major when B_MN (V for O = P V). accumulate = false overwrites d.
template <typename T, bool B_MN = false>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[16][4], uint64_t a, uint64_t b,
                                              bool accumulate) {
#ifdef FLASHBACK_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FLASHBACK_WG_D128
        ", %64, %65, p, 1, 1, 0, %67;\n}\n"
        : FLASHBACK_WG_ACC128
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(B_MN ? 1 : 0));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FLASHBACK_WG_D128
        ", %64, %65, p, 1, 1, 0, %67;\n}\n"
        : FLASHBACK_WG_ACC128
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(B_MN ? 1 : 0));
  }
#endif
}

// The 32 fp32 accumulators of an m64n64 tile (8 n8 blocks of 4, layout as above).
#define FLASHBACK_WG_D64                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FLASHBACK_WG_ACC64                                                                      \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),     \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
      "+f"(d[7][2]), "+f"(d[7][3])

/// d (+)= A B for a 64 x 64 x 16 step from shared memory, A and B K-major (S = Q K^T with the
/// tile's 64 keys as N: each instruction reads 4 KB of operands for 32 clocks of tensor work,
/// where m64n32 reads 3 KB for 16).
template <typename T>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[8][4], uint64_t a, uint64_t b,
                                             bool accumulate) {
#ifdef FLASHBACK_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLASHBACK_WG_D64
        ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : FLASHBACK_WG_ACC64
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FLASHBACK_WG_D64
        ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : FLASHBACK_WG_ACC64
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  }
#endif
}
#undef FLASHBACK_WG_D64
#undef FLASHBACK_WG_ACC64

// The 16 fp32 accumulators of an m64n32 tile (4 n8 blocks of 4, layout as above).
#define FLASHBACK_WG_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FLASHBACK_WG_ACC32                                                                      \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),     \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])

/// d (+)= A B for a 64 x 32 x 16 step from shared memory, B K-major; A K-major, or MN-major
/// when A_MN (as wgmma_ss_n16).
template <typename T, bool A_MN = false>
__device__ __forceinline__ void wgmma_ss_n32(float (&d)[4][4], uint64_t a, uint64_t b,
                                             bool accumulate) {
#ifdef FLASHBACK_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " FLASHBACK_WG_D32
        ", %16, %17, p, 1, 1, %19, 0;\n}\n"
        : FLASHBACK_WG_ACC32
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(A_MN ? 1 : 0));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " FLASHBACK_WG_D32
        ", %16, %17, p, 1, 1, %19, 0;\n}\n"
        : FLASHBACK_WG_ACC32
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(A_MN ? 1 : 0));
  }
#endif
}
#undef FLASHBACK_WG_D32
#undef FLASHBACK_WG_ACC32

// The 8 fp32 accumulators of an m64n16 tile (2 n8 blocks of 4, layout as above).
#define FLASHBACK_WG_D16 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define FLASHBACK_WG_ACC16                                                                  \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
      "+f"(d[1][2]), "+f"(d[1][3])

/// d (+)= A B for a 64 x 16 x 16 step from shared memory, B K-major; A K-major, or MN-major when
/// A_MN (V^T for O^T = V^T P^T: V's rows are A's K dimension).
template <typename T, bool A_MN = false>
__device__ __forceinline__ void wgmma_ss_n16(float (&d)[2][4], uint64_t a, uint64_t b,
                                             bool accumulate) {
#ifdef FLASHBACK_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 " FLASHBACK_WG_D16
        ", %8, %9, p, 1, 1, %11, 0;\n}\n"
        : FLASHBACK_WG_ACC16
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(A_MN ? 1 : 0));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 " FLASHBACK_WG_D16
        ", %8, %9, p, 1, 1, %11, 0;\n}\n"
        : FLASHBACK_WG_ACC16
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(A_MN ? 1 : 0));
  }
#endif
}
#undef FLASHBACK_WG_D16
#undef FLASHBACK_WG_ACC16

/// The m64nNk16 step for N = 8 NB (NB = 2: wgmma_ss_n16, NB = 4: wgmma_ss_n32), for kernels
/// templated on their N (the narrow MLA kernel's rows).
template <typename T, bool A_MN = false, int NB>
__device__ __forceinline__ void wgmma_ss_nb(float (&d)[NB][4], uint64_t a, uint64_t b,
                                            bool accumulate) {
  static_assert(NB == 2 || NB == 4, "m64n16 or m64n32");
  if constexpr (NB == 2)
    wgmma_ss_n16<T, A_MN>(d, a, b, accumulate);
  else
    wgmma_ss_n32<T, A_MN>(d, a, b, accumulate);
}

/// d (+)= A B for a 64 x 128 x 16 step, A from registers (the mma.sync m16n8k16 A fragment of the
/// warp's 16 rows) and B from shared memory: MN-major (V for O = P V) or, with B_MN = false,
/// K-major (K for S = Q K^T with Q in registers). accumulate = false overwrites d.
template <typename T, bool B_MN = true>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b,
                                              bool accumulate = true) {
#ifdef FLASHBACK_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FLASHBACK_WG_D128
        ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : FLASHBACK_WG_ACC128
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)),
          "n"(B_MN ? 1 : 0));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FLASHBACK_WG_D128
        ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : FLASHBACK_WG_ACC128
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)),
          "n"(B_MN ? 1 : 0));
  }
#endif
}

/// stmatrix .x4: four 8 x 8 matrices of 16-bit values into shared memory, matrix i from r_i of
/// every thread in the MMA accumulator layout (row lane / 4, columns 2 (lane % 4) + {0, 1});
/// lanes 8 i .. 8 i + 7 give the addresses of matrix i's rows. An accumulator tile's rows go
/// out in 8 instructions per warp where 4-byte stores take 32.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
#ifdef FLASHBACK_WGMMA
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#endif
}

/// 16 bytes from shared memory (a 32-bit shared-window address).
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

/// 16 bytes to global memory (16-byte aligned).
__device__ __forceinline__ void st_global_v4(void* ptr, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(ptr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

#undef FLASHBACK_WG_D128
#undef FLASHBACK_WG_ACC128

}  // namespace flashback::cuda

// The Tensor Memory Accelerator (sm_90): a tile of a tensor copied from global to shared memory
// by one instruction, described by a tensor map (tensor_map.h builds it on the host), completing
// on an mbarrier by bytes (expect_tx) rather than by arrivals; and its plain form, a contiguous run
// of bytes (cp.async.bulk, common/key_rows.cuh).
#pragma once

#include <cstdint>

#include "cuda/common/tensor_map.h"

namespace flashback::cuda {

/// Whether this build of a kernel has the bulk copy engine (sm_90 and later device code).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHBACK_HAS_BULK_COPY 1
#else
#define FLASHBACK_HAS_BULK_COPY 0
#endif

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared
/// `dst`, completing them on `bar`'s transaction count.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                              uint32_t bar) {
#if FLASHBACK_HAS_BULK_COPY
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

/// Adds `bytes` to the transaction count the current phase of `bar` waits for: the phase then
/// completes when its arrivals have come and that many bytes have landed. A thread calls it
/// before issuing the copies and before its own arrival.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#if FLASHBACK_HAS_BULK_COPY
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}

/// Arrives on `bar` and adds `bytes` to the transaction count its current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if FLASHBACK_HAS_BULK_COPY
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}

/// Copies the box at coordinates (c0, c1, c2, c3) (innermost first, in elements) of the 4-D
/// tensor `map` (a __grid_constant__ kernel parameter) to shared memory at `dst`, completing its
/// bytes on `bar`'s transaction count. With the 128-byte swizzle, dst is 1024-byte aligned.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const TensorMap& map, int c0, int c1,
                                            int c2, int c3, uint32_t bar) {
#if FLASHBACK_HAS_BULK_COPY
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#endif
}

}  // namespace flashback::cuda

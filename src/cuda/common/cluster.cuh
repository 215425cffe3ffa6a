// Thread-block clusters (sm_90): a CTA's rank, a peer's shared-memory address, arrivals on a
// peer's mbarrier, the cluster-wide barrier, and TMA loads multicast to several CTAs.
#pragma once

#include <cstdint>

#include "cuda/common/tensor_map.h"

namespace flashback::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHBACK_HAS_CLUSTER 1
#else
#define FLASHBACK_HAS_CLUSTER 0
#endif

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r = 0;
#if FLASHBACK_HAS_CLUSTER
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}

/// The shared::cluster address of `addr` (this CTA's shared window) in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, uint32_t rank) {
  uint32_t out = addr;
#if FLASHBACK_HAS_CLUSTER
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
#endif
  return out;
}

/// An arrival on an mbarrier of another CTA of the cluster (`bar` from cluster_map), with the
/// default semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive(cta_id) has it:
/// a bare SYNCS.ARRIVE. For an `empty` barrier whose stage the other CTA then overwrites, the
/// caller makes sure its reads of the stage have completed (a wgmma wait, or the loaded values
/// used). `.release.cluster` instead puts MEMBAR.ALL.GPU and ERRBAR before every arrival: with
/// it the head pairs of the prefill kernel ran at 0.76x (ncu: membar stalls at 2 warps per
/// issued instruction; session 34).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar) {
#if FLASHBACK_HAS_CLUSTER
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

/// Every thread of every CTA of the cluster (all must call it): memory operations before it are
/// visible to the cluster after it.
__device__ __forceinline__ void cluster_sync() {
#if FLASHBACK_HAS_CLUSTER
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
#endif
}

/// tma_load_4d (tma.cuh) into the same shared-memory offset of every CTA in `mask` (bits by
/// cluster rank), each copy completing bytes on the mbarrier at `bar`'s offset in its own CTA.
__device__ __forceinline__ void tma_load_4d_multicast(uint32_t dst, const TensorMap& map, int c0,
                                                      int c1, int c2, int c3, uint32_t bar,
                                                      uint16_t mask) {
#if FLASHBACK_HAS_CLUSTER
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
      : "memory");
#endif
}

}  // namespace flashback::cuda

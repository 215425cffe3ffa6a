// Shared-memory barriers (mbarrier, sm_90) for producer/consumer pipelines inside a CTA, the
// Hopper register hand-over between warpgroups (setmaxnreg, sm_90a), and the proxy fence that
// lets the tensor cores' async proxy read what ordinary or cp.async stores wrote.
//
// Phases: a barrier completes a phase when its expected count of arrivals has come; waiters
// name the phase by its parity. A producer waiting for a fresh "slot free" barrier starts on
// parity 1, which counts as already complete, so the first pass does not block.
#pragma once

#include <cstdint>

#include "cuda/common/mma.cuh"

namespace flashback::cuda {

// Barriers are named by their shared-memory address (smem_addr), one 32-bit register each.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
/// Arrives on `bar` once every cp.async this thread issued so far has landed. The arrival
/// counts towards the barrier's expected count (.noinc), so init it with the copying threads.
__device__ __forceinline__ void mbar_arrive_on_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

/// Makes this thread's mbarrier initialisations visible to the async proxy (the copy engine).
__device__ __forceinline__ void fence_mbar_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// Orders this thread's view of shared memory (written through the generic proxy: st.shared,
/// cp.async) before its following async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Named barrier `id` (1..15; 0 is __syncthreads) across `threads` threads (a multiple of 32):
/// synchronises a subset of the CTA's warps, e.g. the consumer warpgroups without the producer.
template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_sync() {
  static_assert(ID >= 1 && ID < 16 && THREADS % 32 == 0, "named barrier id / thread count");
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}

/// The same with the barrier chosen at run time (per warpgroup), and its arrive-only half: the
/// threads that arrive go on, those that sync wait until `threads` have come in all.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Register hand-over between warpgroups (sm_90a; needs a register cap at kernel entry, i.e.
/// __launch_bounds__(threads, 1)). Each warpgroup's role must be one branch of an if/else.
template <int REGS>
__device__ __forceinline__ void regs_shrink() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}
template <int REGS>
__device__ __forceinline__ void regs_grow() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}

}  // namespace flashback::cuda

// Launching a kernel that needs more than 48 KB of dynamic shared memory.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/check.cuh"
#include "cuda/device_facts.h"

namespace flashback::cuda {

/// Raises `kernel`'s dynamic shared-memory limit to `smem` and asks for the full carveout (the
/// short-query kernels size their stages for two or three CTAs per SM; with a smaller partition
/// the driver may fit fewer), then launches it on `stream`. The attributes are per function and
/// device; setting them on every call keeps multi-GPU processes correct, costs microseconds, and is
/// not a stream operation, so it is legal during graph capture. A layout larger than the device
/// allows per block is a clear error here rather than a failed launch.
template <typename Params>
void launch_with_smem(void (*kernel)(Params), dim3 grid, int threads, int smem, cudaStream_t stream,
                      const Params& p, const char* name) {
  const cudaError_t set =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (set != cudaSuccess) {  // the device's limit is read only here, off the launch path
    static_cast<void>(cudaGetLastError());
    const int most = device_facts().smem_block;
    if (smem > most)
      throw Error(
          name,
          "at most " + std::to_string(most) + " bytes of shared memory per block (this device)",
          std::to_string(smem) +
              " (a layout sized for a larger GPU; no smaller instance is built)");
    FLASHBACK_CUDA_CHECK(set);
  }
  FLASHBACK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            cudaSharedmemCarveoutMaxShared));
  kernel<<<grid, threads, smem, stream>>>(p);
  FLASHBACK_CUDA_CHECK_LAUNCH(name);
}

}  // namespace flashback::cuda

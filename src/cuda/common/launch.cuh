// Launching a kernel that needs more than 48 KB of dynamic shared memory.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/check.cuh"
#include "cuda/device_facts.h"

namespace flashback::cuda {

/// Raises `kernel`'s dynamic shared-memory limit to `smem` and asks for the full carveout (the
/// short-query kernels size their stages for two or three CTAs per SM; with a smaller partition
/// the driver may fit fewer). The attributes are per function and
/// device; setting them on every call keeps multi-GPU processes correct, costs microseconds, and is
/// not a stream operation, so it is legal during graph capture. A layout larger than the device
/// allows per block is a clear error here rather than a failed launch.
template <typename Params>
void set_smem(void (*kernel)(Params), int smem, const char* name) {
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
}

/// The launch configuration of `kernel` on `stream`, in clusters of `cluster_x` CTAs along x
/// where that is more than one (`attr` holds the attribute).
inline cudaLaunchConfig_t launch_config(dim3 grid, int threads, int smem, cudaStream_t stream,
                                        int cluster_x, cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  if (cluster_x > 1) {
    attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  return cfg;
}

/// set_smem, then launches `kernel` on `stream` (in clusters of `cluster_x` CTAs along x where
/// that is more than one; the grid's x is then a multiple of it).
template <typename Params>
void launch_with_smem(void (*kernel)(Params), dim3 grid, int threads, int smem, cudaStream_t stream,
                      const Params& p, const char* name, int cluster_x = 1) {
  set_smem(kernel, smem, name);
  if (cluster_x > 1) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = launch_config(grid, threads, smem, stream, cluster_x, attr);
    FLASHBACK_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  } else {
    kernel<<<grid, threads, smem, stream>>>(p);
  }
  FLASHBACK_CUDA_CHECK_LAUNCH(name);
}

/// How many clusters of `cluster_x` CTAs of `kernel` (with `smem` bytes each, set_smem done) the
/// current device runs at once; 0 where it runs none (or clusters are not supported). Asked of
/// the driver once per kernel and device.
template <typename Params>
int max_active_clusters(void (*kernel)(Params), int threads, int smem, int cluster_x) {
  static int known[64];  // per device ordinal, + 1 (0: not asked yet)
  int dev = 0;
  FLASHBACK_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < 64 && known[dev] > 0) return known[dev] - 1;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = launch_config(dim3(static_cast<unsigned>(cluster_x)), threads,
                                               smem, nullptr, cluster_x, attr);
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    n = 0;
  }
  if (dev >= 0 && dev < 64) known[dev] = n + 1;
  return n;
}

}  // namespace flashback::cuda

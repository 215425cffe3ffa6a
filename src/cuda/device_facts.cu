#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/device_facts.h"

namespace flashback::cuda {

DeviceFacts device_facts(int device) {
  if (device < 0) FLASHBACK_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::vector<DeviceFacts> cache;  // sms == 0: not read yet
  std::lock_guard<std::mutex> lock(mu);
  if (device >= static_cast<int>(cache.size())) cache.resize(device + 1);
  DeviceFacts& f = cache[device];
  if (f.sms == 0) {
    FLASHBACK_CUDA_CHECK(
        cudaDeviceGetAttribute(&f.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    FLASHBACK_CUDA_CHECK(
        cudaDeviceGetAttribute(&f.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    FLASHBACK_CUDA_CHECK(
        cudaDeviceGetAttribute(&f.smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    FLASHBACK_CUDA_CHECK(
        cudaDeviceGetAttribute(&f.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    FLASHBACK_CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
#ifdef FLASHBACK_SM90A
    f.sm90a = f.cc_major == 9 && f.cc_minor == 0;
#endif
  }
  return f;
}

}  // namespace flashback::cuda

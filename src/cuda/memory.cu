#include "cuda/common/check.cuh"
#include "cuda/memory.h"

namespace flashback::cuda {

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor
}

void DeviceBuffer::reserve(size_t bytes, Device device) {
  if (bytes <= bytes_ && device.index == device_ && ptr_ != nullptr) return;
  int prev = 0;
  FLASHBACK_CUDA_CHECK(cudaGetDevice(&prev));
  FLASHBACK_CUDA_CHECK(cudaSetDevice(device.index));
  if (ptr_ != nullptr) FLASHBACK_CUDA_CHECK(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  FLASHBACK_CUDA_CHECK(cudaMalloc(&ptr_, bytes == 0 ? 256 : bytes));
  bytes_ = bytes;
  device_ = device.index;
  FLASHBACK_CUDA_CHECK(cudaSetDevice(prev));
}

void copy_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FLASHBACK_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  if (status != cudaStreamCaptureStatusNone || bytes == 0) return;
  FLASHBACK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) FLASHBACK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  FLASHBACK_CUDA_CHECK(cudaDeviceSynchronize());
  if (bytes > 0) FLASHBACK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace flashback::cuda

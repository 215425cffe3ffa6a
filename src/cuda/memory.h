// Device memory for host-built state the kernels read (the backend's metadata mirror). No CUDA
// headers here, so C++ translation units (src/backend) can use it.
#pragma once

#include <cstddef>

#include "flashback/tensor.h"

namespace flashback::cuda {

/// An owning device allocation that only grows. Never resized while a captured graph uses it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// Makes the buffer at least `bytes` on `device` (reallocates, so pointers change).
  void reserve(size_t bytes, Device device);
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

/// Asynchronous host-to-device copy on `stream` (a cudaStream_t). When the stream is being
/// captured into a CUDA graph the copy is skipped: captured kernels only run at replay, and
/// replay refreshes the buffer (outside the capture) before launching the graph.
void copy_to_device_async(void* dst, const void* src, size_t bytes, void* stream);

/// Synchronous copies between host and device memory (after all earlier work on the device).
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);

}  // namespace flashback::cuda

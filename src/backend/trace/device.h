// The trace on a GPU (`flashback check --device cuda`): device copies of the host tensors the
// backend reads and writes. The host tensors stay the engine's record (the histories and the
// oracle read them); `put` uploads one, `on_device` maps any view inside an uploaded tensor to
// the same view of its copy, `get` brings a copy's contents back for the check. No CUDA headers;
// in a build without CUDA the constructor throws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "flashback/tensor.h"

namespace flashback::trace {

class DeviceCopies {
 public:
  explicit DeviceCopies(Device device);
  ~DeviceCopies();
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;

  /// Uploads contiguous `host` into its copy (made on first use, reused while its address and
  /// size stay). A `lasting` copy lives until destruction, the others until `release()`.
  void put(const TensorView& host, bool lasting = false);
  /// `host` (any view inside a put tensor) with its data moved to the copy: same shape and
  /// strides, device memory.
  TensorView on_device(const TensorView& host) const;
  /// Copies the device copy of contiguous `host` back into it (waits for the device first).
  void get(const TensorView& host) const;
  /// Frees the copies that are not lasting (a forward pass's tensors).
  void release();

 private:
  struct Copy;
  char* find(const void* host) const;  // the device address of a host address inside a copy
  Device device_;
  std::map<uintptr_t, std::unique_ptr<Copy>> copies_;  // by host start address
};

}  // namespace flashback::trace

// Test support: device copies of the shared case's host tensors (testing::make_paged), with the
// params rebased onto them. Outputs keep their poison (NaN) on the device too, so an element a
// kernel does not write fails the comparison.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback::testing {

#define FB_TEST_CUDA(call)                                                                         \
  do {                                                                                             \
    const cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) throw ::flashback::Error(#call, "cudaSuccess", cudaGetErrorString(e_)); \
  } while (0)

/// An owning device buffer.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  void* get() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> ptr_;
  size_t bytes_ = 0;
};

/// Device mirrors of a set of host tensors; views into any of them can be rebased.
class DeviceMirror {
 public:
  /// Copies `t` (all its bytes) to a new device buffer (copy = false: allocate only).
  void add(const Tensor& t, bool copy = true);
  /// Copies a contiguous host view that is not part of an added tensor.
  void add_view(const TensorView& v);
  /// The device view of a host view that points into one of the added tensors.
  TensorView rebase(const TensorView& host) const;
  /// Copies the device bytes of `t` back into the host tensor.
  void download(const Tensor& t) const;
  /// Device pointer of the mirror of `t`.
  void* device_ptr(const Tensor& t) const { return rebase(t.view()).data; }
  /// Re-uploads the host bytes of `t` (after the test changed them).
  void upload(const Tensor& t) const;

 private:
  struct Entry {
    const void* host;
    size_t bytes;
    DeviceBuffer dev;
  };
  const Entry* find(const void* host_ptr) const;
  std::vector<Entry> entries_;
};

/// A PagedData mirrored on the device: `params` view device memory, and `workspace` is sized
/// by paged_attention_workspace_bytes for `exec`.
struct DevicePaged {
  DeviceMirror mirror;
  PagedAttentionParams params;
  DeviceBuffer workspace;
};
/// copy_values = false leaves q and the caches uninitialised on the device (the bench fills
/// them there).
DevicePaged to_device(const PagedData& d, bool copy_values = true);
/// Sizes and attaches the workspace for `exec`.
void attach_workspace(DevicePaged& dp, const Exec& exec);
/// Runs paged_attention on the device copy, then copies out/lse back into `d`'s host tensors.
void run_on_device(DevicePaged& dp, const PagedData& d, const Exec& exec);

/// The storage variants both GPU attention kernels (short and long queries) run on top of a
/// base case, in this order: a req_to_token slot table; fp16 with a transposed LSE; no LSE;
/// fp8 e4m3 and e5m2 caches with per-head and scalar descales under bf16 and fp16 q.
std::vector<AttentionCase> storage_variants(const AttentionCase& base);

/// The head dims of a comma-separated list: the tests' FLASHBACK_TEST_HEAD_DIMS (those built).
std::vector<int> head_dims(const char* list);

}  // namespace flashback::testing

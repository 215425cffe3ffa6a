// Entry points: validate once, then dispatch on the tensors' device and the requested CPU
// implementation. Kernels below this point assume validated input.
#include "flashback/ops.h"

#include "common/validate.h"
#include "cpu/fast/fast.h"
#include "cpu/reference.h"

#ifdef FLASHBACK_WITH_CUDA
#include "cuda/dispatch.h"
#endif

namespace flashback {
namespace {

[[noreturn]] void no_cuda(Device d) {
  throw Error("device", "cpu (this build of flashback has no CUDA support)", to_string(d));
}

}  // namespace

int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p, const Exec& exec) {
  const auto s = detail::validate(p);
  if (s.device.type == DeviceType::kCPU) return 0;
#ifdef FLASHBACK_WITH_CUDA
  return cuda::paged_attention_workspace_bytes(p, s, exec);
#else
  (void)exec;
  no_cuda(s.device);
#endif
}

void paged_attention(const PagedAttentionParams& p, const Exec& exec) {
  const auto s = detail::validate(p);
  if (s.device.type == DeviceType::kCPU) {
    if (exec.cpu_impl == Exec::CpuImpl::kReference) return reference::paged_attention(p, s);
    return cpu_fast::paged_attention(p, s, exec);
  }
#ifdef FLASHBACK_WITH_CUDA
  cuda::paged_attention(p, s, exec);
#else
  (void)exec;
  no_cuda(s.device);
#endif
}

void ragged_attention(const RaggedAttentionParams& p, const Exec& exec) {
  const auto s = detail::validate(p);
  if (s.device.type == DeviceType::kCPU) {
    if (exec.cpu_impl == Exec::CpuImpl::kReference) return reference::ragged_attention(p, s);
    return cpu_fast::ragged_attention(p, s, exec);
  }
#ifdef FLASHBACK_WITH_CUDA
  cuda::ragged_attention(p, s, exec);
#else
  (void)exec;
  no_cuda(s.device);
#endif
}

void merge_state(const MergeStateParams& p, const Exec& exec) {
  const auto s = detail::validate(p);
  if (s.device.type == DeviceType::kCPU) {
    if (exec.cpu_impl == Exec::CpuImpl::kReference) return reference::merge_state(p, s);
    return cpu_fast::merge_state(p, s, exec);
  }
#ifdef FLASHBACK_WITH_CUDA
  cuda::merge_state(p, s, exec);
#else
  (void)exec;
  no_cuda(s.device);
#endif
}

void kv_store(const KVStoreParams& p, const Exec& exec) {
  const auto s = detail::validate(p);
  if (s.device.type == DeviceType::kCPU) {
    if (exec.cpu_impl == Exec::CpuImpl::kReference) return reference::kv_store(p, s);
    return cpu_fast::kv_store(p, s, exec);
  }
#ifdef FLASHBACK_WITH_CUDA
  cuda::kv_store(p, s, exec);
#else
  (void)exec;
  no_cuda(s.device);
#endif
}

}  // namespace flashback

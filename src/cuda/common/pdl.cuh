// Programmatic dependent launch (sm_90+): a kernel launched with the programmatic stream
// serialization attribute may start while the kernel before it on the stream is still running,
// and waits (pdl_wait) for that kernel's completion and memory before it reads its outputs; the
// kernel before it lets its dependents start early (pdl_launch_dependents), so their launch and
// scheduling overlap its last CTAs. Both are no-ops on older GPUs and when no dependent launch
// is in play, so a kernel may call them unconditionally.
#pragma once

namespace flashback::cuda {

/// Lets the next kernel on the stream, if launched as a programmatic dependent, start now.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// Waits until the kernels this one depends on have completed and their writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashback::cuda

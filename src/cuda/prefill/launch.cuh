// Launch of the long-query attention kernel for one (head dims, q dtype) instance; the KV kind is
// picked at run time. Included only by the generated instance files (one head-dim pair x dtype
// each, listed by src/cuda/prefill/prefill.cmake).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/launch.cuh"
#include "cuda/prefill/kernel.cuh"

namespace flashback::cuda::prefill {

template <int D, int DV, typename T, KvKind KV, Cap CAP>
void launch_one(const PrefillParams& p, cudaStream_t stream) {
  using Cfg = PrefillConfig<D, DV, KV != KvKind::kSame>;
  launch_with_smem(prefill_kernel<Cfg, T, KV, CAP>, dim3(p.m_blocks, p.heads_q, p.batch),
                   Cfg::THREADS, Cfg::SMEM_BYTES, stream, p, "prefill_kernel");
}

template <int D, int DV, typename T, Cap CAP>
void launch_kv(const PrefillParams& p, KvKind kv, cudaStream_t stream) {
  switch (kv) {
    case KvKind::kSame:
      return launch_one<D, DV, T, KvKind::kSame, CAP>(p, stream);
    case KvKind::kE4M3:
      return launch_one<D, DV, T, KvKind::kE4M3, CAP>(p, stream);
    case KvKind::kE5M2:
      return launch_one<D, DV, T, KvKind::kE5M2, CAP>(p, stream);
  }
}

// Softcap is a kernel variant (kernel.cuh says why).
template <int D, int DV, typename T>
void launch(const PrefillParams& p, KvKind kv, cudaStream_t stream) {
  if (p.softcap > 0.f)
    launch_kv<D, DV, T, kCapOn>(p, kv, stream);
  else
    launch_kv<D, DV, T, kCapOff>(p, kv, stream);
}

// Rows per CTA of an instance (the host sizes the grid with it).
template <int D, int DV>
constexpr int block_rows() {
  return PrefillConfig<D, DV, false>::BM;
}

}  // namespace flashback::cuda::prefill

#define FLASHBACK_DEFINE_PREFILL_INSTANCE(D, DV, TN)                            \
  namespace flashback::cuda::prefill {                                          \
  void run_##D##_##DV##_##TN(const PrefillParams& p, KvKind kv, void* stream) { \
    launch<D, DV, TN>(p, kv, static_cast<cudaStream_t>(stream));                \
  }                                                                             \
  int rows_##D##_##DV##_##TN() { return block_rows<D, DV>(); }                  \
  }

// Launch of the long-query attention kernel for one (head dims, q dtype) instance; the KV kind is
// picked at run time. Included only by the generated instance files (one head-dim pair x dtype
// each, listed by src/cuda/prefill/prefill.cmake).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/launch.cuh"
#include "cuda/prefill/kernel.cuh"
#include "cuda/prefill/wgmma_kernel.cuh"

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

/// True when this library holds sm_90a code and the current device runs it (compute capability
/// 9.0), unless the environment sets FLASHBACK_PREFILL_KERNEL=mma (launch.cu).
bool wgmma_available();
/// Whether the Hopper kernel's consumers take turns issuing their MMAs (launch.cu).
bool wgmma_pingpong();
/// Whether the Hopper kernel stores O's rows through shared memory (params.h, staged_out): out's
/// rows are 16-byte aligned, unless the environment sets FLASHBACK_PREFILL_STAGED_OUT=0
/// (launch.cu).
bool wgmma_staged_out(const PrefillParams& p, int elem_bytes);
/// Whether the Hopper kernel's persistent grid may run in head pairs (wgmma_kernel.cuh): only
/// where the environment sets FLASHBACK_PREFILL_CLUSTER=1 (launch.cu says why).
bool wgmma_head_pairs();
/// The Hopper kernel's grid for blocks of `rows` queries; sets p.persistent and p.head_pairs
/// (clusters of two where `max_pairs`, the clusters of two the device runs at once, is above 0;
/// launch.cu).
dim3 wgmma_grid(PrefillParams& p, int rows, int max_pairs);

// The Hopper kernel (wgmma_kernel.cuh) takes the shapes it is built for with 16-bit caches.
template <int D, int DV>
bool uses_wgmma(KvKind kv) {
  return WgmmaConfig<D, DV>::kBuilt && kv == KvKind::kSame && wgmma_available();
}

/// K and V as TMA maps for the Hopper kernel's tiles of `tile_keys` keys (launch.cu; kv_box
/// stays 0 where they cannot be built, and the producer then copies every tile itself).
void add_kv_maps(PrefillParams& p, int d, int dv, int tile_keys);

template <int D, int DV, typename T>
void launch_wgmma(const PrefillParams& p_in, cudaStream_t stream) {
  using Cfg = WgmmaConfig<D, DV>;
  PrefillParams p = p_in;
  add_kv_maps(p, D, DV, Cfg::N);
  p.pingpong = wgmma_pingpong();
  p.staged_out = wgmma_staged_out(p, static_cast<int>(sizeof(T)));
  const auto kernel =
      p.softcap > 0.f ? prefill_wgmma_kernel<Cfg, T, true> : prefill_wgmma_kernel<Cfg, T, false>;
  set_smem(kernel, Cfg::SMEM_BYTES, "prefill_wgmma_kernel");
  // Head pairs where a KV group holds an even number of q heads (the pair's heads share it) and
  // the driver runs clusters of two of this kernel (asked once per device).
  const int max_pairs = wgmma_head_pairs() && p.group % 2 == 0
                            ? max_active_clusters(kernel, Cfg::THREADS, Cfg::SMEM_BYTES, 2)
                            : 0;
  const dim3 grid = wgmma_grid(p, Cfg::BM, max_pairs);
  launch_with_smem(kernel, grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream, p, "prefill_wgmma_kernel",
                   p.head_pairs ? 2 : 1);
}

// Softcap is a kernel variant (kernel.cuh says why).
template <int D, int DV, typename T>
void launch(const PrefillParams& p, KvKind kv, cudaStream_t stream) {
  if constexpr (WgmmaConfig<D, DV>::kBuilt) {
    if (uses_wgmma<D, DV>(kv)) return launch_wgmma<D, DV, T>(p, stream);
  }
  if (p.softcap > 0.f)
    launch_kv<D, DV, T, kCapOn>(p, kv, stream);
  else
    launch_kv<D, DV, T, kCapOff>(p, kv, stream);
}

// Rows per CTA of the kernel `launch` picks (the host sizes the grid with it).
template <int D, int DV>
int block_rows(KvKind kv) {
  return uses_wgmma<D, DV>(kv) ? WgmmaConfig<D, DV>::BM : PrefillConfig<D, DV, false>::BM;
}

}  // namespace flashback::cuda::prefill

#define FLASHBACK_DEFINE_PREFILL_INSTANCE(D, DV, TN)                            \
  namespace flashback::cuda::prefill {                                          \
  void run_##D##_##DV##_##TN(const PrefillParams& p, KvKind kv, void* stream) { \
    launch<D, DV, TN>(p, kv, static_cast<cudaStream_t>(stream));                \
  }                                                                             \
  int rows_##D##_##DV##_##TN(KvKind kv) { return block_rows<D, DV>(kv); }       \
  }

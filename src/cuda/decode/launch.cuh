// Launch of the short-query paged attention kernel for one (head dims, q dtype) instance: picks
// the row tiles (1 or 4 m-tiles; 2 only for the narrow MLA kernel) and the KV kind at run time.
// Included only by the generated instance files (one head-dim x dtype combination each, listed by
// src/cuda/sources.cmake).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/launch.cuh"
#include "cuda/decode/kernel.cuh"
#include "cuda/decode/launch.h"
#include "cuda/decode/mla_narrow.cuh"
#include "cuda/decode/mla_wgmma.cuh"
#include "cuda/decode/warp_keys.cuh"

namespace flashback::cuda {

template <int D, int DV, bool QV, typename T, int MT, KvKind KV>
void launch_decode_one(const DecodeParams& p, cudaStream_t stream) {
  using Cfg = DecodeConfig<D, DV, QV, KV != KvKind::kSame, MT>;
  launch_with_smem(decode_kernel<Cfg, T, KV>,
                   dim3(p.num_splits, p.heads_kv * p.row_blocks, p.batch), Cfg::THREADS,
                   Cfg::SMEM_BYTES, stream, p, "decode_kernel");
}

// Up to 16 rows and v heads up to 256 wide: the warps-split-keys kernel (warp_keys.cuh), in its
// narrow form (S^T = K Q^T) when no CTA holds more than 8 rows (queries x heads of a group).
template <int D, int DV, typename T, KvKind KV>
void launch_decode_wk(const DecodeParams& p, cudaStream_t stream) {
  constexpr bool FP8 = KV != KvKind::kSame;
  using Narrow = DecodeWkConfig<D, DV, FP8, true>;
  using Wide = DecodeWkConfig<D, DV, FP8, false>;
  const dim3 grid(p.num_splits, p.heads_kv * p.row_blocks, p.batch);
  if (p.narrow)
    launch_with_smem(decode_wk_kernel<Narrow, T, KV>, grid, Narrow::THREADS, Narrow::SMEM_BYTES,
                     stream, p, "decode_wk_kernel");
  else
    launch_with_smem(decode_wk_kernel<Wide, T, KV>, grid, Wide::THREADS, Wide::SMEM_BYTES, stream,
                     p, "decode_wk_kernel");
}

template <typename T, int ROWS>
void launch_mla_narrow(const DecodeParams& p, dim3 grid, cudaStream_t stream) {
  using Nc = MlaNarrowConfig<ROWS>;
  if (p.softcap > 0.f)
    launch_with_smem(mla_narrow_kernel<T, true, ROWS>, grid, Nc::THREADS, Nc::SMEM_BYTES, stream, p,
                     "mla_narrow_kernel");
  else
    launch_with_smem(mla_narrow_kernel<T, false, ROWS>, grid, Nc::THREADS, Nc::SMEM_BYTES, stream,
                     p, "mla_narrow_kernel");
}

// MLA absorbed on Hopper, the kernel named by dispatch.cu's m_tiles: mla_narrow.cuh's for row
// blocks of <= 16 rows (m_tiles == 1) or <= 32 (m_tiles == 2, picked only for this kernel), a
// quarter or half of the 64-row kernel's tensor work; mla_wgmma.cuh's 64-row blocks for 4.
// Softcap is a kernel variant.
template <typename T>
void launch_mla_wgmma(const DecodeParams& p, int m_tiles, cudaStream_t stream) {
  using Cfg = MlaWgmmaConfig;
  const dim3 grid(p.num_splits, p.heads_kv * p.row_blocks, p.batch);
  if (m_tiles == 1) return launch_mla_narrow<T, 16>(p, grid, stream);
  if (m_tiles == 2) return launch_mla_narrow<T, 32>(p, grid, stream);
  if (p.softcap > 0.f)
    launch_with_smem(mla_wgmma_kernel<T, true>, grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream, p,
                     "mla_wgmma_kernel");
  else
    launch_with_smem(mla_wgmma_kernel<T, false>, grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream, p,
                     "mla_wgmma_kernel");
}

template <int D, int DV, bool QV, typename T, int MT>
void launch_decode_mt(const DecodeParams& p, KvKind kv, cudaStream_t stream) {
  switch (kv) {
    case KvKind::kSame:
      return launch_decode_one<D, DV, QV, T, MT, KvKind::kSame>(p, stream);
    case KvKind::kE4M3:
      return launch_decode_one<D, DV, QV, T, MT, KvKind::kE4M3>(p, stream);
    case KvKind::kE5M2:
      return launch_decode_one<D, DV, QV, T, MT, KvKind::kE5M2>(p, stream);
  }
}

template <int D, int DV, bool QV, typename T>
void launch_decode(const DecodeParams& p, int m_tiles, KvKind kv, cudaStream_t stream) {
  const bool fp8 = kv != KvKind::kSame;
  switch (decode_shape(D, DV, QV, fp8, m_tiles, p.hopper_mla, p.smem_block)) {
    case DecodeShape::kMlaWgmma:
      // The host's row blocks are 16 * m_tiles rows: the narrow kernel's 16 or 32, or 64.
      if constexpr (QV && D == MlaWgmmaConfig::D && DV == MlaWgmmaConfig::DV)
        return launch_mla_wgmma<T>(p, m_tiles, stream);
      break;
    case DecodeShape::kWarpKeys:
      if constexpr (!QV && DV <= 256) {
        if (kv == KvKind::kSame) return launch_decode_wk<D, DV, T, KvKind::kSame>(p, stream);
        if constexpr (D % 64 == 0 && DV % 64 == 0) {  // fp8 fragments: see decode_shape
          if (kv == KvKind::kE4M3) return launch_decode_wk<D, DV, T, KvKind::kE4M3>(p, stream);
          return launch_decode_wk<D, DV, T, KvKind::kE5M2>(p, stream);
        }
      }
      break;
    case DecodeShape::kColumns:
      if (m_tiles == 1) return launch_decode_mt<D, DV, QV, T, 1>(p, kv, stream);
      return launch_decode_mt<D, DV, QV, T, 4>(p, kv, stream);
  }
  throw Error("decode kernel", "an instance for this shape (dispatch and launch agree)",
              "none built");
}

}  // namespace flashback::cuda

#define FLASHBACK_DEFINE_DECODE_INSTANCE(D, DV, QV, TN)                                        \
  namespace flashback::cuda {                                                                  \
  void decode_##D##_##DV##_##TN(const DecodeParams& p, int m_tiles, KvKind kv, void* stream) { \
    launch_decode<D, DV, QV, TN>(p, m_tiles, kv, static_cast<cudaStream_t>(stream));           \
  }                                                                                            \
  }

// The K/V pipeline of the warps-split-keys decode kernel (warp_keys.cuh): common/paged.cuh's
// KvPipeline, but per warp. That kernel's warps each read only their own 16 keys of a tile, so
// each warp can copy, wait for and consume its own keys with no barrier across warps (the
// CTA-wide form spent a __syncthreads per 64-key tile, and the warps waited for the slowest).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mma.cuh"
#include "cuda/common/paged.cuh"

namespace flashback::cuda {

/// Issues the 16-byte copies of NW keys (one warp's): K rows of CK chunks to k_dst (pitch KRAW),
/// V rows of CV chunks to v_dst (pitch VRAW), key i located by at[i]. Consecutive lanes take
/// consecutive chunks of a key, so each copy instruction is coalesced.
template <int NW, int CK, int CV, int KRAW, int VRAW>
__device__ __forceinline__ void copy_keys_warp(unsigned char* k_dst, unsigned char* v_dst,
                                               const KeyBytes* at, const unsigned char* kbase,
                                               const unsigned char* vbase, int lane) {
  constexpr int C = CK + CV;
  static_assert((NW * C) % 32 == 0, "whole rounds of copies per lane");
#pragma unroll
  for (int it = 0; it < NW * C / 32; ++it) {
    const int c = lane + 32 * it, key = c / C, ch = c % C;
    const bool is_k = ch < CK;
    const int64_t off = is_k ? at[key].x : at[key].y;
    unsigned char* dst = is_k ? k_dst + key * KRAW + ch * 16 : v_dst + key * VRAW + (ch - CK) * 16;
    const unsigned char* src = is_k ? kbase + ch * 16 : vbase + (ch - CK) * 16;
    cp_async16_or_zero(dst, src + off, off >= 0);
  }
}

/// KvPipeline's per-warp form, for kernels whose warps each read only their own NW keys of a
/// tile of N (warp w: keys [w NW, w NW + NW)): lane l < NW of warp w owns key w NW + l (its
/// table read a tile ahead, its byte offsets in `loc`), and the warp copies its own keys. A warp
/// then waits only for its own copies, so the per-tile step is
///   cp_async_wait<STAGES - 2>(); __syncwarp(); advance(j); ...compute...; retire(p, j);
/// with no barrier across warps. Stage layout as KvPipeline's: N K rows, then N V rows.
template <int NW, int N, int CK, int CV, int KRAW, int VRAW, int STAGES, int STAGE_BYTES, int EB>
struct WarpKvPipeline {
  PageWalk walk;
  KeyBytes* loc = nullptr;          // [STAGES][N], shared
  unsigned char* stages = nullptr;  // [STAGES][STAGE_BYTES], shared
  const unsigned char *kbase = nullptr, *vbase = nullptr;
  int first = 0, end = 0, ntiles = 0;
  int warp = 0, lane = 0;
  int32_t ahead = 0;

  __device__ __forceinline__ void bind(KeyBytes* loc_buf, unsigned char* stage_buf, const void* k,
                                       int64_t k_sh, const void* v, int64_t v_sh, int g) {
    loc = loc_buf;
    stages = stage_buf;
    kbase = static_cast<const unsigned char*>(k) + g * k_sh * EB;
    vbase = static_cast<const unsigned char*>(v) + g * v_sh * EB;
    warp = static_cast<int>(threadIdx.x) >> 5;
    lane = static_cast<int>(threadIdx.x) & 31;
  }
  __device__ __forceinline__ void set_range(int first_key, int end_key) {
    first = first_key;
    end = end_key;
    ntiles = end > first ? (end - first + N - 1) / N : 0;
  }
  __device__ __forceinline__ unsigned char* stage(int tile) const {
    return stages + (tile % STAGES) * STAGE_BYTES;
  }
  __device__ __forceinline__ int key_of(int tile) const {
    return first + tile * N + warp * NW + lane;
  }
  __device__ __forceinline__ int32_t fetch(int tile) const {
    return lane < NW && key_of(tile) < end ? walk.read(key_of(tile)) : 0;
  }
  template <typename P>
  __device__ __forceinline__ void publish(const P& p, int tile, int32_t entry) {
    if (lane < NW)
      loc[(tile % STAGES) * N + warp * NW + lane] =
          key_of(tile) < end
              ? key_bytes(walk.locate(entry, key_of(tile)), p.k_sp, p.k_so, p.v_sp, p.v_so, EB)
              : no_key();
  }
  __device__ __forceinline__ void copy(int tile) {
    unsigned char* st = stage(tile);
    copy_keys_warp<NW, CK, CV, KRAW, VRAW>(st + warp * NW * KRAW, st + N * KRAW + warp * NW * VRAW,
                                           loc + (tile % STAGES) * N + warp * NW, kbase, vbase,
                                           lane);
  }
  template <typename P>
  __device__ __forceinline__ void prologue(const P& p) {
    int32_t e[STAGES - 1];
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) e[s] = s < ntiles ? fetch(s) : 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) publish(p, s, e[s]);
    __syncwarp();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < ntiles) copy(s);
      cp_async_commit();
    }
    if (STAGES - 1 < ntiles) {
      ahead = fetch(STAGES - 1);
      publish(p, STAGES - 1, ahead);
    }
  }
  __device__ __forceinline__ void advance(int j) {
    if (j + STAGES - 1 < ntiles) copy(j + STAGES - 1);
    cp_async_commit();
    if (j + STAGES < ntiles) ahead = fetch(j + STAGES);
  }
  template <typename P>
  __device__ __forceinline__ void retire(const P& p, int j) {
    if (j + STAGES < ntiles) publish(p, j + STAGES, ahead);
  }
};

}  // namespace flashback::cuda

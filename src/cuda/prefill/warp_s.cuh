// S = Q K^T for one warp's 16 query rows against a tile of N keys held in the 128-byte-swizzled
// layout (cuda/common/sw128.h: [D / 64][N][128 B]), by mma.sync m16n8k16 from Q's A fragments in
// registers. The Hopper prefill kernel's fallback when a stale softmax fails (wgmma_kernel.cuh,
// redo_s): a wgmma accumulator's per-warp layout is m16n8k16's, so each n8 block of keys lands
// where wgmma puts it. One ldmatrix.x4 gives the B fragments of two n8 blocks at one k step
// (the blocks' keys as rows, 8 dims per matrix). Header of its own, on mma.cuh's primitives
// only, so that tests/cuda/prefill_emu can run it on the CPU (cpu_test_softmax_emu).
#pragma once

#include <cstdint>

#include "cuda/common/mma.cuh"
#include "cuda/common/sw128.h"

namespace flashback::cuda::prefill {

template <typename T, int D, int N>
__device__ __forceinline__ void warp_s_sw128(float (&s)[1][N / 8][4],
                                             const uint32_t (&qf)[D / 16][4],
                                             const unsigned char* k_tile, int lane) {
  const int m = lane >> 3, r = lane & 7;  // this lane's matrix and its row in it
#pragma unroll
  for (int u = 0; u < N / 8; ++u) s[0][u][0] = s[0][u][1] = s[0][u][2] = s[0][u][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int u = 0; u < N / 8; u += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, k_tile + sw128_offset(u * 8 + (m >> 1) * 8 + r, 2 * ks + (m & 1), N));
      mma16816<T>(s[0][u], qf[ks], b[0], b[1]);
      mma16816<T>(s[0][u + 1], qf[ks], b[2], b[3]);
    }
}

}  // namespace flashback::cuda::prefill

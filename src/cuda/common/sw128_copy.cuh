// Copying rows from global memory into the 128-byte-swizzled layout wgmma reads
// (cuda/common/wgmma.cuh), with cp.async in 128-byte pieces: the producers of the Hopper kernels
// (prefill/wgmma_kernel.cuh, decode/mla_wgmma.cuh) use it for Q and for every K/V tile.
#pragma once

#include <cstdint>

#include "cuda/common/mma.cuh"

namespace flashback::cuda {

/// Copies rows 32 warp + [0, 32) of a swizzled block of R rows at `dst` (C 16-byte chunks per
/// row; rows from `nvalid` on are zero-filled) in 128-byte pieces: lane l takes chunk l % 8 of
/// rows 4 i + l / 8, so one instruction reads four whole 128-byte segments and writes four
/// swizzled rows (all 32 banks once per 128 bytes). Row r = 4 i + l / 8 of the warp comes from
/// src + off(r) (an offset of 0 for a zero-filled row keeps the address valid). `dst` is
/// 1024-byte aligned, so bits 4-6 of an address are the swizzled chunk and the XOR below flips
/// only them. The row has (row & 7) = 4 (i & 1) + l / 8, so the destination's swizzle depends
/// only on the lane and i % 2, and every address past `off` is a constant offset. (The first
/// form spent ~24 instructions per 16-byte copy on index and swizzle arithmetic and the prefill
/// producer could not keep up; docs/PERFORMANCE_GPU.md, session 4.)
template <int C, int R, typename Off>
__device__ __forceinline__ void copy_rows_sw128(uint32_t dst, const unsigned char* src, Off off,
                                                int nvalid, int warp, int lane) {
  const int h = lane >> 3, c = lane & 7;
  const uint32_t d0 = dst + (warp * 32 + h) * 128 + ((c ^ h) << 4);
  const uint32_t d[2] = {d0, d0 ^ 64u};
  src += c * 16;
#pragma unroll 2
  for (int i = 0; i < 8; ++i) {
    const int r = 4 * i + h;
    const int64_t o = off(r);
    const int bytes = warp * 32 + r < nvalid ? 16 : 0;
#pragma unroll
    for (int b = 0; b < C / 8; ++b)
      cp_async16(d[i & 1] + b * R * 128 + i * 512, src + o + b * 128, bytes);
  }
}

}  // namespace flashback::cuda

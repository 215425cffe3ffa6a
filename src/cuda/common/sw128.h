// The 128-byte-swizzled shared-memory layout the Hopper kernels use and the wgmma matrix
// descriptors that point into it: plain integer functions, kept apart from wgmma.cuh so that a
// CPU test (tests/cuda/test_sw128.cc) can check them.
//
// Layout ("128-byte swizzle", PTX ISA 9.7.15.5.1.2): a tile of 16-bit elements is stored as
// blocks of 64 columns; a block holds its rows at a 128-byte pitch, and the 16-byte chunk c of
// row r sits at chunk c ^ (r % 8). Blocks start on 1024-byte boundaries. The same bytes serve as
// a K-major operand (rows = M or N, columns = K: Q and K for S = Q K^T) and as an MN-major one
// (rows = K, columns = N: V for O = P V), so one loader fills both.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.h"

namespace flashback::cuda {

/// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of `rows` rows.
FLASHBACK_HOST_DEVICE constexpr int sw128_offset(int row, int chunk, int rows) {
  return (chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

/// A shared-memory matrix descriptor with 128-byte swizzle. K-major operands: `lbo` unused (16),
/// `sbo` = 1024 (the next 8 rows). MN-major operands: `lbo` = the next 64-column block, `sbo` =
/// 1024 (the next 8 rows of K).
FLASHBACK_HOST_DEVICE constexpr uint64_t sw128_desc(uint32_t smem_byte_addr, uint32_t lbo,
                                                    uint32_t sbo) {
  return static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

/// sw128_desc split for cheap k-stepping, with sbo = 1024: sw128_desc_lo(addr, lbo) once per
/// tile, then sw128_desc_at(lo, offset) per MMA. The offset (bytes, a multiple of 16) only adds
/// to the address field, which cannot carry out while the address stays inside the 256 KB shared
/// window; with a constant offset that is one integer add per descriptor (building each
/// descriptor from scratch cost ~6 instructions, ~13 per MMA with both operands: the MLA decode
/// kernel's 36-step S chain was issue-bound on them, and the prefill kernel gained 4-5 %).
FLASHBACK_HOST_DEVICE constexpr uint32_t sw128_desc_lo(uint32_t smem_byte_addr, uint32_t lbo) {
  return ((smem_byte_addr & 0x3FFFF) >> 4) | (((lbo & 0x3FFFF) >> 4) << 16);
}
FLASHBACK_HOST_DEVICE constexpr uint64_t sw128_desc_at(uint32_t lo, uint32_t offset) {
  return (static_cast<uint64_t>((1024u >> 4) | (1u << 30)) << 32) | (lo + (offset >> 4));
}

}  // namespace flashback::cuda

// Stage rows without padding: which 16-byte chunk of a shared-memory row holds which chunk of
// the K or V row it copies. Pure C++ (constexpr), so the host's layout arithmetic
// (decode/config.h) and the device code read the same rule.
//
// A 16-byte pad per row spreads the rows a warp reads at once over the banks, but it costs
// 16 bytes a row: at head dim 128 in fp8 (128-byte rows), one stage of 64 keys is 18 KB instead
// of 16, which is the difference between three and four resident CTAs with three stages each.
// Without the pad, chunk c of row r is stored at chunk c ^ row_swizzle_mask(s, r) of the row.
// The mask is below 8, so it permutes the chunks within each aligned 128-byte line: rows must be
// whole lines.
#pragma once

namespace flashback::cuda {

enum class RowSwizzle {
  kNone,  // padded rows (chunk c at chunk c)
  // 16-bit tiles read by ldmatrix: an 8 x 8 matrix is 8 rows of one 16-byte chunk each, so the
  // rows' low three bits pick eight different bank groups.
  kLdsm,
  // fp8 head dim 128 (warp_keys.cuh): K is read as 16-byte pieces by lane quads, chunks
  // 4q..4q+3 of rows r and r + 1 in one phase (the mask's bit 2 follows the row's parity, so the
  // two rows take different halves of the line); V as chunk g of rows 2c + p (c < 4) for lane
  // groups g in {0, 1} (bits 1-2 follow c, bit 0 stays g's).
  kFp8,
};

constexpr int row_swizzle_mask(RowSwizzle s, int row) {
  return s == RowSwizzle::kLdsm  ? (row & 7)
         : s == RowSwizzle::kFp8 ? ((row & 6) ^ ((row & 1) << 2))
                                 : 0;
}

/// Byte `b` of stage row `row`: its offset within the shared row.
constexpr int swizzled_byte(RowSwizzle s, int row, int b) {
  return b ^ (row_swizzle_mask(s, row) << 4);
}

}  // namespace flashback::cuda

// Where a byte of a K/V stage row sits when the rows are swizzled: whole 128-byte lines without
// padding, 16-byte chunk x of row r stored at chunk x ^ row_swizzle_mask(s, r) of its line, so
// the rows a read takes at once fall in different bank groups and every copy of a row's line
// writes one whole line (decode/config.h, WkLayout::swizzle, says why). Plain constexpr C++: the
// copies (common/paged.cuh), the reads (decode/warp_keys.cuh) and the host tests share this rule.
#pragma once

namespace flashback::cuda {

enum class RowSwizzle {
  kNone,  // padded rows: chunk x at chunk x
  // 16-bit rows read by ldmatrix: an 8 x 8 matrix is 8 rows (from a multiple of 8) of one
  // 16-byte chunk each, so the rows' low three bits pick eight different bank groups.
  kLdsm,
  // fp8 rows of one line (warp_keys.cuh's fp8 reads): K is read as 16-byte pieces by lane quads,
  // chunks 4 q..4 q + 3 of rows r and r + 1 in one 8-lane phase (the mask's bit 2 follows the
  // row's parity, so the two rows take different halves of the line); V as chunk g of rows 2 c +
  // p (c < 4) for lane groups g in {0, 1} (bits 1-2 follow c, bit 0 stays g's).
  kFp8,
};

constexpr int row_swizzle_mask(RowSwizzle s, int row) {
  return s == RowSwizzle::kLdsm  ? (row & 7)
         : s == RowSwizzle::kFp8 ? ((row & 6) ^ ((row & 1) << 2))
                                 : 0;
}

/// Offset within its row of byte `b` of stage row `row` (counted from a multiple of 8 rows):
/// permuted within its 128-byte line when swizzled, else `b` (padded rows).
constexpr int stage_row_byte(RowSwizzle s, int row, int b) {
  return b ^ (row_swizzle_mask(s, row) << 4);
}

}  // namespace flashback::cuda

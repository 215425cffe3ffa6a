// Where a byte of a K/V stage row sits when the rows are swizzled: whole 128-byte lines without
// padding, chunk x (16 bytes) of row r stored at chunk x ^ (r % 8), so the 8 rows an ldmatrix
// phase reads fall in 8 bank groups and every copy of a row's line writes one whole line
// (decode/config.h, WkLayout::swizzle, says why). Plain constexpr C++: the copies
// (common/paged.cuh), the reads (decode/warp_keys.cuh) and the host tests share this one rule.
#pragma once

namespace flashback::cuda {

/// Offset within its row of byte `b` of stage row `row` (counted from a multiple of 8 rows):
/// permuted within its 128-byte line when `swizzled`, else `b` (padded rows).
constexpr int stage_row_byte(bool swizzled, int row, int b) {
  return swizzled ? b ^ ((row & 7) << 4) : b;
}

}  // namespace flashback::cuda

// The swizzled shared-memory layout and the wgmma descriptors of the Hopper kernels
// (src/cuda/common/sw128.h): stepping a descriptor by an offset gives the descriptor of the
// offset address everywhere the kernels use it, and the swizzle is a permutation of each
// 1024-byte group of 8 rows. Plain C++ (label cpu).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "cuda/common/sw128.h"

namespace flashback::cuda {
namespace {

TEST(Sw128, SteppedDescriptorEqualsFreshOne) {
  // Bases: 1024-byte aligned anywhere in the 227 KB a CTA may hold; offsets: 16-byte multiples
  // up to 72 KB (the largest stage); lbo: K-major (16) and the MN-major block strides in use.
  int checked = 0;
  for (uint32_t base = 0; base <= 227 * 1024; base += 1024 * 7)
    for (uint32_t off = 0; off <= 72 * 1024; off += 16 * 13)
      for (uint32_t lbo : {16u, 8192u, 16384u}) {
        if (base + off >= 256 * 1024) continue;  // outside the shared window's 18 address bits
        ASSERT_EQ(sw128_desc_at(sw128_desc_lo(base, lbo), off), sw128_desc(base + off, lbo, 1024))
            << base << " + " << off << ", lbo " << lbo;
        ++checked;
      }
  EXPECT_GT(checked, 10000);
  // The fields: address >> 4 in bits 0-13, lbo >> 4 in 16-29, sbo >> 4 in 32-45, swizzle mode
  // 128 B (1) in 62-63.
  EXPECT_EQ(sw128_desc(0x1230, 8192, 1024),
            0x123ull | (512ull << 16) | (64ull << 32) | (1ull << 62));
}

TEST(Sw128, SwizzleIsAPermutationOfEachGroup) {
  for (int rows : {64, 128}) {
    std::set<int> seen;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < 16; ++c) {  // two 64-column blocks
        const int o = sw128_offset(r, c, rows);
        EXPECT_EQ(o % 16, 0);
        // Chunk c of row r stays in its row's 128 bytes of its block.
        EXPECT_EQ(o / 128, (c / 8) * rows + r) << r << " " << c;
        EXPECT_TRUE(seen.insert(o).second) << "offset " << o << " twice";
      }
    EXPECT_EQ(static_cast<int>(seen.size()), rows * 16);
  }
}

}  // namespace
}  // namespace flashback::cuda

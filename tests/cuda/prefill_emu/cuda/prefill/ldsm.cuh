// CPU emulation stand-in for src/cuda/prefill/ldsm.cuh: ldmatrix .x4 .trans as a warp
// exchange. Lane l receives, of each matrix i (row addresses from lanes 8i..8i+7), the elements
// at rows 2(l%4) and 2(l%4)+1, column l/4 (low half first).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/common/mma.cuh"

namespace flashback::cuda::prefill {

inline void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  struct Out {
    uint32_t v[4];
  };
  const Out o = emu::exchange(p, [](auto get) {
    Out out;
    const int l = emu::lane();
    for (int i = 0; i < 4; ++i) {
      uint16_t lo, hi;
      std::memcpy(&lo, static_cast<const char*>(get(8 * i + 2 * (l % 4))) + 2 * (l / 4), 2);
      std::memcpy(&hi, static_cast<const char*>(get(8 * i + 2 * (l % 4) + 1)) + 2 * (l / 4), 2);
      out.v[i] = uint32_t{lo} | (uint32_t{hi} << 16);
    }
    return out;
  });
  for (int i = 0; i < 4; ++i) r[i] = o.v[i];
}

}  // namespace flashback::cuda::prefill

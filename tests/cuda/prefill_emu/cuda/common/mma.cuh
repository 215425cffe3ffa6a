// CPU emulation stand-in for src/cuda/common/mma.cuh: cp.async as an immediate copy, ldmatrix
// and mma.sync m16n8k16 as warp exchanges with the PTX ISA's fragment layouts.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/common/dtype.cuh"
#include "emu_rt.h"

namespace flashback::cuda {

inline void cp_async16(void* smem, const void* gmem, int src_bytes) {
  if (src_bytes == 16)
    std::memcpy(smem, gmem, 16);
  else
    std::memset(smem, 0, 16);
}
inline void cp_async16_or_zero(void* smem, const void* gmem, bool ok) {
  cp_async16(smem, gmem, ok ? 16 : 0);
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

// ldmatrix .x4: lanes 8i..8i+7 give the row addresses of matrix i; lane l receives row l/4,
// elements 2(l%4) and 2(l%4)+1 of each matrix.
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  struct Out {
    uint32_t v[4];
  };
  const Out o = emu::exchange(p, [](auto get) {
    Out out;
    const int l = emu::lane();
    for (int i = 0; i < 4; ++i)
      std::memcpy(&out.v[i], static_cast<const char*>(get(8 * i + l / 4)) + 4 * (l % 4), 4);
    return out;
  });
  for (int i = 0; i < 4; ++i) r[i] = o.v[i];
}

// D(16x8) += A(16x16, row) B(16x8, col). A: reg 0 rows g / cols 0-7, reg 1 rows g+8 / cols
// 0-7, reg 2 rows g / cols 8-15, reg 3 rows g+8 / cols 8-15, with g = lane/4 and the two
// halves at columns 2(lane%4) and +1. B: b0 rows (k) 2(lane%4)+{0,1}, b1 the same + 8, column
// (n) lane/4. C/D: d0,d1 row g, columns 2(lane%4)+{0,1}; d2,d3 row g+8.
template <typename T>
inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct In {
    uint32_t a[4], b[2];
  };
  struct Out {
    float v[4];
  };
  const In mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  auto half = [](uint32_t w, int h) {
    return to_float<T>(T{static_cast<uint16_t>(h ? w >> 16 : w & 0xffff)});
  };
  const Out o = emu::exchange(mine, [&](auto get) {
    Out out;
    const int l = emu::lane(), g = l / 4, tq = l % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + (e >= 2 ? 8 : 0), col = 2 * tq + (e & 1);
      float sum = 0.f;
      for (int k = 0; k < 16; ++k) {
        const In ia = get((row % 8) * 4 + (k % 8) / 2);
        const float av = half(ia.a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1);
        const In ib = get(col * 4 + (k % 8) / 2);
        const float bv = half(ib.b[k >= 8 ? 1 : 0], k & 1);
        sum += av * bv;
      }
      out.v[e] = sum;
    }
    return out;
  });
  for (int e = 0; e < 4; ++e) d[e] += o.v[e];
}

}  // namespace flashback::cuda

// A CPU stand-in for the CUDA execution model, just enough to run the prefill kernel
// (src/cuda/prefill/kernel.cuh) unmodified on the host: one std::thread per CUDA thread,
// __syncthreads as a CTA barrier, and the warp collectives (shuffles, ldmatrix, mma.sync
// m16n8k16) as exchanges through per-warp slots between two warp barriers, with operand
// fragments placed as the PTX ISA specifies. It lets a machine without a GPU check the kernel's
// tiling, masking, paging, online softmax, FP8 widening and LSE against the oracle; it cannot
// check timing or real tensor-core rounding, which the GPU tests do.
#pragma once

#include <math.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct uint2 {
  uint32_t x, y;
};
struct uint4 {
  uint32_t x, y, z, w;
};
struct int2 {
  int x, y;
};
struct longlong2 {
  long long x, y;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
inline longlong2 make_longlong2(long long x, long long y) { return {x, y}; }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

struct Warp {
  std::barrier<> bar{32};
  alignas(16) unsigned char slot[32][64];
};

struct Cta {
  explicit Cta(int threads) : bar(threads), warps(static_cast<size_t>((threads + 31) / 32)) {
    for (auto& w : warps) w = std::make_unique<Warp>();
  }
  std::barrier<> bar;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local Dim3 thread_idx, block_idx;
inline Dim3 grid_dim;
inline thread_local Cta* cta = nullptr;

inline int lane() { return static_cast<int>(thread_idx.x & 31); }

// Every lane publishes `mine`; `f(get)` computes this lane's result from any lane's value.
template <typename In, typename F>
auto exchange(const In& mine, F&& f) {
  static_assert(sizeof(In) <= 64, "slot too small");
  Warp& w = *cta->warps[thread_idx.x >> 5];
  std::memcpy(w.slot[lane()], &mine, sizeof(In));
  w.bar.arrive_and_wait();
  auto get = [&](int l) {
    In v;
    std::memcpy(&v, w.slot[l], sizeof(In));
    return v;
  };
  auto r = f(get);
  w.bar.arrive_and_wait();
  return r;
}

// Runs kernel(args) over the grid, one CTA at a time, `threads` host threads per CTA.
template <typename K>
void launch(Dim3 grid, int threads, K&& kernel) {
  grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        Cta c(threads);
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&, t] {
            thread_idx = {static_cast<unsigned>(t), 0, 0};
            block_idx = {x, y, z};
            cta = &c;
            kernel();
          });
        for (auto& t : ts) t.join();
      }
}

}  // namespace emu

#define threadIdx emu::thread_idx
#define blockIdx emu::block_idx
#define gridDim emu::grid_dim

inline void __syncthreads() { emu::cta->bar.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  emu::cta->warps[emu::thread_idx.x >> 5]->bar.arrive_and_wait();
}

inline float __shfl_xor_sync(unsigned, float v, int m) {
  return emu::exchange(v, [&](auto get) { return get(emu::lane() ^ m); });
}
inline bool __any_sync(unsigned, bool v) {
  return emu::exchange(v, [&](auto get) {
    bool any = false;
    for (int l = 0; l < 32; ++l) any = any || get(l);
    return any;
  });
}
inline bool __all_sync(unsigned, bool v) {
  return emu::exchange(v, [&](auto get) {
    bool all = true;
    for (int l = 0; l < 32; ++l) all = all && get(l);
    return all;
  });
}

using std::max;
using std::min;

// The plain parameter struct and work items shared by the fast CPU attention driver
// (attention.cc: plans work, runs threads) and its SIMD kernels (attention_kernel.cc: one
// Highway target each). Paged and ragged attention differ only in where key t's K/V rows live.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "flashback/tensor.h"

namespace flashback::cpu_fast {

/// std::allocator with cache-line (64-byte) alignment, for the kernels' fp32 scratch: their rows
/// are read with full-width vector loads (often as FMA memory operands), and a load that
/// straddles two lines costs about twice as much. With malloc's 16-byte alignment a thread's
/// q rows sat at 16 bytes past a line in some runs, which made the decode score loop ~20 %
/// slower on Zen 3 (PERFORMANCE_CPU.md, session 18).
template <class T>
struct LineAllocator {
  using value_type = T;
  static constexpr std::size_t kAlign = 64;
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    const std::size_t bytes = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, bytes == 0 ? kAlign : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const LineAllocator<U>&) const noexcept {
    return true;
  }
};

/// A vector whose data starts on a cache line (LineAllocator).
template <class T>
using LineVector = std::vector<T, LineAllocator<T>>;

/// Keys per tile: K/V rows are converted to fp32 and scored this many at a time.
inline constexpr int64_t kTileKeys = 32;
/// Keys per split. Fixed (never derived from thread count or batch), so a request's result bits
/// are the same whether its splits run on one thread or many, alone or in a big batch.
inline constexpr int64_t kSplitKeys = 512;
/// Rows (q token × q head of one KV group) scored together against each K/V tile.
inline constexpr int64_t kMaxRows = 64;
/// fp32 buffers are padded to a multiple of this (the widest vector, AVX-512).
inline constexpr int64_t kPad = 16;

inline int64_t pad(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

struct AttnArgs {
  // q [tokens, Hq, D] (+ qv [tokens, Hq, Dqv] for MLA), element strides of token and head.
  const void* q = nullptr;
  const void* qv = nullptr;
  DType q_dtype = DType::kF32;
  int64_t q_s0 = 0, q_s1 = 0, qv_s0 = 0, qv_s1 = 0;
  int64_t head_dim = 0, head_dim_qv = 0, head_dim_v = 0;
  int64_t group = 1;  // q heads per KV head

  // K/V: element offset of (slot, head) = slot_offset(slot) + head * s_head.
  const void* k = nullptr;
  const void* v = nullptr;
  DType kv_dtype = DType::kF32;
  bool paged = true;    // false: ragged contiguous K/V, slot = cu_seqlens_k[b] + t
  bool four_d = false;  // paged cache as [pages, P, H, D]
  int64_t page_size = 1;
  int64_t k_s0 = 0, k_s1 = 0, k_head = 0, v_s0 = 0, v_s1 = 0, v_head = 0;
  const int32_t* table = nullptr;
  int64_t table_s0 = 0, table_s1 = 0;
  bool table_holds_slots = false;

  const float* k_descale = nullptr;  // [B, Hk] with strides; nullptr = 1
  const float* v_descale = nullptr;
  int64_t kd_s0 = 0, kd_s1 = 0, vd_s0 = 0, vd_s1 = 0;

  bool causal = true;
  int window_left = -1, window_right = -1;
  float softcap = 0, scale = 1;

  void* out = nullptr;
  DType out_dtype = DType::kF32;
  int64_t out_s0 = 0, out_s1 = 0;
  float* lse = nullptr;  // nullptr = not requested
  int64_t lse_s0 = 0, lse_s1 = 0;
};

/// One work item: KV heads [g, g + ng) × `nt` consecutive q tokens × `nh` consecutive q heads
/// of each KV head's group, of batch entry `b`, over the key splits [split_lo, split_hi) that
/// some of its rows can see. Row r = (gi · nt + ti) · nh + hi.
struct Task {
  int64_t b = 0, g = 0, ng = 1, h0 = 0, nh = 0, t0 = 0, nt = 0;
  int64_t q0 = 0, q_len = 0, kv_len = 0;
  int64_t kv_start = 0;   // paged: first key position; ragged: first key row
  int64_t table_row = 0;  // paged only
  int64_t split_lo = 0, split_hi = 0;
  int64_t rows() const { return ng * nt * nh; }
};

/// Floats of one partial state (m, l and the unnormalised output per row).
inline int64_t state_floats(const AttnArgs& a) { return kMaxRows * (2 + pad(a.head_dim_v)); }

/// Element offsets of key positions [t0, t0 + n) of task `t` in K and V, at KV head t.g.
void key_offsets(const AttnArgs& a, const Task& t, int64_t t0, int64_t n, int64_t* k_off,
                 int64_t* v_off);

// SIMD kernels (attention_kernel.cc), dispatched to the best target at run time.
/// Asked before each split of a range but its first: false ends the range there (another
/// thread has taken the rest). Empty: the whole range runs.
struct SplitClaim {
  bool (*take)(void* ctx) = nullptr;
  void* ctx = nullptr;
  bool operator()() const { return take == nullptr || take(ctx); }
};
/// Runs splits [s_lo, s_hi) of `t`, merged in order into `state` (starts empty); or, with
/// `stride` > 0, split s's own state to state + (s - s_lo) · stride (empty where it sees no
/// key). Within the range a split's last tile prefetches the next split's first one. With
/// `claim` (stride > 0 only) the range may end early, at the first split it refuses.
void run_splits(const AttnArgs& a, const Task& t, int64_t s_lo, int64_t s_hi, float* state,
                int64_t stride = 0, SplitClaim claim = {});
/// Merges `n` states in order and writes the task's out / lse rows.
void finish(const AttnArgs& a, const Task& t, const float* states, int64_t n);
/// n elements of dtype dt at src as fp32 into dst, as the kernels convert K/V rows (SIMD, on the
/// dispatched target); for tests.
void widen_row(const void* src, DType dt, int64_t n, float* dst);
/// n fp8 values (dt e4m3 or e5m2; n a multiple of 16) as bf16 bits, as decode stages fp8 K/V
/// tiles; for tests.
void fp8_row_to_bf16(const uint8_t* src, DType dt, int64_t n, uint16_t* dst);

}  // namespace flashback::cpu_fast

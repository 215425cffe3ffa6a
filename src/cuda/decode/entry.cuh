// What every short-query CTA works out first, shared by the two kernel shapes (kernel.cuh:
// warps split the output columns; warp_keys.cuh: warps split the keys): its entry, its rows,
// and the slice of keys its split covers.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/dtype.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/visible.cuh"
#include "cuda/decode/params.h"
#include "cuda/plan/split_plan.h"

namespace flashback::cuda {

struct DecodeEntry {
  int q0, q_len, kv_len, start, trow;
  int rows_total, row0;  // (query, head-in-group) rows of the entry; the CTA's first
  int g;                 // KV head
  int begin, end;        // this split's keys [begin, end)
  float kd, vd;          // descales (1 without)
  int split;

  // Row r of the entry as (token, q head).
  __device__ __forceinline__ int token(const DecodeParams& p, int r) const {
    return q0 + r / p.group;
  }
  __device__ __forceinline__ int head(const DecodeParams& p, int r) const {
    return g * p.group + r % p.group;
  }
};

/// The keys some query of an entry sees: the union of its q_len queries' visible ranges (the
/// first query's lower bound, the last one's upper bound).
__device__ __forceinline__ KeyRange entry_keys(const DecodeParams& p, int q_len, int kv_len) {
  return {visible_keys(p, 0, q_len, kv_len).lo, visible_keys(p, q_len - 1, q_len, kv_len).hi};
}

/// How many keys some query of entry b sees (0 for an empty or over-long entry).
__device__ __forceinline__ int entry_range(const DecodeParams& p, int b) {
  const int q0 = p.cu_q[b * p.cu_q_s], ql = p.cu_q[(b + 1) * p.cu_q_s] - q0;
  if (ql <= 0 || ql > p.max_q) return 0;
  const KeyRange r = entry_keys(p, ql, p.seqlens[b * p.seqlens_s]);
  return r.hi >= r.lo ? r.hi - r.lo + 1 : 0;
}

/// Longest-first order (DecodeParams::longest_first): the entry of rank z when the batch is
/// ordered by visible keys, most first (ties by index). When the grid is deeper than the SMs'
/// slots, the long entries then start first and the last wave is short ones (list scheduling,
/// longest processing time first), instead of a long entry that happened to come late running
/// alone at the end. Every CTA ranks the batch itself (one round of loads, a count in shared
/// memory over at most kLongestFirstMax entries), before its K/V pipeline starts. `keys`:
/// kLongestFirstMax words of shared scratch, free until the CTA's own copies begin.
__device__ __forceinline__ int longest_first_entry(const DecodeParams& p, int z, uint32_t* keys) {
  __shared__ int pick;  // counted in config.h's WkLayout::static_bytes
  static_assert(kLongestFirstMax <= 256, "the index part of the keys (255 - i) fits a byte");
  const int n = p.batch;
  // Unique keys: range above, 255 - index in the low byte (ties go to the lower index).
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
    keys[i] = (static_cast<uint32_t>(min(entry_range(p, i), (1 << 23) - 1)) << 8) |
              static_cast<uint32_t>(255 - i);
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    const uint32_t k = keys[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += keys[j] > k ? 1 : 0;
    if (rank == z) pick = i;
  }
  __syncthreads();
  return pick;
}

/// Fills `e` for this CTA (grid: split x (KV head, row block) x entry b: blockIdx.z unless the
/// kernel orders entries otherwise). Returns false when the CTA has nothing to do. Splits cover
/// ceil(range / splits) keys rounded up to the tile size N (or p.split_chunk keys in the
/// deterministic mode). An entry longer than the grid's max_q is outside the kernel's contract: its
/// output is made NaN (loud) rather than left stale. Every thread of every decode kernel passes
/// here first, so this is where the grid lets its dependent launch (the combine) start.
template <typename T, int DV, int ROWS, int N>
__device__ __forceinline__ bool load_entry(const DecodeParams& p, DecodeEntry& e,
                                           int b = static_cast<int>(blockIdx.z)) {
  if (p.use_workspace) pdl_launch_dependents();  // the split combine (combine.cu) may start
  e.split = blockIdx.x;
  e.g = blockIdx.y / p.row_blocks;
  const int rb = blockIdx.y % p.row_blocks;
  e.q0 = p.cu_q[b * p.cu_q_s];
  e.q_len = p.cu_q[(b + 1) * p.cu_q_s] - e.q0;
  e.kv_len = p.seqlens[b * p.seqlens_s];
  e.start = p.kv_start ? p.kv_start[b * p.kv_start_s] : 0;
  e.trow = p.table_rows ? p.table_rows[b * p.table_rows_s] : b;
  if (e.q_len <= 0) return false;
  e.rows_total = e.q_len * p.group;
  e.row0 = rb * ROWS;
  if (e.q_len > p.max_q) {
    if (e.split == 0 && rb == 0) {
      for (int i = threadIdx.x; i < e.rows_total * DV; i += blockDim.x) {
        const int r = i / DV, c = i % DV;
        const int tok = e.token(p, r), head = e.head(p, r);
        static_cast<T*>(p.out)[tok * p.out_st + head * p.out_sh + c] = from_float<T>(NAN);
        if (c == 0 && p.lse) p.lse[tok * p.lse_st + head * p.lse_sh] = NAN;
        // With splits the combine writes every row afterwards: a NaN split-0 LSE tells it to
        // write NaN too (it would otherwise merge workspace rows no split wrote).
        if (c == 0 && p.use_workspace) p.ws_lse[static_cast<int64_t>(tok) * p.heads_q + head] = NAN;
      }
    }
    return false;
  }
  if (e.row0 >= e.rows_total) return false;

  // This split's keys: a slice of the union of the entry's visible ranges.
  e.begin = e.end = 0;
  const KeyRange keys = entry_keys(p, e.q_len, e.kv_len);
  const int lo = keys.lo, hi = keys.hi;
  if (hi >= lo) {
    const int range = hi - lo + 1;
    int chunk = p.split_chunk;
    if (chunk <= 0) chunk = ((range + p.num_splits - 1) / p.num_splits + N - 1) / N * N;
    const int64_t b0 = lo + static_cast<int64_t>(e.split) * chunk;
    if (b0 <= hi) {
      e.begin = static_cast<int>(b0);
      e.end = min(hi + 1, e.begin + chunk);
    }
  }
  e.kd = p.k_descale ? p.k_descale[b * p.kd_s0 + e.g * p.kd_s1] : 1.0f;
  e.vd = p.v_descale ? p.v_descale[b * p.vd_s0 + e.g * p.vd_s1] : 1.0f;
  return true;
}

/// The CTA's ROWS x W slice of q (or qv) held as 16-byte chunks in registers, IT per thread.
/// Every load is issued before any is used, so the slice costs one memory latency; the first
/// form (one element per iteration, stored before the next load) paid one per element a thread
/// owned, 16 for a full 16-row block, which made the verify kernel ~10 % slower than decode on
/// the same bytes (docs/PERFORMANCE_GPU.md, session 6). Rows past the entry are zeros; a row
/// whose address is not 16-byte aligned (odd strides) is read element by element.
template <typename T, int ROWS, int W, int THREADS>
struct RowChunks {
  static constexpr int V = 16 / static_cast<int>(sizeof(T));  // elements per chunk
  static constexpr int CPR = W / V, CH = ROWS * CPR, IT = (CH + THREADS - 1) / THREADS;
  static_assert(W % V == 0, "rows of whole 16-byte chunks");
  uint4 v[IT];

  // Chunk k of this thread: row r (block-relative), first element d; false past the slice.
  static __device__ __forceinline__ bool at(int k, int& r, int& d) {
    const int c = static_cast<int>(threadIdx.x) + k * THREADS;
    r = c / CPR;
    d = (c % CPR) * V;
    return CH % THREADS == 0 || c < CH;
  }
  __device__ __forceinline__ void load(const DecodeParams& p, const DecodeEntry& e, const T* src,
                                       int64_t st, int64_t sh) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      int r, d;
      v[k] = make_uint4(0, 0, 0, 0);
      if (!at(k, r, d) || e.row0 + r >= e.rows_total) continue;
      const int gr = e.row0 + r;
      const T* row = src + e.token(p, gr) * st + e.head(p, gr) * sh + d;
      if ((reinterpret_cast<uintptr_t>(row) & 15) == 0) {
        v[k] = *reinterpret_cast<const uint4*>(row);
      } else {
        uint32_t w[4];
#pragma unroll
        for (int h = 0; h < 4; ++h) w[h] = pack2<T>(to_float(row[2 * h]), to_float(row[2 * h + 1]));
        v[k] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }
  // Into shared memory at `dst`, row pitch P elements (16-byte aligned rows).
  template <int P>
  __device__ __forceinline__ void store(T* dst) const {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      int r, d;
      if (at(k, r, d)) *reinterpret_cast<uint4*>(dst + r * P + d) = v[k];
    }
  }
};

/// The CTA's ROWS x W slice of q (or qv) into shared memory (pitch P); rows past the entry are
/// zeros.
template <typename T, int ROWS, int W, int P, int THREADS>
__device__ __forceinline__ void load_rows(const DecodeParams& p, const DecodeEntry& e, const T* src,
                                          int64_t st, int64_t sh, T* dst) {
  static_assert((P * sizeof(T)) % 16 == 0, "16-byte aligned shared rows");
  RowChunks<T, ROWS, W, THREADS> rows;
  rows.load(p, e, src, st, sh);
  rows.template store<P>(dst);
}

/// Points a K/V pipeline (common/paged.cuh) at this CTA's entry: its page-table row, KV head g
/// of both caches, and its split's keys.
template <typename Pipe>
__device__ __forceinline__ void bind_kv(Pipe& kv, const DecodeParams& p, const DecodeEntry& e,
                                        KeyBytes* loc, unsigned char* stages) {
  kv.walk.paged(p.table + static_cast<int64_t>(e.trow) * p.table_s0, p.table_s1, e.start,
                p.table_holds_slots, p.page_size);
  kv.bind(loc, stages, p.k, p.k_sh, p.v, p.v_sh, e.g);
  kv.set_range(e.begin, e.end);
}

}  // namespace flashback::cuda

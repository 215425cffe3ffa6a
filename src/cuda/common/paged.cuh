// Where the keys of a K/V tile live, shared by the short- and long-query kernels.
//
// A tile's copy is issued as many 16-byte chunks per key (a 128-wide bf16 K/V pair is 32). The
// first kernels walked the page table for every chunk: a dependent table read plus a runtime
// division by the page size per 16 bytes made them issue-bound at ~0.9 TB/s (ncu on the H200:
// ~120 instructions per chunk, 0.37 issued warps per scheduler). Here one thread per key reads
// the table once, a tile ahead, and publishes the key's K and V byte offsets to shared memory;
// the copy loop then costs a shared load, a 64-bit add and the copy per chunk (~12-20 SASS
// instructions). Power-of-two page sizes (all the common ones) use shifts; others divide, once
// per key.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mma.cuh"
#include "cuda/common/row_swizzle.h"

namespace flashback::cuda {

/// Location of one key: row `page` of the cache's page axis, `off` within it; page < 0 marks a
/// key past the range (its chunks are zero-filled, never read).
using KeyLoc = int2;

struct PageWalk {
  const int32_t* row = nullptr;   // the entry's page-table (or slot-table) row; null: ragged
  int64_t s1 = 0;                 // table stride between columns
  int start = 0;                  // table position of entry-relative key 0 (kv_start)
  int page_size = 1, shift = -1;  // shift >= 0 iff page_size is a power of two
  bool slots = false;             // the row holds slot ids, one per position
  int krow0 = 0;                  // ragged: key t is row krow0 + t

  /// Keys through a page-table row (page ids, or slot ids when `holds_slots`).
  __device__ __forceinline__ void paged(const int32_t* table_row, int64_t stride, int first_pos,
                                        bool holds_slots, int ps) {
    row = table_row;
    s1 = stride;
    start = first_pos;
    slots = holds_slots;
    set_page_size(ps);
  }
  __device__ __forceinline__ void set_page_size(int ps) {
    page_size = ps;
    shift = (ps & (ps - 1)) == 0 ? __ffs(ps) - 1 : -1;
  }
  __device__ __forceinline__ int div(int x) const {
    return shift >= 0 ? x >> shift : x / page_size;
  }
  __device__ __forceinline__ int mod(int x) const {
    return shift >= 0 ? x & (page_size - 1) : x % page_size;
  }
  /// The table read for key t (independent of everything else, so it can be issued early).
  __device__ __forceinline__ int32_t read(int t) const {
    if (!row) return 0;
    const int pos = start + t;
    return __ldg(row + static_cast<int64_t>(slots ? pos : div(pos)) * s1);
  }
  /// Key t's location from its table read.
  __device__ __forceinline__ KeyLoc locate(int32_t entry, int t) const {
    if (!row) return make_int2(krow0 + t, 0);
    if (slots) return make_int2(div(entry), mod(entry));
    return make_int2(entry, mod(start + t));
  }
};

/// Byte offsets of one key's K and V rows from the (head-offset) cache bases; k < 0 marks a key
/// past the range (zero-filled, never read). Computed once per key, so the 64-bit stride
/// arithmetic is not repeated for each of the row's chunks.
using KeyBytes = longlong2;

__device__ __forceinline__ KeyBytes key_bytes(KeyLoc l, int64_t k_sp, int64_t k_so, int64_t v_sp,
                                              int64_t v_so, int eb) {
  return make_longlong2((static_cast<int64_t>(l.x) * k_sp + static_cast<int64_t>(l.y) * k_so) * eb,
                        (static_cast<int64_t>(l.x) * v_sp + static_cast<int64_t>(l.y) * v_so) * eb);
}
__device__ __forceinline__ KeyBytes no_key() { return make_longlong2(-1, -1); }

/// Issues the 16-byte copies of keys [0, N) of one tile: K rows (CK chunks each, row pitch
/// KRAW bytes) then V rows (CV chunks, pitch VRAW), keys located by `at`. Consecutive threads
/// take consecutive chunks of a key, so each warp's copy is coalesced; when the thread count
/// is a multiple of the chunks per key, a thread keeps one chunk column for the whole tile.
template <int N, int CK, int CV, int KRAW, int VRAW, int THREADS>
__device__ __forceinline__ void copy_tile(unsigned char* dst0, const KeyBytes* at,
                                          const unsigned char* kbase, const unsigned char* vbase) {
  constexpr int C = CK + CV;
  if constexpr (THREADS % C == 0) {
    const int ch = threadIdx.x % C;
    const bool is_k = ch < CK;
    const unsigned char* src0 = is_k ? kbase + ch * 16 : vbase + (ch - CK) * 16;
    unsigned char* dst = dst0 + (is_k ? ch * 16 : N * KRAW + (ch - CK) * 16);
    const int pitch = is_k ? KRAW : VRAW;
#pragma unroll
    for (int it = 0; it < N * C / THREADS; ++it) {
      const int key = threadIdx.x / C + it * (THREADS / C);
      const int64_t off = is_k ? at[key].x : at[key].y;
      cp_async16_or_zero(dst + key * pitch, src0 + off, off >= 0);
    }
  } else {
#pragma unroll
    for (int it = 0; it < (N * C + THREADS - 1) / THREADS; ++it) {
      const int c = threadIdx.x + it * THREADS;
      if ((N * C) % THREADS != 0 && c >= N * C) break;
      const int key = c / C, ch = c % C;
      const bool is_k = ch < CK;
      const int64_t off = is_k ? at[key].x : at[key].y;
      unsigned char* dst =
          is_k ? dst0 + key * KRAW + ch * 16 : dst0 + N * KRAW + key * VRAW + (ch - CK) * 16;
      const unsigned char* src = is_k ? kbase + ch * 16 : vbase + (ch - CK) * 16;
      cp_async16_or_zero(dst, src + off, off >= 0);
    }
  }
}

// Lanes that share one key row in each copy instruction of copy_keys_warp (FLASHBACK_WK_LPK
// overrides it, for A/B builds): the largest of 8, 4, 2, 1 dividing both rows' chunk counts. On
// the H200 (docs/PERFORMANCE_GPU.md, session 12) the copies want few lines per instruction: 2
// lanes per key (16 lines) made bf16 decode 1.5x slower, 4 lanes (8 lines) ~1.09x, 16 lanes
// (2 rows of 256 bytes, 8 offsets per lane) ~1.007x, against 8 (4 lines).
#ifndef FLASHBACK_WK_LPK
#define FLASHBACK_WK_LPK 8
#endif
constexpr int lanes_per_key(int ck, int cv) {
  int l = FLASHBACK_WK_LPK;
  while (l > 1 && (ck % l != 0 || cv % l != 0)) l /= 2;
  return l;
}

/// Issues the 16-byte copies of NW keys (one warp's): K rows of CK chunks to k_dst (pitch KRAW),
/// V rows of CV chunks to v_dst (pitch VRAW), key i's K and V rows at the absolute addresses
/// at[i] (KvPipeline::publish writes them). LPK lanes share a key: each copy instruction moves
/// LPK contiguous chunks of each of 32 / LPK rows, so it stays coalesced, and a lane reads each
/// of its NW LPK / 32 keys' addresses once, then issues all of that key's chunks at constant
/// offsets from them. (The first form spread one key over all 32 lanes per instruction: one
/// shared load, a 64-bit add and a predicate per chunk, about ten instructions per 16 bytes.) A
/// key past the range has bit 63 of its V address set and reads nothing: src-size 0 zero-fills
/// its chunks, from the head's base addresses. SWZ other than kNone: the stage rows are
/// whole 128-byte lines without padding, and chunk x of row r lands at chunk x ^ mask(r) of its
/// line (r counts from the warp's first key, a multiple of 8; common/row_swizzle.h), so every
/// copy writes whole lines (decode/config.h, WkLayout::swizzle, says why).
template <int NW, int CK, int CV, int KRAW, int VRAW, RowSwizzle SWZ = RowSwizzle::kNone>
__device__ __forceinline__ void copy_keys_warp(unsigned char* k_dst, unsigned char* v_dst,
                                               const KeyBytes* at, int lane) {
  constexpr int LPK = lanes_per_key(CK, CV), KPI = 32 / LPK;  // lanes per key, keys per copy
  static_assert(NW % KPI == 0, "whole rounds of keys per lane");
  static_assert(SWZ == RowSwizzle::kNone || (NW % 8 == 0 && KRAW % 128 == 0 && VRAW % 128 == 0),
                "swizzled rows are whole 128-byte lines, 8 rows per mask period");
  const int c = lane % LPK;
#pragma unroll
  for (int m = 0; m < NW / KPI; ++m) {
    const int key = lane / LPK + m * KPI;
    const KeyBytes src = at[key];
    const int bytes = src.y >= 0 ? 16 : 0;
    const unsigned char* ks = reinterpret_cast<const unsigned char*>(src.x) + c * 16;
    const unsigned char* vs = reinterpret_cast<const unsigned char*>(src.y & INT64_MAX) + c * 16;
    unsigned char* kd = k_dst + key * KRAW;
    unsigned char* vd = v_dst + key * VRAW;
#pragma unroll
    for (int i = 0; i < CK / LPK; ++i)
      cp_async16(kd + stage_row_byte(SWZ, key, (c + i * LPK) * 16), ks + i * LPK * 16, bytes);
#pragma unroll
    for (int i = 0; i < CV / LPK; ++i)
      cp_async16(vd + stage_row_byte(SWZ, key, (c + i * LPK) * 16), vs + i * LPK * 16, bytes);
  }
}

/// A kernel's K/V tile pipeline: STAGES shared-memory stages of N keys over keys [first, end).
/// Each key of a tile has an owner thread that reads the key's table entry one tile ahead and
/// publishes the key's byte offsets into the tile's slot of `loc` at the end of an iteration,
/// so the next iteration's copies find them after the pipeline's barrier. Two ownerships:
///   NW = 0: the CTA shares every tile. Thread k < N owns key k; all threads copy the tile, and
///     the barrier is __syncthreads.
///   NW > 0: warp w reads only its own NW keys [w NW, w NW + NW) of a tile (the warps-split-keys
///     decode kernel). Lane l < NW owns key w NW + l, the warp copies its own keys, and the
///     barrier is __syncwarp: no barrier across warps (with one resident CTA a __syncthreads per
///     tile stalled every warp on the SM, docs/PERFORMANCE_GPU.md session 6).
/// Per tile j the kernel does:
///   cp_async_wait<STAGES - 2>(); sync(); advance(j); ...compute on stage(j)...; retire(p, j);
/// The cache strides are read from the kernel's params `p` (any struct with k_sp, k_so, v_sp,
/// v_so) where they are used, not kept in registers: the prefill kernel runs at 255.
template <int N, int CK, int CV, int KRAW, int VRAW, int THREADS, int STAGES, int STAGE_BYTES,
          int EB, int NW = 0, RowSwizzle SWZ = RowSwizzle::kNone>
struct KvPipeline {
  static_assert(NW == 0 || (NW <= 32 && THREADS / 32 * NW == N),
                "per-warp ownership: every warp owns NW <= 32 keys of the tile");
  static_assert(NW > 0 || SWZ == RowSwizzle::kNone,
                "swizzled rows: per-warp copies only (copy_keys_warp)");
  PageWalk walk;
  KeyBytes* loc = nullptr;                                 // [STAGES][N], shared
  unsigned char* stages = nullptr;                         // [STAGES][STAGE_BYTES], shared
  const unsigned char *kbase = nullptr, *vbase = nullptr;  // cache bases at the KV head
  int first = 0, end = 0, ntiles = 0;
  int32_t ahead = 0;

  /// Shared buffers, and the caches at KV head g (head strides in elements).
  __device__ __forceinline__ void bind(KeyBytes* loc_buf, unsigned char* stage_buf, const void* k,
                                       int64_t k_sh, const void* v, int64_t v_sh, int g) {
    loc = loc_buf;
    stages = stage_buf;
    kbase = static_cast<const unsigned char*>(k) + g * k_sh * EB;
    vbase = static_cast<const unsigned char*>(v) + g * v_sh * EB;
  }
  __device__ __forceinline__ void set_range(int first_key, int end_key) {
    first = first_key;
    end = end_key;
    ntiles = end > first ? (end - first + N - 1) / N : 0;
  }
  __device__ __forceinline__ unsigned char* stage(int tile) const {
    return stages + (tile % STAGES) * STAGE_BYTES;
  }
  /// The pipeline's barrier: the copies this thread waited for, and the key offsets, are then
  /// visible to every thread that reads them.
  static __device__ __forceinline__ void sync() {
    if constexpr (NW > 0)
      __syncwarp();
    else
      __syncthreads();
  }
  /// Whether this thread owns a key of each tile, and which (tile-relative).
  static __device__ __forceinline__ bool owns() {
    if constexpr (NW > 0) return (threadIdx.x & 31) < NW;
    return threadIdx.x < N;
  }
  static __device__ __forceinline__ int owned() {
    if constexpr (NW > 0) return static_cast<int>((threadIdx.x >> 5) * NW + (threadIdx.x & 31));
    return static_cast<int>(threadIdx.x);
  }
  __device__ __forceinline__ int key_of(int tile) const { return first + tile * N + owned(); }
  __device__ __forceinline__ int32_t fetch(int tile) const {
    return owns() && key_of(tile) < end ? walk.read(key_of(tile)) : 0;
  }
  template <typename P>
  __device__ __forceinline__ void publish(const P& p, int tile, int32_t entry) {
    if (!owns()) return;
    const bool in = key_of(tile) < end;
    const KeyBytes off =
        in ? key_bytes(walk.locate(entry, key_of(tile)), p.k_sp, p.k_so, p.v_sp, p.v_so, EB)
           : no_key();
    if constexpr (NW > 0) {
      // Per-warp copies take absolute addresses (one add per chunk, no selects); a key past the
      // range points at the cache bases with bit 63 of V's set (copy_keys_warp: src-size 0).
      const int64_t k = reinterpret_cast<int64_t>(kbase) + (in ? off.x : 0);
      const int64_t v = reinterpret_cast<int64_t>(vbase) + (in ? off.y : 0);
      loc[(tile % STAGES) * N + owned()] = make_longlong2(k, in ? v : (v | INT64_MIN));
    } else {
      loc[(tile % STAGES) * N + owned()] = off;
    }
  }
  __device__ __forceinline__ void copy(int tile) {
    unsigned char* st = stage(tile);
    const KeyBytes* at = loc + (tile % STAGES) * N;
    if constexpr (NW > 0) {
      const int w0 = static_cast<int>(threadIdx.x >> 5) * NW;  // the warp's first key
      copy_keys_warp<NW, CK, CV, KRAW, VRAW, SWZ>(st + w0 * KRAW, st + N * KRAW + w0 * VRAW,
                                                  at + w0, static_cast<int>(threadIdx.x & 31));
    } else {
      copy_tile<N, CK, CV, KRAW, VRAW, THREADS>(st, at, kbase, vbase);
    }
  }
  /// Tiles [0, STAGES - 1) located and their copies issued, one commit group each (cp.async
  /// the caller issued before joins tile 0's group); tile STAGES - 1 located.
  template <typename P>
  __device__ __forceinline__ void prologue(const P& p) {
    int32_t e[STAGES - 1];
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) e[s] = s < ntiles ? fetch(s) : 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) publish(p, s, e[s]);
    sync();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < ntiles) copy(s);
      cp_async_commit();
    }
    if (STAGES - 1 < ntiles) {
      ahead = fetch(STAGES - 1);
      publish(p, STAGES - 1, ahead);
    }
  }
  /// Iteration j: this thread's copies of tile j have landed (the barrier, sync(), follows).
  __device__ __forceinline__ void wait(int) const { cp_async_wait<STAGES - 2>(); }
  /// Iteration j, after its barrier: copy tile j + STAGES - 1, read tile j + STAGES's entry.
  template <typename P>
  __device__ __forceinline__ void advance(const P&, int j) {
    advance(j);
  }
  __device__ __forceinline__ void advance(int j) {
    if (j + STAGES - 1 < ntiles) copy(j + STAGES - 1);
    cp_async_commit();
    if (j + STAGES < ntiles) ahead = fetch(j + STAGES);
  }
  /// End of iteration j: publish tile j + STAGES's location (into tile j's slot, whose copy
  /// was issued STAGES - 1 iterations ago).
  template <typename P>
  __device__ __forceinline__ void retire(const P& p, int j) {
    if (j + STAGES < ntiles) publish(p, j + STAGES, ahead);
  }
};

}  // namespace flashback::cuda

// A per-warp K/V tile pipeline whose copies are one bulk copy per key row (sm_90's
// cp.async.bulk: the copy engine moves a contiguous run of bytes global -> shared and completes
// it on an mbarrier by bytes), for kernels whose warps read only their own keys of a tile (the
// warps-split-keys decode kernel).
//
// Against paged.cuh's KvPipeline with per-warp ownership (NW > 0), which issues 16-byte cp.async
// chunks (a 256-wide bf16 K/V pair is 64 per key, 32 per lane per tile, ~12 instructions each
// with the key offsets going through shared memory), a key's owner lane here locates its key and
// issues two instructions, its K row and its V row, and no key offset goes through shared
// memory. Every key, on any page size, slot table or ragged layout, is one row of D (K) and DV
// (V) elements contiguous in the cache, so this needs no tensor map and no page alignment.
//
// The copy engine takes small copies at a bounded rate, so this pays only for long rows
// (`use_key_rows`). On the H200 (docs/PERFORMANCE_GPU.md, session 11), against cp.async: head
// dim 256 (512-byte rows) 11 % faster; head dim 128 bf16 (256-byte rows) 1-7 % slower, fp8
// (128-byte rows) 35 % slower (~17 G copies/s over the GPU whatever their size), and with only K
// by bulk copy and V by cp.async still 1-4 % and 23 % slower.
//
// Keys past the range copy nothing: their K rows stay stale (their logits are masked to -inf,
// which replaces a NaN too) and their V rows are zeroed by the owner lane (0 * a stale NaN would
// poison the output). A first form copied a row of zeros from global memory instead: every such
// copy read the same line, and cross_b64_enc1601 (1601 keys: a nearly empty last tile per CTA)
// ran 1.8x slower.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/tma.cuh"

namespace flashback::cuda {

/// Whether rows of `k_bytes` (K) and `v_bytes` (V) go by bulk copy (see above) where the device
/// code has it.
constexpr bool use_key_rows(int k_bytes, int v_bytes) { return k_bytes >= 512 && v_bytes >= 512; }

/// STAGES shared-memory stages of N keys over keys [first, end); warp w owns keys [w NW, w NW +
/// NW) of every tile and lane l < NW of it owns key w NW + l: it reads the key's table entry one
/// tile ahead and, when the tile's stage is free, issues the key's K row (KB bytes, to pitch
/// KRAW) and V row (VB bytes, pitch VRAW). Each warp has one mbarrier per stage (the NW owners
/// arrive, each with its key's bytes); tile j of the warp's keys has landed when stage
/// j % STAGES's barrier completes phase j / STAGES. Per tile j the kernel does:
///   wait(j); sync(); advance(p, j); ...compute on stage(j)...; retire(p, j);
/// as with KvPipeline, so a kernel takes either.
template <int N, int KB, int VB, int KRAW, int VRAW, int STAGES, int STAGE_BYTES, int EB, int NW>
struct KeyRowPipeline {
  static_assert(NW >= 1 && NW <= 32 && N % NW == 0, "every warp owns NW <= 32 keys of a tile");
  static_assert(KB % 16 == 0 && VB % 16 == 0 && KRAW % 16 == 0 && VRAW % 16 == 0,
                "bulk copies move whole 16-byte aligned rows");

  PageWalk walk;
  uint32_t bars = 0;                                       // this warp's first barrier
  unsigned char* stages = nullptr;                         // [STAGES][STAGE_BYTES], shared
  const unsigned char *kbase = nullptr, *vbase = nullptr;  // cache bases at the KV head
  int first = 0, end = 0, ntiles = 0;
  int32_t ahead = 0;

  static __device__ __forceinline__ int lane() { return static_cast<int>(threadIdx.x & 31); }
  static __device__ __forceinline__ int owned() {
    return static_cast<int>(threadIdx.x >> 5) * NW + lane();
  }
  static __device__ __forceinline__ bool owns() { return lane() < NW; }

  /// Shared buffers (`bar_buf`: an 8-byte mbarrier per warp and stage), and the caches at KV head g
  /// (head strides in elements). Initialises this warp's barriers (lane 0), then __syncwarp.
  __device__ __forceinline__ void bind(void* bar_buf, unsigned char* stage_buf, const void* k,
                                       int64_t k_sh, const void* v, int64_t v_sh, int g) {
    bars = smem_addr(bar_buf) + static_cast<uint32_t>(threadIdx.x >> 5) * STAGES * 8;
    stages = stage_buf;
    kbase = static_cast<const unsigned char*>(k) + g * k_sh * EB;
    vbase = static_cast<const unsigned char*>(v) + g * v_sh * EB;
    if (lane() == 0) {
      for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, NW);
      fence_mbar_init();
    }
    __syncwarp();
  }
  __device__ __forceinline__ void set_range(int first_key, int end_key) {
    first = first_key;
    end = end_key;
    ntiles = end > first ? (end - first + N - 1) / N : 0;
  }
  __device__ __forceinline__ unsigned char* stage(int tile) const {
    return stages + (tile % STAGES) * STAGE_BYTES;
  }
  static __device__ __forceinline__ void sync() { __syncwarp(); }

  __device__ __forceinline__ int key_of(int tile) const { return first + tile * N + owned(); }
  __device__ __forceinline__ int32_t fetch(int tile) const {
    return owns() && key_of(tile) < end ? walk.read(key_of(tile)) : 0;
  }
  /// The owner lanes issue tile `tile`'s rows (their keys located from their table reads
  /// `entry`); a key past the range gets its V row zeroed instead.
  template <typename P>
  __device__ __forceinline__ void issue(const P& p, int tile, int32_t entry) {
    if (!owns()) return;
    const int t = key_of(tile);
    const uint32_t bar = bars + 8 * (tile % STAGES);
    unsigned char* st = stage(tile);
    unsigned char* vrow = st + N * KRAW + owned() * VRAW;
    // The stage was last read (ldmatrix / ld.shared, the generic proxy) by this warp in the
    // iteration before, and a dead key's V row may have been zeroed by this lane through the
    // generic proxy; order both before the copy engine's writes.
    fence_proxy_async_smem();
    if (t < end) {
      const KeyBytes at = key_bytes(walk.locate(entry, t), p.k_sp, p.k_so, p.v_sp, p.v_so, EB);
      mbar_arrive_expect_tx(bar, KB + VB);
      bulk_copy_g2s(smem_addr(st) + owned() * KRAW, kbase + at.x, KB, bar);
      bulk_copy_g2s(smem_addr(vrow), vbase + at.y, VB, bar);
    } else {
      uint4* z = reinterpret_cast<uint4*>(vrow);
#pragma unroll
      for (int c = 0; c < VB / 16; ++c) z[c] = make_uint4(0, 0, 0, 0);
      mbar_arrive(bar);  // release: the zeros are visible to the warp after its wait
    }
  }
  /// Tiles [0, STAGES - 1) issued; tile STAGES - 1's table entry read.
  template <typename P>
  __device__ __forceinline__ void prologue(const P& p) {
    int32_t e[STAGES - 1];
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) e[s] = s < ntiles ? fetch(s) : 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < ntiles) issue(p, s, e[s]);
    if (STAGES - 1 < ntiles) ahead = fetch(STAGES - 1);
  }
  /// Every lane: waits until tile j's rows of this warp have landed.
  __device__ __forceinline__ void wait(int j) const {
    mbar_wait(bars + 8 * (j % STAGES), static_cast<uint32_t>((j / STAGES) & 1));
  }
  /// Iteration j, after wait(j) and sync(): issue tile j + STAGES - 1 (into the stage tile j - 1
  /// used), read tile j + STAGES's table entry.
  template <typename P>
  __device__ __forceinline__ void advance(const P& p, int j) {
    if (j + STAGES - 1 < ntiles) issue(p, j + STAGES - 1, ahead);
    if (j + STAGES < ntiles) ahead = fetch(j + STAGES);
  }
  /// End of iteration j: nothing (KvPipeline publishes key offsets here).
  template <typename P>
  __device__ __forceinline__ void retire(const P&, int) {}
};

}  // namespace flashback::cuda

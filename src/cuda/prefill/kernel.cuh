// Attention for long queries (EXTEND with or without prefix, DRAFT_EXTEND, the prefill rows of
// MIXED, chunked-local virtual requests, cross-attention prefill) and ragged attention, on
// mma.sync tensor cores (m16n8k16, fp32 accumulate): a FlashAttention-2 style forward that builds
// for sm_80 and later.
//
// One CTA = (block of BM queries, q head, batch entry); it loops over further query blocks when
// an entry is longer than the grid assumed, so a short max_seqlen_q hint is never wrong, only
// slower. Each warp owns MT m-tiles of 16 query rows (config.h): S = Q K^T lands in registers,
// the online softmax runs there (a row lives in a quad of lanes), and P is re-packed as the A
// operand of P V without touching shared memory. K/V tiles of N keys are STAGES-buffered with
// cp.async; only the tiles that intersect the block's visible key range (SPEC.md §2:
// bottom-right causal, window) are visited, a warp skips tiles its rows cannot see, and
// per-element masking runs only on tiles that straddle a row's range. FP8 caches are widened
// exactly to q's 16-bit type in shared memory; descales fold into the logits (k) and the final
// normalisation (v). There is no split over keys, so a request's bits never depend on its batch
// (the deterministic mode holds).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/dtype.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/prefill/config.h"
#include "cuda/prefill/ldsm.cuh"
#include "cuda/prefill/params.h"

namespace flashback::cuda::prefill {

using Range = KeyRange;  // cuda/common/visible.cuh

// Per-entry facts shared by every query block of the CTA.
struct Entry {
  int q0, q_len, kv_len, start, trow, krow0;
  float kd, vd;
};

// Entry b's facts for KV head g (both long-query kernels).
__device__ __forceinline__ Entry load_entry(const PrefillParams& p, int b, int g) {
  Entry e;
  e.q0 = p.cu_q[b * p.cu_q_s];
  e.q_len = p.cu_q[(b + 1) * p.cu_q_s] - e.q0;
  if (p.cu_k) {
    e.krow0 = p.cu_k[b * p.cu_k_s];
    e.kv_len = p.cu_k[(b + 1) * p.cu_k_s] - e.krow0;
    e.start = 0;
    e.trow = 0;
  } else {
    e.krow0 = 0;
    e.kv_len = p.seqlens[b * p.seqlens_s];
    e.start = p.kv_start ? p.kv_start[b * p.kv_start_s] : 0;
    e.trow = p.table_rows ? p.table_rows[b * p.table_rows_s] : b;
  }
  e.kd = p.k_descale ? p.k_descale[b * p.kd_s0 + g * p.kd_s1] : 1.f;
  e.vd = p.v_descale ? p.v_descale[b * p.vd_s0 + g * p.vd_s1] : 1.f;
  return e;
}

// Ends a thread's row r of a block: the quad's partial sums of l added up, the row's LSE
// stored (natural log; -inf for a row that saw no key), and O's factor returned (v_descale / l,
// 0 for no key). A row is empty by l == 0, not l > 0: a NaN l (a NaN input the row saw) stays NaN
// in its output and LSE (ARCHITECTURE.md, "NaN inputs"). Every lane of the warp calls it (the
// shuffles); rows past q_len store nothing.
__device__ __forceinline__ float finish_row(const PrefillParams& p, const Entry& e, int h, int r,
                                            float m, float& l, int lane) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (p.lse && (lane & 3) == 0 && r < e.q_len)
    p.lse[(e.q0 + r) * p.lse_st + static_cast<int64_t>(h) * p.lse_sh] =
        l != 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
  return l != 0.f ? e.vd / l : 0.f;
}

// Epilogue of a warp whose m-tiles start at entry-relative query row `first`: normalise (with
// the value descale) and write O and LSE; empty rows give zeros and LSE -inf. l_run holds
// per-thread partial sums (a row lives in a quad of lanes), reduced here.
template <typename T, int MT, int DV>
__device__ __forceinline__ void store_rows(const PrefillParams& p, const Entry& e, int h, int first,
                                           float (&acc)[MT][DV / 8][4],
                                           const float (&m_run)[2 * MT], float (&l_run)[2 * MT],
                                           int lane) {
#pragma unroll
  for (int ri = 0; ri < 2 * MT; ++ri) {
    const int mt = ri >> 1, i = ri & 1;
    const int r = first + mt * 16 + (lane >> 2) + 8 * i;
    const float inv = finish_row(p, e, h, r, m_run[ri], l_run[ri], lane);
    if (r >= e.q_len) continue;
    T* o = static_cast<T*>(p.out) + (e.q0 + r) * p.out_st + static_cast<int64_t>(h) * p.out_sh +
           2 * (lane & 3);
#pragma unroll
    for (int u = 0; u < DV / 8; ++u)
      *reinterpret_cast<uint32_t*>(o + u * 8) =
          pack2<T>(acc[mt][u][2 * i] * inv, acc[mt][u][2 * i + 1] * inv);
  }
}

// CAP: the logit softcap is on. A template parameter (chosen at launch) so the common path
// carries no tanh and no per-element branch: with it as a runtime test, ptxas laid out each
// element's tanh and IEEE division (32 calls to the slow division path per tile) in the loop.
template <typename Cfg, typename T, KvKind KV, bool CAP>
struct PrefillKernel {
  static constexpr int D = Cfg::D, DV = Cfg::DV, N = Cfg::N, BM = Cfg::BM, MT = Cfg::MT;
  static constexpr int THREADS = Cfg::THREADS, EB = Cfg::EB, STAGES = Cfg::STAGES;
  static constexpr int QP = Cfg::QP, KP = Cfg::KP, VP = Cfg::VP;
  static constexpr bool FP8 = Cfg::FP8;
  static_assert(FP8 == (KV != KvKind::kSame), "config and KV kind disagree");

  // Widens the N rows of W fp8 values at src0 (pitch RP bytes) into 16-bit rows at dst0 (pitch
  // P elements), 8 values per step. Trip count and row width are compile-time, so the index
  // math is shifts and the loop unrolls: as one runtime loop over K and V with divisions it
  // cost ~40 instructions per step, 16 steps per thread per 64-key tile (SASS sm_90a).
  template <int W, int RP, int P>
  static __device__ __forceinline__ void widen_rows(const unsigned char* src0, T* dst0) {
    constexpr int STEPS = N * W / 8, C8 = W / 8;
#pragma unroll
    for (int it = 0; it < (STEPS + THREADS - 1) / THREADS; ++it) {
      const int e = static_cast<int>(threadIdx.x) + it * THREADS;
      if (STEPS % THREADS != 0 && e >= STEPS) break;
      const int key = e / C8, c8 = e % C8;
      const uint2 raw = *reinterpret_cast<const uint2*>(src0 + key * RP + c8 * 8);
      uint4 o;
      o.x = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.x & 0xffff));
      o.y = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.x >> 16));
      o.z = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.y & 0xffff));
      o.w = fp8x2_to<T, KV>(static_cast<uint16_t>(raw.y >> 16));
      *reinterpret_cast<uint4*>(dst0 + key * P + c8 * 8) = o;
    }
  }
  static __device__ __forceinline__ void widen(const unsigned char* stage, T* sK16, T* sV16) {
    widen_rows<D, Cfg::KRAW, KP>(stage, sK16);
    widen_rows<DV, Cfg::VRAW, VP>(stage + N * Cfg::KRAW, sV16);
  }

  // One block of BM queries starting at entry-relative query row0.
  static __device__ void block(const PrefillParams& p, const Entry& e, int h, int row0,
                               unsigned char* smem) {
    T* sQ = reinterpret_cast<T*>(smem);
    unsigned char* sStage = smem + Cfg::Q_BYTES;
    T* sK16 = reinterpret_cast<T*>(sStage + STAGES * Cfg::STAGE_BYTES);
    T* sV16 = sK16 + N * KP;
    KeyBytes* sLoc = reinterpret_cast<KeyBytes*>(sStage + STAGES * Cfg::STAGE_BYTES +
                                                 Cfg::CVT_BYTES);  // [STAGES][N]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = h / p.group;

    // The block's key range: the union of its rows' ranges, contiguous because both ends are
    // non-decreasing in the query index. Tiles outside it are never loaded.
    const int last_row = min(row0 + BM, e.q_len) - 1;
    const int lo = visible_keys(p, row0, e.q_len, e.kv_len).lo;
    const int hi = visible_keys(p, last_row, e.q_len, e.kv_len).hi;
    const int end = hi + 1;
    const int ntiles = hi >= lo ? (hi - lo + N) / N : 0;

    // This warp's 16 MT rows, for tile skipping and mask elision.
    constexpr int WR = 16 * MT;
    const int wfirst = row0 + warp * WR, wlast = min(wfirst + WR - 1, e.q_len - 1);
    const bool warp_live = wfirst < e.q_len;
    Range wr_first{1, 0}, wr_last{1, 0};
    if (warp_live) {
      wr_first = visible_keys(p, wfirst, e.q_len, e.kv_len);
      wr_last = visible_keys(p, wlast, e.q_len, e.kv_len);
    }
    const bool warp_full = wfirst + WR - 1 < e.q_len;  // all rows are real queries

    // Q rows (zeros past the entry) join the first tile's copy group.
    {
      const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(e.q0) * p.q_st +
                   static_cast<int64_t>(h) * p.q_sh;
      constexpr int CQ = D / 8;
      for (int c = threadIdx.x; c < BM * CQ; c += THREADS) {
        const int r = c / CQ, ch = c % CQ;
        const bool ok = row0 + r < e.q_len;
        const T* src = ok ? q + static_cast<int64_t>(row0 + r) * p.q_st + ch * 8 : q;
        cp_async16(sQ + r * QP + ch * 8, src, ok ? 16 : 0);
      }
    }
    // K/V tiles (cuda/common/paged.cuh): thread `key` < N reads one key's table entry a tile
    // ahead and publishes its byte offsets to the stage's slot of sLoc for the copy loop. The
    // same protocol as KvPipeline, spelled out here: the pipeline object costs this kernel
    // (already at 255 registers) 12-44 more bytes of spills (ptxas, sm_90a).
    const unsigned char* kbase = static_cast<const unsigned char*>(p.k) + g * p.k_sh * EB;
    const unsigned char* vbase = static_cast<const unsigned char*>(p.v) + g * p.v_sh * EB;
    PageWalk walk;
    if (p.cu_k) {
      walk.krow0 = e.krow0;
    } else {
      walk.paged(p.table + static_cast<int64_t>(e.trow) * p.table_s0, p.table_s1, e.start,
                 p.table_holds_slots, p.page_size);
    }
    const int tid = threadIdx.x;
    auto key_of = [&](int tile) { return lo + tile * N + tid; };
    auto fetch = [&](int tile) -> int32_t {
      return tid < N && key_of(tile) < end ? walk.read(key_of(tile)) : 0;
    };
    auto publish = [&](int tile, int32_t entry) {
      if (tid < N)
        sLoc[(tile % STAGES) * N + tid] =
            key_of(tile) < end
                ? key_bytes(walk.locate(entry, key_of(tile)), p.k_sp, p.k_so, p.v_sp, p.v_so, EB)
                : no_key();
    };
    auto copy = [&](int tile) {
      copy_tile<N, D * EB / 16, DV * EB / 16, Cfg::KRAW, Cfg::VRAW, THREADS>(
          sStage + (tile % STAGES) * Cfg::STAGE_BYTES, sLoc + (tile % STAGES) * N, kbase, vbase);
    };
    {
      int32_t first[STAGES - 1];
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) first[s] = s < ntiles ? fetch(s) : 0;
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) publish(s, first[s]);
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {  // the Q rows joined tile 0's group above
      if (s < ntiles) copy(s);
      cp_async_commit();
    }
    // Tile j + STAGES's entry is read during iteration j and published at its end, into the
    // slot of tile j (whose copy was issued STAGES - 1 iterations earlier).
    int32_t ahead = STAGES - 1 < ntiles ? fetch(STAGES - 1) : 0;
    if (STAGES - 1 < ntiles) publish(STAGES - 1, ahead);

    float acc[MT][DV / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int u = 0; u < DV / 8; ++u)
        acc[mt][u][0] = acc[mt][u][1] = acc[mt][u][2] = acc[mt][u][3] = 0.f;
    float m_run[2 * MT], l_run[2 * MT];
#pragma unroll
    for (int ri = 0; ri < 2 * MT; ++ri) {
      m_run[ri] = -INFINITY;
      l_run[ri] = 0.f;
    }
    // logit = softcap(scale * kd * (q . k_stored)), in base 2 (softmax.cuh).
    const float sk = p.scale * e.kd;
    LogitMap lm;
    lm.mul = sk * kLog2e;
    lm.in = CAP ? sk / p.softcap : 0.f;
    lm.out = CAP ? p.softcap * kLog2e : 0.f;

    for (int j = 0; j < ntiles; ++j) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile j visible to all; every warp is done with tile j - 1's stage
      if (j + STAGES - 1 < ntiles) copy(j + STAGES - 1);
      cp_async_commit();
      if (j + STAGES < ntiles) ahead = fetch(j + STAGES);
      auto finish = [&] {
        if (j + STAGES < ntiles) publish(j + STAGES, ahead);
      };
      const unsigned char* stage = sStage + (j % STAGES) * Cfg::STAGE_BYTES;
      const T* Kt = reinterpret_cast<const T*>(stage);
      const T* Vt = reinterpret_cast<const T*>(stage + N * Cfg::KRAW);
      if constexpr (FP8) {
        widen(stage, sK16, sV16);
        __syncthreads();
        Kt = sK16;
        Vt = sV16;
      }
      const int t0 = lo + j * N;
      // A warp whose rows see none of this tile leaves its state untouched (alpha = 1, P = 0).
      if (!warp_live || t0 > wr_last.hi || t0 + N - 1 < wr_first.lo) {
        finish();
        continue;
      }

      // S = Q K^T for the warp's rows x N keys; each K fragment serves MT m-tiles.
      float s[MT][N / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int u = 0; u < N / 8; ++u) s[mt][u][0] = s[mt][u][1] = s[mt][u][2] = s[mt][u][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldmatrix_x4(a[mt],
                      sQ + (warp * WR + mt * 16 + (lane & 15)) * QP + ks * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int kb = 0; kb < N / 16; ++kb) {
          uint32_t bb[4];
          ldmatrix_x4(bb, Kt + (kb * 16 + (lane & 7) + ((lane >> 4) << 3)) * KP + ks * 16 +
                              ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816<T>(s[mt][2 * kb], a[mt], bb[0], bb[1]);
            mma16816<T>(s[mt][2 * kb + 1], a[mt], bb[2], bb[3]);
          }
        }
      }

      // Online softmax in base 2; masking only where the tile straddles some row's range.
      if (warp_full && t0 >= wr_last.lo && t0 + N - 1 <= wr_first.hi && (CAP || lm.mul >= 0.f)) {
        online_softmax<MT, N, DV, false, CAP>(s, m_run, l_run, acc, {}, t0, lane, lm);
      } else {
        // This thread's rows (2 per m-tile: lane / 4 and lane / 4 + 8, slot 2 mt + i), derived
        // here rather than kept across the loop: edge tiles are few, registers are not.
        Range rr[2 * MT];
#pragma unroll
        for (int ri = 0; ri < 2 * MT; ++ri) {
          const int r = wfirst + (ri >> 1) * 16 + (lane >> 2) + 8 * (ri & 1);
          rr[ri] = r < e.q_len ? visible_keys(p, r, e.q_len, e.kv_len) : Range{1, 0};
        }
        online_softmax<MT, N, DV, true, CAP>(s, m_run, l_run, acc, rr, t0, lane, lm);
      }

      // O += P V: the S accumulators of keys [16 kk, 16 kk + 16) are exactly the A fragment;
      // each V fragment serves MT m-tiles.
#pragma unroll
      for (int kk = 0; kk < N / 16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < DV / 16; ++dp) {
          uint32_t bv[4];
          ldsm_x4_t(bv, Vt + (kk * 16 + (lane & 15)) * VP + dp * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816<T>(acc[mt][2 * dp], a[mt], bv[0], bv[1]);
            mma16816<T>(acc[mt][2 * dp + 1], a[mt], bv[2], bv[3]);
          }
        }
      }
      finish();
    }
    cp_async_wait<0>();
    store_rows<T, MT, DV>(p, e, h, wfirst, acc, m_run, l_run, lane);
  }
};

// Softcap variant of a kernel: launch.cuh picks kCapOff / kCapOn from p.softcap; kCapAny tests
// it per block (both bodies in one kernel, so it needs the registers of the larger), kept as
// the default for the CPU emulation test, which drives the kernel without the launcher.
enum Cap : int { kCapOff = 0, kCapOn = 1, kCapAny = 2 };

template <typename Cfg, typename T, KvKind KV, Cap CAP = kCapAny>
__global__ void __launch_bounds__(Cfg::THREADS) prefill_kernel(const PrefillParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int h = blockIdx.y, b = blockIdx.z;
  const Entry e = load_entry(p, b, h / p.group);
  // Heaviest (last, under causal masking) query blocks first, so the grid's tail is short ones.
  for (int mb = gridDim.x - 1 - blockIdx.x; mb * Cfg::BM < e.q_len; mb += gridDim.x) {
    if (CAP == kCapOn || (CAP == kCapAny && p.softcap > 0.f))
      PrefillKernel<Cfg, T, KV, true>::block(p, e, h, mb * Cfg::BM, smem);
    else
      PrefillKernel<Cfg, T, KV, false>::block(p, e, h, mb * Cfg::BM, smem);
    __syncthreads();  // shared memory is reused by the next block
  }
}

}  // namespace flashback::cuda::prefill

// The Hopper path of the long-query attention kernel (sm_90a): the same work as kernel.cuh
// (one CTA = a block of BM queries of one q head of one entry; bottom-right causal, window,
// softcap, LSE, paged or ragged K/V, 16-bit caches), on warpgroup MMA.
//
// Warp-specialised, as FlashAttention-3 does: warpgroup 2 is the producer, warpgroups 0 and 1
// consume 64 query rows each. The producer reads each key's table entry (one thread per key of
// a 128-key tile), then its warps copy K and V rows with cp.async into the 128-byte-swizzled
// layout wgmma reads (cuda/common/wgmma.cuh), STAGES deep; each copy's completion arrives on
// the stage's `full` mbarrier. A consumer warpgroup computes S = Q K^T (wgmma, both operands in
// shared memory), the online softmax in registers (softmax.cuh, as the mma.sync kernel), then
// O += P V with P straight from the S registers as the A operand, and frees the stage on its
// `empty` mbarrier. The two consumers are not in lockstep, so one's softmax overlaps the
// other's MMAs. Registers move from the producer to the consumers with setmaxnreg.
//
// Built only for (D, 128) with D a multiple of 64 up to 192 (128/128 and the MLA chunked-prefix
// 192/128 of the workloads); the mma.sync kernel serves every other case, fp8 caches included.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/prefill/kernel.cuh"

namespace flashback::cuda::prefill {

template <int D_, int DV_>
struct WgmmaConfig {
  static constexpr int D = D_, DV = DV_;
  static constexpr bool kBuilt = DV == 128 && D % 64 == 0 && D <= 192;
  static constexpr int N = 128;   // keys per tile: one per producer thread
  static constexpr int BM = 128;  // query rows per CTA: 64 per consumer warpgroup
  static constexpr int STAGES = 2;
  static constexpr int THREADS = 384;
  static constexpr int CK = D * 2 / 16, CV = DV * 2 / 16;  // 16-byte chunks per K / V row
  static constexpr int Q_BYTES = BM * D * 2;
  static constexpr int K_BYTES = N * D * 2, V_BYTES = N * DV * 2;
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int BARRIERS = 2 * STAGES + 2;  // full, empty per stage; q_full, q_empty
  // 1024 bytes of slack: swizzled blocks must start on 1024-byte boundaries.
  static constexpr int SMEM_BYTES = 1024 + Q_BYTES + STAGES * STAGE_BYTES + 8 * BARRIERS;
  static constexpr int PRODUCER_REGS = 56, CONSUMER_REGS = 224;  // 128 x 56 + 256 x 224 <= 64K
  static_assert(!kBuilt || SMEM_BYTES <= 227 * 1024, "shared memory per CTA exceeds 227 KB");
};

template <typename Cfg, typename T, bool CAP>
struct WgmmaPrefill {
  static constexpr int D = Cfg::D, DV = Cfg::DV, N = Cfg::N, BM = Cfg::BM, S = Cfg::STAGES;
  static constexpr int CK = Cfg::CK, CV = Cfg::CV;

  unsigned char* sq;       // [D / 64][BM][128 B], swizzled
  unsigned char* stages;   // per stage: K [D / 64][N][128 B], then V [DV / 64][N][128 B]
  uint64_t *full, *empty;  // [S] each
  uint64_t *q_full, *q_empty;

  __device__ unsigned char* k_stage(int s) const { return stages + s * Cfg::STAGE_BYTES; }
  __device__ unsigned char* v_stage(int s) const { return k_stage(s) + Cfg::K_BYTES; }

  // The block's key range (the union of its rows' ranges, contiguous because both ends are
  // non-decreasing in the query index) in tiles of N keys from `lo`.
  struct Span {
    int lo, end, ntiles;
  };
  static __device__ Span span(const PrefillParams& p, const Entry& e, int row0) {
    const int last_row = min(row0 + BM, e.q_len) - 1;
    const int lo = visible_keys(p, row0, e.q_len, e.kv_len).lo;
    const int hi = visible_keys(p, last_row, e.q_len, e.kv_len).hi;
    return {lo, hi + 1, hi >= lo ? (hi - lo + N) / N : 0};
  }

  // Producer warpgroup: Q of each block, then the K/V tiles. `it` counts tiles over the CTA's
  // blocks, so stage and phase continue across blocks.
  __device__ void produce(const PrefillParams& p, const Entry& e, int h) {
    const int t = threadIdx.x - 256, lane = t & 31, warp = t >> 5;
    const int g = h / p.group;
    const unsigned char* kbase = static_cast<const unsigned char*>(p.k) + g * p.k_sh * 2;
    const unsigned char* vbase = static_cast<const unsigned char*>(p.v) + g * p.v_sh * 2;
    PageWalk walk;
    if (p.cu_k)
      walk.krow0 = e.krow0;
    else
      walk.paged(p.table + static_cast<int64_t>(e.trow) * p.table_s0, p.table_s1, e.start,
                 p.table_holds_slots, p.page_size);
    const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(e.q0) * p.q_st +
                 static_cast<int64_t>(h) * p.q_sh;
    int it = 0, blk = 0;
    for (int mb = gridDim.x - 1 - blockIdx.x; mb * BM < e.q_len; mb += gridDim.x, ++blk) {
      const int row0 = mb * BM;
      const Span sp = span(p, e, row0);
      mbar_wait(q_empty, (blk & 1) ^ 1);
      for (int c = t; c < BM * CK; c += 128) {
        const int r = c / CK, ch = c % CK;
        const bool ok = row0 + r < e.q_len;
        const T* src = ok ? q + static_cast<int64_t>(row0 + r) * p.q_st + ch * 8 : q;
        cp_async16(sq + sw128_offset(r, ch, BM), src, ok ? 16 : 0);
      }
      mbar_arrive_on_copies(q_full);
      for (int j = 0; j < sp.ntiles; ++j, ++it) {
        const int s = it % S;
        const int key = sp.lo + j * N + t;  // this thread's key
        KeyBytes kb = no_key();
        if (key < sp.end)
          kb = key_bytes(walk.locate(walk.read(key), key), p.k_sp, p.k_so, p.v_sp, p.v_so, 2);
        mbar_wait(&empty[s], ((it / S) & 1) ^ 1);
        // The warp's 32 keys, whole rows per instruction: lane l takes chunk (i 32 + l) % C of
        // key (i 32 + l) / C, the key's byte offset shuffled from the lane that located it.
        unsigned char* kd = k_stage(s);
#pragma unroll 4
        for (int i = 0; i < CK; ++i) {
          const int idx = i * 32 + lane, kl = idx / CK, ch = idx % CK;
          const int64_t off = __shfl_sync(0xffffffffu, kb.x, kl);
          cp_async16(kd + sw128_offset(warp * 32 + kl, ch, N),
                     kbase + (off >= 0 ? off : 0) + ch * 16, off >= 0 ? 16 : 0);
        }
        unsigned char* vd = v_stage(s);
#pragma unroll 4
        for (int i = 0; i < CV; ++i) {
          const int idx = i * 32 + lane, kl = idx / CV, ch = idx % CV;
          const int64_t off = __shfl_sync(0xffffffffu, kb.y, kl);
          cp_async16(vd + sw128_offset(warp * 32 + kl, ch, N),
                     vbase + (off >= 0 ? off : 0) + ch * 16, off >= 0 ? 16 : 0);
        }
        mbar_arrive_on_copies(&full[s]);
      }
    }
  }

  // Consumer warpgroup wg (0 or 1): query rows [row0 + 64 wg, row0 + 64 wg + 64) of each block.
  __device__ void consume(const PrefillParams& p, const Entry& e, int h, int wg) {
    const int tw = threadIdx.x & 127, lane = tw & 31, warp = tw >> 5;
    const uint32_t sq_addr = smem_addr(sq) + wg * 64 * 128;
    // logit = softcap(scale * kd * (q . k_stored)), in base 2 (softmax.cuh).
    const float sk = p.scale * e.kd;
    LogitMap lm;
    lm.mul = sk * kLog2e;
    lm.in = CAP ? sk / p.softcap : 0.f;
    lm.out = CAP ? p.softcap * kLog2e : 0.f;
    int it = 0, blk = 0;
    for (int mb = gridDim.x - 1 - blockIdx.x; mb * BM < e.q_len; mb += gridDim.x, ++blk) {
      const int row0 = mb * BM;
      const Span sp = span(p, e, row0);
      const int wfirst = row0 + wg * 64, wlast = min(wfirst + 63, e.q_len - 1);
      const bool live = wfirst < e.q_len, full_rows = wfirst + 63 < e.q_len;
      Range r_first{1, 0}, r_last{1, 0};
      if (live) {
        r_first = visible_keys(p, wfirst, e.q_len, e.kv_len);
        r_last = visible_keys(p, wlast, e.q_len, e.kv_len);
      }
      float acc[1][DV / 8][4];
#pragma unroll
      for (int u = 0; u < DV / 8; ++u)
        acc[0][u][0] = acc[0][u][1] = acc[0][u][2] = acc[0][u][3] = 0.f;
      float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

      mbar_wait(q_full, blk & 1);
      for (int j = 0; j < sp.ntiles; ++j, ++it) {
        const int s = it % S;
        const int t0 = sp.lo + j * N;
        mbar_wait(&full[s], (it / S) & 1);
        // A warpgroup whose rows see none of this tile only frees the stage.
        if (live && t0 <= r_last.hi && t0 + N - 1 >= r_first.lo) {
          fence_proxy_async_smem();  // cp.async wrote the stage through the generic proxy
          float sacc[1][N / 8][4];
          const uint32_t k_addr = smem_addr(k_stage(s));
          wgmma_fence();
#pragma unroll
          for (int ks = 0; ks < D / 16; ++ks) {
            // k step ks: column block ks / 4, 32 bytes further per step inside the block.
            const uint32_t col = (ks & 3) * 32;
            const uint64_t da = sw128_desc(sq_addr + (ks >> 2) * BM * 128 + col, 16, 1024);
            const uint64_t db = sw128_desc(k_addr + (ks >> 2) * N * 128 + col, 16, 1024);
            wgmma_ss_n128<T>(sacc[0], da, db, ks > 0);
          }
          wgmma_commit();
          wgmma_wait<0>();
          reg_fence(sacc[0]);

          if (full_rows && t0 >= r_last.lo && t0 + N - 1 <= r_first.hi && (CAP || lm.mul >= 0.f)) {
            online_softmax<1, N, DV, false, CAP>(sacc, m_run, l_run, acc, {}, t0, lane, lm);
          } else {
            Range rr[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const int r = wfirst + warp * 16 + (lane >> 2) + 8 * i;
              rr[i] = r < e.q_len ? visible_keys(p, r, e.q_len, e.kv_len) : Range{1, 0};
            }
            online_softmax<1, N, DV, true, CAP>(sacc, m_run, l_run, acc, rr, t0, lane, lm);
          }

          // O += P V: the S accumulators of keys [16 kk, 16 kk + 16) are the A fragment.
          uint32_t pa[N / 16][4];
#pragma unroll
          for (int kk = 0; kk < N / 16; ++kk) {
            pa[kk][0] = pack2<T>(sacc[0][2 * kk][0], sacc[0][2 * kk][1]);
            pa[kk][1] = pack2<T>(sacc[0][2 * kk][2], sacc[0][2 * kk][3]);
            pa[kk][2] = pack2<T>(sacc[0][2 * kk + 1][0], sacc[0][2 * kk + 1][1]);
            pa[kk][3] = pack2<T>(sacc[0][2 * kk + 1][2], sacc[0][2 * kk + 1][3]);
          }
          const uint32_t v_addr = smem_addr(v_stage(s));
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < N / 16; ++kk)
            wgmma_rs_n128<T>(acc[0], pa[kk], sw128_desc(v_addr + kk * 16 * 128, N * 128, 1024));
          wgmma_commit();
          wgmma_wait<0>();
          reg_fence(acc[0]);
          reg_fence(pa);
        }
        mbar_arrive(&empty[s]);
      }
      mbar_arrive(q_empty);
      if (live) store_rows<T, 1, DV>(p, e, h, wfirst + warp * 16, acc, m_run, l_run, lane);
    }
  }
};

template <typename Cfg, typename T, bool CAP>
__global__ void __launch_bounds__(Cfg::THREADS, 1) prefill_wgmma_kernel(const PrefillParams p) {
#ifdef FLASHBACK_WGMMA
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  WgmmaPrefill<Cfg, T, CAP> k;
  k.sq = smem;
  k.stages = smem + Cfg::Q_BYTES;
  uint64_t* bars = reinterpret_cast<uint64_t*>(k.stages + Cfg::STAGES * Cfg::STAGE_BYTES);
  k.full = bars;
  k.empty = bars + Cfg::STAGES;
  k.q_full = bars + 2 * Cfg::STAGES;
  k.q_empty = k.q_full + 1;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::STAGES; ++s) {
      mbar_init(&k.full[s], 128);   // one .noinc arrival per producer thread
      mbar_init(&k.empty[s], 256);  // every consumer thread
    }
    mbar_init(k.q_full, 128);
    mbar_init(k.q_empty, 256);
  }
  __syncthreads();
  const int h = blockIdx.y, b = blockIdx.z;
  const Entry e = load_entry(p, b, h / p.group);
  const int wg = threadIdx.x / 128;
  if (wg == 2) {
    regs_shrink<Cfg::PRODUCER_REGS>();
    k.produce(p, e, h);
  } else {
    regs_grow<Cfg::CONSUMER_REGS>();
    k.consume(p, e, h, wg);
  }
#else
  __trap();  // launched only where wgmma_available() (launch.cu) says this build has sm_90a
#endif
}

}  // namespace flashback::cuda::prefill

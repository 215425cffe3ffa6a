// Host side of the long-query attention kernel: checks what only this CUDA path restricts,
// turns validated PagedAttentionParams / RaggedAttentionParams into PrefillParams, sizes the
// grid and calls the generated instance for (head dims, q dtype).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/tensor_map.h"
#include "cuda/device_facts.h"
#include "cuda/env.h"
#include "cuda/prefill/make_params.h"
#include "cuda/prefill/params.h"
#include "cuda/prefill/prefill.h"

// The generated list of instances (src/cuda/prefill/prefill.cmake): declarations...
#define FLASHBACK_PREFILL_INSTANCE(D, DV, TN)                      \
  namespace flashback::cuda::prefill {                             \
  void run_##D##_##DV##_##TN(const PrefillParams&, KvKind, void*); \
  int rows_##D##_##DV##_##TN(KvKind);                              \
  }
#include "flashback_prefill_instances.inc"
#undef FLASHBACK_PREFILL_INSTANCE

namespace flashback::cuda::prefill {
namespace {

using detail::concat;

struct Instance {
  int d, dv;
  bool bf16;
  void (*run)(const PrefillParams&, KvKind, void*);
  int (*rows)(KvKind);
};

// ...and the table.
const std::vector<Instance>& instances() {
  static const std::vector<Instance> table = {
#define FLASHBACK_PREFILL_INSTANCE(D, DV, TN) \
  {D, DV, std::string(#TN) == "bf16", &run_##D##_##DV##_##TN, &rows_##D##_##DV##_##TN},
#include "flashback_prefill_instances.inc"
#undef FLASHBACK_PREFILL_INSTANCE
  };
  return table;
}

const Instance& find(int64_t d, int64_t dv, DType q) {
  FLASHBACK_CHECK(q == DType::kBF16 || q == DType::kF16, "q", "dtype bf16 or f16 on CUDA",
                  dtype_name(q));
  for (const Instance& in : instances())
    if (in.d == d && in.dv == dv && in.bf16 == (q == DType::kBF16)) return in;
  throw Error("q",
              concat("head dims built into this CUDA prefill library (", built_instances(), ")"),
              concat("D=", d, " Dv=", dv, " ", dtype_name(q)));
}

void expect_aligned(const TensorView& t, const char* name, int bytes) {
  const int64_t eb = dtype_size(t.dtype);
  bool ok = reinterpret_cast<uintptr_t>(t.data) % bytes == 0;
  for (int d = 0; d + 1 < t.ndim; ++d) ok = ok && (t.strides[d] * eb) % bytes == 0;
  FLASHBACK_CHECK(ok, name, concat(bytes, "-byte aligned rows on CUDA (base pointer and strides)"),
                  concat("pointer ", t.data, ", strides of shape ", t.shape_str()));
}

void expect_out(const TensorView& out, const TensorView& q) {
  FLASHBACK_CHECK(out.dtype == q.dtype, "out", concat("dtype ", dtype_name(q.dtype), " (as q)"),
                  dtype_name(out.dtype));
  expect_aligned(out, "out", 4);  // the epilogue stores pairs of 16-bit values
}

void check_grid(int64_t batch, int64_t heads_q) {
  FLASHBACK_CHECK(batch <= 65535, "cu_seqlens_q", "at most 65535 entries on CUDA",
                  std::to_string(batch));
  FLASHBACK_CHECK(heads_q <= 65535, "q", "at most 65535 heads on CUDA", std::to_string(heads_q));
}

}  // namespace

bool wgmma_available() {
  static const bool forced_mma = env_value("FLASHBACK_PREFILL_KERNEL") == "mma";
  return !forced_mma && device_facts().sm90a;
}

bool wgmma_pingpong() {
  // FLASHBACK_PREFILL_PINGPONG=0: the consumers issue their MMAs whenever they are ready.
  static const bool off = env_value("FLASHBACK_PREFILL_PINGPONG") == "0";
  return !off;
}

bool wgmma_head_pairs() {
  // On: the two CTAs of a pair pull half the K/V bytes each from L2, an energy cost where
  // sustained prefill is bound by the power limit; with the stale softmax 1-2 % faster on the
  // H100 (prefill_1x16k 671 against 660 TFLOP/s, session 34; session 33's 0.76x was the remote
  // arrival's fence, fixed since). FLASHBACK_PREFILL_CLUSTER=0 turns it off.
  static const bool off = env_value("FLASHBACK_PREFILL_CLUSTER") == "0";
  return !off;
}

bool wgmma_staged_out(const PrefillParams& p, int elem_bytes) {
  static const bool off = env_value("FLASHBACK_PREFILL_STAGED_OUT") == "0";
  const auto bytes = [&](int64_t elems) { return static_cast<uint64_t>(elems * elem_bytes); };
  return !off &&
         ((reinterpret_cast<uintptr_t>(p.out) | bytes(p.out_st) | bytes(p.out_sh)) & 15) == 0;
}

dim3 wgmma_grid(PrefillParams& p, int rows, int max_pairs) {
  // Persistent (blocks.h): about one CTA per SM (the kernel takes one) walks the (rank, entry,
  // head) items in bands of ranks, longest band first, so the producer streams the next block's
  // Q and tiles while the consumers finish one across the whole launch, and the launch ends
  // within about a block of balance instead of a fractional last wave. The producer skips items
  // past a short entry's blocks at one entry load each, and those items are the high ranks, dealt
  // last, so only batches whose entries average more than 7/8 of m_blocks - 1 blocks take it
  // (total_q > 7/8 (m_blocks - 1) rows batch: about an eighth of the items empty at most, plus
  // the last block's rounding); more ragged ones, and a max_seqlen_q hint well above the longest
  // entry, keep the grid, which has no empty items.
  // FLASHBACK_PREFILL_PERSISTENT=0: never; =N > 0: always, with at most N CTAs (the tests use
  // it to give each CTA many blocks of ragged batches).
  static const int64_t forced = [] {
    const std::string s = env_value("FLASHBACK_PREFILL_PERSISTENT");
    return s.empty() ? int64_t{-1} : std::max<int64_t>(0, std::atoll(s.c_str()));
  }();
  const int64_t items = int64_t{p.m_blocks} * p.heads_q * p.batch;
  const int64_t sms = device_facts().sms;
  const bool fits = items < (int64_t{1} << 31);
  const bool full = 8 * p.total_q > 7 * int64_t{p.m_blocks - 1} * rows * p.batch;
  p.persistent = fits && (forced > 0 || (forced < 0 && items > sms && full));
  p.head_pairs = false;
  if (p.persistent) {
    // Bands of ranks (blocks.h): the items side by side share K/V in L2 and the band's ranks
    // differ little in cost. Causal or windowed: max(6, 24 / group) ranks, about 24 items per K/V
    // stream (on the H200, session 15: 6 ranks beat 3 and 4 on the four causal workloads, 1.3-2 %
    // faster than the grid where 16 / group ranks were 0-1 % slower on local_prefill). Without
    // either every rank costs the same, so one band of all ranks (each head's blocks side by side,
    // as the grid has them; mla_prefix_chunk 2.5 % slower at 6). FLASHBACK_PREFILL_BAND=N sets it.
    static const int band_env = std::atoi(env_value("FLASHBACK_PREFILL_BAND").c_str());
    const bool equal_ranks = !p.causal && p.window_left < 0 && p.window_right < 0;
    p.sched_band = std::min(p.m_blocks, band_env > 0  ? band_env
                                        : equal_ranks ? p.m_blocks
                                                      : std::max(6, 24 / std::max(p.group, 1)));
    // Head pairs (wgmma_kernel.cuh): clusters of two CTAs run q heads 2i and 2i + 1 of a KV
    // group side by side, each loading half of every K/V tile for both by TMA multicast, which
    // halves the tiles' traffic from L2. Only where wanted (max_pairs > 0: wgmma_head_pairs, an
    // even group and a driver that runs clusters of two), the tiles come by TMA (kv_box) and
    // every cluster runs at once.
    p.head_pairs = max_pairs > 0 && p.group % 2 == 0 && p.kv_box > 0;
    if (p.head_pairs) {
      const int64_t clusters = std::min(items / 2, forced > 0 ? (forced + 1) / 2 : max_pairs);
      return dim3(static_cast<unsigned>(2 * std::max<int64_t>(clusters, 1)), 1, 1);
    }
    return dim3(static_cast<unsigned>(std::min(items, forced > 0 ? forced : sms)), 1, 1);
  }
  // Otherwise a grid over the blocks, two query blocks per CTA (snake_block: one long, one
  // short) where the halved grid still covers every SM twice; a smaller grid keeps one block
  // per CTA so that no SM idles. FLASHBACK_PREFILL_PAIRS=0: never pair; =1: always (the tests'
  // small grids, for coverage).
  static const int mode = [] {
    const std::string s = env_value("FLASHBACK_PREFILL_PAIRS");
    return s == "0" ? 0 : s == "1" ? 1 : -1;
  }();
  const int half = (p.m_blocks + 1) / 2;
  int x = p.m_blocks;
  if (mode == 1 && p.m_blocks >= 2)
    x = half;
  else if (mode == -1 && p.m_blocks >= 2 && int64_t{half} * p.heads_q * p.batch >= 2 * sms)
    x = half;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(p.heads_q),
              static_cast<unsigned>(p.batch));
}

void add_kv_maps(PrefillParams& p, int d, int dv, int tile_keys) {
  // FLASHBACK_PREFILL_TMA=0: every tile by cp.async (for A/B runs and as a fallback switch).
  static const bool off = env_value("FLASHBACK_PREFILL_TMA") == "0";
  p.kv_box = 0;
  if (off) return;
  // Ragged keys: (column, head, 1, row), a box per tile. Paged: (column, head, offset, page), a
  // box per page (or per tile of a page longer than one), starting on a page boundary; page
  // sizes that are not a multiple of 8 keys (a box then ends off a swizzle period), or that
  // neither divide nor are a multiple of the tile, and slot tables stay on cp.async.
  const bool ragged = p.cu_k != nullptr;
  const int ps = p.page_size;
  const int box = ragged ? tile_keys : std::min(ps, tile_keys);
  if (!ragged &&
      (p.table_holds_slots || ps % 8 != 0 || (tile_keys % ps != 0 && ps % tile_keys != 0)))
    return;
  const int64_t hk = p.heads_q / p.group;
  const auto map = [&](TensorMap& m, const void* base, int cols, int64_t outer, int64_t sh,
                       int64_t so, int64_t sp) {
    const int64_t dims[4] = {cols, hk, ragged ? 1 : ps, outer};
    const int64_t strides[3] = {sh * 2, (ragged ? sp : so) * 2, sp * 2};
    const int boxes[4] = {64, 1, ragged ? 1 : box, ragged ? box : 1};
    return encode_map_4d(m, base, dims, strides, boxes);
  };
  if (map(p.k_map, p.k, d, p.k_outer, p.k_sh, p.k_so, p.k_sp) &&
      map(p.v_map, p.v, dv, p.v_outer, p.v_sh, p.v_so, p.v_sp))
    p.kv_box = box;
}

std::string built_instances() {
  std::string out;
  for (const Instance& in : instances())
    out += concat(out.empty() ? "" : ", ", in.d, "/", in.dv, " ", in.bf16 ? "bf16" : "f16");
  return out;
}

bool takes(const PagedAttentionParams& p, const detail::PagedShape& s) {
  return s.head_dim_qv == 0 && max_q_of(p.max_seqlen_q, s.max_seqlen_q, s.total_q) > kDecodeMaxQ;
}

void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec) {
  FLASHBACK_CHECK(s.head_dim_qv == 0, "qv", "no qv (MLA absorbed runs on the decode kernel)",
                  concat("qv with ", s.head_dim_qv, " columns"));
  const Instance& in = find(s.head_dim, s.head_dim_v, p.q.dtype);
  expect_out(p.out, p.q);
  KvKind kv = KvKind::kSame;
  const DType kt = p.k_cache.dtype;
  if (kt == DType::kF8E4M3)
    kv = KvKind::kE4M3;
  else if (kt == DType::kF8E5M2)
    kv = KvKind::kE5M2;
  else
    FLASHBACK_CHECK(kt == p.q.dtype, "k_cache",
                    concat("dtype ", dtype_name(p.q.dtype), " (as q) or fp8 e4m3/e5m2 on CUDA"),
                    dtype_name(kt));
  expect_aligned(p.q, "q", 16);
  expect_aligned(p.k_cache, "k_cache", 16);
  expect_aligned(p.v_cache, "v_cache", 16);
  check_grid(s.batch, s.heads_q);
  if (s.batch == 0 || s.total_q == 0) return;

  in.run(paged_params(p, s, in.rows(kv)), kv, exec.stream);
}

void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                      const Exec& exec) {
  const Instance& in = find(s.head_dim, s.head_dim_v, p.q.dtype);
  expect_out(p.out, p.q);
  expect_aligned(p.q, "q", 16);
  expect_aligned(p.k, "k", 16);
  expect_aligned(p.v, "v", 16);
  check_grid(s.batch, s.heads_q);
  if (s.batch == 0 || s.total_q == 0) return;

  in.run(ragged_params(p, s, in.rows(KvKind::kSame)), KvKind::kSame, exec.stream);
}

}  // namespace flashback::cuda::prefill

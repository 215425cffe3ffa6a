// SIMD kernels of the fast CPU attention, compiled once per Highway target (SSE4, AVX2, ...) and
// picked at run time. A task's rows (q token × q head of one KV group) are scored against tiles
// of kTileKeys keys, the softmax is online in fp32, and each split of kSplitKeys keys yields a
// partial state (m, l, unnormalised O) merged in split order. This file walks splits and tiles;
// the micro-kernels are in decode-inl.h (up to 16 rows per KV head: K/V read in place) and
// prefill-inl.h (many rows: rows in vector lanes). The per-element operation order never depends
// on which rows share a task or on threads, so results are bitwise reproducible.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fast/attention_kernel.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "cpu/fast/decode-inl.h"
#include "cpu/fast/prefill-inl.h"
#include "cpu/fast/simd-inl.h"
#include "hwy/highway.h"

#ifndef FLASHBACK_CPU_FAST_ATTENTION_KERNEL_ONCE
#define FLASHBACK_CPU_FAST_ATTENTION_KERNEL_ONCE
#include <vector>

#include "cpu/fast/amx.h"
#include "cpu/fast/dpbf16.h"
#include "cpu/reference.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace flashback::cpu_fast::HWY_NAMESPACE {

// The dpbf16 path (dpbf16.h) runs from the AVX-512 targets only, so forcing a lower target
// (test_fast_targets) runs the fp32 tile path on the same host.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kDpbf16Target = true;
#else
constexpr bool kDpbf16Target = false;
#endif

struct Scratch {
  LineVector<float> q, k, v, s, part;
  std::vector<int64_t> k_off, v_off;
  // Row pointers of tile key j: in place at [j] (see Rows), fp32 tiles of KV head gi at
  // [gi · kTileKeys + j]; pk/pv: the next tile's rows, in place.
  std::vector<const void*> kp, vp, pk, pv;
  std::vector<const char*> next_list;  // the next tile's rows in prefetch order (NextRows)
  LineVector<float> qt, st, wm, row_lo, row_hi;     // transposed (wide) path
  LineVector<uint16_t> qb, kstage, vstage, pstage;  // AMX (amx.h): packed q, staged K, V, P
  LineVector<float> row_scale;                      // AMX and dpbf16.h: q_scale of each row
  LineVector<uint16_t> kv16;                        // fp8 K/V tiles widened to bf16
  LineVector<uint32_t> pwords;                      // dpbf16.h: P as bf16 pairs
};

Scratch& scratch() {
  thread_local Scratch sc;
  return sc;
}

float descale(const float* d, int64_t s0, int64_t s1, int64_t b, int64_t g) {
  return d ? d[b * s0 + g * s1] : 1.0f;
}

// Token and q head of the task's row (gi, ti, hi): KV head t.g + gi, token t.t0 + ti of the
// entry, q head t.h0 + hi of that KV head's group.
struct TokHead {
  int64_t tok, h;
};
TokHead tok_head(const AttnArgs& a, const Task& t, int64_t gi, int64_t ti, int64_t hi) {
  return {t.q0 + t.t0 + ti, (t.g + gi) * a.group + t.h0 + hi};
}

// scale and 1/softcap: folded into q so scores come out as logits (or as logit / softcap, the
// argument of tanh).
float pre_scale(const AttnArgs& a) { return a.scale / (a.softcap > 0 ? a.softcap : 1.0f); }

// The factor of KV head gi's q rows: pre_scale and the fp8 key descale.
float q_scale(const AttnArgs& a, const Task& t, int64_t gi) {
  return pre_scale(a) * descale(a.k_descale, a.kd_s0, a.kd_s1, t.b, t.g + gi);
}

// q rows of the task as fp32 (stride qs), times q_scale. MLA rows are [q_rope | q_nope] to
// match the [k_rope | c_kv] tile rows (q_nope times the value descale instead of the key's).
void load_q(const AttnArgs& a, const Task& t, int64_t qs, float* q) {
  const int64_t head_rows = t.nt * t.nh, dp = pad(a.head_dim);
  const int64_t dqvp = a.qv ? pad(a.head_dim_qv) : 0;
  const float pre = pre_scale(a);
  const auto* qb = static_cast<const char*>(a.q);
  const auto* qvb = static_cast<const char*>(a.qv);
  const int64_t qsz = dtype_size(a.q_dtype);
  for (int64_t gi = 0; gi < t.ng; ++gi) {
    const float f = q_scale(a, t, gi);
    const float vd = descale(a.v_descale, a.vd_s0, a.vd_s1, t.b, t.g + gi);
    for (int64_t ti = 0; ti < t.nt; ++ti)
      for (int64_t hi = 0; hi < t.nh; ++hi) {
        float* qr = q + (gi * head_rows + ti * t.nh + hi) * qs;
        const auto [tok, h] = tok_head(a, t, gi, ti, hi);
        convert_row(qb + (tok * a.q_s0 + h * a.q_s1) * qsz, a.q_dtype, a.head_dim, dp, qr);
        for (int64_t d = 0; d < a.head_dim; ++d) qr[d] *= f;
        if (a.qv) {
          convert_row(qvb + (tok * a.qv_s0 + h * a.qv_s1) * qsz, a.q_dtype, a.head_dim_qv, dqvp,
                      qr + dp);
          for (int64_t d = 0; d < a.head_dim_qv; ++d) qr[dp + d] *= pre * vd;
        }
      }
  }
}

// The raw bf16 q rows of the task (row r of KV head gi at rows[r], r < head_rows) handed to
// pack(gi, rows) per KV head, and the q_scale of each row into sc.row_scale (ra entries, zero
// past the task's rows): the inputs of the AMX and the dpbf16 paths, which scale the scores.
template <class Pack>
void raw_q(const AttnArgs& a, const Task& t, int64_t head_rows, int64_t ra, Scratch& sc,
           Pack&& pack) {
  sc.row_scale.assign(static_cast<size_t>(ra), 0.0f);
  const auto* qbase = static_cast<const uint16_t*>(a.q);
  const uint16_t* qrow[kMaxRows];
  for (int64_t gi = 0; gi < t.ng; ++gi) {
    const float f = q_scale(a, t, gi);
    for (int64_t ti = 0; ti < t.nt; ++ti)
      for (int64_t hi = 0; hi < t.nh; ++hi) {
        const int64_t r = ti * t.nh + hi;
        const auto [tok, h] = tok_head(a, t, gi, ti, hi);
        qrow[r] = qbase + tok * a.q_s0 + h * a.q_s1;
        sc.row_scale[static_cast<size_t>(gi * head_rows + r)] = f;
      }
    pack(gi, qrow);
  }
}

// The AMX path's per-task inputs (amx.h): each KV head's raw bf16 q rows packed as the B
// operand, the q_scale of each row, and the stage buffers.
void prepare_amx(const AttnArgs& a, const Task& t, int64_t head_rows, int64_t ra, Scratch& sc) {
  sc.qb.resize(static_cast<size_t>(t.ng * a.head_dim * head_rows));
  sc.kstage.resize(static_cast<size_t>(amx::kKeys * t.ng * a.head_dim));
  sc.vstage.resize(static_cast<size_t>(kTileKeys * a.head_dim_v));
  sc.pstage.resize(static_cast<size_t>(amx::kPStage));
  raw_q(a, t, head_rows, ra, sc, [&](int64_t gi, const uint16_t* const* qrow) {
    amx::pack_q(qrow, head_rows, a.head_dim, sc.qb.data() + gi * a.head_dim * head_rows);
  });
}

// The dpbf16 path's (dpbf16.h): the task's raw bf16 q rows one after another, the q_scale of
// each row, and the P stage.
void prepare_dpbf16(const AttnArgs& a, const Task& t, int64_t head_rows, int64_t ra, Scratch& sc) {
  const int64_t dims = a.head_dim;
  sc.qb.resize(static_cast<size_t>(t.ng * head_rows * dims));
  sc.pwords.resize(static_cast<size_t>(dpbf16::pstage_words(kTileKeys, ra)));
  raw_q(a, t, head_rows, ra, sc, [&](int64_t gi, const uint16_t* const* qrow) {
    for (int64_t r = 0; r < head_rows; ++r)
      std::copy(qrow[r], qrow[r] + dims, sc.qb.data() + (gi * head_rows + r) * dims);
  });
}

// fp8 K/V rows of tile keys [j0, j1) (offsets ko, vo from key j0, in bytes) widened to bf16 into
// the stage k16 / v16 ([key][KV head][dim]; exact), and kp / vp pointed at each key's first head.
void stage_fp8_tile(const AttnArgs& a, const Task& t, const int64_t* ko, const int64_t* vo,
                    int64_t j0, int64_t j1, uint16_t* k16, uint16_t* v16, const void** kp,
                    const void** vp) {
  const auto* kb = static_cast<const uint8_t*>(a.k);
  const auto* vb = static_cast<const uint8_t*>(a.v);
  auto rows = [&](auto e4m3) {
    for (int64_t j = j0; j < j1; ++j) {
      uint16_t* kr = k16 + j * t.ng * a.head_dim;
      uint16_t* vr = v16 + j * t.ng * a.head_dim_v;
      for (int64_t gi = 0; gi < t.ng; ++gi) {
        fp8_row_to_bf16<decltype(e4m3)::value>(kb + ko[j - j0] + gi * a.k_head, a.head_dim,
                                               kr + gi * a.head_dim);
        fp8_row_to_bf16<decltype(e4m3)::value>(vb + vo[j - j0] + gi * a.v_head, a.head_dim_v,
                                               vr + gi * a.head_dim_v);
      }
      kp[j] = kr;
      vp[j] = vr;
    }
  };
  if (a.kv_dtype == DType::kF8E4M3)
    rows(std::true_type{});
  else
    rows(std::false_type{});
}

void RunSplits(const AttnArgs& a, const Task& t, int64_t s_lo, int64_t s_hi, float* state,
               int64_t stride, SplitClaim claim) {
  const int64_t rows = t.rows(), head_rows = t.nt * t.nh;  // rows per KV head
  const int64_t dp = pad(a.head_dim), dqvp = a.qv ? pad(a.head_dim_qv) : 0;
  const int64_t dvp = pad(a.head_dim_v);
  const bool mla = a.qv != nullptr;
  // MLA: the tile row is [k_rope | c_kv] so one dot gives q_rope·k_rope + q_nope·c_kv, and the
  // values are read from the c_kv part of the same buffer (converted once).
  const int64_t qs = dp + dqvp, ks = mla ? dp + dvp : dp;
  Scratch& sc = scratch();
  sc.q.resize(static_cast<size_t>(kMaxRows * qs));
  sc.k.resize(static_cast<size_t>(t.ng * kTileKeys * ks));
  if (!mla) sc.v.resize(static_cast<size_t>(t.ng * kTileKeys * dvp));
  sc.s.resize(static_cast<size_t>(kMaxRows * kTileKeys));
  sc.part.resize(static_cast<size_t>(state_floats(a)));
  sc.k_off.resize(2 * kTileKeys);
  sc.v_off.resize(2 * kTileKeys);
  // Tile buffers hold KV head gi's keys at [gi · kTileKeys · stride].
  float* vbuf = mla ? sc.k.data() + dp : sc.v.data();
  const int64_t vs = mla ? ks : dvp;
  load_q(a, t, qs, sc.q.data());

  // Key range of each token of the task.
  int64_t lo[kMaxRows], hi[kMaxRows];
  int64_t u_lo = t.kv_len, u_hi = -1;
  for (int64_t ti = 0; ti < t.nt; ++ti) {
    const auto kr = reference::visible_keys(t.t0 + ti, t.q_len, t.kv_len, a.causal, a.window_left,
                                            a.window_right);
    lo[ti] = kr.lo;
    hi[ti] = kr.hi;
    if (kr.lo <= kr.hi) {
      u_lo = std::min(u_lo, kr.lo);
      u_hi = std::max(u_hi, kr.hi);
    }
  }

  if (stride == 0) clear_state(state, rows, dvp);
  const auto* kbase = static_cast<const char*>(a.k);
  const auto* vbase = static_cast<const char*>(a.v);
  const int64_t esz = dtype_size(a.kv_dtype);
  // Reading K/V in place (no fp32 copy) pays when few rows share each key: the copy would be
  // read back only a few times. Needs whole vectors per row (no reads past a row's end).
  const int64_t N = lanes();
  // The tile kernels (decode-inl.h) take bf16 and fp16 K/V in place, and fp8 K/V with each tile's
  // rows widened to bf16 once (exact; fp8x32_to_bf16) into sc.kv16, [key][KV head][dim], read
  // there as if in place: 1.5x less time from DRAM than fp32 tiles and the generic path (session
  // 45; staged through fp8_to_f32's ~2 instructions a value, equal to them).
  const bool dims_2n = N <= 16 && a.head_dim % (2 * N) == 0 && a.head_dim_v % (2 * N) == 0;
  const bool fp8_tiles = is_fp8(a.kv_dtype) && !mla && dims_2n;
  const bool tile_kv =
      !mla && dims_2n && (fp8_tiles || a.kv_dtype == DType::kBF16 || a.kv_dtype == DType::kF16);
  // Rows per KV head read against K/V in place: up to 8; up to 16 on the tile kernels, where 12
  // and 16 rows (verify with GQA 4) took 0.82 and 0.92x the transposed path's time (session 45;
  // 32 rows gained nothing in single runs).
  const int64_t direct_rows = tile_kv ? 16 : 8;
  const bool fp8_staged = fp8_tiles && head_rows <= direct_rows;
  const DType tile_dtype = fp8_staged ? DType::kBF16 : a.kv_dtype;  // as the kernels read it
  // Bytes between KV heads' rows of a key as the tile kernels read them.
  const int64_t k_head_bytes = fp8_staged ? 2 * a.head_dim : a.k_head * esz;
  const int64_t v_head_bytes = fp8_staged ? 2 * a.head_dim_v : a.v_head * esz;
  if (fp8_staged)
    sc.kv16.resize(static_cast<size_t>(kTileKeys * t.ng * (a.head_dim + a.head_dim_v)));
  uint16_t* k16 = sc.kv16.data();
  uint16_t* v16 = k16 + kTileKeys * t.ng * a.head_dim;
  const bool direct = !mla && (!is_fp8(a.kv_dtype) || fp8_staged) && head_rows <= direct_rows &&
                      a.head_dim % N == 0 && a.head_dim_v % N == 0;
  const int64_t qk_len = direct ? a.head_dim : qs, pv_len = direct ? a.head_dim_v : dvp;
  // More rows per KV head: the transposed (rows-in-lanes) path.
  const bool wide = head_rows > direct_rows;
  // bf16 K/V read in place as pairs (decode-inl.h), O rows de-interleaved in chunks of 2N: in
  // decode with q rows de-interleaved to match; in the wide path K needs only even rows (pairs
  // of elements broadcast), so no fp32 tile is built.
  const bool bf16_pairs = tile_dtype == DType::kBF16 && N <= 16 && a.head_dim_v % (2 * N) == 0;
  const bool wide_pairs = wide && bf16_pairs && !mla && a.head_dim % 2 == 0;
  const bool pairs = (direct && bf16_pairs && a.head_dim % (2 * N) == 0) || wide_pairs;
  const bool in_place = direct || wide_pairs;  // else K/V rows are converted to fp32 tiles
  // Decode and verify over bf16 pairs (up to 16 rows per KV head): a tile's scores for all the
  // task's KV heads in one pass, two keys at a time, 4 rows per pass (scores_tile_pairs; groups of
  // 4 rows that span KV heads where a head has 1-3, 5-7), then softmax and P·V (pv_tile_pairs).
  // fp16 K/V on the same tile kernels, 2N elements as two vectors in order (F16Halves).
  const bool f16_halves = direct && tile_dtype == DType::kF16 && dims_2n;
  const bool tile_scores = direct && (pairs || f16_halves);
  if (pairs && direct)
    for (int64_t r = 0; r < rows; ++r) permute_pairs(sc.q.data() + r * qs, a.head_dim, true);
  // The last group of 4 rows' padding rows score zeros (masked by the softmax).
  if (tile_scores) std::fill(sc.q.data() + rows * qs, sc.q.data() + (rows + 3) / 4 * 4 * qs, 0.0f);
  const int64_t rp = (head_rows + N - 1) / N * N;
  if (wide) {
    sc.qt.assign(static_cast<size_t>(t.ng * qs * rp), 0.0f);
    for (int64_t gi = 0; gi < t.ng; ++gi)
      for (int64_t r = 0; r < head_rows; ++r)
        for (int64_t d = 0; d < qs; ++d)
          sc.qt[(gi * qs + d) * rp + r] = sc.q[(gi * head_rows + r) * qs + d];
    sc.st.resize(static_cast<size_t>(kTileKeys * rp));
    sc.wm.assign(static_cast<size_t>(3 * rp), kNegInf);
    std::fill(sc.wm.begin() + rp, sc.wm.end(), 0.0f);
    // Key range of each row as floats (exact below 2^24); padding rows see nothing.
    sc.row_lo.assign(static_cast<size_t>(rp), 1.0f);
    sc.row_hi.assign(static_cast<size_t>(rp), 0.0f);
    for (int64_t r = 0; r < head_rows; ++r) {
      sc.row_lo[r] = static_cast<float>(lo[r / t.nh]);
      sc.row_hi[r] = static_cast<float>(hi[r / t.nh]);
    }
  }
  // tile_scores: scores of all the task's rows transposed ([key][row], rows padded to ra), the
  // softmax with rows in lanes (wide_softmax), weights read back by P·V with a key stride.
  // (A multiple of 4 too, for scores_tile_pairs' groups of 4 rows, where a vector has fewer lanes.)
  const int64_t rq = std::max<int64_t>(N, 4);
  const int64_t ra = (rows + rq - 1) / rq * rq;
  static_assert(kTileKeys == 2 * amx::kKeys, "amx::pv_tile takes tiles of 32 keys");
  // Scores and P·V on AMX tiles where the host has them (amx.h): raw bf16 q and K (exact
  // products), the scale folded in per row afterwards; P rounded to bf16 for P·V.
  const bool use_amx = tile_scores && !f16_halves && a.q_dtype == DType::kBF16 &&
                       a.head_dim % 32 == 0 && a.head_dim_v % 64 == 0 &&
                       a.head_dim_v <= amx::kMaxDv && head_rows % 4 == 0 &&
                       head_rows <= amx::kMaxRows && amx::usable();
  struct AmxTiles {  // this thread's tile configuration, for the task
    bool on;
    ~AmxTiles() {
      if (on) amx::end();
    }
  } amx_tiles{use_amx};
  if (use_amx) {
    prepare_amx(a, t, head_rows, ra, sc);
    amx::begin(head_rows);
  }
  // Elsewhere, on AVX-512 targets, scores and P·V by VDPBF16PS where the host has AVX512-BF16
  // (dpbf16.h): raw bf16 q and K, P rounded to bf16.
  const bool use_dpbf16 = kDpbf16Target && !use_amx && tile_scores && !f16_halves &&
                          head_rows % 4 == 0 && head_rows <= 8 && a.q_dtype == DType::kBF16 &&
                          a.head_dim % 32 == 0 && a.head_dim_v % 64 == 0 &&
                          2 * a.head_dim_v <= NextRows::kSpareBytes && dpbf16::usable();
  if (use_dpbf16) prepare_dpbf16(a, t, head_rows, ra, sc);
  if (tile_scores) {
    sc.st.resize(static_cast<size_t>(kTileKeys * ra));
    sc.wm.resize(static_cast<size_t>(ra));
    sc.row_lo.assign(static_cast<size_t>(ra), 1.0f);
    sc.row_hi.assign(static_cast<size_t>(ra), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t ti = (r % head_rows) / t.nh;
      sc.row_lo[r] = static_cast<float>(lo[ti]);
      sc.row_hi[r] = static_cast<float>(hi[ti]);
    }
  }
  for (auto* p : {&sc.kp, &sc.vp, &sc.pk, &sc.pv}) p->resize(static_cast<size_t>(t.ng * kTileKeys));
  sc.next_list.resize(static_cast<size_t>(NextRows::slots_for(kTileKeys, t.ng)));
  const void** kp = sc.kp.data();
  const void** vp = sc.vp.data();
  float* part = sc.part.data();
  // Split sp's key range [k_lo, k_hi] (empty when k_lo > k_hi) and the tile-local loaded range
  // [j0, j1) of tile ts within it.
  auto split_range = [&](int64_t sp, int64_t& k_lo, int64_t& k_hi) {
    k_lo = std::max(u_lo, sp * kSplitKeys);
    k_hi = std::min(u_hi, (sp + 1) * kSplitKeys - 1);
  };
  auto tile_range = [](int64_t k_lo, int64_t k_hi, int64_t ts, int64_t& j0, int64_t& j1) {
    j0 = std::max(k_lo, ts) - ts;
    j1 = std::min(k_hi, ts + kTileKeys - 1) - ts + 1;
  };
  // Offsets of tile ts's loaded keys (split range [k_lo, k_hi]) to (ko, vo); returns their count.
  auto tile_offsets = [&](int64_t k_lo, int64_t k_hi, int64_t ts, int64_t* ko, int64_t* vo) {
    int64_t j0, j1;
    tile_range(k_lo, k_hi, ts, j0, j1);
    key_offsets(a, t, ts + j0, j1 - j0, ko, vo);
    return j1 - j0;
  };
  // The tile after tile ts of split sp, crossing into the next non-empty split of the range, so
  // that the last tile of a split prefetches the first one of the next (split boundaries are
  // tile boundaries). Offsets of its keys go to (ko, vo); returns their count (0: no next tile).
  auto next_tile_offsets = [&](int64_t sp, int64_t ts, int64_t* ko, int64_t* vo) -> int64_t {
    int64_t k_lo, k_hi;
    split_range(sp, k_lo, k_hi);
    ts += kTileKeys;
    while (ts > k_hi || k_lo > k_hi) {
      if (++sp >= s_hi) return 0;
      split_range(sp, k_lo, k_hi);
      ts = k_lo / kTileKeys * kTileKeys;
    }
    return tile_offsets(k_lo, k_hi, ts, ko, vo);
  };
  // Offsets of tile ts's keys are in (ko, vo); the next tile's are computed one step ahead and
  // its rows prefetched, because with random page placement the hardware prefetcher cannot
  // follow the key rows and each tile would otherwise wait on memory latency.
  int64_t* ko = sc.k_off.data();
  int64_t* vo = sc.v_off.data();
  int64_t* ko_next = ko + kTileKeys;
  int64_t* vo_next = vo + kTileKeys;
  bool first = true;  // no tile of the range has run yet (so none prefetched this one)
  for (int64_t sp = s_lo; sp < s_hi; ++sp) {
    if (sp > s_lo && stride > 0 && !claim()) break;  // the rest is another thread's now
    int64_t k_lo, k_hi;
    split_range(sp, k_lo, k_hi);
    if (stride > 0) part = state + (sp - s_lo) * stride;  // the split's own state
    if (k_lo > k_hi) {
      if (stride > 0) clear_state(part, rows, dvp);
      continue;
    }
    clear_state(part, rows, dvp);
    float* pm = part;
    float* pl = part + kMaxRows;
    float* po = part + 2 * kMaxRows;
    const int64_t first_tile = k_lo / kTileKeys * kTileKeys;
    if (first) tile_offsets(k_lo, k_hi, first_tile, ko, vo);  // else the tile before did
    for (int64_t ts = first_tile; ts <= k_hi; ts += kTileKeys) {
      // Tile-local loaded range [j0, j1).
      int64_t j0, j1;
      tile_range(k_lo, k_hi, ts, j0, j1);
      const int64_t nn = next_tile_offsets(sp, ts, ko_next, vo_next);
      const bool first_of_range = first;
      first = false;
      // Row pointers of the task's first KV head; head gi adds gi · k_head elements (Rows::off).
      for (int64_t i = 0; i < nn; ++i) {
        sc.pk[i] = kbase + ko_next[i] * esz;
        sc.pv[i] = vbase + vo_next[i] * esz;
      }
      if (fp8_staged) {
        stage_fp8_tile(a, t, ko, vo, j0, j1, k16, v16, kp, vp);
      } else if (in_place) {
        // Read K/V rows in place, widening as they load.
        for (int64_t j = j0; j < j1; ++j) {
          kp[j] = kbase + ko[j - j0] * esz;
          vp[j] = vbase + vo[j - j0] * esz;
        }
      } else {
        // Many rows (prefill) or fp8/MLA/odd dims: convert each K/V row to fp32 once.
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t gi = 0; gi < t.ng; ++gi) {
            const int64_t jb = gi * kTileKeys + j;
            convert_row(kbase + (ko[j - j0] + gi * a.k_head) * esz, a.kv_dtype, a.head_dim, dp,
                        sc.k.data() + jb * ks);
            convert_row(vbase + (vo[j - j0] + gi * a.v_head) * esz, a.kv_dtype, a.head_dim_v, dvp,
                        vbuf + jb * vs);
            kp[jb] = sc.k.data() + jb * ks;
            vp[jb] = vbuf + jb * vs;
          }
      }
      std::swap(ko, ko_next);
      std::swap(vo, vo_next);
      if (tile_scores) {
        // The next tile's K and V stream into L2 over this tile's scores and P·V (NextRows);
        // the range's first tile, which no tile before it prefetched, is fetched at once.
        auto stream = [&](const void* const* k, const void* const* v, int64_t n) {
          return NextRows(k, v, n, t.ng, a.k_head * esz, a.v_head * esz, a.head_dim * esz,
                          a.head_dim_v * esz, sc.next_list.data());
        };
        if (first_of_range && !fp8_staged) stream(kp + j0, vp + j0, j1 - j0).finish();
        NextRows next = stream(sc.pk.data(), sc.pv.data(), nn);
        if (use_amx)
          amx::scores_tile(sc.qb.data(), t.ng, head_rows, a.head_dim, kp, k_head_bytes, j0, j1,
                           sc.st.data(), ra, sc.row_scale.data(), sc.kstage.data(), &next);
        else if (use_dpbf16)
          dpbf16::scores_tile(sc.qb.data(), a.head_dim, head_rows, t.ng, kp, k_head_bytes, j0, j1,
                              sc.st.data(), ra, sc.row_scale.data(), next);
        else if (f16_halves)
          scores_tile_f16(sc.q.data(), qs, head_rows, t.ng, Rows{kp, 0}, k_head_bytes, qk_len, j0,
                          j1, sc.st.data(), ra, next);
        else
          scores_tile_bf16(sc.q.data(), qs, head_rows, t.ng, Rows{kp, 0}, k_head_bytes, qk_len, j0,
                           j1, sc.st.data(), ra, next);
        // m, l of padding rows stay -inf, 0 (they see no key); pm, pl hold kMaxRows ≥ ra.
        float* alpha = sc.wm.data();
        wide_softmax(sc.st.data(), ra, j0, j1, ts, sc.row_lo.data(), sc.row_hi.data(), a.softcap,
                     pm, pl, alpha, &next);
        for (int64_t r = 0; r < rows; ++r)
          if (alpha[r] != 1.0f) scale_row(po + r * dvp, dvp, alpha[r]);
        if (use_amx) {
          for (int64_t gi = 0; gi < t.ng; ++gi) {
            const int64_t r0 = gi * head_rows;
            amx::pv_tile(sc.st.data() + r0, ra, head_rows, vp, gi * v_head_bytes, j0, j1,
                         po + r0 * dvp, dvp, a.head_dim_v, sc.vstage.data(), sc.pstage.data(),
                         &next);
          }
        } else if (use_dpbf16) {
          dpbf16::pv_tile(sc.st.data(), ra, head_rows, t.ng, vp, v_head_bytes, j0, j1, po, dvp,
                          a.head_dim_v, sc.pwords.data(), next);
        } else if (f16_halves) {
          pv_tile_f16(sc.st.data(), ra, head_rows, t.ng, Rows{vp, 0}, v_head_bytes, j0, j1, po, dvp,
                      a.head_dim_v, next);
        } else {
          pv_tile_bf16(sc.st.data(), ra, head_rows, t.ng, Rows{vp, 0}, v_head_bytes, j0, j1, po,
                       dvp, a.head_dim_v, next);
        }
        next.finish();
        continue;
      }
      for (int64_t gi = 0; gi < t.ng; ++gi) {
        const int64_t k_off = gi * a.k_head * esz, v_off = gi * a.v_head * esz;
        const Prefetch pf{
            {sc.pk.data(), k_off}, {sc.pv.data(), v_off}, nn, a.head_dim * esz, a.head_dim_v * esz};
        const int64_t r0 = gi * head_rows;
        const Rows kg = in_place ? Rows{kp, k_off} : Rows{kp + gi * kTileKeys, 0};
        const Rows vg = in_place ? Rows{vp, v_off} : Rows{vp + gi * kTileKeys, 0};
        float* s0 = sc.s.data() + r0 * kTileKeys;
        float* o0 = po + r0 * dvp;
        auto run = [&](auto tag) {
          using T = decltype(tag);
          scores<T>(sc.q.data() + r0 * qs, qs, head_rows, kg, qk_len, j0, j1, s0, pf);
          for (int64_t ti = 0; ti < t.nt; ++ti) {
            const int64_t ra = std::max(lo[ti], ts + j0) - ts;
            const int64_t re = std::min(hi[ti], ts + j1 - 1) - ts;
            for (int64_t hi2 = 0; hi2 < t.nh; ++hi2) {
              const int64_t r = r0 + ti * t.nh + hi2;
              float* srow = sc.s.data() + r * kTileKeys;
              if (ra > re) {  // nothing visible here: weights 0, state untouched
                std::fill(srow, srow + kTileKeys, 0.0f);
                continue;
              }
              softmax_row(srow, ra, re, a.softcap, pm[r], pl[r], po + r * dvp, dvp);
            }
          }
          accumulate<T, kTileKeys>(s0, 1, head_rows, vg, j0, j1, o0, dvp, pv_len);
        };
        if (wide) {
          // Transposed path: m, l of this head's rows as whole vectors (padding lanes empty).
          pf.rows(0, nn);  // ample compute per tile hides one burst
          float* wm = sc.wm.data();
          float* wl = wm + rp;
          float* wa = wl + rp;
          std::copy(pm + r0, pm + r0 + head_rows, wm);
          std::copy(pl + r0, pl + r0 + head_rows, wl);
          if (wide_pairs)
            wide_scores<Bf16Pairs>(sc.qt.data() + gi * qs * rp, rp, kg, a.head_dim, j0, j1,
                                   sc.st.data());
          else
            wide_scores<float>(sc.qt.data() + gi * qs * rp, rp, kg, qs, j0, j1, sc.st.data());
          wide_softmax(sc.st.data(), rp, j0, j1, ts, sc.row_lo.data(), sc.row_hi.data(), a.softcap,
                       wm, wl, wa);
          std::copy(wm, wm + head_rows, pm + r0);
          std::copy(wl, wl + head_rows, pl + r0);
          for (int64_t r = 0; r < head_rows; ++r)
            if (wa[r] != 1.0f) scale_row(o0 + r * dvp, dvp, wa[r]);
          if (wide_pairs)
            accumulate<Bf16Pairs, 1>(sc.st.data(), rp, head_rows, vg, j0, j1, o0, dvp,
                                     a.head_dim_v);
          else
            accumulate<float, 1>(sc.st.data(), rp, head_rows, vg, j0, j1, o0, dvp, dvp);
        } else if (!direct || a.kv_dtype == DType::kF32) {
          run(float{});
        } else if (pairs) {
          run(Bf16Pairs{});
        } else if (a.kv_dtype == DType::kBF16) {
          run(hwy::bfloat16_t{});
        } else {
          run(hwy::float16_t{});
        }
      }
    }
    if (use_amx)
      for (int64_t r = 0; r < rows; ++r) amx::unsplit_columns(po + r * dvp, dvp, a.head_dim_v);
    else if (use_dpbf16)
      for (int64_t r = 0; r < rows; ++r) dpbf16::unsplit_columns(po + r * dvp, a.head_dim_v);
    else if (pairs)
      for (int64_t r = 0; r < rows; ++r) permute_pairs(po + r * dvp, a.head_dim_v, false);
    if (stride == 0) merge_state_rows(state, part, rows, dvp);
  }
}

void Finish(const AttnArgs& a, const Task& t, const float* states, int64_t n) {
  const int64_t rows = t.rows(), dvp = pad(a.head_dim_v), sf = state_floats(a);
  Scratch& sc = scratch();
  sc.part.resize(static_cast<size_t>(sf));
  float* run = sc.part.data();
  clear_state(run, rows, dvp);
  for (int64_t i = 0; i < n; ++i) merge_state_rows(run, states + i * sf, rows, dvp);
  auto* out = static_cast<char*>(a.out);
  const int64_t osz = dtype_size(a.out_dtype);
  for (int64_t gi = 0; gi < t.ng; ++gi) {
    const float vd = descale(a.v_descale, a.vd_s0, a.vd_s1, t.b, t.g + gi);
    for (int64_t ti = 0; ti < t.nt; ++ti)
      for (int64_t hi = 0; hi < t.nh; ++hi) {
        const int64_t r = (gi * t.nt + ti) * t.nh + hi;
        const auto [tok, h] = tok_head(a, t, gi, ti, hi);
        const float m = run[r], l = run[kMaxRows + r];
        // No key seen (l = 0): zeros and LSE -inf. A NaN score (from q, or from K at a key the
        // row sees) leaves l NaN, m possibly -inf (a max drops NaNs): the row comes out NaN.
        const bool empty = l == 0.0f;
        const float inv = empty ? 0.0f : vd / l;
        float* o = run + 2 * kMaxRows + r * dvp;
        for (int64_t d = 0; d < a.head_dim_v; ++d) o[d] = empty ? 0.0f : o[d] * inv;
        store_f32_row(o, a.head_dim_v, out + (tok * a.out_s0 + h * a.out_s1) * osz, a.out_dtype);
        if (a.lse) a.lse[tok * a.lse_s0 + h * a.lse_s1] = empty ? kNegInf : m + std::log(l);
      }
  }
}

void WidenRow(const void* src, DType dt, int64_t n, float* dst) { convert_row(src, dt, n, n, dst); }

void Fp8RowToBf16(const uint8_t* src, DType dt, int64_t n, uint16_t* dst) {
  if (dt == DType::kF8E4M3)
    fp8_row_to_bf16<true>(src, n, dst);
  else
    fp8_row_to_bf16<false>(src, n, dst);
}

}  // namespace flashback::cpu_fast::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashback::cpu_fast {

HWY_EXPORT(RunSplits);
HWY_EXPORT(Finish);
HWY_EXPORT(WidenRow);
HWY_EXPORT(Fp8RowToBf16);

void run_splits(const AttnArgs& a, const Task& t, int64_t s_lo, int64_t s_hi, float* state,
                int64_t stride, SplitClaim claim) {
  HWY_DYNAMIC_DISPATCH(RunSplits)(a, t, s_lo, s_hi, state, stride, claim);
}

void finish(const AttnArgs& a, const Task& t, const float* states, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Finish)(a, t, states, n);
}

void widen_row(const void* src, DType dt, int64_t n, float* dst) {
  HWY_DYNAMIC_DISPATCH(WidenRow)(src, dt, n, dst);
}

void fp8_row_to_bf16(const uint8_t* src, DType dt, int64_t n, uint16_t* dst) {
  HWY_DYNAMIC_DISPATCH(Fp8RowToBf16)(src, dt, n, dst);
}

}  // namespace flashback::cpu_fast
#endif  // HWY_ONCE

// GPU short-query paged attention against the CPU oracle: every variant of issue #6 on fresh
// random inputs (testing::make_paged places pages randomly and poisons outputs, on the device
// too), ragged lengths including 0, 1 and page boundaries, P in {1, 16, 64}, GQA 1/4/8/16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device_data.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback {
namespace {

using testing::AttentionCase;
using testing::PagedData;

const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};

std::vector<int> built_head_dims() { return testing::head_dims(FLASHBACK_TEST_HEAD_DIMS); }

uint64_t next_seed() {
  static uint64_t s = 0x5eed;
  return ++s;
}

// Lengths that hit 0, 1 and both sides of page boundaries, plus a few long ones.
std::vector<int> boundary_lengths(int P) {
  std::vector<int> v = {0, 1, P + 1, 2 * P, 3 * P + 5, 257, 1500};
  if (P > 1) v.push_back(P - 1);
  v.push_back(P);
  return v;
}

int max_of(const std::vector<int>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// Runs `c` on the GPU and the oracle on identical inputs; `mutate` may adjust the host data
// (e.g. add table_rows / kv_start) before both run.
void check(const AttentionCase& c, const Exec& exec = {},
           const std::function<void(PagedData&)>& mutate = {}, bool hint = true) {
  SCOPED_TRACE(c.describe());
  PagedData d = testing::make_paged(c, next_seed());
  if (hint) d.params.max_seqlen_q = std::max(1, max_of(c.q_lens));
  if (mutate) mutate(d);
  PagedData ref = testing::with_fresh_outputs(d);
  paged_attention(ref.params, kRef);
  testing::DevicePaged dp = testing::to_device(d);
  testing::run_on_device(dp, d, exec);
  const auto cmp = testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
  EXPECT_TRUE(cmp.ok) << cmp.why << " (rel " << cmp.rel_l2 << ", max abs " << cmp.max_abs
                      << ", lse " << cmp.lse_max_abs << ")";
}

AttentionCase decode_case(int D, int hq, int hk, int P, std::vector<int> kv) {
  AttentionCase c;
  c.heads_q = hq;
  c.heads_kv = hk;
  c.head_dim = D;
  c.page_size = P;
  c.kv_lens = std::move(kv);
  c.q_lens.assign(c.kv_lens.size(), 1);
  return c;
}

TEST(CudaDecode, PageSizesAndGqaRatios) {
  for (int D : built_head_dims())
    for (int P : {1, 16, 64})
      for (auto [hq, hk] : {std::pair{4, 4}, {8, 2}, {16, 2}, {32, 2}}) {
        AttentionCase c = decode_case(D, hq, hk, P, boundary_lengths(P));
        c.name = "decode";
        check(c);
      }
}

TEST(CudaDecode, VerifyAndRaggedShortQueries) {
  for (int D : built_head_dims()) {
    for (auto [hq, hk] : {std::pair{8, 2}, {16, 2}, {32, 2}}) {
      AttentionCase c = decode_case(D, hq, hk, 16, {4, 17, 64, 300, 1200});
      c.name = "verify q4";
      c.q_lens.assign(c.kv_lens.size(), 4);
      check(c);
    }
    std::mt19937_64 rng(next_seed());
    AttentionCase c = decode_case(D, 32, 2, 16, {});
    c.name = "ragged q 0..16 (256 rows per KV head)";
    c.q_lens = {0, 1, 16, 7, 3, 16, 0, 2};
    for (int q : c.q_lens) c.kv_lens.push_back(q + std::uniform_int_distribution<int>(0, 900)(rng));
    c.kv_lens[6] = 0;
    check(c);
  }
}

TEST(CudaDecode, Variants) {
  for (int D : built_head_dims()) {
    const std::vector<int> kv = {0, 1, 15, 16, 17, 129, 700, 2049};
    auto base = [&] { return decode_case(D, 8, 2, 16, kv); };
    {
      AttentionCase c = base();
      c.name = "window left";
      c.window_left = 100;
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "verify window";
      c.q_lens.assign(kv.size(), 3);
      for (int& k : c.kv_lens) k += 3;
      c.window_left = 37;
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "non-causal two-sided window";
      c.causal = false;
      c.q_lens.assign(kv.size(), 2);
      for (int& k : c.kv_lens) k += 2;
      c.window_left = 50;
      c.window_right = 20;
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "softcap";
      c.softcap = 5.0f;
      c.softmax_scale = 0.5f;
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "cross (non-causal)";
      c.causal = false;
      c.q_lens.assign(kv.size(), 2);
      check(c);
    }
    for (const AttentionCase& c : testing::storage_variants(base())) check(c);
    // Up to 8 rows per CTA run the warps-split-keys kernel narrow (S^T = K Q^T); 12 rows (3
    // queries x a group of 4) take its 16-row form, with each cache type too.
    for (AttentionCase c : testing::storage_variants(base())) {
      c.name += ", verify q3 (16-row form)";
      c.q_lens.assign(kv.size(), 3);
      for (int& k : c.kv_lens) k += 3;
      check(c);
    }
    {
      // fp8 caches run the tensor cores in fp16: q far outside fp16's range must still work.
      AttentionCase c = base();
      c.name = "fp8, q beyond fp16 range";
      c.kv_dtype = DType::kF8E4M3;
      c.q_stddev = 3.0e5;
      c.softmax_scale = 1.0e-6f;
      check(c);
    }
  }
}

TEST(CudaDecode, NoMaxSeqlenHint) {
  AttentionCase c = decode_case(built_head_dims()[0], 8, 2, 16, {5, 0, 300, 33});
  c.name = "decode without max_seqlen_q";
  check(c, {}, {}, /*hint=*/false);
}

TEST(CudaDecode, Splits) {
  const int D = built_head_dims()[0];
  AttentionCase c = decode_case(D, 16, 2, 16, {0, 1, 16, 33, 1000, 3000});
  c.q_lens = {1, 1, 2, 1, 4, 1};
  c.window_left = -1;
  for (int s : {1, 2, 5, 64}) {
    c.name = "num_splits " + std::to_string(s);
    check(c, {}, [s](PagedData& d) { d.params.num_splits = s; });
  }
  c.name = "deterministic";
  Exec det;
  det.deterministic = true;
  check(c, det);
  c.name = "deterministic window";
  c.window_left = 1500;
  check(c, det);
}

// q rows that are not 16-byte aligned (an odd head stride, inside a wider buffer): entry.cuh's
// RowChunks reads such rows element by element. 4 rows per KV head take the warps-split-keys
// kernel (its fp8 form scales q on the way in), 32 rows kernel.cuh.
TEST(CudaDecode, UnalignedQRows) {
  for (int D : built_head_dims())
    for (DType kv : {DType::kBF16, DType::kF8E4M3})
      for (int hq : {8, 64}) {
        AttentionCase c = decode_case(D, hq, 2, 16, {0, 1, 17, 300, 1025});
        c.kv_dtype = kv;
        c.name = "unaligned q rows";
        check(c, {}, [](PagedData& d) {
          const TensorView q = d.params.q;
          const int64_t T = q.shape[0], H = q.shape[1], Dq = q.shape[2];
          const int64_t hs = Dq + 1, ts = H * hs + 3;  // odd strides, first row one element in
          Tensor wide(q.dtype, {T * ts + 2});
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t x = 0; x < Dq; ++x)
                wide.set(1 + t * ts + h * hs + x, d.q.get((t * H + h) * Dq + x));
          d.params.q = TensorView(static_cast<unsigned char*>(wide.data()) + dtype_size(q.dtype),
                                  q.dtype, {T, H, Dq}, {ts, hs, 1});
          d.q = wide;  // the device mirror copies the whole buffer
        });
      }
}

// Longest-first entry order (entry.cuh, split_plan.h's order_longest_first): 128 ragged entries
// x 4 KV heads are a grid deeper than one wave for every built head dim, so the default rule
// ranks them; lengths 0, 1, page boundaries, ties, and entries with no query. With
// FLASHBACK_DECODE_ORDER=length (gpu_final.sh) every other decode test runs ranked too. (Sized
// for the CPU oracle: with 16 q heads and up to 1400 keys it took 96 s on the H200's host.)
TEST(CudaDecode, LongestFirstRaggedBatch) {
  for (int D : built_head_dims()) {
    std::vector<int> kv(128);
    std::mt19937 rng(static_cast<unsigned>(11 + D));
    for (int& k : kv) k = std::uniform_int_distribution<int>(0, 600)(rng);
    kv[0] = 0;
    kv[1] = 1;
    kv[2] = 600;
    kv[3] = 16;
    kv[4] = 600;  // a tie with kv[2]
    kv[127] = 17;
    AttentionCase c = decode_case(D, 4, 4, 16, kv);
    c.q_lens[5] = 0;  // an entry with no query
    c.name = "longest first";
    check(c);
    c.name = "longest first, fp8";
    c.kv_dtype = DType::kF8E4M3;
    check(c);
    c.kv_dtype = c.dtype;
    c.name = "longest first, window";
    c.window_left = 300;
    check(c);
  }
}

// Chunked-local attention and cross attention as the plan expresses them: entries that pick a
// row of the table (table_rows) and start at a key position (kv_start).
TEST(CudaDecode, TableRowsAndKvStart) {
  for (int D : built_head_dims())
    for (int P : {1, 16}) {
      AttentionCase c = decode_case(D, 8, 2, P, {64, 300, 1000, 45, 512});
      c.name = "virtual requests";
      c.q_lens = {1, 2, 1, 1, 3};
      SCOPED_TRACE(c.describe());
      PagedData d = testing::make_paged(c, next_seed());
      d.params.max_seqlen_q = 3;
      const int B = static_cast<int>(c.q_lens.size());
      Tensor rows(DType::kI32, {B}), start(DType::kI32, {B});
      std::mt19937_64 rng(next_seed());
      for (int b = 0; b < B; ++b) {
        const int r = (b * 3 + 1) % B;  // another request's row of the table
        const int full = c.kv_lens[r], q = c.q_lens[b];
        const int s = std::uniform_int_distribution<int>(0, std::max(0, full - q))(rng);
        const int len = std::uniform_int_distribution<int>(std::min(q, full - s), full - s)(rng);
        rows.ptr<int32_t>()[b] = r;
        start.ptr<int32_t>()[b] = s;
        d.cache_seqlens.ptr<int32_t>()[b] = len;
      }
      d.params.table_rows = rows;
      d.params.kv_start = start;
      PagedData ref = testing::with_fresh_outputs(d);
      paged_attention(ref.params, kRef);
      testing::DevicePaged dp = testing::to_device(d);
      dp.mirror.add(rows);
      dp.mirror.add(start);
      dp.params.table_rows = dp.mirror.rebase(rows);
      dp.params.kv_start = dp.mirror.rebase(start);
      testing::run_on_device(dp, d, {});
      const auto cmp = testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
      EXPECT_TRUE(cmp.ok) << cmp.why;
    }
}

#if FLASHBACK_TEST_MLA
TEST(CudaDecode, MlaAbsorbed) {
  for (int hq : {16, 128})
    for (DType kv : {DType::kBF16, DType::kF8E4M3}) {
      AttentionCase c = decode_case(64, hq, 1, 64, {0, 1, 63, 64, 65, 700});
      c.name = "mla";
      c.mla = true;
      c.head_dim_v = 512;
      c.kv_dtype = kv;
      if (hq == 16) {
        c.q_lens = {1, 1, 2, 1, 2, 1};
        for (int& k : c.kv_lens) k += 1;
      }
      check(c);
    }
}

// An MLA batch again in the deterministic mode, with a window, with softcap and in fp16 (the
// modes every MLA kernel's tests cover beyond the plain batch).
void check_mla_modes(AttentionCase c, const std::string& name) {
  Exec det;
  det.deterministic = true;
  c.name = name + " deterministic";
  check(c, det);
  c.name = name + " window";
  c.window_left = 100;
  check(c);
  c.window_left = -1;
  c.name = name + " softcap";
  c.softcap = 30.f;
  check(c);
  c.softcap = 0.f;
  c.name = name + " fp16";
  c.dtype = c.kv_dtype = DType::kF16;
  check(c);
}

// The edges of the Hopper MLA kernel (mla_wgmma.cuh; it takes 16-bit MLA on an sm_90a build
// and a 9.0 device, and FLASHBACK_DECODE_KERNEL=mma runs the same cases on kernel.cuh): its
// 64-key tiles and their boundaries (63, 64, 65, 127, 129 keys), page sizes 1 and 16, MTP rows
// spilling into a second 64-row block (32 heads x 3 queries), forced splits, the deterministic
// mode, a window, softcap and fp16.
TEST(CudaDecode, MlaAbsorbedVariants) {
  for (int P : {1, 16}) {
    AttentionCase c = decode_case(64, 32, 1, P, {0, 1, 63, 64, 65, 127, 129, 1000});
    c.name = "mla tiles";
    c.mla = true;
    c.head_dim_v = 512;
    c.q_lens = {1, 1, 2, 1, 3, 1, 2, 1};
    check(c);
    c.name = "mla num_splits 3";
    check(c, {}, [](PagedData& d) { d.params.num_splits = 3; });
    if (P == 1) continue;
    check_mla_modes(c, "mla");
  }
}

// MLA batches of <= 32 rows per block. 16 rows: 16 heads x 1 query, 8 heads x up to 2 queries
// (MTP rows with their own causal limits) and 4 x 4; 32 rows: 16 heads x up to 2 queries and
// 32 x 1. Over tile and page boundaries (0, 1, 63-65, 127, 129 keys and longer), page sizes 1 and
// 64, forced splits, and for 16 heads the deterministic mode, a window, softcap and fp16. On
// Hopper mla_narrow.cuh's kernel (keys as the MMAs' M; 16- and 32-row instances) takes them;
// gpu_final.sh runs the test again with FLASHBACK_MLA_NARROW=0 for mla_wgmma.cuh's 64-row kernel.
TEST(CudaDecode, MlaAbsorbedNarrow) {
  struct Shape {
    int hq;
    std::vector<int> q_lens;
  };
  const std::vector<Shape> shapes = {{16, {1, 1, 1, 1, 1, 1, 1, 1}},
                                     {8, {1, 2, 2, 1, 2, 1, 2, 2}},
                                     {4, {1, 1, 3, 4, 2, 4, 1, 4}},
                                     {16, {2, 1, 2, 2, 1, 2, 2, 1}},
                                     {32, {1, 1, 1, 1, 1, 1, 1, 1}}};
  for (const Shape& sh : shapes)
    for (int P : {1, 64}) {
      AttentionCase c = decode_case(64, sh.hq, 1, P, {0, 1, 63, 64, 65, 127, 129, 1000});
      c.name = "mla narrow";
      c.mla = true;
      c.head_dim_v = 512;
      c.q_lens = sh.q_lens;
      for (size_t i = 0; i < c.kv_lens.size(); ++i)  // entry 0 keeps its empty key range
        if (c.kv_lens[i] > 0) c.kv_lens[i] = std::max(c.kv_lens[i], c.q_lens[i]);
      check(c);
      if (P == 1) continue;
      c.name = "mla narrow num_splits 3";
      check(c, {}, [](PagedData& d) { d.params.num_splits = 3; });
      if (sh.hq != 16) continue;
      check_mla_modes(c, "mla narrow");
    }
}

// MLA absorbed attention with more than 16 queries per entry (EXTEND over a cached prefix, and
// a prefill from scratch) runs on the same MLA instance, its 64-row blocks covering every
// (query, head) row; with no max_seqlen_q hint the bound is total_q.
TEST(CudaDecode, MlaAbsorbedLongQueries) {
  // The oracle takes ~10 s per 128-head case (fp64, 576 + 512 wide), so those are two.
  for (int hq : {16, 128})
    for (DType kv : {DType::kBF16, DType::kF8E4M3})
      for (bool hint : {true, false}) {
        if (hq == 128 && (kv == DType::kBF16) != hint) continue;
        AttentionCase c = decode_case(64, hq, 1, 64, {100, 17, 8, 40, 120});
        c.name = "mla extend";
        c.mla = true;
        c.head_dim_v = 512;
        c.kv_dtype = kv;
        c.q_lens = {40, 17, 0, 40, 33};  // the fourth is a prefill (q_len == kv_len)
        check(c, {}, {}, hint);
      }
}
#endif

// An entry with more queries than the grid's max_seqlen_q (the engine's promise, which the host
// cannot check against device lengths) is outside the kernel's contract: its rows come out NaN,
// also when splits go through the workspace and the combine writes the rows last; the other
// entries are unaffected.
TEST(CudaDecode, OverLongEntryIsNan) {
  const int D = built_head_dims()[0];
  AttentionCase c = decode_case(D, 8, 2, 16, {40, 1500, 60});
  c.q_lens = {1, 3, 1};  // tokens 1..3 are entry 1's
  for (int s : {1, 4}) {
    SCOPED_TRACE("num_splits " + std::to_string(s));
    PagedData d = testing::make_paged(c, next_seed());
    d.params.max_seqlen_q = 1;
    d.params.num_splits = s;
    // Zeros instead of the NaN poison, so a NaN row is one the kernels wrote.
    const int64_t H = d.params.out.shape[1], Dv = d.params.out.shape[2];
    for (int64_t x = 0; x < 5 * H * Dv; ++x) d.out.set(x, 0.0);
    testing::DevicePaged dp = testing::to_device(d);
    testing::run_on_device(dp, d, {});
    for (int64_t t = 0; t < 5; ++t) {
      const bool over = t >= 1 && t <= 3;
      int64_t nan = 0;
      for (int64_t x = 0; x < H * Dv; ++x) nan += std::isnan(d.out.get(t * H * Dv + x)) ? 1 : 0;
      EXPECT_EQ(nan, over ? H * Dv : 0) << "token " << t;
    }
  }
}

TEST(CudaDecode, UnsupportedIsLoud) {
  const int D = built_head_dims()[0];
  AttentionCase c = decode_case(D, 8, 2, 16, {40, 50});
  PagedData d = testing::make_paged(c, next_seed());
  testing::DevicePaged dp = testing::to_device(d);
  auto arg_of = [&](const std::function<void(PagedAttentionParams&)>& f) -> std::string {
    PagedAttentionParams p = dp.params;
    f(p);
    try {
      paged_attention(p);
    } catch (const Error& e) {
      return e.argument();
    }
    return "(no error)";
  };
  // max_seqlen_q > 16 and ragged_attention now go to the prefill kernels (test_prefill.cc).
  EXPECT_EQ(arg_of([](PagedAttentionParams& p) {
              p.num_splits = 4;
              p.workspace = TensorView();
            }),
            "workspace");
  EXPECT_EQ(arg_of([](PagedAttentionParams& p) {
              p.q.shape[2] = 48;  // a head dim no instance is built for
              p.k_cache.shape[3] = 48;
              p.v_cache.shape[3] = 48;
              p.out.shape[2] = 48;
            }),
            "q");
  EXPECT_EQ(arg_of([](PagedAttentionParams& p) {
              p.q.dtype = p.out.dtype = DType::kF32;  // f32 is CPU-only
              p.k_cache.dtype = p.v_cache.dtype = DType::kF32;
            }),
            "q");
  EXPECT_EQ(arg_of([](PagedAttentionParams& p) {
              p.k_cache.data = static_cast<char*>(p.k_cache.data) + 2;  // rows not 16-byte aligned
            }),
            "k_cache");
}

}  // namespace
}  // namespace flashback

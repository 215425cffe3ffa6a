// GPU long-query paged attention and ragged attention (issue #7 part 1) against the CPU oracle:
// fresh random inputs (testing::make_paged places pages randomly and poisons outputs, on the
// device too), ragged query lengths including 0, 1, 17 and 130 (more than one 128-row block),
// keys across page boundaries, P in {1, 16, 64}, GQA ratios 1/4/8, causal and not, windows,
// softcap, FP8 e4m3/e5m2 with per-head and scalar descales, both LSE layouts, table rows and
// kv_start (chunked-local virtual requests), a short max_seqlen_q hint, batch invariance, and
// the errors for what is not built.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_data.h"
#include "flashback/numeric.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback {
namespace {

using testing::AttentionCase;
using testing::PagedData;

const Exec kRef{nullptr, 0, Exec::CpuImpl::kReference};

std::vector<int> built_head_dims() { return testing::head_dims(FLASHBACK_TEST_HEAD_DIMS); }

uint64_t next_seed() {
  static uint64_t s = 0x9f11;
  return ++s;
}

int max_of(const std::vector<int>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// Runs the device copy and brings out (and lse, when the case has one) back into `d`.
void run_dev(testing::DevicePaged& dp, const PagedData& d, const Exec& exec) {
  testing::attach_workspace(dp, exec);
  paged_attention(dp.params, exec);
  ASSERT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream)), cudaSuccess);
  dp.mirror.download(d.out);
  if (d.lse.data() != nullptr) dp.mirror.download(d.lse);
}

// Runs `c` on the GPU and the oracle on identical inputs. `hint` is the max_seqlen_q passed
// (-1: the true maximum; 0: none, so the CUDA side must assume total_q).
void check(const AttentionCase& c, const Exec& exec = {}, int hint = -1,
           const std::function<void(PagedData&)>& mutate = {}) {
  SCOPED_TRACE(c.describe());
  PagedData d = testing::make_paged(c, next_seed());
  d.params.max_seqlen_q = hint < 0 ? max_of(c.q_lens) : hint;
  if (mutate) mutate(d);
  PagedData ref = testing::with_fresh_outputs(d);
  paged_attention(ref.params, kRef);
  testing::DevicePaged dp = testing::to_device(d);
  run_dev(dp, d, exec);
  const auto cmp = testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
  EXPECT_TRUE(cmp.ok) << cmp.why << " (rel " << cmp.rel_l2 << ", max abs " << cmp.max_abs
                      << ", lse " << cmp.lse_max_abs << ")";
}

// (q_len, kv_len) pairs: empty entries, a single query, 17 and 130 queries (one and two row
// blocks), prefixes ending on, before and after page boundaries, q_len > kv_len (causal rows
// that see no key: zeros and LSE -inf), and queries with no key at all between entries with keys
// (a CTA's blocks without tiles among blocks with tiles).
AttentionCase extend_case(int D, int hq, int hk, int P) {
  AttentionCase c;
  c.heads_q = hq;
  c.heads_kv = hk;
  c.head_dim = D;
  c.page_size = P;
  const std::vector<std::pair<int, int>> qk = {
      {0, 0},  {17, 17},          {1, 300},     {130, 130 + 3 * P + 5},        {0, 37},
      {20, 5}, {140, 0},          {17, 17 + P}, {129, 129 + P - 1 + (P == 1)}, {64, 2 * P + 64},
      {1, 1},  {130, 130 + 2 * P}};
  for (auto [q, k] : qk) {
    c.q_lens.push_back(q);
    c.kv_lens.push_back(k);
  }
  return c;
}

TEST(CudaPrefill, PageSizesAndGqaRatios) {
  for (int D : built_head_dims())
    for (int P : {1, 16, 64})
      for (auto [hq, hk] : {std::pair{2, 2}, {4, 1}, {8, 1}}) {
        AttentionCase c = extend_case(D, hq, hk, P);
        c.name = "extend";
        check(c);
      }
}

// On Hopper the tiles whose keys all exist come by TMA, a box per page (per 128-key tile for
// longer pages, as 128 and 256 here); 8 is the smallest page size it takes, 24 is not a power
// of two (cp.async throughout).
TEST(CudaPrefill, TmaBoxPageSizes) {
  for (int D : built_head_dims())
    for (int P : {8, 24, 32, 128, 256}) {
      AttentionCase c = extend_case(D, 4, 1, P);
      c.name = "extend, page size " + std::to_string(P);
      c.q_lens.push_back(200);
      c.kv_lens.push_back(1000);
      check(c);
    }
}

TEST(CudaPrefill, Variants) {
  for (int D : built_head_dims()) {
    auto base = [&] { return extend_case(D, 4, 1, 16); };
    {
      AttentionCase c = base();
      c.name = "non-causal (cross-attention prefill)";
      c.causal = false;
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "window left, long keys (tiles outside skipped)";
      c.window_left = 45;
      c.q_lens.push_back(200);
      c.kv_lens.push_back(1500);
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "non-causal two-sided window";
      c.causal = false;
      c.window_left = 50;
      c.window_right = 20;
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "causal with right window 0 and left 0";
      c.window_left = 0;
      c.window_right = 0;
      check(c);
    }
    {
      AttentionCase c = base();
      c.name = "softcap";
      c.softcap = 5.0f;
      c.softmax_scale = 0.5f;
      check(c);
    }
    for (const AttentionCase& c : testing::storage_variants(base())) check(c);
  }
}

TEST(CudaPrefill, HintsAndLongEntries) {
  const int D = built_head_dims()[0];
  AttentionCase c = extend_case(D, 8, 2, 16);
  c.q_lens.push_back(300);  // three row blocks
  c.kv_lens.push_back(333);
  c.name = "no max_seqlen_q (total_q bound)";
  check(c, {}, /*hint=*/0);
  c.name = "max_seqlen_q 17 shorter than the entries (the kernel loops over blocks)";
  check(c, {}, /*hint=*/17);
  c.name = "deterministic";
  Exec det;
  det.deterministic = true;
  check(c, det);
}

// Batches whose entries nearly all have the longest one's block count and more items than SMs
// (384 here: any GPU of fewer SMs) take the Hopper kernel's persistent schedule by default
// (launch.cu, wgmma_grid): about one CTA per SM walking (rank, entry, head) items in bands of
// ranks. Causal with prefixes of different lengths (ranks of unequal cost), a window, and a
// batch whose last entry is a block shorter than the rest (still persistent: the producer skips
// that entry's rank-2 items).
TEST(CudaPrefill, PersistentScheduleBatches) {
  const int D = built_head_dims()[0];
  AttentionCase c;
  c.heads_q = 16;
  c.heads_kv = 4;
  c.head_dim = D;
  c.page_size = 16;
  c.q_lens = {300, 300, 300, 300, 300, 300, 300, 300};
  c.kv_lens = {300, 301, 316, 555, 300, 1000, 429, 317};
  c.name = "8 x 300 queries, 16 heads (384 items), prefixes 0..700";
  check(c);
  c.name = "the same with a 100-key window";
  c.window_left = 100;
  check(c);
  c.window_left = -1;
  {
    AttentionCase z = c;
    z.kv_lens[4] = 0;
    z.name = "an entry whose queries see no key (blocks without tiles between others)";
    check(z);
  }
  c.q_lens.back() = 250;  // two blocks of 128 rows, against the others' three
  c.kv_lens.back() = 250;
  c.name = "last entry one block shorter";
  check(c);
}

// Keys far along the context whose q.k jumps far past the rows' running maxima (their K rows
// scaled by 16, so logits of ~16 sigma): on Hopper the whole tiles after a block's first take
// the softmax without the row max (softmax_probs_stale), which fails on these tiles for the rows
// the jump raises; the warp then recomputes its S by mma.sync (wgmma_kernel.cuh, redo_s) and
// rescales. On the random data of the other tests that path hardly ever runs.
TEST(CudaPrefill, LateMaxJumps) {
  for (int D : built_head_dims()) {
    AttentionCase c;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.head_dim = D;
    c.page_size = 16;
    c.q_lens = {200, 300};
    c.kv_lens = {1500, 900};
    c.name = "K rows x16 at late keys";
    check(c, {}, -1, [&](PagedData& d) {
      const int P = c.page_size, Hk = c.heads_kv;
      uint16_t* k = d.k_cache.ptr<uint16_t>();
      const int32_t* table = d.page_table.ptr<int32_t>();
      const int64_t width = d.page_table.size(1);
      for (int b = 0; b < 2; ++b)
        for (int key : {300, 550, 551, 777, 830}) {
          const int64_t page = table[b * width + key / P];
          for (int h = 0; h < Hk; ++h)
            for (int x = 0; x < D; ++x) {
              uint16_t& e = k[((page * P + key % P) * Hk + h) * D + x];
              e = f32_to_bf16(16.f * bf16_to_f32(e));
            }
        }
    });
  }
}

// Chunked-local virtual requests and cross attention as the plan expresses them: entries pick
// a row of the table (table_rows) and start at a key position (kv_start).
TEST(CudaPrefill, TableRowsAndKvStart) {
  for (int D : built_head_dims())
    for (int P : {1, 16, -16}) {  // -16: pages of 16, starts on page boundaries (TMA boxes)
      const bool aligned = P < 0;
      P = std::abs(P);
      AttentionCase c = extend_case(D, 8, 2, P);
      c.q_lens = {30, 130, 0, 17, 1};
      c.kv_lens = {200, 700, 64, 300, 90};
      c.name = aligned ? "virtual requests, page-aligned starts" : "virtual requests";
      SCOPED_TRACE(c.describe());
      PagedData d = testing::make_paged(c, next_seed());
      d.params.max_seqlen_q = max_of(c.q_lens);
      const int B = static_cast<int>(c.q_lens.size());
      Tensor rows(DType::kI32, {B}), start(DType::kI32, {B});
      std::mt19937_64 rng(next_seed());
      for (int b = 0; b < B; ++b) {
        const int r = (b * 3 + 1) % B;  // another request's row of the table
        const int full = c.kv_lens[r], q = c.q_lens[b];
        int s = std::uniform_int_distribution<int>(0, std::max(0, full - q))(rng);
        if (aligned) s -= s % P;
        const int len = std::uniform_int_distribution<int>(std::min(q, full - s), full - s)(rng);
        rows.ptr<int32_t>()[b] = r;
        start.ptr<int32_t>()[b] = s;
        d.cache_seqlens.ptr<int32_t>()[b] = len;
      }
      d.params.table_rows = rows;
      d.params.kv_start = start;
      PagedData ref = testing::with_fresh_outputs(d);
      paged_attention(ref.params, kRef);
      PagedData base = d;  // same tensors; the mirror learns rows / start separately
      base.params.table_rows = TensorView();
      base.params.kv_start = TensorView();
      testing::DevicePaged dp = testing::to_device(base);
      dp.mirror.add(rows);
      dp.mirror.add(start);
      dp.params.table_rows = dp.mirror.rebase(rows);
      dp.params.kv_start = dp.mirror.rebase(start);
      run_dev(dp, d, {});
      const auto cmp = testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
      EXPECT_TRUE(cmp.ok) << cmp.why << " (rel " << cmp.rel_l2 << ", max abs " << cmp.max_abs
                          << ")";
    }
}

// A request's output bits do not depend on the rest of its batch (SPEC.md §9): entry 0 run
// alone (views of the same device data, output re-poisoned) equals entry 0 run in the batch.
TEST(CudaPrefill, BatchInvariant) {
  const int D = built_head_dims()[0];
  AttentionCase c = extend_case(D, 8, 2, 16);
  c.q_lens = {130, 40, 0, 300, 17};
  c.kv_lens = {400, 40, 10, 300, 1000};
  PagedData d = testing::make_paged(c, next_seed());
  d.params.max_seqlen_q = 300;
  testing::DevicePaged dp = testing::to_device(d);
  run_dev(dp, d, {});
  const int64_t n0 = int64_t{130} * c.heads_q * D;
  std::vector<unsigned char> batch_bits(static_cast<size_t>(n0 * 2));
  std::memcpy(batch_bits.data(), d.out.data(), batch_bits.size());

  testing::DevicePaged one = testing::to_device(d);  // fresh poisoned device outputs
  PagedAttentionParams& p = one.params;
  p.max_seqlen_q = 130;
  p.cu_seqlens_q = p.cu_seqlens_q.slice(0, 0, 2);
  p.cache_seqlens = p.cache_seqlens.slice(0, 0, 1);
  p.q = p.q.slice(0, 0, 130);
  p.out = p.out.slice(0, 0, 130);
  p.lse = p.lse.slice(0, 0, 130);
  d.out.poison();
  one.mirror.upload(d.out);
  paged_attention(p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  one.mirror.download(d.out);
  EXPECT_EQ(std::memcmp(batch_bits.data(), d.out.data(), batch_bits.size()), 0)
      << "entry 0's output changed with its batch";
}

// Ragged attention: contiguous K/V with cu_seqlens_k, on the oracle's semantics.
struct RaggedCase {
  std::string name;
  std::vector<int> q_lens, k_lens;
  int heads_q = 8, heads_kv = 2, head_dim = 192, head_dim_v = 128;
  DType dtype = DType::kBF16;
  bool causal = true, lse_transposed = false;
  int window_left = -1, window_right = -1;
  float softcap = 0;
  // > 0: K and V are views starting kv_pad columns into rows kv_pad columns wider (as an engine
  // passes V sliced from a joint K/V projection): strides the Hopper kernel's TMA maps must take.
  int kv_pad = 0;
  // > 0: out is a view starting out_pad columns into rows out_pad columns wider. The Hopper
  // kernel stores rows in 16-byte pieces where the rows are 16-byte aligned (out_pad 8) and in
  // 4-byte pairs where they are not (out_pad 2).
  int out_pad = 0;
};

void check_ragged(const RaggedCase& c) {
  SCOPED_TRACE(c.name);
  std::mt19937_64 rng(next_seed());
  const int64_t B = static_cast<int64_t>(c.q_lens.size());
  int64_t tq = 0, tk = 0;
  Tensor cu_q(DType::kI32, {B + 1}), cu_k(DType::kI32, {B + 1});
  cu_q.ptr<int32_t>()[0] = cu_k.ptr<int32_t>()[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    tq += c.q_lens[b];
    tk += c.k_lens[b];
    cu_q.ptr<int32_t>()[b + 1] = static_cast<int32_t>(tq);
    cu_k.ptr<int32_t>()[b + 1] = static_cast<int32_t>(tk);
  }
  const int pad = c.kv_pad;
  Tensor q(c.dtype, {tq, c.heads_q, c.head_dim}), k(c.dtype, {tk, c.heads_kv, c.head_dim + pad}),
      v(c.dtype, {tk, c.heads_kv, c.head_dim_v + pad});
  testing::fill_normal(q, rng);
  testing::fill_normal(k, rng);
  testing::fill_normal(v, rng);
  auto cols = [&](const Tensor& t, int64_t d) {  // columns [pad, pad + d) of each row
    const int64_t w = d + pad;
    return TensorView(static_cast<char*>(t.view().data) + pad * dtype_size(c.dtype), c.dtype,
                      {tk, c.heads_kv, d}, {c.heads_kv * w, w, 1});
  };
  auto outputs = [&](Tensor& out, Tensor& lse, RaggedAttentionParams& p) {
    const int64_t ow = c.head_dim_v + c.out_pad;
    out = Tensor(c.dtype, {tq, c.heads_q, ow});
    out.poison();
    lse = c.lse_transposed ? Tensor(DType::kF32, {c.heads_q, tq})
                           : Tensor(DType::kF32, {tq, c.heads_q});
    lse.poison();
    p.out = TensorView(static_cast<char*>(out.view().data) + c.out_pad * dtype_size(c.dtype),
                       c.dtype, {tq, c.heads_q, c.head_dim_v}, {c.heads_q * ow, ow, 1});
    p.lse = c.lse_transposed ? lse.view().transposed(0, 1) : lse.view();
  };
  RaggedAttentionParams p;
  p.q = q;
  p.k = cols(k, c.head_dim);
  p.v = cols(v, c.head_dim_v);
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_k = cu_k;
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  p.max_seqlen_q = max_of(c.q_lens);
  p.max_seqlen_k = max_of(c.k_lens);
  Tensor out, lse, ref_out, ref_lse;
  RaggedAttentionParams ref = p;
  outputs(ref_out, ref_lse, ref);
  ragged_attention(ref, kRef);
  outputs(out, lse, p);

  testing::DeviceMirror m;
  for (const Tensor* t : {&q, &k, &v, &cu_q, &cu_k, &out, &lse}) m.add(*t);
  RaggedAttentionParams dev = p;
  dev.q = m.rebase(p.q);
  dev.k = m.rebase(p.k);
  dev.v = m.rebase(p.v);
  dev.cu_seqlens_q = m.rebase(p.cu_seqlens_q);
  dev.cu_seqlens_k = m.rebase(p.cu_seqlens_k);
  dev.out = m.rebase(p.out);
  dev.lse = m.rebase(p.lse);
  ragged_attention(dev);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  m.download(out);
  m.download(lse);
  const auto cmp = testing::compare(p.out, ref.out, p.lse, ref.lse);
  EXPECT_TRUE(cmp.ok) << cmp.why << " (rel " << cmp.rel_l2 << ", max abs " << cmp.max_abs
                      << ", lse " << cmp.lse_max_abs << ")";
}

TEST(CudaRagged, MlaChunkedPrefixShapes) {
  RaggedCase c;
  c.q_lens = {0, 1, 17, 130, 64, 20, 33};
  c.k_lens = {0, 1, 17, 130, 500, 5, 0};
  c.name = "192/128 causal extend";
  check_ragged(c);
  c.name = "192/128 non-causal prefix chunk, transposed lse";
  c.causal = false;
  c.lse_transposed = true;
  c.k_lens = {10, 1, 300, 257, 64, 0, 129};
  check_ragged(c);
  c.name = "192/128 fp16, GQA 1";
  c.dtype = DType::kF16;
  c.heads_q = c.heads_kv = 4;
  check_ragged(c);
  // Many tiles per block, so the two-stage K and V rings of the Hopper kernel wrap several
  // times (and with windows, tiles a warpgroup sees none of).
  c.name = "192/128 long keys, causal";
  c.dtype = DType::kBF16;
  c.causal = true;
  c.q_lens = {200, 1, 129};
  c.k_lens = {1100, 700, 129};
  check_ragged(c);
  c.name = "192/128 long keys, window + softcap";
  c.window_left = 150;
  c.softcap = 5.0f;
  check_ragged(c);
  // Whole 128-key tiles of ragged keys come by TMA on Hopper: K and V as strided views with an
  // offset base, entries whose keys start mid-way through the tensor, full tiles then a
  // partial one (a stage with V by TMA and K by cp.async), and one ending exactly on a tile.
  c.name = "192/128 strided K/V views, non-causal";
  c.window_left = -1;
  c.softcap = 0;
  c.causal = false;
  c.kv_pad = 64;
  c.q_lens = {130, 3, 64};
  c.k_lens = {77, 1100, 512};
  check_ragged(c);
  c.name = "192/128 strided K/V views, causal";
  c.causal = true;
  c.q_lens = {130, 300, 64};
  check_ragged(c);
  // Output rows that are (and are not) 16-byte aligned: the Hopper epilogue's two store forms.
  c.kv_pad = 0;
  c.name = "192/128 strided out, 16-byte aligned rows";
  c.out_pad = 8;
  check_ragged(c);
  c.name = "192/128 strided out, 4-byte aligned rows";
  c.out_pad = 2;
  check_ragged(c);
}

TEST(CudaRagged, HeadDimsAndVariants) {
  for (int D : built_head_dims())
    for (auto [hq, hk] : {std::pair{2, 2}, {8, 2}, {8, 1}}) {
      RaggedCase c;
      c.head_dim = c.head_dim_v = D;
      c.heads_q = hq;
      c.heads_kv = hk;
      c.q_lens = {17, 0, 130, 1, 40};
      c.k_lens = {17, 9, 260, 1, 31};
      c.name = "ragged D=" + std::to_string(D);
      check_ragged(c);
      c.name = "ragged window + softcap";
      c.window_left = 20;
      c.softcap = 3.0f;
      check_ragged(c);
    }
}

TEST(CudaPrefill, UnsupportedIsLoud) {
  auto arg_of = [](const AttentionCase& c) -> std::string {
    PagedData d = testing::make_paged(c, next_seed());
    testing::DevicePaged dp = testing::to_device(d);
    dp.params.max_seqlen_q = max_of(c.q_lens);
    try {
      paged_attention(dp.params);
    } catch (const Error& e) {
      return e.argument();
    }
    return "(no error)";
  };
  // MLA absorbed (qv) of any length runs on the decode kernel (test_decode.cc).
  AttentionCase odd = extend_case(48, 4, 4, 16);  // a head dim no instance is built for
  EXPECT_EQ(arg_of(odd), "q");
  AttentionCase f32 = extend_case(built_head_dims()[0], 4, 4, 16);
  f32.dtype = f32.kv_dtype = DType::kF32;
  EXPECT_EQ(arg_of(f32), "q");
}

}  // namespace
}  // namespace flashback

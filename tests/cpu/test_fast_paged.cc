// Fast CPU paged attention against the oracle: every dtype pair and variant × page size
// {1, 16} × GQA ratio {1, 4, 8}, on ragged lengths that include 0, 1, page boundaries, tile
// (32 keys) and split (512 keys) boundaries, and q_len > kv_len (empty rows).
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "test_fast_common.h"

namespace flashback {
namespace {

using fast_test::check_paged;
using fast_test::fast;
using testing::AttentionCase;
using testing::make_paged;
using testing::PagedData;

// Ragged lengths around page size P: empty, one key, exact pages, one past, several tiles.
AttentionCase base_case(int page, int gqa) {
  AttentionCase c;
  c.page_size = page;
  c.heads_kv = 2;
  c.heads_q = 2 * gqa;
  c.head_dim = 64;
  c.q_lens = {1, 1, 3, 1, 5, 2, 1};
  c.kv_lens = {0, 1, 1, page, page + 1, 2 * page + 3, 45};
  return c;
}

const DType kQ[] = {DType::kBF16, DType::kF16, DType::kF32};
const DType kKv[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3, DType::kF8E5M2};

TEST(FastPaged, EveryDtypePairPageSizeAndGqa) {
  uint64_t seed = 100;
  for (int page : {1, 16})
    for (int gqa : {1, 4, 8})
      for (DType q : kQ)
        for (DType kv : kKv) {
          AttentionCase c = base_case(page, gqa);
          c.dtype = q;
          c.kv_dtype = kv;
          PagedData d = make_paged(c, ++seed);
          EXPECT_CLOSE(check_paged(d, fast(2)), c.describe());
        }
}

// The decode tile path (bf16 K/V read in place, fp16 in place in order, fp8 staged as bf16; up
// to 16 rows per KV head) for every group size 1-8, with KV heads per task that leave groups of
// 4 rows spanning heads and a padded last group (3 and 5 KV heads), decode and short extends (2
// and 3 tokens: up to 16 rows per head on the tile path, 18-24 on the transposed one), one and
// two threads.
TEST(FastPaged, TilePathEveryGroupSize) {
  const DType pairs[][2] = {{DType::kBF16, DType::kBF16},
                            {DType::kF16, DType::kF16},
                            {DType::kBF16, DType::kF8E4M3},
                            {DType::kF16, DType::kF8E5M2}};
  uint64_t seed = 500;
  for (const auto& [q, kv] : pairs)
    for (int gqa = 1; gqa <= 8; ++gqa)
      for (int heads_kv : {1, 3, 5})
        for (int head_dim : {64, 128}) {
          // bf16 at both head dims and every KV head count, the others at 128 with 3 KV heads
          if (kv != DType::kBF16 && (head_dim == 64 || heads_kv != 3)) continue;
          AttentionCase c;
          c.page_size = gqa % 2 == 0 ? 16 : 1;
          c.heads_kv = heads_kv;
          c.heads_q = gqa * heads_kv;
          c.head_dim = head_dim;
          c.dtype = q;
          c.kv_dtype = kv;
          c.q_lens = {1, 1, 2, 1, 3};
          c.kv_lens = {0, 1, 47, 100, 600};
          const PagedData d = make_paged(c, ++seed);
          for (int threads : {1, 2}) {
            PagedData e = testing::with_fresh_outputs(d);
            EXPECT_CLOSE(check_paged(e, fast(threads)),
                         c.describe() + ", threads " + std::to_string(threads));
          }
        }
}

struct Variant {
  const char* name;
  std::function<void(AttentionCase&)> apply;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"causal", [](AttentionCase&) {}},
      {"non-causal", [](AttentionCase& c) { c.causal = false; }},
      {"window (7, 0)", [](AttentionCase& c) { c.window_left = 7; }},
      {"window (0, 0)",
       [](AttentionCase& c) {
         c.window_left = 0;
         c.window_right = 0;
       }},
      {"non-causal window (3, 5)",
       [](AttentionCase& c) {
         c.causal = false;
         c.window_left = 3;
         c.window_right = 5;
       }},
      {"non-causal window (-1, 2)",
       [](AttentionCase& c) {
         c.causal = false;
         c.window_right = 2;
       }},
      {"softcap", [](AttentionCase& c) { c.softcap = 1.5f; }},
      {"softcap + window",
       [](AttentionCase& c) {
         c.softcap = 4.0f;
         c.window_left = 9;
       }},
      {"explicit scale", [](AttentionCase& c) { c.softmax_scale = 0.3f; }},
      {"lse [H, total_q]", [](AttentionCase& c) { c.lse_transposed = true; }},
      {"no lse", [](AttentionCase& c) { c.with_lse = false; }},
      {"req_to_token table", [](AttentionCase& c) { c.table_holds_slots = true; }},
      {"fp8 e4m3 scalar descale",
       [](AttentionCase& c) {
         c.kv_dtype = DType::kF8E4M3;
         c.per_head_descale = false;
       }},
      {"fp8 e5m2 per-head descale", [](AttentionCase& c) { c.kv_dtype = DType::kF8E5M2; }},
      {"head dim 80", [](AttentionCase& c) { c.head_dim = 80; }},
      {"head dim 128, f32",
       [](AttentionCase& c) {
         c.head_dim = 128;
         c.dtype = DType::kF32;
       }},
      {"head dim 256", [](AttentionCase& c) { c.head_dim = 256; }},
      {"MLA 64 + 512",
       [](AttentionCase& c) {
         c.mla = true;
         c.heads_q /= c.heads_kv;
         c.heads_kv = 1;
         c.head_dim = 64;
         c.head_dim_v = 512;
       }},
      {"MLA fp8 e4m3",
       [](AttentionCase& c) {
         c.mla = true;
         c.heads_q = 16;
         c.heads_kv = 1;
         c.head_dim = 64;
         c.head_dim_v = 512;
         c.kv_dtype = DType::kF8E4M3;
       }},
      {"8 KV heads",  // MHA decode takes the tile path with 4 KV heads per pass
       [](AttentionCase& c) {
         c.heads_q = c.heads_q / c.heads_kv * 8;
         c.heads_kv = 8;
       }},
      {"8 KV heads, head dim 128, across splits",
       [](AttentionCase& c) {
         c.heads_q = c.heads_q / c.heads_kv * 8;
         c.heads_kv = 8;
         c.head_dim = 128;
         c.q_lens = {1, 1, 2, 1};
         c.kv_lens = {700, 33, 530, 1};
       }},
      {"across splits",  // 512-key splits, decode and extend, causal + window
       [](AttentionCase& c) {
         c.q_lens = {1, 1, 17, 2};
         c.kv_lens = {1100, 513, 1040, 512};
       }},
      {"across splits, window 600",
       [](AttentionCase& c) {
         c.q_lens = {1, 9};
         c.kv_lens = {1300, 1100};
         c.window_left = 600;
       }},
  };
  return v;
}

TEST(FastPaged, EveryVariantPageSizeAndGqa) {
  uint64_t seed = 1000;
  for (const Variant& v : variants())
    for (int page : {1, 16})
      for (int gqa : {1, 4, 8}) {
        AttentionCase c = base_case(page, gqa);
        c.name = v.name;
        v.apply(c);
        PagedData d = make_paged(c, ++seed);
        EXPECT_CLOSE(check_paged(d, fast(2)), c.describe());
      }
}

TEST(FastPaged, SingleThreadAndThreeThreads) {
  AttentionCase c = base_case(16, 4);
  c.q_lens = {1, 33};
  c.kv_lens = {700, 90};
  for (int threads : {1, 3}) {
    PagedData d = make_paged(c, 7);
    EXPECT_CLOSE(check_paged(d, fast(threads)), "threads " + std::to_string(threads));
  }
}

TEST(FastPaged, EmptyBatchAndNoTokens) {
  AttentionCase c = base_case(16, 4);
  c.q_lens = {};
  c.kv_lens = {};
  PagedData d = make_paged(c, 8);
  EXPECT_NO_THROW(paged_attention(d.params, fast(2)));
  c.q_lens = {0, 0};
  c.kv_lens = {5, 0};
  PagedData e = make_paged(c, 9);
  EXPECT_NO_THROW(paged_attention(e.params, fast(2)));
}

// Strided q / out / lse (other dims than the last non-contiguous), a 3-D [slots, H, D] cache,
// and kv_start / table_rows selecting keys from inside other table rows.
TEST(FastPaged, StridedViewsThreeDimCacheKvStartAndTableRows) {
  for (int gqa : {1, 4}) {
    AttentionCase c = base_case(1, gqa);
    c.table_holds_slots = true;
    PagedData d = make_paged(c, 20 + gqa);
    const int64_t T = d.total_q, Hq = c.heads_q, D = c.head_dim;
    // q and out inside wider buffers: token stride Hq·(D+16)+8, head stride D+16.
    const int64_t hs = D + 16, ts = Hq * hs + 8;
    Tensor qw(c.dtype, {T * ts + 1}), ow(c.dtype, {T * ts + 1});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t x = 0; x < D; ++x) qw.set(t * ts + h * hs + x, d.q.get((t * Hq + h) * D + x));
    ow.poison();
    d.params.q = TensorView(qw.data(), c.dtype, {T, Hq, D}, {ts, hs, 1});
    d.params.out = TensorView(ow.data(), c.dtype, {T, Hq, D}, {ts, hs, 1});
    // 3-D cache view of the [pages, 1, Hk, D] cache.
    for (TensorView* cv : {&d.params.k_cache, &d.params.v_cache}) {
      const TensorView o = *cv;
      *cv = TensorView(o.data, o.dtype, {o.shape[0], o.shape[2], o.shape[3]},
                       {o.strides[0], o.strides[2], o.strides[3]});
    }
    // Table rows in reverse order, each shifted right by `shift` columns; kv_start skips them.
    const int64_t B = static_cast<int64_t>(c.q_lens.size()), W = d.page_table.size(1);
    const int64_t shift = 3;
    Tensor table(DType::kI32, {B, W + shift}), rows(DType::kI32, {B}), start(DType::kI32, {B});
    for (int64_t b = 0; b < B; ++b) {
      const int64_t r = B - 1 - b;
      rows.ptr<int32_t>()[b] = static_cast<int32_t>(r);
      start.ptr<int32_t>()[b] = static_cast<int32_t>(shift);
      for (int64_t x = 0; x < shift; ++x) table.ptr<int32_t>()[r * (W + shift) + x] = -7;
      for (int64_t x = 0; x < W; ++x)
        table.ptr<int32_t>()[r * (W + shift) + shift + x] = d.page_table.ptr<int32_t>()[b * W + x];
    }
    // Entries past a request's keys are garbage; the shifted table must still cover them.
    d.params.page_table = table;
    d.params.table_rows = rows;
    d.params.kv_start = start;
    auto ref = testing::with_fresh_outputs(d);
    paged_attention(ref.params, fast_test::kRef);
    paged_attention(d.params, fast(2));
    EXPECT_CLOSE(testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse),
                 "strided gqa " + std::to_string(gqa));
  }
}

TEST(FastPaged, BadInputThrowsNamingTheArgument) {
  AttentionCase c = base_case(16, 4);
  PagedData d = make_paged(c, 30);
  d.params.out.dtype = DType::kI32;
  try {
    paged_attention(d.params, fast(2));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashback

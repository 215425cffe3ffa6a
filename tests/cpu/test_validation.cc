// Every bad shape, dtype, stride or length raises flashback::Error naming the argument.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback {
namespace {

using testing::AttentionCase;
using testing::PagedData;

struct Bad {
  std::string arg;  // the argument the error must name
  std::function<void(PagedData&, PagedAttentionParams&)> mutate;
};

AttentionCase base_case() {
  AttentionCase c;
  c.q_lens = {2, 1};
  c.kv_lens = {5, 9};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 8;
  c.page_size = 4;
  c.dtype = DType::kBF16;
  c.kv_dtype = DType::kF8E4M3;
  return c;
}

void expect_error(const std::function<void()>& f, const std::string& arg, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not a flashback::Error: " << e.what();
  }
}

TEST(Validation, PagedAttentionRejectsBadInput) {
  static Tensor wide_i64(DType::kI64, {3});
  static Tensor f32_table(DType::kF32, {2, 8});
  const std::vector<Bad> bad = {
      {"q", [](PagedData&, PagedAttentionParams& p) { p.q = {}; }},
      {"q", [](PagedData&, PagedAttentionParams& p) { p.q.ndim = 2; }},
      {"q", [](PagedData&, PagedAttentionParams& p) { p.q.dtype = DType::kI32; }},
      {"q", [](PagedData&, PagedAttentionParams& p) { p.q.strides[2] = 2; }},
      {"k_cache", [](PagedData&, PagedAttentionParams& p) { p.k_cache.shape[3] = 16; }},
      {"k_cache",
       [](PagedData&, PagedAttentionParams& p) {
         p.k_cache.shape[2] = 3;
         p.v_cache.shape[2] = 3;
       }},
      {"v_cache", [](PagedData&, PagedAttentionParams& p) { p.v_cache.shape[1] = 2; }},
      {"v_cache", [](PagedData&, PagedAttentionParams& p) { p.v_cache.dtype = DType::kBF16; }},
      {"k_cache",
       [](PagedData&, PagedAttentionParams& p) {
         p.k_cache.dtype = DType::kI32;
         p.v_cache.dtype = DType::kI32;
       }},
      {"k_cache", [](PagedData&, PagedAttentionParams& p) { p.k_cache.strides[3] = 3; }},
      {"v_cache",
       [](PagedData&, PagedAttentionParams& p) {
         p.v_cache.device = {DeviceType::kCUDA, 0};
       }},
      {"qv",
       [](PagedData&, PagedAttentionParams& p) {
         p.qv = p.q;
       }},  // wrong width for the value dim? same → ok, so break dtype
      {"cu_seqlens_q", [](PagedData&, PagedAttentionParams& p) { p.cu_seqlens_q = {}; }},
      {"cu_seqlens_q",
       [](PagedData& d, PagedAttentionParams&) { d.cu_seqlens_q.ptr<int32_t>()[0] = 1; }},
      {"cu_seqlens_q",
       [](PagedData& d, PagedAttentionParams&) { d.cu_seqlens_q.ptr<int32_t>()[1] = 4; }},
      {"cu_seqlens_q",
       [](PagedData& d, PagedAttentionParams&) { d.cu_seqlens_q.ptr<int32_t>()[2] = 2; }},
      {"cu_seqlens_q", [](PagedData&, PagedAttentionParams& p) { p.cu_seqlens_q = wide_i64; }},
      {"cache_seqlens", [](PagedData&, PagedAttentionParams& p) { p.cache_seqlens.shape[0] = 1; }},
      {"cache_seqlens",
       [](PagedData& d, PagedAttentionParams&) { d.cache_seqlens.ptr<int32_t>()[0] = -1; }},
      {"cache_seqlens",
       [](PagedData& d, PagedAttentionParams&) { d.cache_seqlens.ptr<int32_t>()[1] = 100; }},
      {"page_table", [](PagedData&, PagedAttentionParams& p) { p.page_table = f32_table; }},
      {"page_table",
       [](PagedData& d, PagedAttentionParams&) { d.page_table.ptr<int32_t>()[0] = 100000; }},
      {"page_table",
       [](PagedData& d, PagedAttentionParams&) { d.page_table.ptr<int32_t>()[1] = -3; }},
      {"page_table", [](PagedData&, PagedAttentionParams& p) { p.page_table.shape[0] = 1; }},
      {"table_rows",
       [](PagedData&, PagedAttentionParams& p) {
         p.table_rows = p.cache_seqlens;
       }},  // row 5 / 9 out of range
      {"kv_start",
       [](PagedData&, PagedAttentionParams& p) { p.kv_start = p.cu_seqlens_q; }},  // wrong length
      {"k_descale", [](PagedData&, PagedAttentionParams& p) { p.k_descale.shape[1] = 1; }},
      {"v_descale", [](PagedData&, PagedAttentionParams& p) { p.v_descale.dtype = DType::kF16; }},
      {"out", [](PagedData&, PagedAttentionParams& p) { p.out.shape[2] = 4; }},
      {"out", [](PagedData&, PagedAttentionParams& p) { p.out.shape[0] = 2; }},
      {"out", [](PagedData&, PagedAttentionParams& p) { p.out.dtype = DType::kF8E4M3; }},
      {"lse", [](PagedData&, PagedAttentionParams& p) { p.lse.shape[1] = 3; }},
      {"lse", [](PagedData&, PagedAttentionParams& p) { p.lse.dtype = DType::kBF16; }},
      {"window_left", [](PagedData&, PagedAttentionParams& p) { p.window_left = -2; }},
      {"softcap", [](PagedData&, PagedAttentionParams& p) { p.softcap = -1; }},
      {"softmax_scale",
       [](PagedData&, PagedAttentionParams& p) { p.softmax_scale = std::nanf(""); }},
      {"num_splits", [](PagedData&, PagedAttentionParams& p) { p.num_splits = -1; }},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    PagedData d = testing::make_paged(base_case(), 11);
    // Sanity: the unmutated case is valid.
    if (i == 0) ASSERT_NO_THROW(paged_attention(d.params));
    if (bad[i].arg == "qv")
      d.params.qv = TensorView(d.q.data(), DType::kF16, {3, 4, 8});
    else
      bad[i].mutate(d, d.params);
    expect_error([&] { paged_attention(d.params); }, bad[i].arg, "case " + std::to_string(i));
  }
}

TEST(Validation, DescaleWithoutFp8CacheIsAnError) {
  AttentionCase c = base_case();
  c.kv_dtype = DType::kBF16;
  PagedData d = testing::make_paged(c, 12);
  d.params.k_descale = TensorView(d.cache_seqlens.data(), DType::kF32, {2, 2}, {0, 0});
  expect_error([&] { paged_attention(d.params); }, "k_descale", "descale on bf16");
}

TEST(Validation, CudaTensorsWithoutCudaBuildAreAnError) {
#ifndef FLASHBACK_WITH_CUDA
  PagedData d = testing::make_paged(base_case(), 13);
  for (TensorView* t : {&d.params.q, &d.params.k_cache, &d.params.v_cache, &d.params.page_table,
                        &d.params.cache_seqlens, &d.params.cu_seqlens_q, &d.params.k_descale,
                        &d.params.v_descale, &d.params.out, &d.params.lse})
    t->device = {DeviceType::kCUDA, 0};
  expect_error([&] { paged_attention(d.params); }, "device", "cuda tensors on a cpu build");
#else
  GTEST_SKIP() << "a CUDA build: cuda tensors are served (tests/cuda covers them)";
#endif
}

TEST(Validation, RaggedMergeStoreRejectBadInput) {
  Tensor q(DType::kBF16, {4, 2, 8}), k(DType::kBF16, {6, 1, 8}), v(DType::kBF16, {6, 1, 4}),
      cuq(DType::kI32, {2}), cuk(DType::kI32, {2}), out(DType::kBF16, {4, 2, 4}),
      lse(DType::kF32, {4, 2});
  cuq.ptr<int32_t>()[0] = cuk.ptr<int32_t>()[0] = 0;
  cuq.ptr<int32_t>()[1] = 4;
  cuk.ptr<int32_t>()[1] = 6;
  RaggedAttentionParams r{q, k, v, cuq, cuk, out, lse};
  ASSERT_NO_THROW(ragged_attention(r));
  auto rr = r;
  rr.v.shape[0] = 5;
  expect_error([&] { ragged_attention(rr); }, "v", "v rows");
  rr = r;
  rr.k.shape[2] = 4;
  expect_error([&] { ragged_attention(rr); }, "k", "k head dim");
  rr = r;
  rr.k.dtype = DType::kF16;
  expect_error([&] { ragged_attention(rr); }, "k", "k dtype");
  cuk.ptr<int32_t>()[1] = 7;
  expect_error([&] { ragged_attention(r); }, "cu_seqlens_k", "cu_k total");
  cuk.ptr<int32_t>()[1] = 6;

  Tensor o3(DType::kF32, {4, 2, 4}), l3(DType::kF32, {4, 2});
  MergeStateParams m{o3, l3, o3, l3, o3, l3};
  ASSERT_NO_THROW(merge_state(m));
  auto mm = m;
  mm.lse_b.shape[1] = 1;
  expect_error([&] { merge_state(mm); }, "lse_b", "lse_b heads");
  mm = m;
  mm.out.shape[2] = 3;
  expect_error([&] { merge_state(mm); }, "out", "out dim");

  Tensor kc(DType::kF8E4M3, {2, 4, 1, 8}), vc(DType::kF8E4M3, {2, 4, 1, 4}), loc(DType::kI32, {6});
  for (int i = 0; i < 6; ++i) loc.ptr<int32_t>()[i] = i + 1;
  KVStoreParams s{k, v, loc, kc, vc, 1.0f, 1.0f};
  ASSERT_NO_THROW(kv_store(s));
  loc.ptr<int32_t>()[3] = 8;  // 8 slots: 0..7
  expect_error([&] { kv_store(s); }, "loc", "slot out of range");
  loc.ptr<int32_t>()[3] = 3;
  auto ss = s;
  ss.k_scale = 0;
  expect_error([&] { kv_store(ss); }, "k_scale/v_scale", "zero scale");
  ss = s;
  ss.loc.shape[0] = 5;
  expect_error([&] { kv_store(ss); }, "loc", "loc length");
  ss = s;
  ss.v_cache.shape[3] = 8;
  expect_error([&] { kv_store(ss); }, "v_cache", "v_cache width");
}

}  // namespace
}  // namespace flashback

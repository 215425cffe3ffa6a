// The plan's device side equals the host plan (plan::CudaGraphPlanState) for the modes captured
// in CUDA graphs: decode, draft decode and verify, with chunked-local virtual requests, cross
// attention, explicit page tables (P = 1 and P > 1) and padded graph rows; and a replay with new
// lengths rewrites the same buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/plan/device_plan.h"
#include "device_data.h"
#include "plan/plan.h"

namespace flashback {
namespace {

using testing::DeviceMirror;

struct PlanSetup {
  int P, C;
  bool table;
  ForwardMode mode;
  int step, N;
  bool encoder;
};

std::string name(const PlanSetup& s) {
  return std::string(forward_mode_name(s.mode)) + " P=" + std::to_string(s.P) +
         " C=" + std::to_string(s.C) + (s.table ? " table" : "") +
         " step=" + std::to_string(s.step) + " N=" + std::to_string(s.N) +
         (s.encoder ? " enc" : "");
}

std::vector<int32_t> fetch(const int32_t* dev, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(std::max<int64_t>(n, 0)));
  if (n > 0) FB_TEST_CUDA(cudaMemcpy(v.data(), dev, n * 4, cudaMemcpyDeviceToHost));
  return v;
}

void expect_same(const EntryList& h, const EntryList& d, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(h.size, d.size);
  const int64_t n = h.size;
  auto host = [](const int32_t* p, int64_t k) { return std::vector<int32_t>(p, p + k); };
  EXPECT_EQ(host(h.table_rows, n), fetch(d.table_rows, n)) << "table_rows";
  EXPECT_EQ(host(h.kv_start, n), fetch(d.kv_start, n)) << "kv_start";
  EXPECT_EQ(host(h.cache_seqlens, n), fetch(d.cache_seqlens, n)) << "cache_seqlens";
  EXPECT_EQ(host(h.source_row, n), fetch(d.source_row, n)) << "source_row";
  EXPECT_EQ(host(h.cu_seqlens_q, n + 1), fetch(d.cu_seqlens_q, n + 1)) << "cu_seqlens_q";
  EXPECT_EQ(host(h.cu_seqlens_k, n + 1), fetch(d.cu_seqlens_k, n + 1)) << "cu_seqlens_k";
  ASSERT_EQ(h.page_table == nullptr, d.page_table == nullptr);
  if (h.page_table) {
    ASSERT_EQ(h.page_table_width, d.page_table_width);
    EXPECT_EQ(host(h.page_table, n * h.page_table_width),
              fetch(d.page_table, n * d.page_table_width))
        << "page_table";
  }
}

TEST(CudaDevicePlan, EqualsHostGraphPlanAcrossModesAndReplays) {
  const PlanSetup setups[] = {
      {1, 0, false, ForwardMode::kDecode, -1, 0, false},
      {16, 32, true, ForwardMode::kDecode, -1, 0, true},
      {1, 8, true, ForwardMode::kDecode, 2, 0, false},
      {16, 16, true, ForwardMode::kTargetVerify, -1, 4, false},
      {1, 8, true, ForwardMode::kTargetVerify, -1, 4, true},
      {4, 8, true, ForwardMode::kTargetVerify, -1, 3, true},
  };
  std::mt19937_64 rng(2026);
  for (const PlanSetup& s : setups) {
    SCOPED_TRACE(name(s));
    const int max_bs = 8, max_ctx = 256, rows = 12;
    // req_to_token: whole pages placed randomly per row; row 0 is the padding row (page 0).
    Tensor r2t(DType::kI32, {rows, max_ctx});
    std::fill_n(r2t.ptr<int32_t>(), rows * max_ctx, 0);
    const int pages_per_row = max_ctx / s.P;
    std::vector<int32_t> pages(static_cast<size_t>(rows * pages_per_row));
    std::iota(pages.begin(), pages.end(), 1);
    std::shuffle(pages.begin(), pages.end(), rng);
    for (int r = 1; r < rows; ++r)
      for (int t = 0; t < max_ctx; ++t)
        r2t.ptr<int32_t>()[r * max_ctx + t] =
            pages[(r * pages_per_row + t / s.P) % pages.size()] * s.P + t % s.P;

    plan::PlanConfig cfg;
    cfg.page_size = s.P;
    cfg.attention_chunk_size = s.C;
    cfg.materialize_page_table = s.table;
    cfg.cuda_graph_fill_seq_len = 1;
    cfg.cuda_graph_padding_row = 0;
    cfg.max_draft_tokens = 4;
    plan::CudaGraphPlanState host_state(cfg, max_bs, max_ctx);
    cuda::DeviceGraphPlanState dev_state(cfg, max_bs, max_ctx);

    DeviceMirror mirror;
    mirror.add(r2t);
    const int extra = s.mode == ForwardMode::kTargetVerify ? s.N : s.step + 1;
    auto make_batch = [&](int bs, Tensor& rpi, Tensor& seq, Tensor& enc) {
      rpi = Tensor(DType::kI64, {bs});
      seq = Tensor(DType::kI32, {bs});
      enc = Tensor(DType::kI32, {bs});
      for (int b = 0; b < bs; ++b) {
        rpi.ptr<int64_t>()[b] = 1 + (b * 5 + static_cast<int>(rng() % 3)) % (rows - 1);
        const int e = s.encoder ? s.P * static_cast<int>(rng() % (64 / s.P + 1)) : 0;
        enc.ptr<int32_t>()[b] = e;
        seq.ptr<int32_t>()[b] = static_cast<int>(rng() % (max_ctx - e - extra + 1));
      }
      if (bs > 2) seq.ptr<int32_t>()[1] = 0;  // an empty request
    };
    auto batch_of = [&](int bs, const Tensor& rpi, const Tensor& seq, const Tensor& enc,
                        bool device) {
      ForwardBatch fb;
      fb.forward_mode = s.mode;
      fb.batch_size = bs;
      fb.spec.draft_step = s.step;
      fb.spec.num_draft_tokens = s.N;
      fb.req_to_token = device ? mirror.rebase(r2t) : r2t.view();
      fb.req_pool_indices = device ? mirror.rebase(rpi) : rpi.view();
      fb.seq_lens = device ? mirror.rebase(seq) : seq.view();
      if (s.encoder) fb.encoder_lens = device ? mirror.rebase(enc) : enc.view();
      return fb;
    };

    Tensor rpi, seq, enc;
    make_batch(max_bs, rpi, seq, enc);
    mirror.add(rpi);
    mirror.add(seq);
    mirror.add(enc);
    ForwardMetadata hm = host_state.bind(batch_of(max_bs, rpi, seq, enc, false));
    ForwardMetadata dm = dev_state.bind(batch_of(max_bs, rpi, seq, enc, true), nullptr);
    FB_TEST_CUDA(cudaDeviceSynchronize());
    expect_same(hm.self, dm.self, "bind self");
    ASSERT_EQ(hm.has_local, dm.has_local);
    ASSERT_EQ(hm.has_cross, dm.has_cross);
    if (hm.has_local) expect_same(hm.local, dm.local, "bind local");
    if (hm.has_cross) expect_same(hm.cross, dm.cross, "bind cross");

    // Replays with fewer real requests (padded rows) and new lengths, same buffers.
    const int32_t* self_rows = dm.self.table_rows;
    for (int real : {5, 0, 8}) {
      Tensor rpi2, seq2, enc2;
      make_batch(real, rpi2, seq2, enc2);
      DeviceMirror m2;
      m2.add(rpi2);
      m2.add(seq2);
      m2.add(enc2);
      ForwardBatch db = batch_of(real, rpi2, seq2, enc2, false);
      db.req_to_token = mirror.rebase(r2t);
      if (real > 0) {
        db.req_pool_indices = m2.rebase(rpi2);
        db.seq_lens = m2.rebase(seq2);
        if (s.encoder) db.encoder_lens = m2.rebase(enc2);
      } else {
        // An empty real batch still passes (empty) device views.
        db.req_pool_indices = mirror.rebase(rpi).slice(0, 0, 0);
        db.seq_lens = mirror.rebase(seq).slice(0, 0, 0);
        if (s.encoder) db.encoder_lens = mirror.rebase(enc).slice(0, 0, 0);
      }
      host_state.update(hm, batch_of(real, rpi2, seq2, enc2, false));
      dev_state.update(dm, db, nullptr);
      FB_TEST_CUDA(cudaDeviceSynchronize());
      SCOPED_TRACE("replay with " + std::to_string(real) + " real requests");
      EXPECT_EQ(dm.self.table_rows, self_rows) << "replay moved the buffers";
      expect_same(hm.self, dm.self, "self");
      if (hm.has_local) expect_same(hm.local, dm.local, "local");
      if (hm.has_cross) expect_same(hm.cross, dm.cross, "cross");
    }
  }
}

}  // namespace
}  // namespace flashback

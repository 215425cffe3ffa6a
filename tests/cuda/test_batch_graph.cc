// Deterministic mode (a request's bits do not depend on its batch) and CUDA-graph capture +
// replay with changed lengths (equal to eager execution and to the oracle).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "device_data.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback {
namespace {

using testing::AttentionCase;
using testing::DeviceBuffer;
using testing::PagedData;

const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};

int first_head_dim() { return testing::head_dims(FLASHBACK_TEST_HEAD_DIMS).front(); }

AttentionCase decode_case(int hq, int hk, int P, std::vector<int> kv) {
  AttentionCase c;
  c.heads_q = hq;
  c.heads_kv = hk;
  c.head_dim = first_head_dim();
  c.page_size = P;
  c.kv_lens = std::move(kv);
  c.q_lens.assign(c.kv_lens.size(), 1);
  return c;
}

// Output and LSE (row 0, or all of them) as raw bytes.
struct Bits {
  std::vector<unsigned char> out, lse;
  bool operator==(const Bits&) const = default;
};

// The whole of `d`'s host output and LSE.
Bits host_bits(const PagedData& d) {
  const auto bytes = [](const Tensor& t) {
    const auto* b = static_cast<const unsigned char*>(t.data());
    return std::vector<unsigned char>(b, b + t.nbytes());
  };
  return {bytes(d.out), bytes(d.lse)};
}

// `launch` captured on `stream` (thread-local mode) into an instantiated graph.
cudaGraphExec_t capture(cudaStream_t stream, const std::function<void()>& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t instance;
  FB_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch();
  FB_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  FB_TEST_CUDA(cudaGraphInstantiate(&instance, graph, 0));
  FB_TEST_CUDA(cudaGraphDestroy(graph));  // the instance does not need it
  return instance;
}

Bits run_prefix(const testing::DevicePaged& dp, int n, int width, const Exec& exec) {
  PagedAttentionParams p = dp.params;
  p.cu_seqlens_q = p.cu_seqlens_q.slice(0, 0, n + 1);
  p.cache_seqlens = p.cache_seqlens.slice(0, 0, n);
  p.page_table = p.page_table.slice(0, 0, n).slice(1, 0, width);
  p.q = p.q.slice(0, 0, n);
  p.out = p.out.slice(0, 0, n);
  p.lse = p.lse.slice(0, 0, n);
  p.max_seqlen_q = 1;
  const int64_t ws = paged_attention_workspace_bytes(p, exec);
  DeviceBuffer wbuf(static_cast<size_t>(std::max<int64_t>(ws, 16)));
  if (ws > 0) p.workspace = TensorView(wbuf.get(), DType::kU8, {ws}, p.q.device);
  const size_t row_out = static_cast<size_t>(p.out.shape[1] * p.out.shape[2] * 2);
  const size_t row_lse = static_cast<size_t>(p.lse.shape[1] * 4);
  FB_TEST_CUDA(cudaMemset(p.out.data, 0xff, row_out * n));  // poison
  FB_TEST_CUDA(cudaMemset(p.lse.data, 0xff, row_lse * n));
  paged_attention(p, exec);
  FB_TEST_CUDA(cudaDeviceSynchronize());
  Bits b;
  b.out.resize(row_out);
  b.lse.resize(row_lse);
  FB_TEST_CUDA(cudaMemcpy(b.out.data(), p.out.data, row_out, cudaMemcpyDeviceToHost));
  FB_TEST_CUDA(cudaMemcpy(b.lse.data(), p.lse.data, row_lse, cudaMemcpyDeviceToHost));
  return b;
}

TEST(CudaDeterministic, RequestBitsDoNotDependOnItsBatch) {
  std::mt19937_64 rng(20261130);
  std::vector<int> lens = {3000};
  for (int i = 0; i < 64; ++i) lens.push_back(std::uniform_int_distribution<int>(0, 6000)(rng));
  AttentionCase c = decode_case(8, 2, 16, lens);
  PagedData d = testing::make_paged(c, 77);
  testing::DevicePaged dp = testing::to_device(d);
  const int full_width = static_cast<int>(d.page_table.size(1));
  Exec det;
  det.deterministic = true;
  const Bits alone = run_prefix(dp, 1, 3000 / 16 + 1, det);
  for (int others : {1, 7, 31, 64}) {
    const Bits batch = run_prefix(dp, others + 1, full_width, det);
    EXPECT_TRUE(batch == alone) << "request output differs inside a batch of " << others
                                << " other requests";
  }
  // The bits are also right: the first request alone against the oracle.
  PagedData one = testing::make_paged(decode_case(8, 2, 16, {3000}), 78);
  one.params.max_seqlen_q = 1;
  PagedData ref = testing::with_fresh_outputs(one);
  paged_attention(ref.params, kRef);
  testing::DevicePaged dp1 = testing::to_device(one);
  testing::run_on_device(dp1, one, det);
  const auto cmp = testing::compare(one.params.out, ref.params.out, one.params.lse, ref.params.lse);
  EXPECT_TRUE(cmp.ok) << cmp.why;
}

TEST(CudaGraph, ReplayWithChangedLengthsEqualsEager) {
  // Pages for 4000 keys per request; the lengths actually attended change between replays.
  const int B = 16, cap = 4000;
  AttentionCase c = decode_case(8, 2, 16, std::vector<int>(B, cap));
  PagedData d = testing::make_paged(c, 99);
  d.params.max_seqlen_q = 1;
  testing::DevicePaged dp = testing::to_device(d);
  cudaStream_t stream;
  FB_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Exec exec;
  exec.stream = stream;
  testing::attach_workspace(dp, exec);  // sized from shapes only: valid for every length

  std::mt19937_64 rng(5);
  auto set_lengths = [&](bool include_edges) {
    for (int b = 0; b < B; ++b)
      d.cache_seqlens.ptr<int32_t>()[b] = std::uniform_int_distribution<int>(0, cap)(rng);
    if (include_edges) {
      d.cache_seqlens.ptr<int32_t>()[0] = 0;
      d.cache_seqlens.ptr<int32_t>()[1] = 1;
      d.cache_seqlens.ptr<int32_t>()[2] = cap;
      d.cache_seqlens.ptr<int32_t>()[3] = 16;
    }
    dp.mirror.upload(d.cache_seqlens);
  };
  set_lengths(false);
  const cudaGraphExec_t instance = capture(stream, [&] { paged_attention(dp.params, exec); });

  const size_t out_bytes = static_cast<size_t>(d.out.nbytes());
  for (int round = 0; round < 3; ++round) {
    set_lengths(round == 1);
    FB_TEST_CUDA(cudaMemsetAsync(dp.params.out.data, 0xff, out_bytes, stream));
    FB_TEST_CUDA(cudaGraphLaunch(instance, stream));
    FB_TEST_CUDA(cudaStreamSynchronize(stream));
    dp.mirror.download(d.out);
    dp.mirror.download(d.lse);
    const Bits g = host_bits(d);
    FB_TEST_CUDA(cudaMemsetAsync(dp.params.out.data, 0xff, out_bytes, stream));
    paged_attention(dp.params, exec);
    FB_TEST_CUDA(cudaStreamSynchronize(stream));
    dp.mirror.download(d.out);
    dp.mirror.download(d.lse);
    const Bits e = host_bits(d);
    EXPECT_EQ(g.out, e.out) << "replay " << round << " output differs from eager";
    EXPECT_EQ(g.lse, e.lse) << "replay " << round << " LSE differs from eager";
    PagedData ref = testing::with_fresh_outputs(d);
    paged_attention(ref.params, kRef);
    const auto cmp = testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
    EXPECT_TRUE(cmp.ok) << "replay " << round << ": " << cmp.why;
  }
  FB_TEST_CUDA(cudaGraphExecDestroy(instance));
  FB_TEST_CUDA(cudaStreamDestroy(stream));
}

// Prefill captured into a graph and replayed: 2 requests of 1024 new queries on 256 cached keys,
// 16 q heads on 8 KV heads. On Hopper that is 256 (block, head) items in a near-uniform batch,
// so the persistent grid with head pairs (clusters of two CTAs sharing K/V tiles by multicast,
// launched with a cluster attribute); elsewhere the other prefill forms. Replay equals eager
// execution bit for bit and the oracle.
TEST(CudaGraph, PrefillReplayEqualsEagerAndOracle) {
  if (std::ranges::count(testing::head_dims(FLASHBACK_TEST_HEAD_DIMS), 128) == 0)
    GTEST_SKIP() << "head dim 128 not built";
  AttentionCase c;
  c.heads_q = 16;
  c.heads_kv = 8;
  c.head_dim = 128;
  c.page_size = 16;
  c.q_lens = {1024, 1024};
  c.kv_lens = {1280, 1280};
  PagedData d = testing::make_paged(c, 2026);
  d.params.max_seqlen_q = 1024;
  testing::DevicePaged dp = testing::to_device(d);
  cudaStream_t stream;
  FB_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Exec exec;
  exec.stream = stream;
  testing::attach_workspace(dp, exec);
  const cudaGraphExec_t instance = capture(stream, [&] { paged_attention(dp.params, exec); });
  const size_t out_bytes = static_cast<size_t>(d.out.nbytes()), lse_bytes = d.lse.nbytes();
  auto run = [&](bool replay) {
    FB_TEST_CUDA(cudaMemsetAsync(dp.params.out.data, 0xff, out_bytes, stream));  // poison
    FB_TEST_CUDA(cudaMemsetAsync(dp.params.lse.data, 0xff, lse_bytes, stream));
    if (replay)
      FB_TEST_CUDA(cudaGraphLaunch(instance, stream));
    else
      paged_attention(dp.params, exec);
    FB_TEST_CUDA(cudaStreamSynchronize(stream));
    dp.mirror.download(d.out);
    dp.mirror.download(d.lse);
    return host_bits(d);
  };
  const Bits eager = run(false);
  for (int round = 0; round < 2; ++round)
    EXPECT_TRUE(run(true) == eager) << "replay " << round << " differs from eager";
  PagedData ref = testing::with_fresh_outputs(d);
  paged_attention(ref.params, kRef);
  const auto cmp = testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
  EXPECT_TRUE(cmp.ok) << cmp.why;
  FB_TEST_CUDA(cudaGraphExecDestroy(instance));
  FB_TEST_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace flashback

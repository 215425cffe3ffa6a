// AttentionBackend with CUDA tensors equals the same backend on the CPU: eager DECODE and
// TARGET_VERIFY, and a DECODE step captured into a CUDA graph and replayed with new lengths
// (metadata rewritten in place, mirrored to the device outside the capture).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "device_data.h"
#include "flashback/backend.h"
#include "flashback/kv_cache.h"

namespace flashback {
namespace {

using testing::DeviceMirror;

constexpr int Hq = 8, Hk = 2, D = 128, kRows = 8, kCtx = 512;

struct World {
  int P;
  ReqToTokenPool pool{kRows, kCtx};
  PagedAllocator alloc;
  KVPool kv;
  Layer layer;
  std::vector<int32_t> rows, lens;
  std::mt19937_64 rng{7};
  World(int p, std::vector<int32_t> start_lens, DType kv_dtype)
      : P(p),
        alloc(16384, p),
        kv(KVPoolConfig{1, 16384, p, Hk, D, D, kv_dtype, 0.5f, 0.25f}),
        lens(std::move(start_lens)) {
    layer.num_q_heads = Hq;
    layer.num_kv_heads = Hk;
    layer.head_dim = D;
    layer.v_head_dim = D;
    layer.scaling = 0.088f;
    layer.k_scale = 0.5f;
    layer.v_scale = 0.25f;
    for (int32_t l : lens) {
      rows.push_back(pool.alloc());
      alloc.extend(pool, rows.back(), 0, l);
    }
    for (const TensorView& c : {kv.k_cache(0), kv.v_cache(0)}) {
      std::normal_distribution<double> nd(0, 1);
      for (int64_t i = 0; i < c.numel(); ++i) store_from_double(c, i, nd(rng));
    }
  }
};

// Host batch arrays for one step that adds n tokens per request.
struct Step {
  std::vector<int32_t> rows, seq, loc;
  ForwardBatch fb;
};

Step make_step(World& w, ForwardMode mode, int n, int padded_bs) {
  Step s;
  for (size_t i = 0; i < w.rows.size(); ++i) {
    auto slots = w.alloc.extend(w.pool, w.rows[i], w.lens[i], n);
    s.loc.insert(s.loc.end(), slots.begin(), slots.end());
    s.rows.push_back(w.rows[i]);
    // TARGET_VERIFY: seq_lens exclude the N draft tokens (they come on top, SPEC.md §3).
    s.seq.push_back(mode == ForwardMode::kTargetVerify ? w.lens[i] : w.lens[i] + n);
    w.lens[i] += n;
  }
  for (int i = static_cast<int>(w.rows.size()); i < padded_bs; ++i) {  // graph padding rows
    s.rows.push_back(0);
    s.seq.push_back(1);
    for (int j = 0; j < n; ++j) s.loc.push_back(0);
  }
  const int64_t B = static_cast<int64_t>(s.rows.size());
  s.fb.forward_mode = mode;
  s.fb.batch_size = static_cast<int32_t>(w.rows.size());
  s.fb.req_to_token = w.pool.table();
  s.fb.req_pool_indices = TensorView(s.rows.data(), DType::kI32, {B});
  s.fb.seq_lens = TensorView(s.seq.data(), DType::kI32, {B});
  s.fb.out_cache_loc = TensorView(s.loc.data(), DType::kI32, {static_cast<int64_t>(s.loc.size())});
  if (mode == ForwardMode::kTargetVerify) s.fb.spec.num_draft_tokens = n;
  return s;
}

// The same batch with its arrays on the device (host copies kept as *_cpu for the plan).
ForwardBatch on_device(const Step& s, DeviceMirror& m, const TensorView& r2t_dev) {
  ForwardBatch b = s.fb;
  m.add_view(s.fb.req_pool_indices);
  m.add_view(s.fb.seq_lens);
  m.add_view(s.fb.out_cache_loc);
  b.req_to_token = r2t_dev;
  b.req_pool_indices = m.rebase(s.fb.req_pool_indices);
  b.req_pool_indices_cpu = s.fb.req_pool_indices;
  b.seq_lens = m.rebase(s.fb.seq_lens);
  b.seq_lens_cpu = s.fb.seq_lens;
  b.out_cache_loc = m.rebase(s.fb.out_cache_loc);
  return b;
}

// Re-uploads a contiguous host view that DeviceMirror::add_view copied earlier.
void upload_view(const DeviceMirror& m, const TensorView& host) {
  FB_TEST_CUDA(cudaMemcpy(m.rebase(host).data, host.data,
                          static_cast<size_t>(host.numel() * dtype_size(host.dtype)),
                          cudaMemcpyHostToDevice));
}

void run_case(int P, ForwardMode mode, int n, DType kv_dtype) {
  World w(P, {37, 300, 5}, kv_dtype);
  const int bs = static_cast<int>(w.rows.size());
  Step s = make_step(w, mode, n, bs);
  const int64_t T = static_cast<int64_t>(bs) * n;
  Tensor q(DType::kBF16, {T, Hq, D}), k(DType::kBF16, {T, Hk, D}), v(DType::kBF16, {T, Hk, D}),
      out_cpu(DType::kBF16, {T, Hq, D}), out_gpu(DType::kBF16, {T, Hq, D});
  testing::fill_normal(q, w.rng);
  testing::fill_normal(k, w.rng);
  testing::fill_normal(v, w.rng);
  out_cpu.poison();
  out_gpu.poison();
  // Device state first: the CPU run below writes the new K/V into the host pool.
  DeviceMirror m;
  m.add_view(w.kv.k_cache(0));
  m.add_view(w.kv.v_cache(0));
  m.add_view(w.pool.table());
  for (const Tensor* t : {&q, &k, &v, &out_gpu}) m.add(*t);
  const ForwardBatch db = on_device(s, m, m.rebase(w.pool.table()));
  const LayerCache dev_cache{m.rebase(w.kv.k_cache(0)), m.rebase(w.kv.v_cache(0))};

  AttentionBackend cpu(BackendConfig{.page_size = P});
  cpu.init_forward_metadata(s.fb);
  cpu.forward(q, k, v, out_cpu, w.layer, s.fb, {w.kv.k_cache(0), w.kv.v_cache(0)});

  AttentionBackend gpu(BackendConfig{.page_size = P, .device = {DeviceType::kCUDA, 0}});
  gpu.init_forward_metadata(db);
  gpu.forward(m.rebase(q), m.rebase(k), m.rebase(v), m.rebase(out_gpu), w.layer, db, dev_cache);
  FB_TEST_CUDA(cudaDeviceSynchronize());
  m.download(out_gpu);
  const auto c = testing::compare(out_gpu, out_cpu);
  EXPECT_TRUE(c.ok) << "P=" << P << " " << forward_mode_name(mode) << ": " << c.why;
}

TEST(CudaBackend, DecodeMatchesCpu) {
  for (int P : {1, 16}) run_case(P, ForwardMode::kDecode, 1, DType::kBF16);
}
TEST(CudaBackend, VerifyMatchesCpu) { run_case(16, ForwardMode::kTargetVerify, 3, DType::kBF16); }
TEST(CudaBackend, Fp8DecodeMatchesCpu) { run_case(16, ForwardMode::kDecode, 1, DType::kF8E4M3); }

TEST(CudaBackend, GraphReplayWithNewLengths) {
  const int P = 16, bs = 4;  // 3 real requests padded to a captured size of 4
  World w(P, {20, 150, 64}, DType::kBF16);
  Tensor q(DType::kBF16, {bs, Hq, D}), k(DType::kBF16, {bs, Hk, D}), v(DType::kBF16, {bs, Hk, D}),
      out(DType::kBF16, {bs, Hq, D});
  DeviceMirror m;
  m.add_view(w.kv.k_cache(0));
  m.add_view(w.kv.v_cache(0));
  m.add_view(w.pool.table());
  for (const Tensor* t : {&q, &k, &v, &out}) m.add(*t);
  const LayerCache dev_cache{m.rebase(w.kv.k_cache(0)), m.rebase(w.kv.v_cache(0))};
  // Static batch buffers on the device, as an engine's graph runner keeps them.
  Tensor rows(DType::kI32, {bs}), seq(DType::kI32, {bs}), loc(DType::kI32, {bs});
  for (const Tensor* t : {&rows, &seq, &loc}) m.add(*t, false);

  cudaStream_t stream;
  FB_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  AttentionBackend gpu(
      BackendConfig{.page_size = P, .stream = stream, .device = {DeviceType::kCUDA, 0}});
  gpu.init_cuda_graph_state(bs, kCtx);
  auto device_batch = [&](Step& s) {
    std::copy(s.rows.begin(), s.rows.end(), rows.ptr<int32_t>());
    std::copy(s.seq.begin(), s.seq.end(), seq.ptr<int32_t>());
    std::copy(s.loc.begin(), s.loc.end(), loc.ptr<int32_t>());
    for (const Tensor* t : {&rows, &seq, &loc}) m.upload(*t);
    // Device arrays hold every captured row; the host copies the plan reads hold the real ones.
    ForwardBatch b = s.fb;
    b.req_to_token = m.rebase(w.pool.table());
    b.req_pool_indices = m.rebase(rows).slice(0, 0, s.fb.batch_size);
    b.req_pool_indices_cpu = s.fb.req_pool_indices.slice(0, 0, s.fb.batch_size);
    b.seq_lens = m.rebase(seq).slice(0, 0, s.fb.batch_size);
    b.seq_lens_cpu = s.fb.seq_lens.slice(0, 0, s.fb.batch_size);
    b.out_cache_loc = m.rebase(loc);
    return b;
  };
  Step s0 = make_step(w, ForwardMode::kDecode, 1, bs);
  s0.fb.batch_size = bs;  // capture binds the padded size; every row is "real" at capture
  upload_view(m, w.pool.table());
  ForwardBatch b0 = device_batch(s0);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  gpu.init_forward_metadata_capture_cuda_graph(b0);  // before capture: bind + first mirror copy
  // Eager warm-up (as engines do before capturing): sizes the split-KV workspace.
  gpu.forward(m.rebase(q), m.rebase(k), m.rebase(v), m.rebase(out), w.layer, b0, dev_cache, false);
  FB_TEST_CUDA(cudaStreamSynchronize(stream));
  FB_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  gpu.forward(m.rebase(q), m.rebase(k), m.rebase(v), m.rebase(out), w.layer, b0, dev_cache);
  FB_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  FB_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  for (int step = 0; step < 3; ++step) {
    Step s = make_step(w, ForwardMode::kDecode, 1, bs);  // lengths grow by one each step
    upload_view(m, w.pool.table());
    testing::fill_normal(q, w.rng);
    testing::fill_normal(k, w.rng);
    testing::fill_normal(v, w.rng);
    for (const Tensor* t : {&q, &k, &v}) m.upload(*t);
    ForwardBatch b = device_batch(s);
    gpu.init_forward_metadata_replay_cuda_graph(b);
    FB_TEST_CUDA(cudaGraphLaunch(exec, stream));
    FB_TEST_CUDA(cudaStreamSynchronize(stream));
    m.download(out);
    // Eager CPU reference of the real rows (the host pool has not seen this step's K/V yet).
    Tensor ref(DType::kBF16, {bs, Hq, D});
    ref.poison();
    AttentionBackend cpu(BackendConfig{.page_size = P});
    s.fb.batch_size = bs;  // the padded rows too: finite, ignored
    cpu.init_forward_metadata(s.fb);
    cpu.forward(q, k, v, ref, w.layer, s.fb, {w.kv.k_cache(0), w.kv.v_cache(0)});
    const int64_t real = static_cast<int64_t>(w.rows.size());
    const auto c = testing::compare(out.view().slice(0, 0, real), ref.view().slice(0, 0, real));
    EXPECT_TRUE(c.ok) << "replay " << step << ": " << c.why;
  }
  FB_TEST_CUDA(cudaGraphExecDestroy(exec));
  FB_TEST_CUDA(cudaGraphDestroy(graph));
  FB_TEST_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace flashback

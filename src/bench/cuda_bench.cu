// GPU ceilings and CUDA-event timing for the bench (see cuda_bench.h).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/cuda_bench.h"
#include "bench/inputs.h"
#include "flashback/error.h"
#include "flashback/ops.h"

namespace flashback::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(what, "cudaSuccess", cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(what, "CUBLAS_STATUS_SUCCESS", std::to_string(s));
}

// Owns one device allocation.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (bytes) check(cudaMalloc(&p_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

class Events {
 public:
  Events() {
    check(cudaEventCreate(&a_), "cudaEventCreate");
    check(cudaEventCreate(&b_), "cudaEventCreate");
  }
  ~Events() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  cudaEvent_t a_, b_;
  float ms() const {
    float t = 0;
    check(cudaEventSynchronize(b_), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&t, a_, b_), "cudaEventElapsedTime");
    return t;
  }
};

// 16-byte loads, grid-stride; the sum is written only if it hits an impossible value so the loads
// stay live without a store per thread.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = p[i];
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

double read_TBps(const cudaDeviceProp& prop) {
  const size_t bytes = size_t{2} << 30;  // 2 GiB: ~35x the H200's L2
  DeviceBuffer buf(bytes), sink(sizeof(unsigned));
  check(cudaMemset(buf.get(), 1, bytes), "cudaMemset");
  const int blocks = prop.multiProcessorCount * 8;
  const size_t n = bytes / sizeof(uint4);
  Events ev;
  double best = 0;
  for (int i = 0; i < 20; ++i) {
    check(cudaEventRecord(ev.a_), "cudaEventRecord");
    read_kernel<<<blocks, 512>>>(static_cast<const uint4*>(buf.get()), n,
                                 static_cast<unsigned*>(sink.get()));
    check(cudaGetLastError(), "read_kernel launch");
    check(cudaEventRecord(ev.b_), "cudaEventRecord");
    best = std::max(best, static_cast<double>(bytes) / ev.ms() / 1e9);
  }
  return best;
}

// Pseudo-random bf16 in [-1, 1) (a hash of the index): the operands a sustained workload feeds
// the tensor cores. Constant operands toggle no bits and draw less power, so on a GPU whose
// clock the power limit sets they run faster than any real GEMM (H100, session 32: 899 TFLOP/s
// on 0x3C3C everywhere).
__global__ void fill_random_bf16(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    const float x = static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    p[i] = static_cast<uint16_t>(__float_as_uint(x) >> 16);
  }
}

double bf16_gemm_TFLOPs() {
  constexpr int kN = 8192;
  const size_t elems = size_t{kN} * kN;
  DeviceBuffer a(elems * 2), b(elems * 2), c(elems * 2);
  fill_random_bf16<<<1024, 256>>>(static_cast<uint16_t*>(a.get()), elems, 1);
  fill_random_bf16<<<1024, 256>>>(static_cast<uint16_t*>(b.get()), elems, 2);
  check(cudaGetLastError(), "fill_random_bf16 launch");
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  const float alpha = 1, beta = 0;
  Events ev;
  double best = 0;
  try {
    for (int i = 0; i < 12; ++i) {
      check(cudaEventRecord(ev.a_), "cudaEventRecord");
      check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &alpha, a.get(), CUDA_R_16BF, kN,
                         b.get(), CUDA_R_16BF, kN, &beta, c.get(), CUDA_R_16BF, kN,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
      check(cudaEventRecord(ev.b_), "cudaEventRecord");
      if (i >= 2) best = std::max(best, 2.0 * kN * kN * double{kN} / ev.ms() / 1e9);
    }
  } catch (...) {
    cublasDestroy(h);
    throw;
  }
  cublasDestroy(h);
  return best;
}

// A host Inputs uploaded once: device buffers for each tensor and params that view them.
struct DeviceInputs {
  std::vector<DeviceBuffer> buffers;
  PagedAttentionParams paged;
  RaggedAttentionParams rag;
};

DeviceInputs upload(const Inputs& in, int device) {
  DeviceInputs d;
  std::vector<std::pair<const Tensor*, void*>> map;
  auto add = [&](const Tensor& t) {
    if (t.data() == nullptr) return;  // absent (e.g. MLA has no separate v_cache)
    d.buffers.emplace_back(static_cast<size_t>(t.nbytes()));
    check(cudaMemcpy(d.buffers.back().get(), t.data(), static_cast<size_t>(t.nbytes()),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
    map.emplace_back(&t, d.buffers.back().get());
  };
  // Views into a host tensor (slices, stride-0 broadcasts) keep their offset in the device copy.
  auto remap = [&](TensorView v) {
    if (v.data == nullptr) return v;
    for (const auto& [t, dev] : map) {
      const char* base = static_cast<const char*>(t->data());
      const char* p = static_cast<const char*>(v.data);
      if (p >= base && p < base + t->nbytes()) {
        v.data = static_cast<char*>(dev) + (p - base);
        v.device = Device{DeviceType::kCUDA, device};
        return v;
      }
    }
    throw Error("bench upload", "a view into the workload's tensors", "a foreign pointer");
  };
  if (in.ragged) {
    const RaggedData& r = in.rag;
    for (const Tensor* t : {&r.q, &r.k, &r.v, &r.cu_seqlens_q, &r.cu_seqlens_k, &r.out, &r.lse})
      add(*t);
    d.rag = r.params;
    for (TensorView* v : {&d.rag.q, &d.rag.k, &d.rag.v, &d.rag.cu_seqlens_q, &d.rag.cu_seqlens_k,
                          &d.rag.out, &d.rag.lse})
      *v = remap(*v);
  } else {
    const testing::PagedData& p = in.paged;
    for (const Tensor* t : {&p.q, &p.qv, &p.k_cache, &p.v_cache, &p.page_table, &p.cache_seqlens,
                            &p.cu_seqlens_q, &p.k_descale, &p.v_descale, &p.out, &p.lse})
      add(*t);
    d.paged = p.params;
    for (TensorView* v :
         {&d.paged.q, &d.paged.qv, &d.paged.k_cache, &d.paged.v_cache, &d.paged.page_table,
          &d.paged.table_rows, &d.paged.kv_start, &d.paged.cache_seqlens, &d.paged.cu_seqlens_q,
          &d.paged.k_descale, &d.paged.v_descale, &d.paged.out, &d.paged.lse})
      *v = remap(*v);
  }
  return d;
}

}  // namespace

bool cuda_built() { return true; }

Ceilings measure_cuda_ceilings() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  Ceilings c;
  c.device = prop.name;
  c.read_TBps = read_TBps(prop);
  c.read_method = "16-byte streaming loads over 2 GiB, 8 blocks x 512 threads per SM (best of 20)";
  c.peak_TFLOPs = bf16_gemm_TFLOPs();
  c.peak_method = "bf16 cuBLAS GEMM 8192^3 on random operands, fp32 accumulate (best of 10)";
  return c;
}

Timing time_cuda(const Workload& w, const RunOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");

  say("building inputs");
  const Inputs host = make_inputs(w, 1);
  // Copies hold identical values in distinct buffers: what defeats L2 is the addresses.
  const int64_t budget = std::min<int64_t>(o.max_copy_bytes, static_cast<int64_t>(free_b * 0.7));
  const int n = copies_for(host.nbytes(), prop.l2CacheSize, budget);
  std::vector<DeviceInputs> copies;
  for (int i = 0; i < n; ++i) {
    say("upload " + std::to_string(i + 1) + "/" + std::to_string(n));
    copies.push_back(upload(host, dev));
  }

  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Exec exec;
  exec.stream = stream;
  exec.deterministic = o.deterministic;
  std::vector<DeviceBuffer> keep;
  int max_q = 0;
  if (!host.ragged)
    for (int64_t b = 0; b + 1 < host.paged.cu_seqlens_q.numel(); ++b)
      max_q = std::max(max_q, host.paged.cu_seqlens_q.ptr<int32_t>()[b + 1] -
                                  host.paged.cu_seqlens_q.ptr<int32_t>()[b]);
  for (auto& c : copies) {
    if (host.ragged) {
      c.rag.max_seqlen_q = w.q_len;
      c.rag.max_seqlen_k = *std::max_element(w.kv_lens.begin(), w.kv_lens.end());
      continue;
    }
    c.paged.max_seqlen_q = max_q;
    const int64_t ws = paged_attention_workspace_bytes(c.paged, exec);
    if (ws > 0) {
      keep.emplace_back(static_cast<size_t>(ws));
      c.paged.workspace =
          TensorView(keep.back().get(), DType::kU8, {ws}, Device{DeviceType::kCUDA, dev});
    }
  }
  auto launch = [&](const DeviceInputs& c) {
    if (host.ragged) {
      ragged_attention(c.rag, exec);
    } else {
      paged_attention(c.paged, exec);
    }
  };

  Timing t;
  try {
    say("warm-up");
    Events ev;
    for (const auto& c : copies) launch(c);
    check(cudaEventRecord(ev.a_, stream), "cudaEventRecord");
    for (const auto& c : copies) launch(c);
    check(cudaEventRecord(ev.b_, stream), "cudaEventRecord");
    const double estimate_s = ev.ms() / 1e3 / copies.size();
    const int runs = runs_for(estimate_s, o);
    say(std::to_string(runs) + " runs");
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> marks(static_cast<size_t>(runs));
    for (auto& [a, b] : marks) {
      check(cudaEventCreate(&a), "cudaEventCreate");
      check(cudaEventCreate(&b), "cudaEventCreate");
    }
    for (int r = 0; r < runs; ++r) {
      check(cudaEventRecord(marks[r].first, stream), "cudaEventRecord");
      launch(copies[static_cast<size_t>(r) % copies.size()]);
      check(cudaEventRecord(marks[r].second, stream), "cudaEventRecord");
    }
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(cudaGetLastError(), "flashback kernels");
    std::vector<double> ms;
    for (auto& [a, b] : marks) {
      float x = 0;
      check(cudaEventElapsedTime(&x, a, b), "cudaEventElapsedTime");
      ms.push_back(x);
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
    t.median_ms = median(ms);
    t.min_ms = *std::min_element(ms.begin(), ms.end());
    t.runs = runs;
    t.copies = n;
  } catch (...) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    throw;
  }
  cudaStreamDestroy(stream);
  return t;
}

}  // namespace flashback::bench

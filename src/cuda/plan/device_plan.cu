// One-launch device plan for the fixed-query modes. Every block fills a grid-stride share of the
// per-entry arrays and page tables; block 0 alone does the prefix sums (cu_seqlens), recomputing
// the lengths it needs instead of reading other blocks' writes, so no grid-wide sync is needed.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/plan/device_plan.h"
#include "plan/build.h"

namespace flashback::cuda {
namespace {

using detail::concat;

struct Index {
  const void* p = nullptr;
  bool i64 = false;
  int64_t s = 0;
  __device__ int32_t operator[](int64_t i) const {
    return i64 ? static_cast<int32_t>(static_cast<const int64_t*>(p)[i * s])
               : static_cast<const int32_t*>(p)[i * s];
  }
};

struct List {
  int32_t *rows, *start, *lens, *source, *cu_q, *cu_k, *table;
  int32_t width;
};

struct Args {
  Index rpi, seq, enc;  // enc.p null: no encoder
  const int32_t* r2t;
  int64_t r2t_s0, r2t_s1;
  int32_t real_bs, padded_bs, q_fixed, kv_extra, fill_seq, pad_row, P, C, slots;
  bool has_local, has_cross;
  List self, local, cross;
};

struct Row {
  int32_t row, q, kv, enc;
};

__device__ Row row_info(const Args& a, int32_t b) {
  if (b >= a.real_bs) return {a.pad_row, a.q_fixed, a.fill_seq + a.kv_extra, 0};
  return {a.rpi[b], a.q_fixed, a.seq[b] + a.kv_extra, a.enc.p ? a.enc[b] : 0};
}

struct Entry {
  int32_t row, start, kv, q;
};

// Local entry k of request r (plan/build.cc add_local, fixed slots per request).
__device__ Entry local_entry(const Row& r, int32_t k, int32_t C) {
  const Entry pad{r.row, r.enc, 0, 0};
  const int32_t first = r.kv - r.q;
  if (r.q == 1 && r.kv > 0) {
    if (k > 0) return pad;
    const int32_t cs = first - first % C;
    return {r.row, r.enc + cs, r.kv - cs, 1};
  }
  if (r.q > 0 && first < 0) return k == 0 ? Entry{r.row, r.enc, 0, r.q} : pad;
  if (r.q <= 0) return pad;
  const int32_t last = r.kv - 1, c = first / C + k;
  if (c > last / C) return pad;
  const int32_t cs = c * C;
  const int32_t qb = max(first, cs), qe = min(last, cs + C - 1);
  return {r.row, r.enc + cs, qe - cs + 1, qe - qb + 1};
}

// Entry e of list `which` (0 self, 1 local, 2 cross).
__device__ Entry entry_of(const Args& a, int which, int32_t e, int32_t* source) {
  const int32_t b = which == 1 ? e / a.slots : e;
  *source = b;
  const Row r = row_info(a, b);
  if (which == 0) return {r.row, r.enc, r.kv, r.q};
  if (which == 2) return {r.row, 0, r.enc, r.q};
  return local_entry(r, e % a.slots, a.C);
}

__device__ void fill_entry(const Args& a, const List& l, int which, int32_t e) {
  int32_t src;
  const Entry x = entry_of(a, which, e, &src);
  l.rows[e] = x.row;
  l.start[e] = x.start;
  l.lens[e] = x.kv;
  l.source[e] = src;
}

// Prefix sums of q and kv lengths of a list, by block 0 (1024 threads, chunked warp scans).
__device__ void scan_list(const Args& a, const List& l, int which, int32_t n) {
  __shared__ int32_t warp_q[32], warp_k[32];
  __shared__ int32_t carry_q, carry_k;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
    carry_q = carry_k = 0;
    l.cu_q[0] = l.cu_k[0] = 0;
  }
  __syncthreads();
  for (int32_t base = 0; base < n; base += blockDim.x) {
    const int32_t e = base + tid;
    int32_t q = 0, k = 0, src;
    if (e < n) {
      const Entry x = entry_of(a, which, e, &src);
      q = x.q;
      k = x.kv;
    }
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t yq = __shfl_up_sync(0xffffffffu, q, o), yk = __shfl_up_sync(0xffffffffu, k, o);
      if (lane >= o) {
        q += yq;
        k += yk;
      }
    }
    if (lane == 31) {
      warp_q[warp] = q;
      warp_k[warp] = k;
    }
    __syncthreads();
    if (warp == 0) {
      int32_t wq = lane < static_cast<int>(blockDim.x / 32) ? warp_q[lane] : 0;
      int32_t wk = lane < static_cast<int>(blockDim.x / 32) ? warp_k[lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        const int32_t yq = __shfl_up_sync(0xffffffffu, wq, o),
                      yk = __shfl_up_sync(0xffffffffu, wk, o);
        if (lane >= o) {
          wq += yq;
          wk += yk;
        }
      }
      warp_q[lane] = wq;  // inclusive over warps
      warp_k[lane] = wk;
    }
    __syncthreads();
    const int32_t off_q = carry_q + (warp > 0 ? warp_q[warp - 1] : 0);
    const int32_t off_k = carry_k + (warp > 0 ? warp_k[warp - 1] : 0);
    if (e < n) {
      l.cu_q[e + 1] = off_q + q;
      l.cu_k[e + 1] = off_k + k;
    }
    __syncthreads();
    if (tid == 0) {
      carry_q += warp_q[blockDim.x / 32 - 1];
      carry_k += warp_k[blockDim.x / 32 - 1];
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(1024) plan_kernel(const Args a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int32_t n_self = a.padded_bs, n_local = a.has_local ? a.padded_bs * a.slots : 0,
                n_cross = a.has_cross ? a.padded_bs : 0;
  const List* lists[3] = {&a.self, &a.local, &a.cross};
  const int32_t counts[3] = {n_self, n_local, n_cross};
  for (int which = 0; which < 3; ++which) {
    const List& l = *lists[which];
    const int32_t n = counts[which];
    for (int64_t e = tid; e < n; e += stride) fill_entry(a, l, which, static_cast<int32_t>(e));
    if (l.table == nullptr) continue;
    // Explicit table: page ids of the entry's keys from its first key; page 0 past its length.
    for (int64_t i = tid; i < static_cast<int64_t>(n) * l.width; i += stride) {
      const int32_t e = static_cast<int32_t>(i / l.width), j = static_cast<int32_t>(i % l.width);
      int32_t src;
      const Entry x = entry_of(a, which, e, &src);
      const int32_t pages = (x.kv + a.P - 1) / a.P;
      int32_t v = 0;
      if (j < pages)
        v = a.r2t[x.row * a.r2t_s0 +
                  (static_cast<int64_t>(x.start) + int64_t{j} * a.P) * a.r2t_s1] /
            a.P;
      l.table[i] = v;
    }
  }
  const bool active[3] = {true, a.has_local, a.has_cross};
  if (blockIdx.x == 0)
    for (int which = 0; which < 3; ++which)
      if (active[which]) scan_list(a, *lists[which], which, counts[which]);
}

Index index_of(const TensorView& t) {
  Index i;
  if (!t.defined()) return i;
  i.p = t.data;
  i.i64 = t.dtype == DType::kI64;
  i.s = t.strides[0];
  return i;
}

List list_of(const EntryList& l) {
  return {l.table_rows,   l.kv_start,     l.cache_seqlens, l.source_row,
          l.cu_seqlens_q, l.cu_seqlens_k, l.page_table,    l.page_table_width};
}

void expect_device_index(const TensorView& t, const char* name, int64_t n) {
  detail::expect_rank(t, name, 1);
  detail::expect_dtype(t, name, {DType::kI32, DType::kI64});
  FLASHBACK_CHECK(t.device.type == DeviceType::kCUDA, name, "a device tensor (the GPU plan)",
                  to_string(t.device));
  FLASHBACK_CHECK(t.shape[0] >= n, name, concat("at least ", n, " entries"), t.shape_str());
}

}  // namespace

DeviceGraphPlanState::DeviceGraphPlanState(plan::PlanConfig cfg, int32_t max_bs,
                                           int32_t max_context_len)
    : cfg_(cfg), max_bs_(max_bs), max_context_len_(max_context_len) {
  plan::validate_config(cfg_);
  FLASHBACK_CHECK(max_bs >= 0, "max_bs", ">= 0", concat(max_bs));
  FLASHBACK_CHECK(max_context_len >= 1, "max_context_len", ">= 1", concat(max_context_len));
  const plan::Layout L = plan::graph_layout(cfg_, max_bs, max_context_len);
  const size_t n = std::max<size_t>(plan::arena_elements(L), 1);
  FLASHBACK_CUDA_CHECK(cudaMalloc(&arena_, n * sizeof(int32_t)));
  FLASHBACK_CUDA_CHECK(cudaMemset(arena_, 0, n * sizeof(int32_t)));
  plan::carve(L, arena_, buffers_);
  int dev = 0;
  FLASHBACK_CUDA_CHECK(cudaGetDevice(&dev));
  for (EntryList* l : {&buffers_.self, &buffers_.local, &buffers_.cross})
    l->device = Device{DeviceType::kCUDA, dev};
}

DeviceGraphPlanState::~DeviceGraphPlanState() { cudaFree(arena_); }

ForwardMetadata DeviceGraphPlanState::bind(const ForwardBatch& batch, void* stream) {
  const ForwardMode mode = batch.forward_mode;
  FLASHBACK_CHECK(is_decode_or_idle(mode) || mode == ForwardMode::kTargetVerify, "forward_mode",
                  "DECODE, IDLE or TARGET_VERIFY (the modes captured in CUDA graphs)",
                  forward_mode_name(mode));
  FLASHBACK_CHECK(batch.batch_size >= 0 && batch.batch_size <= max_bs_, "batch_size",
                  concat("0 ..", max_bs_, " (max_bs)"), concat(batch.batch_size));
  if (mode == ForwardMode::kTargetVerify)
    FLASHBACK_CHECK(batch.spec.num_draft_tokens >= 1 &&
                        batch.spec.num_draft_tokens <= std::max(cfg_.max_draft_tokens, 1),
                    "spec.num_draft_tokens", concat("1 ..", cfg_.max_draft_tokens),
                    concat(batch.spec.num_draft_tokens));
  ForwardMetadata m = buffers_;
  m.mode = mode;
  m.spec = batch.spec;
  m.batch_size = batch.batch_size;
  m.page_size = cfg_.page_size;
  m.attention_chunk_size = cfg_.attention_chunk_size;
  m.has_cross = batch.encoder_lens.defined();
  update(m, batch, stream);
  return m;
}

void DeviceGraphPlanState::update(ForwardMetadata& m, const ForwardBatch& batch, void* stream) {
  FLASHBACK_CHECK(m.self.table_rows == buffers_.self.table_rows, "metadata",
                  "metadata bound by this device graph state", "other metadata");
  FLASHBACK_CHECK(batch.batch_size >= 0 && batch.batch_size <= m.batch_size, "batch_size",
                  concat("<= ", m.batch_size, " (the bound batch size)"), concat(batch.batch_size));
  const bool verify = m.mode == ForwardMode::kTargetVerify;
  const int32_t q_fixed = verify ? m.spec.num_draft_tokens : 1;
  const int32_t kv_extra = verify ? m.spec.num_draft_tokens : m.spec.draft_step + 1;
  const int32_t C = cfg_.attention_chunk_size;
  const TensorView& r2t = batch.req_to_token;
  detail::expect_rank(r2t, "req_to_token", 2);
  detail::expect_dtype(r2t, "req_to_token", {DType::kI32});
  FLASHBACK_CHECK(r2t.device.type == DeviceType::kCUDA, "req_to_token",
                  "a device tensor (the GPU plan)", to_string(r2t.device));
  expect_device_index(batch.req_pool_indices, "req_pool_indices", batch.batch_size);
  expect_device_index(batch.seq_lens, "seq_lens", batch.batch_size);
  FLASHBACK_CHECK(batch.encoder_lens.defined() == m.has_cross, "encoder_lens",
                  m.has_cross ? "encoder lengths (bound with them)" : "none (bound without)",
                  batch.encoder_lens.defined() ? "encoder lengths" : "none");
  if (m.has_cross) expect_device_index(batch.encoder_lens, "encoder_lens", batch.batch_size);

  Args a{};
  a.rpi = index_of(batch.req_pool_indices);
  a.seq = index_of(batch.seq_lens);
  a.enc = index_of(batch.encoder_lens);
  a.r2t = r2t.ptr<const int32_t>();
  a.r2t_s0 = r2t.strides[0];
  a.r2t_s1 = r2t.strides[1];
  a.real_bs = batch.batch_size;
  a.padded_bs = m.batch_size;
  a.q_fixed = q_fixed;
  a.kv_extra = kv_extra;
  a.fill_seq = cfg_.cuda_graph_fill_seq_len;
  a.pad_row = cfg_.cuda_graph_padding_row;
  a.P = cfg_.page_size;
  a.C = C;
  a.has_local = m.has_local;
  a.slots = m.has_local ? plan::local_entries_per_request(m.mode, m.spec.num_draft_tokens, C) : 1;
  a.has_cross = m.has_cross;
  a.self = list_of(m.self);
  a.local = list_of(m.local);
  a.cross = list_of(m.cross);
  // Host fields: sizes follow from the bound shape; maxima are bounds (no data read here).
  m.self.size = m.batch_size;
  m.self.max_seqlen_q = q_fixed;
  m.self.max_seqlen_k = max_context_len_;
  m.self.causal = true;
  if (m.has_local) {
    m.local.size = m.batch_size * a.slots;
    m.local.max_seqlen_q = std::min(q_fixed, std::max(C, 1));
    m.local.max_seqlen_k = std::min(C, max_context_len_);
    m.local.causal = true;
  }
  if (m.has_cross) {
    m.cross.size = m.batch_size;
    m.cross.max_seqlen_q = q_fixed;
    m.cross.max_seqlen_k = max_context_len_;
    m.cross.causal = false;
  }
  const int64_t work =
      std::max<int64_t>(int64_t{m.batch_size} * std::max({a.slots, 1}) *
                            std::max({m.self.page_table_width, m.local.page_table_width,
                                      m.cross.page_table_width, 1}),
                        1);
  const int blocks = static_cast<int>(std::clamp<int64_t>((work + 1023) / 1024, 1, 264));
  plan_kernel<<<blocks, 1024, 0, static_cast<cudaStream_t>(stream)>>>(a);
  FLASHBACK_CUDA_CHECK_LAUNCH("plan_kernel");
}

}  // namespace flashback::cuda

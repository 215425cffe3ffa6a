// Host side of the long-query attention kernel: checks what only this CUDA path restricts,
// turns validated PagedAttentionParams / RaggedAttentionParams into PrefillParams, sizes the
// grid and calls the generated instance for (head dims, q dtype).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/prefill/params.h"
#include "cuda/prefill/prefill.h"

// The generated list of instances (src/cuda/prefill/prefill.cmake): declarations...
#define FLASHBACK_PREFILL_INSTANCE(D, DV, TN)                      \
  namespace flashback::cuda::prefill {                             \
  void run_##D##_##DV##_##TN(const PrefillParams&, KvKind, void*); \
  int rows_##D##_##DV##_##TN();                                    \
  }
#include "flashback_prefill_instances.inc"
#undef FLASHBACK_PREFILL_INSTANCE

namespace flashback::cuda::prefill {
namespace {

using detail::concat;

struct Instance {
  int d, dv;
  bool bf16;
  void (*run)(const PrefillParams&, KvKind, void*);
  int (*rows)();
};

// ...and the table.
const std::vector<Instance>& instances() {
  static const std::vector<Instance> table = {
#define FLASHBACK_PREFILL_INSTANCE(D, DV, TN) \
  {D, DV, std::string(#TN) == "bf16", &run_##D##_##DV##_##TN, &rows_##D##_##DV##_##TN},
#include "flashback_prefill_instances.inc"
#undef FLASHBACK_PREFILL_INSTANCE
  };
  return table;
}

const Instance& find(int64_t d, int64_t dv, DType q) {
  FLASHBACK_CHECK(q == DType::kBF16 || q == DType::kF16, "q", "dtype bf16 or f16 on CUDA",
                  dtype_name(q));
  for (const Instance& in : instances())
    if (in.d == d && in.dv == dv && in.bf16 == (q == DType::kBF16)) return in;
  throw Error("q",
              concat("head dims built into this CUDA prefill library (", built_instances(), ")"),
              concat("D=", d, " Dv=", dv, " ", dtype_name(q)));
}

void expect_aligned(const TensorView& t, const char* name, int bytes) {
  const int64_t eb = dtype_size(t.dtype);
  bool ok = reinterpret_cast<uintptr_t>(t.data) % bytes == 0;
  for (int d = 0; d + 1 < t.ndim; ++d) ok = ok && (t.strides[d] * eb) % bytes == 0;
  FLASHBACK_CHECK(ok, name, concat(bytes, "-byte aligned rows on CUDA (base pointer and strides)"),
                  concat("pointer ", t.data, ", strides of shape ", t.shape_str()));
}

void expect_out(const TensorView& out, const TensorView& q) {
  FLASHBACK_CHECK(out.dtype == q.dtype, "out", concat("dtype ", dtype_name(q.dtype), " (as q)"),
                  dtype_name(out.dtype));
  expect_aligned(out, "out", 4);  // the epilogue stores pairs of 16-bit values
}

// Query blocks per (entry, head): enough for the longest entry; the kernel loops past it, so a
// short hint costs speed, never correctness.
int m_blocks(int64_t max_q, int rows) {
  const int64_t mb = (std::max<int64_t>(max_q, 1) + rows - 1) / rows;
  return static_cast<int>(std::min<int64_t>(mb, int64_t{1} << 20));
}

void fill_common(PrefillParams& d, const TensorView& q, const TensorView& out,
                 const TensorView& lse, const TensorView& cu_q) {
  d.q = q.data;
  d.q_st = q.strides[0];
  d.q_sh = q.strides[1];
  d.out = out.data;
  d.out_st = out.strides[0];
  d.out_sh = out.strides[1];
  if (lse.defined()) {
    d.lse = lse.ptr<float>();
    d.lse_st = lse.strides[0];
    d.lse_sh = lse.strides[1];
  }
  d.cu_q = cu_q.ptr<const int32_t>();
  d.cu_q_s = cu_q.strides[0];
}

void check_grid(int64_t batch, int64_t heads_q) {
  FLASHBACK_CHECK(batch <= 65535, "cu_seqlens_q", "at most 65535 entries on CUDA",
                  std::to_string(batch));
  FLASHBACK_CHECK(heads_q <= 65535, "q", "at most 65535 heads on CUDA", std::to_string(heads_q));
}

}  // namespace

std::string built_instances() {
  std::string out;
  for (const Instance& in : instances())
    out += concat(out.empty() ? "" : ", ", in.d, "/", in.dv, " ", in.bf16 ? "bf16" : "f16");
  return out;
}

bool takes(const PagedAttentionParams& p, const detail::PagedShape& s) {
  const int64_t max_q = p.max_seqlen_q > 0   ? p.max_seqlen_q
                        : s.max_seqlen_q > 0 ? s.max_seqlen_q
                                             : s.total_q;
  return max_q > kDecodeMaxQ;
}

void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec) {
  FLASHBACK_CHECK(s.head_dim_qv == 0, "qv",
                  concat("no qv: MLA absorbed attention with more than ", kDecodeMaxQ,
                         " queries per entry is not built on CUDA yet (issue #7)"),
                  concat("qv with ", s.head_dim_qv, " columns"));
  const Instance& in = find(s.head_dim, s.head_dim_v, p.q.dtype);
  expect_out(p.out, p.q);
  KvKind kv = KvKind::kSame;
  const DType kt = p.k_cache.dtype;
  if (kt == DType::kF8E4M3)
    kv = KvKind::kE4M3;
  else if (kt == DType::kF8E5M2)
    kv = KvKind::kE5M2;
  else
    FLASHBACK_CHECK(kt == p.q.dtype, "k_cache",
                    concat("dtype ", dtype_name(p.q.dtype), " (as q) or fp8 e4m3/e5m2 on CUDA"),
                    dtype_name(kt));
  expect_aligned(p.q, "q", 16);
  expect_aligned(p.k_cache, "k_cache", 16);
  expect_aligned(p.v_cache, "v_cache", 16);
  check_grid(s.batch, s.heads_q);
  if (s.batch == 0 || s.total_q == 0) return;

  PrefillParams d;
  fill_common(d, p.q, p.out, p.lse, p.cu_seqlens_q);
  const bool paged4 = p.k_cache.ndim == 4;
  d.k = p.k_cache.data;
  d.v = p.v_cache.data;
  d.k_sp = p.k_cache.strides[0];
  d.v_sp = p.v_cache.strides[0];
  d.k_so = paged4 ? p.k_cache.strides[1] : 0;
  d.v_so = paged4 ? p.v_cache.strides[1] : 0;
  d.k_sh = p.k_cache.strides[paged4 ? 2 : 1];
  d.v_sh = p.v_cache.strides[paged4 ? 2 : 1];
  d.table = p.page_table.ptr<const int32_t>();
  d.table_s0 = p.page_table.strides[0];
  d.table_s1 = p.page_table.strides[1];
  d.table_holds_slots = p.table_holds_slots;
  if (p.table_rows.defined()) {
    d.table_rows = p.table_rows.ptr<const int32_t>();
    d.table_rows_s = p.table_rows.strides[0];
  }
  if (p.kv_start.defined()) {
    d.kv_start = p.kv_start.ptr<const int32_t>();
    d.kv_start_s = p.kv_start.strides[0];
  }
  d.seqlens = p.cache_seqlens.ptr<const int32_t>();
  d.seqlens_s = p.cache_seqlens.strides[0];
  if (p.k_descale.defined()) {
    d.k_descale = p.k_descale.ptr<const float>();
    d.kd_s0 = p.k_descale.strides[0];
    d.kd_s1 = p.k_descale.strides[1];
  }
  if (p.v_descale.defined()) {
    d.v_descale = p.v_descale.ptr<const float>();
    d.vd_s0 = p.v_descale.strides[0];
    d.vd_s1 = p.v_descale.strides[1];
  }
  d.batch = static_cast<int>(s.batch);
  d.heads_q = static_cast<int>(s.heads_q);
  d.group = static_cast<int>(s.heads_q / s.heads_kv);
  d.page_size = static_cast<int>(s.page_size);
  const int64_t max_q = p.max_seqlen_q > 0   ? p.max_seqlen_q
                        : s.max_seqlen_q > 0 ? s.max_seqlen_q
                                             : s.total_q;
  d.m_blocks = m_blocks(max_q, in.rows());
  d.scale = s.scale;
  d.softcap = p.softcap;
  d.causal = p.causal;
  d.window_left = p.window_left;
  d.window_right = p.window_right;
  in.run(d, kv, exec.stream);
}

void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                      const Exec& exec) {
  const Instance& in = find(s.head_dim, s.head_dim_v, p.q.dtype);
  expect_out(p.out, p.q);
  expect_aligned(p.q, "q", 16);
  expect_aligned(p.k, "k", 16);
  expect_aligned(p.v, "v", 16);
  check_grid(s.batch, s.heads_q);
  if (s.batch == 0 || s.total_q == 0) return;

  PrefillParams d;
  fill_common(d, p.q, p.out, p.lse, p.cu_seqlens_q);
  d.k = p.k.data;
  d.v = p.v.data;
  d.k_sp = p.k.strides[0];
  d.v_sp = p.v.strides[0];
  d.k_sh = p.k.strides[1];
  d.v_sh = p.v.strides[1];
  d.cu_k = p.cu_seqlens_k.ptr<const int32_t>();
  d.cu_k_s = p.cu_seqlens_k.strides[0];
  d.batch = static_cast<int>(s.batch);
  d.heads_q = static_cast<int>(s.heads_q);
  d.group = static_cast<int>(s.heads_q / s.heads_kv);
  const int64_t max_q = p.max_seqlen_q > 0   ? p.max_seqlen_q
                        : s.max_seqlen_q > 0 ? s.max_seqlen_q
                                             : s.total_q;
  d.m_blocks = m_blocks(max_q, in.rows());
  d.scale = s.scale;
  d.softcap = p.softcap;
  d.causal = p.causal;
  d.window_left = p.window_left;
  d.window_right = p.window_right;
  in.run(d, KvKind::kSame, exec.stream);
}

}  // namespace flashback::cuda::prefill

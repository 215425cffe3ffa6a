// CUDA dispatch: turns validated entry-point params into the kernels' plain Params structs,
// checks what only the CUDA path restricts (dtypes, built head dims, 16-byte aligned cache rows,
// short queries), plans the split-KV grid and launches on the caller's stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/decode/config.h"
#include "cuda/decode/launch.h"
#include "cuda/device_facts.h"
#include "cuda/dispatch.h"
#include "cuda/env.h"
#include "cuda/merge/merge.h"
#include "cuda/paged_params.h"
#include "cuda/plan/split_plan.h"
#include "cuda/prefill/prefill.h"
#include "cuda/store/store.h"

// The generated list of decode instances (src/cuda/sources.cmake): declarations...
#define FLASHBACK_DECODE_INSTANCE(D, DV, QV, TN)                          \
  namespace flashback::cuda {                                             \
  void decode_##D##_##DV##_##TN(const DecodeParams&, int, KvKind, void*); \
  }
#include "flashback_cuda_instances.inc"
#undef FLASHBACK_DECODE_INSTANCE

namespace flashback::cuda {
namespace {

using detail::concat;

struct Instance {
  int d, dv;
  bool qv, bf16;
  DecodeLaunchFn fn;
};

// ...and the table.
const std::vector<Instance>& instances() {
  static const std::vector<Instance> table = {
#define FLASHBACK_DECODE_INSTANCE(D, DV, QV, TN) \
  {D, DV, QV, std::string(#TN) == "bf16", &decode_##D##_##DV##_##TN},
#include "flashback_cuda_instances.inc"
#undef FLASHBACK_DECODE_INSTANCE
  };
  return table;
}

// Selects and restores the tensors' device around a call.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    FLASHBACK_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != index) FLASHBACK_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceGuard() {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

bool aligned16(const TensorView& t) {
  const int64_t eb = dtype_size(t.dtype);
  bool ok = reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
  for (int d = 0; d + 1 < t.ndim; ++d) ok = ok && (t.strides[d] * eb) % 16 == 0;
  return ok;
}

void expect_aligned16(const TensorView& t, const char* name) {
  const bool ok = aligned16(t);
  FLASHBACK_CHECK(ok, name, "16-byte aligned rows on CUDA (base pointer and strides)",
                  concat("pointer ", t.data, ", shape ", t.shape_str()));
}

struct Resolved {
  DecodeParams dp;
  CombineParams cp;
  DecodeLaunchFn fn = nullptr;
  int m_tiles = 1;
  KvKind kv = KvKind::kSame;
  int64_t ws_o_bytes = 0, ws_bytes = 0;
  bool empty = false;
};

Resolved resolve(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec) {
  Resolved r;
  FLASHBACK_CHECK(p.q.dtype == DType::kBF16 || p.q.dtype == DType::kF16, "q",
                  "dtype bf16 or f16 on CUDA", dtype_name(p.q.dtype));
  FLASHBACK_CHECK(p.out.dtype == p.q.dtype, "out",
                  concat("dtype ", dtype_name(p.q.dtype), " (as q)"), dtype_name(p.out.dtype));
  const DType kt = p.k_cache.dtype;
  if (kt == DType::kF8E4M3)
    r.kv = KvKind::kE4M3;
  else if (kt == DType::kF8E5M2)
    r.kv = KvKind::kE5M2;
  else
    FLASHBACK_CHECK(kt == p.q.dtype, "k_cache",
                    concat("dtype ", dtype_name(p.q.dtype), " (as q) or fp8 e4m3/e5m2 on CUDA"),
                    dtype_name(kt));
  const bool qv = s.head_dim_qv > 0, bf16 = p.q.dtype == DType::kBF16;
  for (const Instance& in : instances())
    if (in.d == s.head_dim && in.dv == s.head_dim_v && in.qv == qv && in.bf16 == bf16) r.fn = in.fn;
  FLASHBACK_CHECK(r.fn != nullptr, "q",
                  concat("head dims built into this CUDA library (", built_paged_instances(), ")"),
                  concat("D=", s.head_dim, " Dv=", s.head_dim_v, qv ? " with qv" : "", " ",
                         dtype_name(p.q.dtype)));
  expect_aligned16(p.k_cache, "k_cache");
  expect_aligned16(p.v_cache, "v_cache");

  // Without qv, entries longer than 16 queries went to the prefill kernel (prefill::takes).
  // MLA absorbed attention (qv) of any length stays here: its 64-row blocks of (query, head)
  // rows cover every query, and with no hint the bound is total_q (row blocks past an entry
  // exit at once). An entry longer than max_q gets NaN (entry.cuh).
  int64_t max_q = p.max_seqlen_q > 0   ? p.max_seqlen_q
                  : s.max_seqlen_q > 0 ? s.max_seqlen_q
                  : qv                 ? s.total_q
                                       : std::min<int64_t>(s.total_q, 16);
  FLASHBACK_CHECK(qv || max_q <= 16, "max_seqlen_q",
                  "<= 16 on CUDA here (longer queries go to the prefill kernel)",
                  std::to_string(max_q));
  r.empty = s.batch == 0 || s.total_q == 0;
  max_q = std::max<int64_t>(max_q, 1);
  const int64_t group = s.heads_q / s.heads_kv;
  const int64_t rows = group * max_q;

  // MLA absorbed (64 + 512) with 16-bit caches runs on the Hopper kernels (mla_wgmma.cuh,
  // mla_narrow.cuh) where this build and the device allow it and q's rows can be copied in
  // 16-byte pieces; FLASHBACK_DECODE_KERNEL=mma keeps kernel.cuh's (tests and A/B timing on a
  // Hopper GPU).
  static const bool forced_mma = env_value("FLASHBACK_DECODE_KERNEL") == "mma";
  const DeviceFacts facts = device_facts(s.device.index);
  r.dp.hopper_mla = qv && s.head_dim == 64 && s.head_dim_v == 512 && r.kv == KvKind::kSame &&
                    facts.sm90a && !forced_mma && aligned16(p.q) && aligned16(p.qv);
  // 16-row m-tiles per block, which also names the Hopper MLA kernel (launch.cuh): 1 or 2 on
  // mla_narrow.cuh's (<= 16 or <= 32 rows), 4 on mla_wgmma.cuh's 64-row blocks;
  // FLASHBACK_MLA_NARROW=0 keeps every MLA batch on the latter (tests of that kernel at those
  // shapes, A/B). Elsewhere 1 (<= 16 rows) or 4.
  static const bool mla_narrow = env_value("FLASHBACK_MLA_NARROW") != "0";
  if (r.dp.hopper_mla)
    r.m_tiles = !mla_narrow || rows > 32 ? 4 : rows > 16 ? 2 : 1;
  else
    r.m_tiles = rows <= 16 ? 1 : 4;
  const int64_t row_blocks = (rows + 16 * r.m_tiles - 1) / (16 * r.m_tiles);
  FLASHBACK_CHECK(s.batch <= 65535, "cu_seqlens_q", "at most 65535 entries on CUDA",
                  std::to_string(s.batch));
  FLASHBACK_CHECK(s.heads_kv * row_blocks <= 65535, "k_cache", "fewer KV heads x row blocks",
                  std::to_string(s.heads_kv * row_blocks));
  const int64_t max_keys = p.table_holds_slots ? s.table_width : s.table_width * s.page_size;
  // Kernels that keep their SM slots for a whole split get one wave of them; kernel.cuh, whose
  // shapes vary more, many waves (split_plan.h).
  const bool fp8 = r.kv != KvKind::kSame;
  // FLASHBACK_DECODE_SMEM_BLOCK=<bytes> plans for a device with less shared memory per block
  // (e.g. 101376, sm_86/89's): the shapes a smaller GPU sends to kernel.cuh, tested on this one.
  static const int smem_cap = std::atoi(env_value("FLASHBACK_DECODE_SMEM_BLOCK").c_str());
  r.dp.smem_block = smem_cap > 0 ? std::min(smem_cap, facts.smem_block) : facts.smem_block;
  // FLASHBACK_DECODE_NARROW=0 keeps the warps-split-keys kernel's 16-row form for <= 8 rows.
  static const bool narrow_off = env_value("FLASHBACK_DECODE_NARROW") == "0";
  r.dp.narrow = !narrow_off && wk_narrow(static_cast<int>(group), static_cast<int>(max_q));
  const DecodeShape shape =
      decode_shape(s.head_dim, s.head_dim_v, qv, fp8, r.m_tiles, r.dp.hopper_mla, r.dp.smem_block);
  const int resident =
      shape == DecodeShape::kWarpKeys
          ? wk_resident(wk_layout(s.head_dim, s.head_dim_v, fp8, r.dp.narrow), facts.smem_sm)
          : 1;
  // FLASHBACK_DECODE_SPLITS=<n> stands in for a caller's num_splits when it leaves the count to
  // the heuristic (A/B timing of split counts through `flashback bench`).
  static const int env_splits = std::atoi(env_value("FLASHBACK_DECODE_SPLITS").c_str());
  const SplitPlan plan = plan_splits(
      s.batch * s.heads_kv * row_blocks, max_keys, facts.sms,
      p.num_splits > 0 ? p.num_splits : std::max(env_splits, 0), exec.deterministic,
      shape == DecodeShape::kColumns ? SplitRule::kManyWaves : SplitRule::kOneWave, resident);
  if (plan.use_workspace) {
    const int64_t rows_all = int64_t{plan.num_splits} * s.total_q * s.heads_q;
    r.ws_o_bytes = (rows_all * s.head_dim_v * 4 + 255) / 256 * 256;
    r.ws_bytes = r.ws_o_bytes + rows_all * 4;
  }

  DecodeParams& d = r.dp;
  fill_query_fields(d, p.q, p.out, p.lse, p.cu_seqlens_q, s.batch, s.heads_q, s.heads_kv, s.scale,
                    p.causal, p.window_left, p.window_right, p.softcap);
  if (qv) {
    d.qv = p.qv.data;
    d.qv_st = p.qv.strides[0];
    d.qv_sh = p.qv.strides[1];
  }
  fill_paged_kv(d, p, s.page_size);
  d.use_workspace = plan.use_workspace;
  d.heads_kv = static_cast<int>(s.heads_kv);
  d.total_q = static_cast<int>(s.total_q);
  d.max_q = static_cast<int>(max_q);
  d.row_blocks = static_cast<int>(row_blocks);
  d.num_splits = plan.num_splits;
  d.split_chunk = plan.split_chunk;
  // FLASHBACK_DECODE_ORDER=index keeps blockIdx order, =length ranks every batch that fits
  // (tests, A/B timing); by default split_plan.h's rule.
  static const std::string order = env_value("FLASHBACK_DECODE_ORDER");
  const int64_t grid_ctas = int64_t{plan.num_splits} * s.batch * s.heads_kv * row_blocks;
  d.longest_first =
      shape == DecodeShape::kWarpKeys && order != "index" &&
      (order == "length" ? s.batch <= kLongestFirstMax
                         : order_longest_first(s.batch, grid_ctas, int64_t{facts.sms} * resident));

  CombineParams& c = r.cp;
  c.num_splits = plan.num_splits;
  c.total_q = d.total_q;
  c.heads_q = d.heads_q;
  c.head_dim_v = static_cast<int>(s.head_dim_v);
  c.bf16 = bf16;
  c.out = d.out;
  c.out_st = d.out_st;
  c.out_sh = d.out_sh;
  c.lse = d.lse;
  c.lse_st = d.lse_st;
  c.lse_sh = d.lse_sh;
  // The combine starts while the decode grid's last CTAs run, where the device runs this
  // library's sm_90a code (facts.sm90a: there pdl_wait is compiled in; other builds and GPUs,
  // e.g. compute_80 PTX JIT-compiled for a newer one, launch it plainly). FLASHBACK_COMBINE_PDL=0
  // launches it after the grid as an ordinary kernel.
  static const bool pdl_off = env_value("FLASHBACK_COMBINE_PDL") == "0";
  c.pdl = facts.sm90a && !pdl_off;
  return r;
}

int dcode(DType t) { return static_cast<int>(t); }

}  // namespace

std::string built_paged_instances() {
  std::string out;
  for (const Instance& in : instances())
    out += concat(out.empty() ? "" : ", ", in.d, "/", in.dv, in.qv ? " mla " : " ",
                  in.bf16 ? "bf16" : "f16");
  return out;
}

int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p, const detail::PagedShape& s,
                                        const Exec& exec) {
  if (prefill::takes(p, s)) return 0;  // long queries: no split-KV workspace
  DeviceGuard guard(s.device.index);
  return resolve(p, s, exec).ws_bytes;
}

void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec) {
  DeviceGuard guard(s.device.index);
  if (prefill::takes(p, s)) return prefill::paged_attention(p, s, exec);
  Resolved r = resolve(p, s, exec);
  if (r.empty) return;
  if (r.ws_bytes > 0) {
    const TensorView& w = p.workspace;
    FLASHBACK_CHECK(w.defined() && w.data != nullptr, "workspace",
                    concat(r.ws_bytes, " bytes (paged_attention_workspace_bytes)"), "none");
    FLASHBACK_CHECK(w.device == s.device, "workspace", "a tensor on " + to_string(s.device),
                    to_string(w.device));
    const int64_t have = w.numel() * dtype_size(w.dtype);
    FLASHBACK_CHECK(have >= r.ws_bytes && reinterpret_cast<uintptr_t>(w.data) % 16 == 0,
                    "workspace", concat(r.ws_bytes, " bytes, 16-byte aligned"),
                    concat(have, " bytes at ", w.data));
    r.dp.ws_o = static_cast<float*>(w.data);
    r.dp.ws_lse = reinterpret_cast<float*>(static_cast<unsigned char*>(w.data) + r.ws_o_bytes);
    r.cp.ws_o = r.dp.ws_o;
    r.cp.ws_lse = r.dp.ws_lse;
  }
  r.fn(r.dp, r.m_tiles, r.kv, exec.stream);
  if (r.dp.use_workspace) launch_combine(r.cp, exec.stream);
}

void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                      const Exec& exec) {
  DeviceGuard guard(s.device.index);
  prefill::ragged_attention(p, s, exec);
}

void merge_state(const MergeStateParams& p, const detail::MergeShape& s, const Exec& exec) {
  DeviceGuard guard(s.device.index);
  MergeParams m;
  m.out_a = p.out_a.data;
  m.out_b = p.out_b.data;
  m.out = p.out.data;
  m.dt_a = dcode(p.out_a.dtype);
  m.dt_b = dcode(p.out_b.dtype);
  m.dt_out = dcode(p.out.dtype);
  m.a_st = p.out_a.strides[0];
  m.a_sh = p.out_a.strides[1];
  m.b_st = p.out_b.strides[0];
  m.b_sh = p.out_b.strides[1];
  m.o_st = p.out.strides[0];
  m.o_sh = p.out.strides[1];
  m.lse_a = p.lse_a.ptr<const float>();
  m.lse_b = p.lse_b.ptr<const float>();
  m.la_st = p.lse_a.strides[0];
  m.la_sh = p.lse_a.strides[1];
  m.lb_st = p.lse_b.strides[0];
  m.lb_sh = p.lse_b.strides[1];
  if (p.lse.defined()) {
    m.lse = p.lse.ptr<float>();
    m.l_st = p.lse.strides[0];
    m.l_sh = p.lse.strides[1];
  }
  m.tokens = static_cast<int>(s.tokens);
  m.heads = static_cast<int>(s.heads);
  m.head_dim = static_cast<int>(s.head_dim);
  launch_merge(m, exec.stream);
}

void kv_store(const KVStoreParams& p, const detail::StoreShape& s, const Exec& exec) {
  DeviceGuard guard(s.device.index);
  auto one = [&](const TensorView& src, const TensorView& cache, int64_t dim, float scale) {
    StoreParams st;
    st.src = src.data;
    st.dt_src = dcode(src.dtype);
    st.s_st = src.strides[0];
    st.s_sh = src.strides[1];
    st.cache = cache.data;
    st.dt_cache = dcode(cache.dtype);
    const bool paged4 = cache.ndim == 4;
    st.c_sp = cache.strides[0];
    st.c_so = paged4 ? cache.strides[1] : 0;
    st.c_sh = cache.strides[paged4 ? 2 : 1];
    st.loc = p.loc.data;
    st.loc_i64 = p.loc.dtype == DType::kI64;
    st.loc_s = p.loc.strides[0];
    st.tokens = static_cast<int>(s.tokens);
    st.heads = static_cast<int>(s.heads);
    st.head_dim = static_cast<int>(dim);
    st.page_size = static_cast<int>(s.page_size);
    st.fp8 = is_fp8(cache.dtype);
    st.scale = scale;
    launch_store(st, exec.stream);
  };
  one(p.k, p.k_cache, s.head_dim, p.k_scale);
  if (p.v.defined()) one(p.v, p.v_cache, s.head_dim_v, p.v_scale);
}

}  // namespace flashback::cuda

#include "common/validate.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace flashback::detail {

void expect_defined(const TensorView& t, const char* name) {
  FLASHBACK_CHECK(t.defined() && t.data != nullptr, name, "a tensor", "none");
}

void expect_rank(const TensorView& t, const char* name, int rank) {
  expect_defined(t, name);
  FLASHBACK_CHECK(t.ndim == rank, name, std::to_string(rank) + " dimensions",
                  std::to_string(t.ndim) + " (shape " + t.shape_str() + ")");
}

void expect_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::string list;
  for (DType d : allowed) list += (list.empty() ? "" : " or ") + std::string(dtype_name(d));
  throw Error(name, "dtype " + list, dtype_name(t.dtype));
}

void expect_dim(const TensorView& t, const char* name, int dim, int64_t value) {
  FLASHBACK_CHECK(t.shape[dim] == value, name, concat("size ", value, " in dimension ", dim),
                  concat(t.shape[dim], " (shape ", t.shape_str(), ")"));
}

void expect_last_contiguous(const TensorView& t, const char* name) {
  FLASHBACK_CHECK(t.last_dim_contiguous(), name, "stride 1 in the last dimension",
                  concat("stride ", t.strides[t.ndim - 1]));
}

void expect_device(const TensorView& t, const char* name, Device device) {
  FLASHBACK_CHECK(t.device == device, name, "a tensor on " + to_string(device),
                  to_string(t.device));
}

namespace {

constexpr std::initializer_list<DType> kActDtypes = {DType::kF32, DType::kF16, DType::kBF16};
constexpr std::initializer_list<DType> kCacheDtypes = {DType::kF32, DType::kF16, DType::kBF16,
                                                       DType::kF8E4M3, DType::kF8E5M2};

void expect_nonneg_strides(const TensorView& t, const char* name) {
  for (int i = 0; i < t.ndim; ++i)
    FLASHBACK_CHECK(t.strides[i] >= 0, name, "non-negative strides",
                    concat("stride ", t.strides[i], " in dimension ", i));
}

// A 1-D int32 index array of `n` entries on `dev`.
void expect_index(const TensorView& t, const char* name, int64_t n, Device dev) {
  expect_rank(t, name, 1);
  expect_dtype(t, name, {DType::kI32});
  expect_dim(t, name, 0, n);
  expect_device(t, name, dev);
  expect_nonneg_strides(t, name);
}

int32_t at(const TensorView& t, int64_t i) { return t.ptr<const int32_t>()[i * t.strides[0]]; }

// cu_seqlens: starts at 0, non-decreasing, ends at `total`. Returns the largest step.
int64_t check_cu_seqlens(const TensorView& cu, const char* name, int64_t batch, int64_t total) {
  FLASHBACK_CHECK(at(cu, 0) == 0, name, "first entry 0", std::to_string(at(cu, 0)));
  int64_t max_len = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = int64_t{at(cu, b + 1)} - at(cu, b);
    FLASHBACK_CHECK(
        len >= 0, name, "non-decreasing entries",
        concat("entry ", b + 1, " = ", at(cu, b + 1), " < entry ", b, " = ", at(cu, b)));
    max_len = std::max(max_len, len);
  }
  FLASHBACK_CHECK(at(cu, batch) == total, name, concat("last entry ", total, " (the token count)"),
                  std::to_string(at(cu, batch)));
  return max_len;
}

void check_window(int left, int right) {
  FLASHBACK_CHECK(left >= -1, "window_left", ">= -1", std::to_string(left));
  FLASHBACK_CHECK(right >= -1, "window_right", ">= -1", std::to_string(right));
}

void check_softcap_scale(float softcap, float scale) {
  FLASHBACK_CHECK(std::isfinite(softcap) && softcap >= 0, "softcap", "a finite value >= 0",
                  std::to_string(softcap));
  FLASHBACK_CHECK(std::isfinite(scale) && scale >= 0, "softmax_scale",
                  "a finite value >= 0 (0 = default)", std::to_string(scale));
}

void check_lse(const TensorView& lse, int64_t tokens, int64_t heads, Device dev) {
  if (!lse.defined()) return;
  expect_rank(lse, "lse", 2);
  expect_dtype(lse, "lse", {DType::kF32});
  expect_dim(lse, "lse", 0, tokens);
  expect_dim(lse, "lse", 1, heads);
  expect_device(lse, "lse", dev);
  expect_nonneg_strides(lse, "lse");
}

void check_descale(const TensorView& t, const char* name, int64_t batch, int64_t heads_kv,
                   Device dev) {
  if (!t.defined()) return;
  expect_rank(t, name, 2);
  expect_dtype(t, name, {DType::kF32});
  expect_dim(t, name, 0, batch);
  expect_dim(t, name, 1, heads_kv);
  expect_device(t, name, dev);
  expect_nonneg_strides(t, name);
}

// The output, LSE and mask arguments shared by paged and ragged attention.
template <typename Params, typename Shape>
void check_outputs_and_mask(const Params& p, const Shape& s) {
  expect_rank(p.out, "out", 3);
  expect_dtype(p.out, "out", kActDtypes);
  expect_device(p.out, "out", s.device);
  expect_last_contiguous(p.out, "out");
  expect_dim(p.out, "out", 0, s.total_q);
  expect_dim(p.out, "out", 1, s.heads_q);
  expect_dim(p.out, "out", 2, s.head_dim_v);
  check_lse(p.lse, s.total_q, s.heads_q, s.device);
  check_window(p.window_left, p.window_right);
  check_softcap_scale(p.softcap, p.softmax_scale);
}

}  // namespace

PagedShape validate(const PagedAttentionParams& p) {
  PagedShape s;
  expect_rank(p.q, "q", 3);
  s.device = p.q.device;
  expect_dtype(p.q, "q", kActDtypes);
  expect_last_contiguous(p.q, "q");
  s.total_q = p.q.shape[0];
  s.heads_q = p.q.shape[1];
  s.head_dim = p.q.shape[2];
  FLASHBACK_CHECK(s.heads_q > 0 && s.head_dim > 0, "q", "at least one head of size > 0",
                  "shape " + p.q.shape_str());

  expect_defined(p.k_cache, "k_cache");
  FLASHBACK_CHECK(p.k_cache.ndim == 3 || p.k_cache.ndim == 4, "k_cache",
                  "[num_pages, P, Hk, D] or [num_slots, Hk, D]", "shape " + p.k_cache.shape_str());
  expect_rank(p.v_cache, "v_cache", p.k_cache.ndim);
  const bool paged4 = p.k_cache.ndim == 4;
  s.page_size = paged4 ? p.k_cache.shape[1] : 1;
  s.num_pages = p.k_cache.shape[0];
  s.heads_kv = p.k_cache.shape[p.k_cache.ndim - 2];
  expect_dtype(p.k_cache, "k_cache", kCacheDtypes);
  FLASHBACK_CHECK(p.v_cache.dtype == p.k_cache.dtype, "v_cache",
                  concat("dtype ", dtype_name(p.k_cache.dtype), " (as k_cache)"),
                  dtype_name(p.v_cache.dtype));
  for (const auto* name : {"k_cache", "v_cache"}) {
    const TensorView& c = name[0] == 'k' ? p.k_cache : p.v_cache;
    expect_device(c, name, s.device);
    expect_last_contiguous(c, name);
    expect_nonneg_strides(c, name);
    expect_dim(c, name, 0, s.num_pages);
    if (paged4) expect_dim(c, name, 1, s.page_size);
    expect_dim(c, name, c.ndim - 2, s.heads_kv);
  }
  FLASHBACK_CHECK(s.page_size >= 1, "k_cache", "page size >= 1", std::to_string(s.page_size));
  expect_dim(p.k_cache, "k_cache", p.k_cache.ndim - 1, s.head_dim);
  s.head_dim_v = p.v_cache.shape[p.v_cache.ndim - 1];
  FLASHBACK_CHECK(s.heads_kv > 0 && s.heads_q % s.heads_kv == 0, "k_cache",
                  concat("a KV head count dividing the ", s.heads_q, " q heads"),
                  std::to_string(s.heads_kv));
  if (p.qv.defined()) {
    expect_rank(p.qv, "qv", 3);
    FLASHBACK_CHECK(p.qv.dtype == p.q.dtype, "qv", concat("dtype ", dtype_name(p.q.dtype)),
                    dtype_name(p.qv.dtype));
    expect_device(p.qv, "qv", s.device);
    expect_last_contiguous(p.qv, "qv");
    expect_dim(p.qv, "qv", 0, s.total_q);
    expect_dim(p.qv, "qv", 1, s.heads_q);
    expect_dim(p.qv, "qv", 2, s.head_dim_v);  // q_nope pairs with c_kv, the value
    s.head_dim_qv = s.head_dim_v;
  }

  expect_defined(p.cu_seqlens_q, "cu_seqlens_q");
  FLASHBACK_CHECK(p.cu_seqlens_q.ndim == 1 && p.cu_seqlens_q.shape[0] >= 1, "cu_seqlens_q",
                  "shape [B + 1]", p.cu_seqlens_q.shape_str());
  s.batch = p.cu_seqlens_q.shape[0] - 1;
  expect_index(p.cu_seqlens_q, "cu_seqlens_q", s.batch + 1, s.device);
  expect_index(p.cache_seqlens, "cache_seqlens", s.batch, s.device);
  if (p.table_rows.defined()) expect_index(p.table_rows, "table_rows", s.batch, s.device);
  if (p.kv_start.defined()) expect_index(p.kv_start, "kv_start", s.batch, s.device);

  expect_rank(p.page_table, "page_table", 2);
  expect_dtype(p.page_table, "page_table", {DType::kI32});
  expect_device(p.page_table, "page_table", s.device);
  expect_nonneg_strides(p.page_table, "page_table");
  s.table_width = p.page_table.shape[1];
  if (!p.table_rows.defined())
    FLASHBACK_CHECK(p.page_table.shape[0] >= s.batch, "page_table",
                    concat("at least ", s.batch, " rows (one per batch entry)"),
                    p.page_table.shape_str());

  check_descale(p.k_descale, "k_descale", s.batch, s.heads_kv, s.device);
  check_descale(p.v_descale, "v_descale", s.batch, s.heads_kv, s.device);
  FLASHBACK_CHECK((!p.k_descale.defined() && !p.v_descale.defined()) || is_fp8(p.k_cache.dtype),
                  "k_descale", "descale only with an fp8 cache",
                  concat("descale with a ", dtype_name(p.k_cache.dtype), " cache"));

  check_outputs_and_mask(p, s);
  FLASHBACK_CHECK(p.num_splits >= 0, "num_splits", ">= 0", std::to_string(p.num_splits));
  s.scale = p.softmax_scale > 0
                ? p.softmax_scale
                : static_cast<float>(1.0 / std::sqrt(double(s.head_dim + s.head_dim_qv)));

  // Index contents: only host memory can be read here. Device-resident index arrays are the
  // plan's responsibility (it builds them from validated engine state).
  if (s.device.type != DeviceType::kCPU) return s;
  s.max_seqlen_q = check_cu_seqlens(p.cu_seqlens_q, "cu_seqlens_q", s.batch, s.total_q);
  const int64_t rows = p.page_table.shape[0];
  const int64_t pool = p.table_holds_slots ? s.num_pages * s.page_size : s.num_pages;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = at(p.cache_seqlens, b);
    const int64_t start = p.kv_start.defined() ? at(p.kv_start, b) : 0;
    const int64_t row = p.table_rows.defined() ? at(p.table_rows, b) : b;
    FLASHBACK_CHECK(len >= 0, "cache_seqlens", ">= 0", concat(len, " at entry ", b));
    FLASHBACK_CHECK(start >= 0, "kv_start", ">= 0", concat(start, " at entry ", b));
    FLASHBACK_CHECK(row >= 0 && row < rows, "table_rows", concat("a row in [0, ", rows, ")"),
                    concat(row, " at entry ", b));
    s.max_seqlen_k = std::max(s.max_seqlen_k, len);
    if (len == 0) continue;
    const int64_t end = start + len;  // one past the last key position
    const int64_t first_col = p.table_holds_slots ? start : start / s.page_size;
    const int64_t end_col = p.table_holds_slots ? end : (end + s.page_size - 1) / s.page_size;
    FLASHBACK_CHECK(
        end_col <= s.table_width, "cache_seqlens",
        concat("keys within the page table (", s.table_width, " columns)"),
        concat(len, " keys from position ", start, " at entry ", b, " need ", end_col, " columns"));
    const int32_t* tab = p.page_table.ptr<const int32_t>();
    for (int64_t c = first_col; c < end_col; ++c) {
      const int32_t id = tab[row * p.page_table.strides[0] + c * p.page_table.strides[1]];
      FLASHBACK_CHECK(
          id >= 0 && id < pool, "page_table",
          concat(p.table_holds_slots ? "slot ids in [0, " : "page ids in [0, ", pool, ")"),
          concat(id, " at row ", row, ", column ", c));
    }
  }
  return s;
}

RaggedShape validate(const RaggedAttentionParams& p) {
  RaggedShape s;
  expect_rank(p.q, "q", 3);
  s.device = p.q.device;
  expect_dtype(p.q, "q", kActDtypes);
  expect_rank(p.k, "k", 3);
  expect_rank(p.v, "v", 3);
  s.total_q = p.q.shape[0];
  s.heads_q = p.q.shape[1];
  s.head_dim = p.q.shape[2];
  s.total_k = p.k.shape[0];
  s.heads_kv = p.k.shape[1];
  s.head_dim_v = p.v.shape[2];
  for (const auto& [t, name] : {std::pair{&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}}) {
    expect_last_contiguous(*t, name);
    expect_device(*t, name, s.device);
    expect_nonneg_strides(*t, name);
  }
  FLASHBACK_CHECK(p.k.dtype == p.q.dtype, "k", concat("dtype ", dtype_name(p.q.dtype), " (as q)"),
                  dtype_name(p.k.dtype));
  FLASHBACK_CHECK(p.v.dtype == p.q.dtype, "v", concat("dtype ", dtype_name(p.q.dtype), " (as q)"),
                  dtype_name(p.v.dtype));
  expect_dim(p.k, "k", 2, s.head_dim);
  expect_dim(p.v, "v", 0, s.total_k);
  expect_dim(p.v, "v", 1, s.heads_kv);
  FLASHBACK_CHECK(s.heads_q > 0 && s.head_dim > 0 && s.head_dim_v > 0, "q",
                  "at least one head of size > 0", "shape " + p.q.shape_str());
  FLASHBACK_CHECK(s.heads_kv > 0 && s.heads_q % s.heads_kv == 0, "k",
                  concat("a head count dividing the ", s.heads_q, " q heads"),
                  std::to_string(s.heads_kv));
  expect_defined(p.cu_seqlens_q, "cu_seqlens_q");
  FLASHBACK_CHECK(p.cu_seqlens_q.ndim == 1 && p.cu_seqlens_q.shape[0] >= 1, "cu_seqlens_q",
                  "shape [B + 1]", p.cu_seqlens_q.shape_str());
  s.batch = p.cu_seqlens_q.shape[0] - 1;
  expect_index(p.cu_seqlens_q, "cu_seqlens_q", s.batch + 1, s.device);
  expect_index(p.cu_seqlens_k, "cu_seqlens_k", s.batch + 1, s.device);
  check_outputs_and_mask(p, s);
  s.scale = p.softmax_scale > 0 ? p.softmax_scale
                                : static_cast<float>(1.0 / std::sqrt(double(s.head_dim)));
  if (s.device.type != DeviceType::kCPU) return s;
  s.max_seqlen_q = check_cu_seqlens(p.cu_seqlens_q, "cu_seqlens_q", s.batch, s.total_q);
  s.max_seqlen_k = check_cu_seqlens(p.cu_seqlens_k, "cu_seqlens_k", s.batch, s.total_k);
  return s;
}

MergeShape validate(const MergeStateParams& p) {
  MergeShape s;
  expect_rank(p.out_a, "out_a", 3);
  s.device = p.out_a.device;
  s.tokens = p.out_a.shape[0];
  s.heads = p.out_a.shape[1];
  s.head_dim = p.out_a.shape[2];
  for (const auto& [t, name] :
       {std::pair{&p.out_a, "out_a"}, {&p.out_b, "out_b"}, {&p.out, "out"}}) {
    expect_rank(*t, name, 3);
    expect_dtype(*t, name, kActDtypes);
    expect_device(*t, name, s.device);
    expect_last_contiguous(*t, name);
    expect_nonneg_strides(*t, name);
    for (int d = 0; d < 3; ++d) expect_dim(*t, name, d, p.out_a.shape[d]);
  }
  for (const auto& [t, name] : {std::pair{&p.lse_a, "lse_a"}, {&p.lse_b, "lse_b"}}) {
    expect_defined(*t, name);
    expect_rank(*t, name, 2);
    expect_dtype(*t, name, {DType::kF32});
    expect_device(*t, name, s.device);
    expect_dim(*t, name, 0, s.tokens);
    expect_dim(*t, name, 1, s.heads);
    expect_nonneg_strides(*t, name);
  }
  check_lse(p.lse, s.tokens, s.heads, s.device);
  return s;
}

StoreShape validate(const KVStoreParams& p) {
  StoreShape s;
  expect_rank(p.k, "k", 3);
  s.device = p.k.device;
  expect_dtype(p.k, "k", kActDtypes);
  expect_last_contiguous(p.k, "k");
  s.tokens = p.k.shape[0];
  s.heads = p.k.shape[1];
  s.head_dim = p.k.shape[2];
  expect_defined(p.k_cache, "k_cache");
  FLASHBACK_CHECK(p.k_cache.ndim == 3 || p.k_cache.ndim == 4, "k_cache",
                  "[num_pages, P, Hk, D] or [num_slots, Hk, D]", "shape " + p.k_cache.shape_str());
  expect_dtype(p.k_cache, "k_cache", kCacheDtypes);
  expect_device(p.k_cache, "k_cache", s.device);
  expect_last_contiguous(p.k_cache, "k_cache");
  expect_nonneg_strides(p.k_cache, "k_cache");
  const int nd = p.k_cache.ndim;
  s.page_size = nd == 4 ? p.k_cache.shape[1] : 1;
  s.num_slots = p.k_cache.shape[0] * s.page_size;
  expect_dim(p.k_cache, "k_cache", nd - 2, s.heads);
  expect_dim(p.k_cache, "k_cache", nd - 1, s.head_dim);
  if (p.v.defined()) {
    expect_rank(p.v, "v", 3);
    expect_dtype(p.v, "v", kActDtypes);
    expect_device(p.v, "v", s.device);
    expect_last_contiguous(p.v, "v");
    expect_dim(p.v, "v", 0, s.tokens);
    expect_dim(p.v, "v", 1, s.heads);
    s.head_dim_v = p.v.shape[2];
    expect_rank(p.v_cache, "v_cache", nd);
    FLASHBACK_CHECK(p.v_cache.dtype == p.k_cache.dtype, "v_cache",
                    concat("dtype ", dtype_name(p.k_cache.dtype), " (as k_cache)"),
                    dtype_name(p.v_cache.dtype));
    expect_device(p.v_cache, "v_cache", s.device);
    expect_last_contiguous(p.v_cache, "v_cache");
    expect_nonneg_strides(p.v_cache, "v_cache");
    for (int d = 0; d < nd - 1; ++d) expect_dim(p.v_cache, "v_cache", d, p.k_cache.shape[d]);
    expect_dim(p.v_cache, "v_cache", nd - 1, s.head_dim_v);
  } else {
    FLASHBACK_CHECK(!p.v_cache.defined(), "v", "a tensor when v_cache is given", "none");
  }
  expect_defined(p.loc, "loc");
  expect_rank(p.loc, "loc", 1);
  expect_dtype(p.loc, "loc", {DType::kI32, DType::kI64});
  expect_device(p.loc, "loc", s.device);
  expect_dim(p.loc, "loc", 0, s.tokens);
  for (float sc : {p.k_scale, p.v_scale})
    FLASHBACK_CHECK(std::isfinite(sc) && sc > 0, "k_scale/v_scale", "a finite value > 0",
                    std::to_string(sc));
  if (s.device.type == DeviceType::kCPU) {
    for (int64_t t = 0; t < s.tokens; ++t) {
      const int64_t slot = static_cast<int64_t>(load_as_double(p.loc, t * p.loc.strides[0]));
      FLASHBACK_CHECK(slot >= 0 && slot < s.num_slots, "loc",
                      concat("slots in [0, ", s.num_slots, ")"), concat(slot, " at row ", t));
    }
  }
  return s;
}

}  // namespace flashback::detail

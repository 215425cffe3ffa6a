// Fast CPU merge_state and KV store. Both are memory-bound row copies with a little arithmetic,
// so plain loops over contiguous rows (which the compiler vectorises) on OpenMP threads suffice.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/fast/convert.h"
#include "cpu/fast/fast.h"

namespace flashback::cpu_fast {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

const char* row_ptr(const TensorView& t, int64_t i, int64_t j) {
  return static_cast<const char*>(t.data) +
         (i * t.strides[0] + j * t.strides[1]) * dtype_size(t.dtype);
}

// Element offset of (slot, head) in a cache [slots, H, D] or [pages, P, H, D].
int64_t cache_row(const TensorView& c, int64_t page_size, int64_t slot, int64_t h) {
  if (c.ndim == 4)
    return (slot / page_size) * c.strides[0] + (slot % page_size) * c.strides[1] + h * c.strides[2];
  return slot * c.strides[0] + h * c.strides[1];
}

}  // namespace

void merge_state(const MergeStateParams& p, const detail::MergeShape& s, const Exec& exec) {
  const int64_t rows = s.tokens * s.heads, D = s.head_dim;
  const int threads = thread_count(exec);
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> a(static_cast<size_t>(D)), b(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = r / s.heads, h = r % s.heads;
      float la = p.lse_a.ptr<const float>()[p.lse_a.offset(t, h)];
      float lb = p.lse_b.ptr<const float>()[p.lse_b.offset(t, h)];
      if (std::isinf(la)) la = kNegInf;  // FlashAttention marks empty rows +inf
      if (std::isinf(lb)) lb = kNegInf;
      const float m = std::max(la, lb);
      float wa = 0, wb = 0, lse = kNegInf;
      if (std::isnan(la) || std::isnan(lb)) {
        lse = std::numeric_limits<float>::quiet_NaN();
        wa = wb = lse;
      } else if (m != kNegInf) {
        const float ea = std::exp(la - m), eb = std::exp(lb - m);
        lse = m + std::log(ea + eb);
        wa = std::exp(la - lse);
        wb = std::exp(lb - lse);
      }
      // Read both rows before writing: out may alias out_a or out_b. A weight of 0 skips its
      // row entirely so an empty partial (possibly garbage) never leaks NaN into the result.
      const char* ra = row_ptr(p.out_a, t, h);
      const char* rb = row_ptr(p.out_b, t, h);
      for (int64_t d = 0; d < D; ++d) a[d] = wa == 0 ? 0.0f : load_f32(ra, p.out_a.dtype, d);
      for (int64_t d = 0; d < D; ++d) b[d] = wb == 0 ? 0.0f : load_f32(rb, p.out_b.dtype, d);
      for (int64_t d = 0; d < D; ++d) a[d] = wa * a[d] + wb * b[d];
      store_f32_row(a.data(), D, const_cast<char*>(row_ptr(p.out, t, h)), p.out.dtype);
      if (p.lse.defined()) p.lse.ptr<float>()[p.lse.offset(t, h)] = lse;
    }
  }
}

void kv_store(const KVStoreParams& p, const detail::StoreShape& s, const Exec& exec) {
  const int threads = thread_count(exec);
  auto store = [&](const TensorView& src, const TensorView& cache, int64_t dim, float scale) {
    // x / scale in fp32, rounded once to the cache dtype, exactly as the oracle does.
    const bool fp8 = is_fp8(cache.dtype);
    const int64_t esz = dtype_size(cache.dtype);
    // Threads own (head, column block) pairs and walk the tokens in order, so a slot named twice
    // (padded rows all write the reserved slot) ends with the last row, as in the oracle, and
    // whole 64-element blocks keep threads off each other's cache lines.
    constexpr int64_t kCols = 64;
    const int64_t blocks = (dim + kCols - 1) / kCols, units = s.heads * blocks;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t h = u / blocks, d0 = (u % blocks) * kCols, d1 = std::min(dim, d0 + kCols);
      for (int64_t t = 0; t < s.tokens; ++t) {
        const int64_t slot = p.loc.dtype == DType::kI64
                                 ? p.loc.ptr<const int64_t>()[t * p.loc.strides[0]]
                                 : int64_t{p.loc.ptr<const int32_t>()[t * p.loc.strides[0]]};
        const char* in = row_ptr(src, t, h);
        char* dst = static_cast<char*>(cache.data) + cache_row(cache, s.page_size, slot, h) * esz;
        for (int64_t d = d0; d < d1; ++d) {
          const float x = load_f32(in, src.dtype, d);
          store_f32(dst, cache.dtype, d, fp8 ? x / scale : x);
        }
      }
    }
  };
  store(p.k, p.k_cache, s.head_dim, p.k_scale);
  if (p.v.defined()) store(p.v, p.v_cache, s.head_dim_v, p.v_scale);
}

}  // namespace flashback::cpu_fast

#include "testing/case.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

namespace flashback::testing {

std::string AttentionCase::describe() const {
  std::ostringstream s;
  s << (name.empty() ? "case" : name) << " B=" << q_lens.size() << " Hq=" << heads_q
    << " Hk=" << heads_kv << " D=" << head_dim << "/" << (head_dim_v ? head_dim_v : head_dim)
    << (mla ? " mla" : "") << " P=" << page_size << (table_holds_slots ? " slots" : "") << " "
    << dtype_name(dtype) << "/" << dtype_name(kv_dtype) << (causal ? " causal" : "") << " win=("
    << window_left << "," << window_right << ") cap=" << softcap << " q=[";
  for (size_t i = 0; i < q_lens.size(); ++i) s << (i ? "," : "") << q_lens[i];
  s << "] kv=[";
  for (size_t i = 0; i < kv_lens.size(); ++i) s << (i ? "," : "") << kv_lens[i];
  s << "]";
  return s.str();
}

std::vector<int> random_lengths(std::mt19937_64& rng, int n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

void fill_normal(Tensor& t, std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> nd(0.0, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, nd(rng));
}

PagedData make_paged(const AttentionCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  PagedData d;
  const int64_t B = static_cast<int64_t>(c.q_lens.size());
  FLASHBACK_CHECK(c.kv_lens.size() == c.q_lens.size(), "AttentionCase.kv_lens",
                  std::to_string(B) + " entries", std::to_string(c.kv_lens.size()));
  const int64_t P = c.page_size, Hq = c.heads_q, Hk = c.heads_kv, D = c.head_dim;
  const int64_t Dv = c.head_dim_v ? c.head_dim_v : c.head_dim;
  d.total_q = std::accumulate(c.q_lens.begin(), c.q_lens.end(), int64_t{0});
  const int max_kv = c.kv_lens.empty() ? 0 : *std::max_element(c.kv_lens.begin(), c.kv_lens.end());

  // Pages: one reserved (page 0), the requests' pages placed randomly among spares.
  int64_t pages_needed = 0;
  for (int l : c.kv_lens) pages_needed += (l + P - 1) / P;
  const int64_t num_pages = 1 + pages_needed + pages_needed / 2 + 2;
  std::vector<int32_t> free_pages(static_cast<size_t>(num_pages - 1));
  std::iota(free_pages.begin(), free_pages.end(), 1);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);

  const int64_t width_pages = (max_kv + P - 1) / P + c.extra_table_cols;
  const int64_t width = c.table_holds_slots ? width_pages * P : width_pages;
  d.page_table = Tensor(DType::kI32, {B, width});
  // Entries past a request's length are garbage that would fault if read.
  std::fill_n(d.page_table.ptr<int32_t>(), B * width, std::numeric_limits<int32_t>::min() / 2);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t np = (c.kv_lens[b] + P - 1) / P;
    for (int64_t pg = 0; pg < np; ++pg) {
      const int32_t id = free_pages[next++];
      if (c.table_holds_slots) {
        for (int64_t o = 0; o < P; ++o)
          d.page_table.ptr<int32_t>()[b * width + pg * P + o] = static_cast<int32_t>(id * P + o);
      } else {
        d.page_table.ptr<int32_t>()[b * width + pg] = id;
      }
    }
  }

  d.cache_seqlens = Tensor(DType::kI32, {B});
  d.cu_seqlens_q = Tensor(DType::kI32, {B + 1});
  d.cu_seqlens_q.ptr<int32_t>()[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    d.cache_seqlens.ptr<int32_t>()[b] = c.kv_lens[b];
    d.cu_seqlens_q.ptr<int32_t>()[b + 1] = d.cu_seqlens_q.ptr<int32_t>()[b] + c.q_lens[b];
  }

  auto fill_cache = [&](Tensor& t) {
    if (!c.fill_values) return;
    if (is_fp8(c.kv_dtype)) {
      // Spread over the format's range so saturation-free rounding is exercised.
      const double sd = c.kv_dtype == DType::kF8E4M3 ? 24.0 : 2000.0;
      fill_normal(t, rng, sd);
    } else {
      fill_normal(t, rng, 1.0);
    }
  };

  PagedAttentionParams& p = d.params;
  if (c.mla) {
    // One latent buffer [pages, P, 1, Dv + D]: value = first Dv columns, rope key = the rest.
    d.k_cache = Tensor(c.kv_dtype, {num_pages, P, Hk, Dv + D});
    fill_cache(d.k_cache);
    p.v_cache = d.k_cache.view().slice(3, 0, Dv);
    p.k_cache = d.k_cache.view().slice(3, Dv, Dv + D);
    d.q = Tensor(c.dtype, {d.total_q, Hq, Dv + D});
    if (c.fill_values) fill_normal(d.q, rng, c.q_stddev);
    p.qv = d.q.view().slice(2, 0, Dv);
    p.q = d.q.view().slice(2, Dv, Dv + D);
  } else {
    d.k_cache = Tensor(c.kv_dtype, {num_pages, P, Hk, D});
    d.v_cache = Tensor(c.kv_dtype, {num_pages, P, Hk, Dv});
    fill_cache(d.k_cache);
    fill_cache(d.v_cache);
    p.k_cache = d.k_cache;
    p.v_cache = d.v_cache;
    d.q = Tensor(c.dtype, {d.total_q, Hq, D});
    if (c.fill_values) fill_normal(d.q, rng, c.q_stddev);
    p.q = d.q;
  }
  if (is_fp8(c.kv_dtype)) {
    // Descales bring the stored values back to ~N(0, 1).
    const double base = c.kv_dtype == DType::kF8E4M3 ? 1.0 / 24 : 1.0 / 2000;
    std::uniform_real_distribution<double> u(0.5, 2.0);
    if (c.per_head_descale) {
      d.k_descale = Tensor(DType::kF32, {B, Hk});
      d.v_descale = Tensor(DType::kF32, {B, Hk});
      for (int64_t i = 0; i < B * Hk; ++i) {
        d.k_descale.ptr<float>()[i] = static_cast<float>(base * u(rng));
        d.v_descale.ptr<float>()[i] =
            c.mla ? d.k_descale.ptr<float>()[i] : static_cast<float>(base * u(rng));
      }
      p.k_descale = d.k_descale;
      p.v_descale = d.v_descale;
    } else {
      d.k_descale = Tensor(DType::kF32, {1});
      d.v_descale = Tensor(DType::kF32, {1});
      d.k_descale.ptr<float>()[0] = static_cast<float>(base * u(rng));
      d.v_descale.ptr<float>()[0] =
          c.mla ? d.k_descale.ptr<float>()[0] : static_cast<float>(base * u(rng));
      p.k_descale = TensorView(d.k_descale.data(), DType::kF32, {B, Hk}, {0, 0});
      p.v_descale = TensorView(d.v_descale.data(), DType::kF32, {B, Hk}, {0, 0});
    }
  }
  d.out = Tensor(c.dtype, {d.total_q, Hq, Dv});
  d.out.poison();
  p.out = d.out;
  if (c.with_lse) {
    d.lse_transposed = c.lse_transposed;
    if (c.lse_transposed) {
      d.lse = Tensor(DType::kF32, {Hq, d.total_q});
      p.lse = d.lse.view().transposed(0, 1);
    } else {
      d.lse = Tensor(DType::kF32, {d.total_q, Hq});
      p.lse = d.lse;
    }
    d.lse.poison();
  }
  p.page_table = d.page_table;
  p.table_holds_slots = c.table_holds_slots;
  p.cache_seqlens = d.cache_seqlens;
  p.cu_seqlens_q = d.cu_seqlens_q;
  p.softmax_scale = c.softmax_scale;
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  return d;
}

PagedData with_fresh_outputs(const PagedData& src) {
  PagedData d = src;
  const TensorView o = src.out.view();
  d.out = Tensor(o.dtype, o.shape.data(), o.ndim);
  d.out.poison();
  d.params.out = d.out;
  if (src.lse.data() != nullptr) {  // an absent Tensor has numel() 1 (rank 0)
    const TensorView l = src.lse.view();
    d.lse = Tensor(l.dtype, l.shape.data(), l.ndim);
    d.lse.poison();
    d.params.lse = src.lse_transposed ? d.lse.view().transposed(0, 1) : d.lse.view();
  }
  return d;
}

// The max-abs allowance for 16-bit outputs: DESIGN.md's 2e-2, or one unit in the last place of
// the output type at the reference's magnitude where that is larger. Above |x| = 4 a bf16 ulp
// is 0.031: a result that is right in fp32 can round to the oracle's neighbour, and no
// absolute bound below one ulp can be met there.
double abs_allowance(DType t, double ref) {
  if (t == DType::kF32 || ref == 0 || !std::isfinite(ref)) return 2e-2;
  int e = 0;
  std::frexp(std::abs(ref), &e);  // |ref| in [2^(e-1), 2^e)
  const int mantissa = t == DType::kBF16 ? 7 : 10;
  return std::max(2e-2, std::ldexp(1.0, e - 1 - mantissa));
}

Comparison compare(const TensorView& out, const TensorView& ref, const TensorView& lse,
                   const TensorView& lse_ref) {
  Comparison c;
  FLASHBACK_CHECK(out.ndim == ref.ndim && out.numel() == ref.numel(), "compare.out",
                  "shape " + ref.shape_str(), out.shape_str());
  double num = 0, den = 0;
  // Walk every index of a (up to 3-D) strided view.
  const int64_t n0 = out.ndim > 0 ? out.shape[0] : 1, n1 = out.ndim > 1 ? out.shape[1] : 1,
                n2 = out.ndim > 2 ? out.shape[2] : 1;
  auto off = [](const TensorView& t, int64_t i, int64_t j, int64_t k) {
    int64_t o = 0;
    if (t.ndim > 0) o += i * t.strides[0];
    if (t.ndim > 1) o += j * t.strides[1];
    if (t.ndim > 2) o += k * t.strides[2];
    return o;
  };
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      for (int64_t k = 0; k < n2; ++k) {
        const double a = load_as_double(out, off(out, i, j, k));
        const double r = load_as_double(ref, off(ref, i, j, k));
        if (std::isnan(a) || std::isnan(r)) c.nan = true;
        num += (a - r) * (a - r);
        den += r * r;
        c.max_abs = std::max(c.max_abs, std::abs(a - r));
        c.max_abs_excess =
            std::max(c.max_abs_excess, std::abs(a - r) - abs_allowance(out.dtype, r));
      }
  c.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (lse.defined()) {
    for (int64_t i = 0; i < lse.shape[0]; ++i)
      for (int64_t j = 0; j < lse.shape[1]; ++j) {
        const double a = load_as_double(lse, lse.offset(i, j));
        const double r = load_as_double(lse_ref, lse_ref.offset(i, j));
        if (std::isnan(a) || std::isnan(r)) {
          c.nan = true;
        } else if (std::isinf(a) || std::isinf(r)) {
          if (a != r) c.lse_inf_mismatch = true;
        } else {
          c.lse_max_abs = std::max(c.lse_max_abs, std::abs(a - r));
        }
      }
  }
  const bool low = out.dtype != DType::kF32;
  const double rel_tol = low ? 1e-2 : 1e-5;
  std::ostringstream why;
  if (c.nan)
    why << "NaN in output or LSE";
  else if (c.lse_inf_mismatch)
    why << "LSE -inf mismatch (empty row)";
  else if (c.rel_l2 > rel_tol)
    why << "relative L2 " << c.rel_l2 << " > " << rel_tol;
  else if (low && c.max_abs_excess > 0)
    why << "max abs " << c.max_abs << " > 2e-2 (or one " << dtype_name(out.dtype)
        << " ulp where outputs are larger)";
  else if (!low && c.max_abs > 1e-4)
    why << "max abs " << c.max_abs << " > 1e-4";
  else if (c.lse_max_abs > 1e-3)
    why << "LSE max abs " << c.lse_max_abs << " > 1e-3";
  c.why = why.str();
  c.ok = c.why.empty();
  return c;
}

}  // namespace flashback::testing

#include "cpu/reference.h"

#include <cmath>
#include <limits>
#include <vector>

namespace flashback::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

int32_t idx(const TensorView& t, int64_t i) { return t.ptr<const int32_t>()[i * t.strides[0]]; }

// Element offset of (slot, head, d) in a cache viewed as [slots, H, D] or [pages, P, H, D].
int64_t cache_offset(const TensorView& c, int64_t page_size, int64_t slot, int64_t h, int64_t d) {
  if (c.ndim == 4) return c.offset(slot / page_size, slot % page_size, h, d);
  return c.offset(slot, h, d);
}

// Softmax-weighted sum over precomputed logits, written to out row / lse entry.
// values(t, d) returns value element d of visible key t.
template <typename Values>
void finish_row(const std::vector<double>& logits, int64_t dv, const Values& values,
                const TensorView& out, int64_t out_off, const TensorView& lse, int64_t lse_off) {
  double m = kNegInf;
  bool nan = false;  // a NaN score (from q or K) makes the whole row NaN, its LSE too
  for (double l : logits) {
    m = std::max(m, l);
    nan = nan || std::isnan(l);
  }
  std::vector<double> acc(static_cast<size_t>(dv), 0.0);
  double denom = 0;
  if (nan) {
    m = denom = std::numeric_limits<double>::quiet_NaN();
  } else if (m != kNegInf) {
    for (size_t t = 0; t < logits.size(); ++t) {
      const double w = std::exp(logits[t] - m);
      denom += w;
      for (int64_t d = 0; d < dv; ++d) acc[d] += w * values(t, d);
    }
  }
  for (int64_t d = 0; d < dv; ++d)
    store_from_double(out, out_off + d * out.strides[2], denom == 0 ? 0.0 : acc[d] / denom);
  if (lse.defined()) store_from_double(lse, lse_off, denom == 0 ? kNegInf : m + std::log(denom));
}

double cap(double logit, float softcap) {
  return softcap > 0 ? softcap * std::tanh(logit / softcap) : logit;
}

}  // namespace

void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s) {
  const int64_t group = s.heads_q / s.heads_kv;
  const int64_t P = s.page_size;
  const int32_t* table = p.page_table.ptr<const int32_t>();
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t q0 = idx(p.cu_seqlens_q, b), q_len = idx(p.cu_seqlens_q, b + 1) - q0;
    const int64_t kv_len = idx(p.cache_seqlens, b);
    const int64_t start = p.kv_start.defined() ? idx(p.kv_start, b) : 0;
    const int64_t row = p.table_rows.defined() ? idx(p.table_rows, b) : b;
    auto slot_of = [&](int64_t t) -> int64_t {
      const int64_t pos = start + t;
      const int32_t* r = table + row * p.page_table.strides[0];
      if (p.table_holds_slots) return r[pos * p.page_table.strides[1]];
      return int64_t{r[(pos / P) * p.page_table.strides[1]]} * P + pos % P;
    };
    for (int64_t i = 0; i < q_len; ++i) {
      const KeyRange kr = visible_keys(i, q_len, kv_len, p.causal, p.window_left, p.window_right);
      for (int64_t h = 0; h < s.heads_q; ++h) {
        const int64_t g = h / group;
        const double kd =
            p.k_descale.defined() ? load_as_double(p.k_descale, p.k_descale.offset(b, g)) : 1.0;
        const double vd =
            p.v_descale.defined() ? load_as_double(p.v_descale, p.v_descale.offset(b, g)) : 1.0;
        std::vector<double> logits;
        std::vector<int64_t> slots;
        for (int64_t t = kr.lo; t <= kr.hi; ++t) {
          const int64_t slot = slot_of(t);
          double dot = 0;
          for (int64_t d = 0; d < s.head_dim; ++d)
            dot += load_as_double(p.q, p.q.offset(q0 + i, h, d)) *
                   load_as_double(p.k_cache, cache_offset(p.k_cache, P, slot, g, d)) * kd;
          if (p.qv.defined())
            for (int64_t d = 0; d < s.head_dim_qv; ++d)
              dot += load_as_double(p.qv, p.qv.offset(q0 + i, h, d)) *
                     load_as_double(p.v_cache, cache_offset(p.v_cache, P, slot, g, d)) * vd;
          logits.push_back(cap(s.scale * dot, p.softcap));
          slots.push_back(slot);
        }
        auto values = [&](size_t t, int64_t d) {
          return load_as_double(p.v_cache, cache_offset(p.v_cache, P, slots[t], g, d)) * vd;
        };
        finish_row(logits, s.head_dim_v, values, p.out, p.out.offset(q0 + i, h, 0), p.lse,
                   p.lse.defined() ? p.lse.offset(q0 + i, h) : 0);
      }
    }
  }
}

void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s) {
  const int64_t group = s.heads_q / s.heads_kv;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t q0 = idx(p.cu_seqlens_q, b), q_len = idx(p.cu_seqlens_q, b + 1) - q0;
    const int64_t k0 = idx(p.cu_seqlens_k, b), kv_len = idx(p.cu_seqlens_k, b + 1) - k0;
    for (int64_t i = 0; i < q_len; ++i) {
      const KeyRange kr = visible_keys(i, q_len, kv_len, p.causal, p.window_left, p.window_right);
      for (int64_t h = 0; h < s.heads_q; ++h) {
        const int64_t g = h / group;
        std::vector<double> logits;
        for (int64_t t = kr.lo; t <= kr.hi; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < s.head_dim; ++d)
            dot += load_as_double(p.q, p.q.offset(q0 + i, h, d)) *
                   load_as_double(p.k, p.k.offset(k0 + t, g, d));
          logits.push_back(cap(s.scale * dot, p.softcap));
        }
        auto values = [&](size_t t, int64_t d) {
          return load_as_double(p.v, p.v.offset(k0 + kr.lo + static_cast<int64_t>(t), g, d));
        };
        finish_row(logits, s.head_dim_v, values, p.out, p.out.offset(q0 + i, h, 0), p.lse,
                   p.lse.defined() ? p.lse.offset(q0 + i, h) : 0);
      }
    }
  }
}

void merge_state(const MergeStateParams& p, const detail::MergeShape& s) {
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      double a = load_as_double(p.lse_a, p.lse_a.offset(t, h));
      double b = load_as_double(p.lse_b, p.lse_b.offset(t, h));
      if (std::isinf(a)) a = kNegInf;  // FlashAttention marks empty rows +inf
      if (std::isinf(b)) b = kNegInf;
      const double m = std::max(a, b);
      double wa = 0, wb = 0, lse = kNegInf;
      if (m != kNegInf) {
        lse = m + std::log(std::exp(a - m) + std::exp(b - m));
        wa = std::exp(a - lse);
        wb = std::exp(b - lse);
      } else if (std::isnan(m)) {
        lse = m;
      }
      // Read both rows before writing: out may alias out_a or out_b.
      std::vector<double> row(static_cast<size_t>(s.head_dim));
      for (int64_t d = 0; d < s.head_dim; ++d) {
        const double oa = wa == 0 ? 0 : load_as_double(p.out_a, p.out_a.offset(t, h, d));
        const double ob = wb == 0 ? 0 : load_as_double(p.out_b, p.out_b.offset(t, h, d));
        row[d] = wa * oa + wb * ob;
      }
      for (int64_t d = 0; d < s.head_dim; ++d)
        store_from_double(p.out, p.out.offset(t, h, d), row[d]);
      if (p.lse.defined()) store_from_double(p.lse, p.lse.offset(t, h), lse);
    }
  }
}

void kv_store(const KVStoreParams& p, const detail::StoreShape& s) {
  auto store = [&](const TensorView& src, const TensorView& cache, int64_t dim, float scale) {
    // In fp32, as every fast path does: x / scale rounded once to fp32, then to the cache dtype.
    const float div = is_fp8(cache.dtype) ? scale : 1.0f;
    for (int64_t t = 0; t < s.tokens; ++t) {
      const auto slot = static_cast<int64_t>(load_as_double(p.loc, t * p.loc.strides[0]));
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t d = 0; d < dim; ++d)
          store_from_double(cache, cache_offset(cache, s.page_size, slot, h, d),
                            static_cast<float>(load_as_double(src, src.offset(t, h, d))) / div);
    }
  };
  store(p.k, p.k_cache, s.head_dim, p.k_scale);
  if (p.v.defined()) store(p.v, p.v_cache, s.head_dim_v, p.v_scale);
}

}  // namespace flashback::reference

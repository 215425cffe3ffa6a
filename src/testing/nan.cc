#include "testing/nan.h"

#include <cmath>
#include <sstream>

#include "cpu/reference.h"

namespace flashback::testing {
namespace {

// Element offset of (request b, key t, KV head g, column col) in a [pages, P, H, D] cache view,
// through d's page table (page ids, or slot ids for a req_to_token table).
int64_t cache_at(const PagedData& d, const TensorView& cache, int64_t b, int64_t t, int64_t g,
                 int64_t col) {
  const TensorView& table = d.params.page_table;
  const int64_t P = cache.shape[1];
  const int32_t* row = table.ptr<const int32_t>() + b * table.strides[0];
  if (d.params.table_holds_slots) {
    const int64_t slot = row[t];
    return cache.offset(slot / P, slot % P, g, col);
  }
  return cache.offset(row[t / P], t % P, g, col);
}

}  // namespace

std::string NanPoison::describe() const {
  std::ostringstream s;
  s << "NaN in "
    << (where == NanIn::kQ   ? "q"
        : where == NanIn::kK ? "K"
                             : "V")
    << " (request " << b << (where == NanIn::kQ ? ", token " : ", key ") << t
    << (where == NanIn::kQ ? ", q head " : ", KV head ") << g << ", column " << col << ")";
  return s.str();
}

AttentionCase NanShape::to_case() const {
  AttentionCase c;
  c.q_lens = q_lens;
  c.kv_lens = kv_lens;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.head_dim = head_dim;
  c.page_size = page;
  c.dtype = q;
  c.kv_dtype = kv;
  c.window_left = window_left;
  if (mla) {
    c.mla = true;
    c.head_dim_v = 512;
  }
  return c;
}

std::vector<NanPoison> NanShape::poisons() const {
  const int64_t last = kv_lens[1] - 1;  // request 1's last key: every row of it sees it
  return {
      {NanIn::kQ, 1, q_lens[1] - 1, 1, 3},
      {NanIn::kK, 1, last, heads_kv - 1, 5},
      {NanIn::kK, 1, last - 1 - q_lens[1] / 2, 0, 0},  // seen by some rows of an extend
      {NanIn::kV, 1, last, 0, 9},
  };
}

void put_nan(PagedData& d, const AttentionCase& c, const NanPoison& p) {
  const double nan = std::nan("");
  if (p.where == NanIn::kQ) {
    int64_t q0 = 0;
    for (int64_t b = 0; b < p.b; ++b) q0 += c.q_lens[b];
    store_from_double(d.params.q, d.params.q.offset(q0 + p.t, p.g, p.col), nan);
    return;
  }
  const TensorView& cache = p.where == NanIn::kK ? d.params.k_cache : d.params.v_cache;
  store_from_double(cache, cache_at(d, cache, p.b, p.t, p.g, p.col), nan);
}

void fill_all(const TensorView& t, double v) {
  for (int64_t i = 0; i < t.numel(); ++i) store_from_double(t, i, v);
}

std::string check_nan_where_seen(const PagedData& d, const PagedData& ref, const AttentionCase& c,
                                 const NanPoison& p, bool oracle) {
  const TensorView& out = d.params.out;
  const TensorView& lse = d.params.lse;
  const bool f32 = out.dtype == DType::kF32;
  const double lse_tol = f32 ? 1e-4 : 1e-3;
  const int64_t group = c.heads_q / c.heads_kv, dv = out.shape[2];
  // MLA's latent is its K and its V: a NaN there reaches the scores too.
  const bool v_is_k = p.where == NanIn::kV && c.mla;
  int64_t q0 = 0, nan_rows = 0;
  std::ostringstream why;
  for (int64_t b = 0; b < static_cast<int64_t>(c.q_lens.size()); ++b) {
    for (int64_t i = 0; i < c.q_lens[b]; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const auto kr = reference::visible_keys(i, c.q_lens[b], c.kv_lens[b], c.causal,
                                                c.window_left, c.window_right);
        const bool same = b == p.b && h / group == p.g;
        const bool sees = p.where != NanIn::kQ && same && kr.lo <= p.t && p.t <= kr.hi;
        const bool row_nan = p.where == NanIn::kQ ? b == p.b && i == p.t && h == p.g
                                                  : sees && (p.where == NanIn::kK || v_is_k);
        const bool col_nan = sees && !row_nan;
        const bool col_may = p.where == NanIn::kV && same && !oracle;
        nan_rows += row_nan || col_nan;
        for (int64_t x = 0; x < dv; ++x) {
          const int64_t at = out.offset(q0 + i, h, x);
          const double o = load_as_double(out, at);
          auto el = [&] {
            why << "out[" << q0 + i << ", " << h << ", " << x << "] = " << o;
            return why.str();
          };
          if (o == kFilled) return el() + ": not written";
          if (x == p.col && col_may && !col_nan && std::isnan(o)) continue;  // a masked key's V
          const bool want = row_nan || (col_nan && x == p.col);
          if (std::isnan(o) != want) return el() + (want ? ", want NaN" : ", want a number");
          if (want) continue;
          const double r = load_as_double(ref.params.out, at);
          const double tol = f32 ? 1e-4 * (1 + std::abs(r)) : abs_allowance(out.dtype, r);
          if (!(std::abs(o - r) <= tol)) {
            el();
            why << ", oracle " << r;
            return why.str();
          }
        }
        if (lse.defined()) {
          const int64_t at = lse.offset(q0 + i, h);
          const double l = load_as_double(lse, at);
          const double r = load_as_double(ref.params.lse, at);
          if (std::isnan(l) != row_nan || (!row_nan && !(std::abs(l - r) <= lse_tol))) {
            why << "lse[" << q0 + i << ", " << h << "] = " << l << ", oracle " << r
                << (row_nan ? ", want NaN" : "");
            return why.str();
          }
        }
      }
    q0 += c.q_lens[b];
  }
  if (nan_rows == 0) return "the NaN is seen by no row";
  return "";
}

}  // namespace flashback::testing

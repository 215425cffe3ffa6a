// NaN in the inputs (SPEC.md is silent; ARCHITECTURE.md, "NaN inputs"): a NaN in q, or in a K
// or V element at a key a row sees, reaches that row's output (K or q: every column and the
// LSE; V: that column), in the oracle and in every fast path, and no other request's or KV
// head's rows; every other element matches the oracle. A NaN in V at a key a row of the same
// request and KV head does not see may reach that column of the row (a masked key's zero weight
// times NaN), in any path but the oracle's. Outputs are poisoned with a finite value here (not
// NaN), so a NaN in the result is the kernel's own.
#include <cmath>
#include <string>
#include <vector>

#include "cpu/reference.h"
#include "test_fast_common.h"

namespace flashback {
namespace {

using fast_test::fast;
using fast_test::kRef;
using testing::AttentionCase;
using testing::make_paged;
using testing::PagedData;

const double kNaN = std::nan("");

// Element offset of (request b, key t, KV head g, column d) in a [pages, P, H, D] cache view
// whose table holds page ids.
int64_t cache_at(const PagedData& d, const TensorView& cache, int64_t b, int64_t t, int64_t g,
                 int64_t col) {
  const TensorView& table = d.params.page_table;
  const int64_t P = cache.shape[1];
  const int32_t page = table.ptr<const int32_t>()[b * table.strides[0] + t / P];
  return cache.offset(page, t % P, g, col);
}

void fill(const TensorView& t, double v) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  for (int64_t i = 0; i < n; ++i) store_from_double(t, i, v);  // contiguous outputs
}

enum class Where { kQ, kK, kV };

struct Poison {
  Where where;
  int64_t b, t, g, col;  // request, key (kQ: q token), KV head (kQ: q head), column
};

// Runs `exec` on d (outputs filled with 7) and checks every row: NaN exactly where p says, and
// every other element within 1e-4 (relative to the row's scale) of the oracle's, in `ref`.
void expect_nan_where_seen(PagedData& d, const PagedData& ref, const AttentionCase& c,
                           const Poison& p, const Exec& exec, bool oracle,
                           const std::string& what) {
  fill(d.params.out, 7.0);
  if (d.params.lse.defined()) fill(d.params.lse, 7.0);
  paged_attention(d.params, exec);
  const int64_t group = c.heads_q / c.heads_kv;
  const int64_t dv = d.params.out.shape[2];
  int64_t q0 = 0, nan_rows = 0;
  for (int64_t b = 0; b < static_cast<int64_t>(c.q_lens.size()); ++b) {
    for (int64_t i = 0; i < c.q_lens[b]; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const auto kr = reference::visible_keys(i, c.q_lens[b], c.kv_lens[b], c.causal,
                                                c.window_left, c.window_right);
        bool row_nan = false, col_nan = false, col_may = false;
        const bool same = b == p.b && h / group == p.g;
        if (p.where == Where::kQ) row_nan = b == p.b && i == p.t && h == p.g;
        if (p.where != Where::kQ && same && kr.lo <= p.t && p.t <= kr.hi)
          (p.where == Where::kK ? row_nan : col_nan) = true;
        col_may = p.where == Where::kV && same && !oracle;
        nan_rows += row_nan || col_nan;
        for (int64_t x = 0; x < dv; ++x) {
          const int64_t at = d.params.out.offset(q0 + i, h, x);
          const double o = load_as_double(d.params.out, at);
          const std::string el = what + ": out[" + std::to_string(q0 + i) + ", " +
                                 std::to_string(h) + ", " + std::to_string(x) + "] = ";
          ASSERT_NE(o, 7.0) << el << "not written";
          if (x == p.col && col_may && !col_nan && std::isnan(o)) continue;  // masked key's NaN
          const bool want = row_nan || (col_nan && x == p.col);
          ASSERT_EQ(std::isnan(o), want) << el << o;
          if (want) continue;
          const double r = load_as_double(ref.params.out, at);
          ASSERT_NEAR(o, r, 1e-4 * (1 + std::abs(r))) << el << o << ", oracle " << r;
        }
        if (d.params.lse.defined()) {
          const int64_t at = d.params.lse.offset(q0 + i, h);
          const double l = load_as_double(d.params.lse, at);
          ASSERT_EQ(std::isnan(l), row_nan)
              << what << ": lse[" << q0 + i << ", " << h << "] = " << l;
          if (!row_nan) ASSERT_NEAR(l, load_as_double(ref.params.lse, at), 1e-4) << what;
        }
      }
    q0 += c.q_lens[b];
  }
  ASSERT_GT(nan_rows, 0) << what << ": the poisoned element is seen by no row";
}

// Decode (the tile path), extend (many rows per KV head), MHA, fp8 and f32 caches, a window,
// a key past the first split; each with a NaN in q, in K and in V.
TEST(FastNan, ReachesTheRowsThatSeeItAndNoOthers) {
  struct Shape {
    const char* name;
    std::vector<int> q_lens, kv_lens;
    int heads_q, heads_kv, head_dim, page;
    DType kv;
    int window_left;
  };
  const Shape shapes[] = {
      {"decode gqa 4", {1, 1, 1}, {40, 100, 7}, 8, 2, 128, 16, DType::kBF16, -1},
      {"decode gqa 8", {1, 1}, {70, 33}, 16, 2, 64, 16, DType::kBF16, -1},
      {"extend gqa 4", {1, 5, 3}, {40, 100, 60}, 8, 2, 64, 16, DType::kBF16, -1},
      {"decode mha f16", {1, 1}, {40, 100}, 2, 2, 64, 1, DType::kF16, -1},
      {"decode fp8", {1, 1}, {40, 100}, 8, 2, 64, 16, DType::kF8E4M3, -1},
      {"extend f32 window", {2, 6}, {40, 100}, 8, 2, 64, 16, DType::kF32, 20},
      {"decode across splits", {1, 1}, {40, 1100}, 8, 2, 64, 16, DType::kBF16, -1},
  };
  uint64_t seed = 5000;
  for (const Shape& s : shapes) {
    AttentionCase c;
    c.q_lens = s.q_lens;
    c.kv_lens = s.kv_lens;
    c.heads_q = s.heads_q;
    c.heads_kv = s.heads_kv;
    c.head_dim = s.head_dim;
    c.page_size = s.page;
    c.kv_dtype = s.kv;
    c.window_left = s.window_left;
    c.dtype = DType::kF32;
    const int64_t last = s.kv_lens[1] - 1;  // request 1's last key: every row of it sees it
    const Poison poisons[] = {
        {Where::kQ, 1, s.q_lens[1] - 1, 1, 3},
        {Where::kK, 1, last, 1, 5},
        {Where::kK, 1, last - 1 - s.q_lens[1] / 2, 0, 0},  // seen by some rows of an extend
        {Where::kV, 1, last, 0, 9},
    };
    for (const Poison& p : poisons) {
      PagedData d = make_paged(c, ++seed);
      if (p.where == Where::kQ) {
        int64_t q0 = 0;
        for (int64_t b = 0; b < p.b; ++b) q0 += c.q_lens[b];
        store_from_double(d.params.q, d.params.q.offset(q0 + p.t, p.g, p.col), kNaN);
      } else {
        const TensorView& cache = p.where == Where::kK ? d.params.k_cache : d.params.v_cache;
        store_from_double(cache, cache_at(d, cache, p.b, p.t, p.g, p.col), kNaN);
      }
      const std::string what = std::string(s.name) + ", NaN in " +
                               (p.where == Where::kQ   ? "q"
                                : p.where == Where::kK ? "K"
                                                       : "V") +
                               " at " + std::to_string(p.t);
      PagedData ref = testing::with_fresh_outputs(d);
      expect_nan_where_seen(ref, ref, c, p, kRef, true, what + " (oracle)");
      for (int threads : {1, 2})
        expect_nan_where_seen(d, ref, c, p, fast(threads), false, what + " (fast)");
    }
  }
}

}  // namespace
}  // namespace flashback

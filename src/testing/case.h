// One case description drives tests and benchmarks (DESIGN.md principle 7): an AttentionCase
// names shapes, lengths and flags; make_paged() turns it into random host tensors (pages placed
// randomly, outputs poisoned) and the PagedAttentionParams that point at them; compare() applies
// DESIGN.md's tolerances. Used by the CPU, CUDA and backend tests and by the benchmarks.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flashback/ops.h"

namespace flashback::testing {

struct AttentionCase {
  std::string name;
  std::vector<int> q_lens;   // per batch entry
  std::vector<int> kv_lens;  // per batch entry (keys, including the new ones)
  int heads_q = 4, heads_kv = 1;
  int head_dim = 64, head_dim_v = 0;  // 0 = head_dim
  bool mla = false;                   // qv given: head_dim = rope dim, head_dim_v = latent width
  int page_size = 1;
  bool table_holds_slots = false;  // req_to_token-style table instead of page ids
  DType dtype = DType::kBF16;      // q / out
  DType kv_dtype = DType::kBF16;
  bool causal = true;
  int window_left = -1, window_right = -1;
  float softcap = 0;
  float softmax_scale = 0;
  double q_stddev = 1.0;  // spread of q's random values (large: beyond fp16's range)
  bool with_lse = true;
  bool lse_transposed = false;   // LSE stored as [H, total_q] (FA3 layout)
  bool per_head_descale = true;  // fp8: random [B, Hk] descales; false: stride-0 scalar
  int extra_table_cols = 1;      // page-table columns beyond the longest request
  bool fill_values = true;       // false: q and caches left unfilled (the bench fills GiBs faster)
  std::string describe() const;
};

/// Host tensors backing one AttentionCase, and the params that view them.
struct PagedData {
  Tensor q, qv, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, k_descale, v_descale,
      out, lse;
  PagedAttentionParams params;
  int64_t total_q = 0;
  bool lse_transposed = false;
};

/// Builds random inputs for `c` with values roughly N(0, 1) (fp8 caches: values spread over the
/// format's range, descales ~U(0.5, 2)). out and lse are poisoned (NaN).
PagedData make_paged(const AttentionCase& c, uint64_t seed);

/// A copy of `d` whose out/lse are fresh poisoned tensors of the same shape (for running a
/// second implementation on identical inputs).
PagedData with_fresh_outputs(const PagedData& d);

struct Comparison {
  double rel_l2 = 0, max_abs = 0, lse_max_abs = 0;
  double max_abs_excess = -1;  // max over elements of |out - ref| - allowance (> 0 fails)
  bool nan = false, lse_inf_mismatch = false;
  bool ok = false;
  std::string why;  // the first failing criterion
};

/// The absolute difference an output element of `dtype` may have from the oracle's `ref`:
/// 2e-2, or one ulp of bf16 / f16 where that is larger (compare's per-element criterion).
double abs_allowance(DType dtype, double ref);

/// DESIGN.md tolerances by output dtype: f32 ≤ 1e-5 relative; bf16/f16 ≤ 1e-2 relative and
/// ≤ 2e-2 max-abs (or one ulp of the output type where |ref| is large enough that an ulp
/// exceeds 2e-2: |ref| ≥ 4 for bf16); LSE ≤ 1e-3 absolute; NaN never passes; -inf LSE must
/// match exactly.
Comparison compare(const TensorView& out, const TensorView& ref, const TensorView& lse = {},
                   const TensorView& lse_ref = {});

/// Random ragged lengths helper: n values in [lo, hi].
std::vector<int> random_lengths(std::mt19937_64& rng, int n, int lo, int hi);

/// Fills a float tensor with N(0, stddev) values rounded to its dtype.
void fill_normal(Tensor& t, std::mt19937_64& rng, double stddev = 1.0);

}  // namespace flashback::testing

// NaN inputs (ARCHITECTURE.md, "NaN inputs"; SPEC.md is silent): one NaN written into q or a
// cache, and a check of every output element after a run, shared by the CPU and CUDA tests. A
// NaN in q, or in a K element at a key a row sees, makes that row NaN (every column and its
// LSE); a NaN in a V element at a key a row sees makes that column of the row NaN (MLA: the
// latent is K and V at once, so a whole row); other requests' and KV heads' rows keep their
// values. A NaN in V at a key a row of the same request and KV head does not see may reach that
// column (a masked key's zero weight times NaN), in any implementation but the oracle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "testing/case.h"

namespace flashback::testing {

enum class NanIn { kQ, kK, kV };

struct NanPoison {
  NanIn where;
  // Request; key (kQ: the request's q token); KV head (kQ: q head); column.
  int64_t b, t, g, col;
  std::string describe() const;
};

/// A case of the NaN tests (CPU and CUDA list their own): request 1 is the one poisoned.
struct NanShape {
  const char* name;
  std::vector<int> q_lens, kv_lens;
  int heads_q, heads_kv, head_dim, page;
  DType q, kv;
  int window_left = -1;
  int num_splits = 0;  // forced split count (0: the planner's)
  bool mla = false;    // MLA 576/512 (head_dim is then unused)
  AttentionCase to_case() const;
  /// Request 1 gets, one at a time: a NaN in its last q token's q head 1; in K at its last key
  /// (last KV head: every row sees it); in K at a key only some rows of an extend see; in V.
  std::vector<NanPoison> poisons() const;
};

/// Writes the NaN into d's host q or cache (a key's slot found through the page table).
void put_nan(PagedData& d, const AttentionCase& c, const NanPoison& p);

/// Sets every element of a view over a whole buffer (contiguous, or a transposed LSE) to v: outputs
/// before a run, so that a NaN after it is the implementation's own (make_paged poisons outputs
/// with NaN).
void fill_all(const TensorView& t, double v);

/// After a run on `d` with `p` in its inputs and its outputs filled with kFilled before: NaN
/// exactly where it must be, every element written, and every other element within the
/// tolerance of its output dtype (f32: 1e-4 relative, LSE 1e-4; bf16 / f16: DESIGN.md's
/// element allowance, LSE 1e-3) of `ref` (the oracle on the same inputs). `oracle`: the run
/// was the oracle's. Returns an empty string, or the first failure. At least one row must see
/// the NaN (else the case tests nothing).
constexpr double kFilled = 7.0;
std::string check_nan_where_seen(const PagedData& d, const PagedData& ref, const AttentionCase& c,
                                 const NanPoison& p, bool oracle);

}  // namespace flashback::testing

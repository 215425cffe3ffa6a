// Helpers shared by the fast CPU kernel tests: run the oracle and the fast path on identical
// inputs (outputs poisoned before each run) and compare with DESIGN.md tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback::fast_test {

inline const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};
inline Exec fast(int threads) { return Exec{nullptr, threads, Exec::CpuImpl::kFast}; }

/// Runs the oracle on a copy of d with fresh poisoned outputs and the fast path on d (whose
/// outputs make_paged poisoned), and compares.
inline testing::Comparison check_paged(testing::PagedData& d, const Exec& exec) {
  testing::PagedData ref = testing::with_fresh_outputs(d);
  paged_attention(ref.params, kRef);
  paged_attention(d.params, exec);
  return testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
}

#define EXPECT_CLOSE(cmp, what)                                                         \
  do {                                                                                  \
    const auto& c_ = (cmp);                                                             \
    EXPECT_TRUE(c_.ok) << (what) << ": " << c_.why << " (rel " << c_.rel_l2 << ", max " \
                       << c_.max_abs << ", lse " << c_.lse_max_abs << ")";              \
  } while (0)

}  // namespace flashback::fast_test

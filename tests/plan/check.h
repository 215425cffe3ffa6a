// Shared gtest checks of a plan against the direct computation (host_batch.h).
#pragma once

#include <cstdint>

#include "flashback/metadata.h"
#include "host_batch.h"

namespace flashback::plan_test {

/// For every query token and every layer kind the metadata supports (self, self with a window of
/// `window` (if >= 0), chunked-local, cross), the slots visible through the plan — via
/// req_to_token and, when materialised, via the explicit page table — equal the direct
/// computation. Also checks structural invariants (no index past the table, page-aligned
/// starts, entry rows). Returns the number of (token, layer, form) comparisons made.
int64_t expect_plan_matches(HostBatch& hb, const ForwardMetadata& m, int32_t chunk, int32_t window);

}  // namespace flashback::plan_test

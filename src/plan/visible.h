// What a kernel would read, enumerated on the host: the key slots one query token sees through
// a plan (entries + lengths + causal/window rule + req_to_token or the explicit page table).
// Tests compare it with a direct computation from req_to_token and SPEC.md's mode definitions.
#pragma once

#include <cstdint>
#include <vector>

#include "flashback/metadata.h"

namespace flashback::plan {

/// Slots visible to query `token` (0 .. total queries - 1) of layer plan `lp`, in key order.
/// `use_page_table` reads the explicit page table (slot = table[e, t / P]·P + t % P) instead of
/// req_to_token[row, kv_start + t]. Throws flashback::Error when `token` is out of range.
std::vector<int32_t> visible_slots(const LayerPlan& lp, int32_t page_size,
                                   const TensorView& req_to_token, int32_t token,
                                   bool use_page_table = false);

}  // namespace flashback::plan

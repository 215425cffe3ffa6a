// Writing ForwardMetadata into flat int32 buffers. The same writer serves fresh builds (buffers
// sized for the batch) and CUDA-graph updates (buffers sized for the worst case), so a replay
// produces exactly what a fresh build of the padded batch would.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashback/metadata.h"
#include "plan/plan.h"
#include "plan/rows.h"

namespace flashback::plan {

struct ListShape {
  int32_t capacity = 0;
  int32_t width = 0;  // explicit page table columns (0 = none)
};

struct Layout {
  ListShape self, local, cross;
  bool has_local = false, has_cross = false;
};

/// The smallest layout holding `rows`' metadata.
Layout fresh_layout(const PlanConfig& cfg, const BatchRows& rows);
/// The worst-case layout of a CUDA-graph state (CudaGraphPlanState; the GPU plan mirrors it).
Layout graph_layout(const PlanConfig& cfg, int32_t max_bs, int32_t max_context_len);
/// int32 elements `layout` takes in an arena.
size_t arena_elements(const Layout& layout);
/// Points m's lists at consecutive, 64-byte aligned pieces of `arena`. Reads and writes no
/// element, so `arena` may be device memory (set the lists' `device` afterwards).
void carve(const Layout& layout, int32_t* arena, ForwardMetadata& m);
/// Writes the metadata of `rows` into m's buffers (which must be large enough); sets sizes and
/// maxima, never pointers.
void write_metadata(const PlanConfig& cfg, const BatchRows& rows, ForwardMetadata& m);

}  // namespace flashback::plan

// Argument validation for the entry points of ops.h, shared by every backend (CPU oracle, fast
// CPU, CUDA). Each validate_* throws flashback::Error naming the argument on bad input and
// returns the sizes it derived, so kernels never re-derive or re-check them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "flashback/ops.h"

namespace flashback::detail {

struct PagedShape {
  int64_t batch = 0, total_q = 0, heads_q = 0, heads_kv = 0;
  int64_t head_dim = 0;     // q / k head dim
  int64_t head_dim_qv = 0;  // qv head dim (MLA), 0 when absent
  int64_t head_dim_v = 0;
  int64_t page_size = 1;  // P
  int64_t num_pages = 0;  // first dim of the caches
  int64_t table_width = 0;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // filled when the index arrays are host-readable
  float scale = 0;                             // resolved softmax scale
  Device device;
};

struct RaggedShape {
  int64_t batch = 0, total_q = 0, total_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0,
          head_dim_v = 0, max_seqlen_q = 0, max_seqlen_k = 0;
  float scale = 0;
  Device device;
};

struct MergeShape {
  int64_t tokens = 0, heads = 0, head_dim = 0;
  Device device;
};

struct StoreShape {
  int64_t tokens = 0, heads = 0, head_dim = 0, head_dim_v = 0, page_size = 1, num_slots = 0;
  Device device;
};

PagedShape validate(const PagedAttentionParams& p);
RaggedShape validate(const RaggedAttentionParams& p);
MergeShape validate(const MergeStateParams& p);
StoreShape validate(const KVStoreParams& p);

// Building blocks, also used by the plan and the backend.
void expect_defined(const TensorView& t, const char* name);
void expect_rank(const TensorView& t, const char* name, int rank);
void expect_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
void expect_dim(const TensorView& t, const char* name, int dim, int64_t value);
void expect_last_contiguous(const TensorView& t, const char* name);
void expect_device(const TensorView& t, const char* name, Device device);

}  // namespace flashback::detail

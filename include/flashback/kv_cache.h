/// @brief The KV cache an engine keeps: the req_to_token pool (request row -> token slots), a slot
/// allocator for P = 1 and a paged allocator (whole pages, `slot % P == position % P`, shared
/// prefix pages reference-counted), and per-layer MHA / MLA KV pools. Slot 0 (page 0) is reserved
/// as the padding dummy. Host memory; an engine with device memory passes views of its own
/// buffers to the backend instead.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashback/tensor.h"

namespace flashback {

/// req_to_token: int32 [max_reqs, max_context_len]; row r, column t = slot of token t.
class ReqToTokenPool {
 public:
  ReqToTokenPool(int64_t max_reqs, int64_t max_context_len);
  int32_t alloc();         ///< a free row; Error when none is left
  void free(int32_t row);  ///< returns a row (its contents are left as they are)
  int64_t max_reqs() const { return table_.size(0); }
  int64_t max_context_len() const { return table_.size(1); }
  int64_t free_rows() const { return static_cast<int64_t>(free_.size()); }
  int32_t* row(int32_t r);
  const int32_t* row(int32_t r) const;
  TensorView table() const { return table_.view(); }

 private:
  Tensor table_;
  std::vector<int32_t> free_;
  std::vector<uint8_t> used_;
};

/// Allocates token slots in whole pages of P slots (P = 1: token-level slots). A request's tokens
/// fill its pages in order, so `slot % P == position % P`; page 0 is reserved. Pages shared by
/// prefix reuse are reference-counted and return to the pool when the last user frees them.
class PagedAllocator {
 public:
  PagedAllocator(int64_t num_slots, int64_t page_size);
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }

  /// Gives positions [start, start + n) of `row` slots, writing them into req_to_token; the
  /// position before `start` (if any, and not page-aligned) must already hold a slot of this
  /// request, whose page is continued. Returns the new slots (this step's out_cache_loc).
  std::vector<int32_t> extend(ReqToTokenPool& pool, int32_t row, int64_t start, int64_t n);
  /// Makes `dst` reuse the first `n` tokens of `src` (n a multiple of P: only whole pages are
  /// shared), taking a reference on each page.
  void share_prefix(ReqToTokenPool& pool, int32_t src, int32_t dst, int64_t n);
  /// Drops the references of positions [0, len) of `row` (one per page).
  void release(const ReqToTokenPool& pool, int32_t row, int64_t len);

 private:
  int32_t take_page();
  int64_t page_size_, num_pages_;
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;
};

/// Per-layer K/V buffers `[num_slots, Hk, D]` / `[num_slots, Hk, Dv]` (MHA) or one latent buffer
/// `[num_slots, 1, R + Dr]` (MLA, `v_head_dim = 0`). FP8 pools store x / scale.
struct KVPoolConfig {
  int64_t num_layers = 1, num_slots = 0, page_size = 1, heads_kv = 1, head_dim = 128;
  int64_t head_dim_v = 128;  ///< 0 = MLA (one latent buffer of head_dim columns)
  DType dtype = DType::kBF16;
  float k_scale = 1, v_scale = 1;
};

class KVPool {
 public:
  explicit KVPool(const KVPoolConfig& c);
  const KVPoolConfig& config() const { return c_; }
  bool is_mla() const { return c_.head_dim_v == 0; }
  /// `[num_pages, P, Hk, D]` views of a layer's buffers (MLA: v_cache() is the first
  /// `latent_dim` columns of the latent buffer and k_cache() the whole row; see `mla_views`).
  TensorView k_cache(int64_t layer) const;
  TensorView v_cache(int64_t layer) const;

 private:
  KVPoolConfig c_;
  std::vector<Tensor> k_, v_;
};

}  // namespace flashback

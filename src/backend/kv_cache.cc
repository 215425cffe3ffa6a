#include "flashback/kv_cache.h"

#include <algorithm>
#include <string>

namespace flashback {

using detail::concat;

ReqToTokenPool::ReqToTokenPool(int64_t max_reqs, int64_t max_context_len)
    : table_(DType::kI32, {max_reqs, max_context_len}), used_(static_cast<size_t>(max_reqs), 0) {
  FLASHBACK_CHECK(max_reqs > 0 && max_context_len > 0, "ReqToTokenPool",
                  "max_reqs > 0 and max_context_len > 0", concat(max_reqs, ", ", max_context_len));
  table_.zero();
  for (int64_t r = max_reqs - 1; r >= 0; --r) free_.push_back(static_cast<int32_t>(r));
}

int32_t ReqToTokenPool::alloc() {
  FLASHBACK_CHECK(!free_.empty(), "ReqToTokenPool.alloc",
                  concat("a free request row (of ", max_reqs(), ")"), "none left");
  const int32_t r = free_.back();
  free_.pop_back();
  used_[r] = 1;
  return r;
}

void ReqToTokenPool::free(int32_t r) {
  FLASHBACK_CHECK(r >= 0 && r < max_reqs() && used_[r], "ReqToTokenPool.free", "a row in use",
                  std::to_string(r));
  used_[r] = 0;
  free_.push_back(r);
}

int32_t* ReqToTokenPool::row(int32_t r) {
  FLASHBACK_CHECK(r >= 0 && r < max_reqs(), "req_pool_index",
                  concat("a row in [0, ", max_reqs(), ")"), std::to_string(r));
  return table_.ptr<int32_t>() + int64_t{r} * max_context_len();
}
const int32_t* ReqToTokenPool::row(int32_t r) const {
  return const_cast<ReqToTokenPool*>(this)->row(r);
}

PagedAllocator::PagedAllocator(int64_t num_slots, int64_t page_size)
    : page_size_(page_size), num_pages_(page_size > 0 ? num_slots / page_size : 0) {
  FLASHBACK_CHECK(page_size >= 1, "page_size", ">= 1", std::to_string(page_size));
  FLASHBACK_CHECK(num_slots % page_size == 0 && num_pages_ >= 2, "num_slots",
                  concat("a multiple of the page size ", page_size, " holding >= 2 pages"),
                  std::to_string(num_slots));
  refs_.assign(static_cast<size_t>(num_pages_), 0);
  refs_[0] = 1;  // reserved padding page
  // Hand pages out in a scrambled order: sequential placement flatters kernels and hides bugs.
  for (int64_t p = num_pages_ - 1; p >= 1; --p) free_.push_back(static_cast<int32_t>(p));
  for (size_t i = 1; i < free_.size(); i += 2) std::swap(free_[i], free_[free_.size() - i]);
}

int32_t PagedAllocator::take_page() {
  FLASHBACK_CHECK(!free_.empty(), "PagedAllocator", concat("a free page (of ", num_pages_ - 1, ")"),
                  "out of KV cache slots");
  const int32_t p = free_.back();
  free_.pop_back();
  refs_[p] = 1;
  return p;
}

std::vector<int32_t> PagedAllocator::extend(ReqToTokenPool& pool, int32_t row, int64_t start,
                                            int64_t n) {
  FLASHBACK_CHECK(start >= 0 && n >= 0 && start + n <= pool.max_context_len(), "extend",
                  concat("positions within max_context_len ", pool.max_context_len()),
                  concat("[", start, ", ", start + n, ")"));
  int32_t* r = pool.row(row);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  // Check capacity first so a failed extend changes nothing.
  int64_t new_pages = 0;
  for (int64_t pos = start; pos < start + n; ++pos)
    if (pos % page_size_ == 0) ++new_pages;
  if (start % page_size_ != 0 && n > 0 && page_size_ > 1) {
    const int32_t prev = r[start - 1];
    FLASHBACK_CHECK(prev % page_size_ == (start - 1) % page_size_ && refs_[prev / page_size_] == 1,
                    "extend", "a continuable last page owned by this request",
                    concat("slot ", prev, " at position ", start - 1));
  }
  FLASHBACK_CHECK(new_pages <= free_pages(), "PagedAllocator", concat(new_pages, " free pages"),
                  concat(free_pages(), " (out of KV cache slots)"));
  for (int64_t pos = start; pos < start + n; ++pos) {
    const int32_t slot =
        pos % page_size_ == 0 ? take_page() * static_cast<int32_t>(page_size_) : r[pos - 1] + 1;
    r[pos] = slot;
    out.push_back(slot);
  }
  return out;
}

void PagedAllocator::share_prefix(ReqToTokenPool& pool, int32_t src, int32_t dst, int64_t n) {
  FLASHBACK_CHECK(n % page_size_ == 0, "share_prefix",
                  concat("a multiple of the page size ", page_size_), std::to_string(n));
  const int32_t* s = pool.row(src);
  int32_t* d = pool.row(dst);
  for (int64_t pos = 0; pos < n; ++pos) {
    d[pos] = s[pos];
    if (pos % page_size_ == 0) ++refs_[s[pos] / page_size_];
  }
}

void PagedAllocator::release(const ReqToTokenPool& pool, int32_t row, int64_t len) {
  const int32_t* r = pool.row(row);
  for (int64_t pos = 0; pos < len; pos += page_size_) {
    const int32_t page = r[pos] / static_cast<int32_t>(page_size_);
    FLASHBACK_CHECK(page > 0 && page < num_pages_ && refs_[page] > 0, "release",
                    "a page held by the request", concat("page ", page, " at position ", pos));
    if (--refs_[page] == 0) free_.push_back(page);
  }
}

KVPool::KVPool(const KVPoolConfig& c) : c_(c) {
  FLASHBACK_CHECK(c.num_slots > 0 && c.page_size > 0 && c.num_slots % c.page_size == 0, "num_slots",
                  concat("a positive multiple of the page size ", c.page_size),
                  std::to_string(c.num_slots));
  const int64_t pages = c.num_slots / c.page_size;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    k_.emplace_back(c.dtype,
                    std::initializer_list<int64_t>{pages, c.page_size, c.heads_kv, c.head_dim});
    k_.back().zero();
    if (!is_mla()) {
      v_.emplace_back(c.dtype,
                      std::initializer_list<int64_t>{pages, c.page_size, c.heads_kv, c.head_dim_v});
      v_.back().zero();
    }
  }
}

TensorView KVPool::k_cache(int64_t layer) const {
  FLASHBACK_CHECK(layer >= 0 && layer < c_.num_layers, "layer_id",
                  concat("a layer in [0, ", c_.num_layers, ")"), std::to_string(layer));
  return k_[layer].view();
}

TensorView KVPool::v_cache(int64_t layer) const {
  FLASHBACK_CHECK(layer >= 0 && layer < c_.num_layers, "layer_id",
                  concat("a layer in [0, ", c_.num_layers, ")"), std::to_string(layer));
  return is_mla() ? k_[layer].view() : v_[layer].view();
}

}  // namespace flashback

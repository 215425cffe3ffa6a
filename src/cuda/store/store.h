// KV store on the GPU: plain params (no CUDA headers).
#pragma once

#include <cstdint>

namespace flashback::cuda {

// Writes rows of src [T, H, D] to cache slots loc[t]; the cache is addressed as (page, offset,
// head) with page = slot / P. FP8 caches store x / scale (computed in fp32, rounded once).
struct StoreParams {
  const void* src = nullptr;
  int dt_src = 0;
  int64_t s_st = 0, s_sh = 0;
  void* cache = nullptr;
  int dt_cache = 0;
  int64_t c_sp = 0, c_so = 0, c_sh = 0;
  const void* loc = nullptr;
  bool loc_i64 = false;
  int64_t loc_s = 0;
  int tokens = 0, heads = 0, head_dim = 0, page_size = 1;
  float inv_scale = 1;  // 1 / scale for fp8 caches, else 1 (unused)
  float scale = 1;
  bool fp8 = false;
};
void launch_store(const StoreParams& p, void* stream);

}  // namespace flashback::cuda

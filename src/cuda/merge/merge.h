// merge_state on the GPU: plain params (no CUDA headers).
#pragma once

#include <cstdint>

namespace flashback::cuda {

struct MergeParams {
  const void* out_a = nullptr;
  const void* out_b = nullptr;
  void* out = nullptr;
  int dt_a = 0, dt_b = 0, dt_out = 0;  // flashback::DType codes
  int64_t a_st = 0, a_sh = 0, b_st = 0, b_sh = 0, o_st = 0, o_sh = 0;
  const float* lse_a = nullptr;
  const float* lse_b = nullptr;
  float* lse = nullptr;  // optional
  int64_t la_st = 0, la_sh = 0, lb_st = 0, lb_sh = 0, l_st = 0, l_sh = 0;
  int tokens = 0, heads = 0, head_dim = 0;
};
void launch_merge(const MergeParams& p, void* stream);

}  // namespace flashback::cuda

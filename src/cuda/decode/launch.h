// Host-side view of the decode kernels: the function each generated instance file defines, and
// the split-KV combine (no CUDA headers).
#pragma once

#include <cstdint>

#include "cuda/decode/params.h"

namespace flashback::cuda {

enum class KvKind : int;

// One instance (decode_<D>_<DV>_<bf16|f16>): (params, 16-row m-tiles per block: 1 or 4, or 2 for
// the narrow MLA kernel's 32-row blocks; KV kind, cudaStream_t).
using DecodeLaunchFn = void (*)(const DecodeParams&, int, KvKind, void*);

// Merges the splits of the workspace into the output, in split order (so the result does not
// depend on how many other, empty, splits the grid had: the deterministic mode relies on it).
struct CombineParams {
  const float* ws_o = nullptr;
  const float* ws_lse = nullptr;
  int num_splits = 1, total_q = 0, heads_q = 0, head_dim_v = 0;
  bool bf16 = true;  // out dtype: bf16, else fp16
  void* out = nullptr;
  int64_t out_st = 0, out_sh = 0;
  float* lse = nullptr;
  int64_t lse_st = 0, lse_sh = 0;
  // Launch as the decode kernel's programmatic dependent (sm_90a code on a 9.0 device;
  // dispatch.cu decides).
  bool pdl = false;
};
void launch_combine(const CombineParams& p, void* stream);

}  // namespace flashback::cuda

// Host side of tensor_map.h: cuTensorMapEncodeTiled, found through the runtime's driver entry
// point (no link against the driver library).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstring>

#include "cuda/common/tensor_map.h"

namespace flashback::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      static_cast<void>(cudaGetLastError());
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

bool encode_map_4d(TensorMap& map, const void* base, const int64_t (&dims)[4],
                   const int64_t (&strides)[3], const int (&box)[4]) {
  static_assert(sizeof(CUtensorMap) == sizeof(TensorMap), "CUtensorMap is 128 bytes");
  // The encoder's rules: a 16-byte aligned base, sizes up to 2^32, strides multiples of 16
  // below 2^40, box sides up to 256 and within the tensor, a box row no wider than the
  // 128-byte swizzle span.
  bool ok = reinterpret_cast<uintptr_t>(base) % 16 == 0 && dims[0] % 64 == 0 && box[0] == 64;
  for (int i = 0; i < 4; ++i)
    ok = ok && dims[i] > 0 && dims[i] <= (int64_t{1} << 32) && box[i] > 0 && box[i] <= 256 &&
         box[i] <= dims[i];
  for (int i = 0; i < 3; ++i)
    ok = ok && strides[i] > 0 && strides[i] % 16 == 0 && strides[i] < (int64_t{1} << 40);
  const PFN_cuTensorMapEncodeTiled_v12000 encode = ok ? encoder() : nullptr;
  if (encode == nullptr) return false;
  cuuint64_t d[4], st[3];
  cuuint32_t b[4];
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; ++i) {
    d[i] = static_cast<cuuint64_t>(dims[i]);
    b[i] = static_cast<cuuint32_t>(box[i]);
  }
  for (int i = 0; i < 3; ++i) st[i] = static_cast<cuuint64_t>(strides[i]);
  CUtensorMap m;
  const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(base), d, st,
                            b, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return false;
  std::memcpy(map.bytes, &m, sizeof m);
  return true;
}

}  // namespace flashback::cuda

// A TMA tensor map (the driver's CUtensorMap: 128 opaque bytes) as a plain type, so kernel
// parameter structs can hold one without including the driver API's header, and its host-side
// construction (tensor_map.cu).
#pragma once

#include <cstdint>

namespace flashback::cuda {

struct alignas(64) TensorMap {
  unsigned char bytes[128] = {};
};

/// A 4-D map of 16-bit elements: dims[0] contiguous elements (a multiple of 64), then dims[1..3]
/// at strides[0..2] bytes, read in boxes of box[0..3] elements (box[0] = 64: one 128-byte row)
/// written 128-byte swizzled, the layout wgmma reads (one 128-byte row per box row; the box's
/// rows are dims 1..3 in order). Returns false, leaving `map` as it was, where the TMA cannot
/// describe the tensor (alignment, strides, sizes) or the driver lacks the encoder; callers then
/// copy another way.
bool encode_map_4d(TensorMap& map, const void* base, const int64_t (&dims)[4],
                   const int64_t (&strides)[3], const int (&box)[4]);

}  // namespace flashback::cuda

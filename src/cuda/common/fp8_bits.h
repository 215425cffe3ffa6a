// fp8 bytes to fp16 by moving bits instead of by cvt. The decode kernel's fp8 caches run the
// tensor cores in fp16 (decode/warp_keys.cuh), and every K and V element is widened on the way:
// one cvt.f16x2.e4m3x2 per two values goes through the SM's conversion pipe, a fraction of the
// integer pipe's rate, where these take four integer operations per two values
// (vLLM's Marlin kernels widen fp8 weights the same way).
//
// Four bytes q = [b0 b1 b2 b3] (b0 lowest) give two fp16 pairs, even = (b0, b2) and odd =
// (b1, b3), low half first. e5m2 is the top byte of the fp16 with the same value, so it moves
// whole. e4m3's sign stays the top bit and its 7 exponent-and-mantissa bits go under fp16's
// exponent field; the exponent biases differ (7 against 15), so the fp16 holds the value times
// 2^-8, exactly, subnormals included, and the caller folds kFp8F16Unit back in (the logits'
// scale for K, the output's for V). e4m3's NaN (S.1111.111) reads as ±480 there instead of NaN:
// the KV store saturates and never writes it. Plain C++, so a host test checks all 256 bytes.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.h"

namespace flashback::cuda {

/// The factor by which fp8x4_to_f16x2's fp16 values understate the fp8 ones.
template <bool E4M3>
inline constexpr float kFp8F16Unit = E4M3 ? 256.f : 1.f;

template <bool E4M3>
FLASHBACK_HOST_DEVICE constexpr void fp8x4_to_f16x2(uint32_t q, uint32_t& even, uint32_t& odd) {
  if constexpr (E4M3) {
    odd = (q & 0x80008000u) | ((q & 0x7f007f00u) >> 1);
    const uint32_t r = q << 8;
    even = (r & 0x80008000u) | ((r & 0x7f007f00u) >> 1);
  } else {
    odd = q & 0xff00ff00u;
    even = (q << 8) & 0xff00ff00u;
  }
}

}  // namespace flashback::cuda

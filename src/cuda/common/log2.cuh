// Base-2 constants shared by the online softmaxes of every kernel: logits are kept in base 2
// (scaled by log2 e) so each probability is one exp2, and LSE converts back with ln 2.
#pragma once

#include "cuda/common/host_device.h"

namespace flashback::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Lazy rescale (FlashAttention-4's): a running row max stays while the tile's max exceeds it by
// at most this much (base 2), so O's rescale can be skipped; probabilities then reach at most
// 2^kLazyRescaleLog2, which fp32 sums, 16-bit P and fp32 O carry as well as values <= 1.
constexpr float kLazyRescaleLog2 = 8.f;
/// 2^kLazyRescaleLog2: the largest probability the lazy rule lets through.
constexpr float kLazyMaxProb = 256.f;
/// The lazy rule for one row: its running max m_run may stay although the tile raised it to
/// m_new. False for a row that has seen no key (-inf - -inf is NaN) or sees its first one
/// (x - -inf is +inf); the callers decide per warp (all rows of the warp must keep).
FLASHBACK_HOST_DEVICE inline bool lazy_keeps(float m_new, float m_run) {
  return m_new - m_run <= kLazyRescaleLog2;
}

}  // namespace flashback::cuda

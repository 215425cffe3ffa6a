// Base-2 constants shared by the online softmaxes of every kernel: logits are kept in base 2
// (scaled by log2 e) so each probability is one exp2, and LSE converts back with ln 2.
#pragma once

namespace flashback::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace flashback::cuda

// Which query blocks a CTA of the Hopper prefill kernel takes (wgmma_kernel.cuh, block_at): a
// pure function, kept apart so that a CPU test (tests/cuda/test_prefill_blocks.cc) can check
// that every block of every entry goes to exactly one CTA, for any grid.
#pragma once

#include "cuda/common/host_device.h"

namespace flashback::cuda::prefill {

/// The k-th query block (k = 0, 1, ...) of CTA x of `ctas` for an entry of `nblocks` blocks, or
/// -1 when the CTA has no k-th block (nor any later one). Blocks are dealt from the last (under
/// bottom-right causal the last rows see the most keys) in snake order: round k gives position
/// k * ctas + x for even k and k * ctas + ctas - 1 - x for odd k, so with ctas = nblocks / 2
/// each CTA gets one long and one short block.
FLASHBACK_HOST_DEVICE constexpr int snake_block(int k, int nblocks, int ctas, int x) {
  const int pos = k * ctas + ((k & 1) ? ctas - 1 - x : x);
  return pos < nblocks ? nblocks - 1 - pos : -1;
}

}  // namespace flashback::cuda::prefill

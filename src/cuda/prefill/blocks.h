// Which query blocks a CTA of the Hopper prefill kernel takes (wgmma_kernel.cuh, its producer):
// pure functions, kept apart so that a CPU test (tests/cuda/test_prefill_blocks.cc) can check
// that every block of every entry goes to exactly one CTA, for any grid and any entry lengths.
#pragma once

#include "cuda/common/host_device.h"

namespace flashback::cuda::prefill {

/// Position k (k = 0, 1, ...) of CTA x of `ctas` in a list of n, dealt in snake order: round k
/// gives k * ctas + x for even k and k * ctas + ctas - 1 - x for odd k; -1 once past the list
/// (and for every later k). Dealt from a list sorted longest first, the rounds pair a CTA's long
/// items with short ones.
FLASHBACK_HOST_DEVICE constexpr int snake_pos(int k, int n, int ctas, int x) {
  const long long pos = static_cast<long long>(k) * ctas + ((k & 1) ? ctas - 1 - x : x);
  return pos < n ? static_cast<int>(pos) : -1;
}

/// The k-th query block of CTA x of `ctas` for an entry of `nblocks` blocks, or -1 when the CTA
/// has no k-th block (nor any later one). Blocks are dealt from the last (under bottom-right
/// causal the last rows see the most keys), so with ctas = nblocks / 2 each CTA gets one long
/// and one short block.
FLASHBACK_HOST_DEVICE constexpr int snake_block(int k, int nblocks, int ctas, int x) {
  const int pos = snake_pos(k, nblocks, ctas, x);
  return pos < 0 ? -1 : nblocks - 1 - pos;
}

/// The sequence of (entry, q head, query block) one CTA takes, in one of two schedules:
/// - grid: the CTA is (x, h, b) of a grid (ctas, heads, batch) and takes entry b's blocks for
///   head h by snake_block;
/// - persistent: `ctas` CTAs (about one per SM) share the items (r, b, h), dealt by snake_pos
///   from a list of bands of `band` ranks, the band of ranks 0.. first, and inside a band
///   (b, h, r) with r fastest, so the items running side by side share K/V in L2 (the q heads
///   of a KV group are adjacent too). Item (r, b, h) is entry b's blocks of rank r, r + R,
///   r + 2R, ... counted from the last (rank r is the same work in every entry of a uniform
///   batch, so the list runs about longest first, and a short R, from a short max_seqlen_q
///   hint, costs speed only). A CTA's consumers then finish one block while its producer loads
///   the next, across the whole launch instead of per CTA.
/// `next(nblocks_of)` moves to the next block and returns its index in the entry, or -1 at the
/// end; `nblocks_of(b, h)` gives entry b's block count (the device loads the entry there).
struct BlockCursor {
  bool persistent = false;
  int ctas = 1, x = 0;              // CTAs of the schedule and this one's index among them
  int R = 1, batch = 0, heads = 0;  // persistent: item ranks, entries and q heads
  int band = 1;                     // persistent: ranks dealt together (see next)
  int b = 0, h = 0;                 // the current block's entry and q head (grid: fixed)
  int k = 0, rank = 0, nb = -1;     // next deal round; current rank; blocks of entry b

  template <typename NBlocks>
  FLASHBACK_HOST_DEVICE int next(NBlocks&& nblocks_of) {
    if (!persistent) {
      if (nb < 0) nb = nblocks_of(b, h);
      return snake_block(k++, nb, ctas, x);
    }
    if (nb >= 0 && rank + R < nb) {
      rank += R;
      return nb - 1 - rank;
    }
    const int per_rank = batch * heads;
    for (int pos; (pos = snake_pos(k++, R * per_rank, ctas, x)) >= 0;) {
      // Bands of `band` ranks; inside one, (b, h, rank) with the rank fastest, so the items
      // running side by side share K/V (L2).
      const int first = pos / (band * per_rank) * band;    // the band's first rank
      const int kb = R - first < band ? R - first : band;  // ranks in this band
      const int rem = pos - first * per_rank;
      rank = first + rem % kb;
      h = rem / kb % heads;
      b = rem / kb / heads;
      nb = nblocks_of(b, h);
      if (rank < nb) return nb - 1 - rank;
    }
    nb = 0;  // exhausted: every later call returns -1 too
    rank = 0;
    return -1;
  }
};

}  // namespace flashback::cuda::prefill

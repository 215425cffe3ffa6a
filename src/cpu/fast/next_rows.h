// The next tile's K/V rows, prefetched into L2 while this tile computes: the prefetch stream
// both decode paths share (the AMX tiles of amx.h and the Highway kernels of decode-inl.h).
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashback::cpu_fast {

/// Step c's share (c = 0 .. steps - 1) of `n` prefetch slots spread evenly over `steps` steps:
/// the shares add up to n and differ by at most one. The kernels pace the stream with it.
inline int64_t even_share(int64_t n, int64_t c, int64_t steps) {
  return n * (c + 1) / steps - n * c / steps;
}

/// The next tile's rows (key i of head g at k[i] + g · k_head_bytes, V likewise), prefetched
/// into L2 in step with this tile's work: the kernels call step() with the rows they consume,
/// so the stream runs a tile ahead at the rate the data is used (one burst per tile, or per
/// head, left the prefetches queued behind each other and the loads the FMAs wait on behind
/// them).
///
/// Four runs go side by side, one row (a head of a key) of each in turn: K's first and second
/// half of the keys, then V's first and second half (with 16-key pages, the tile's four pages).
/// Read page after page instead, decode ran 15-20 % slower from DRAM on an Intel host (two
/// threads; PERFORMANCE_CPU.md, session 30): a core keeps more lines in flight across four
/// pages than along one. Turns of 2, 4 or 8 rows were 3-20 % slower, eight runs (quarters) no
/// faster. Callers step a few rows at a time between their loads: the AMX P·V stepping a head's
/// 32 V rows at once ran 5-6 % slower from DRAM than a step before each tile load, and a
/// softmax that issued none let the fill buffers drain (session 36).
///
/// L2 (T1), not L1: an L1 prefetch holds one of the core's ~16 L1 miss buffers until its line
/// arrives, and with several KV heads per task a row is used only after the other heads' work,
/// long after L1 would have evicted it. AMD before Zen 4 fills L1 for every hint; there too the
/// stream pays (Zen 1, session 31: without it decode ran 1.3-1.6x slower, and every variant
/// tried, L1-sized or in address order, was slower or equal; PERFORMANCE_CPU.md).
struct NextRows {
  const void* const* k = nullptr;
  const void* const* v = nullptr;
  int64_t n = 0, heads = 0, k_head_bytes = 0, v_head_bytes = 0, k_bytes = 0, v_bytes = 0;
  // Progress: slots issued (a run's slot past its keys issues nothing) and the next slot's run,
  // key within the run and head.
  int64_t at = 0, run = 0, key = 0, g = 0;

  /// Slots in all (about 2 · n · heads rows).
  int64_t slots() const { return 4 * ((n + 1) / 2) * heads; }
  /// Issues the next `rows` slots.
  void step(int64_t rows) {
    visit(rows, [](const char* row, int64_t bytes) {
      for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
    });
  }
  /// The next `rows` slots in order: use(row address, its bytes) for each slot holding a row.
  template <class Use>
  void visit(int64_t rows, Use&& use) {
    const int64_t h = (n + 1) / 2, end = std::min(at + rows, slots());
    for (; at < end; ++at) {
      const int64_t i = (run & 1) * h + key;  // the tile's key
      if (i < n) {
        const bool is_k = run < 2;
        use(is_k ? static_cast<const char*>(k[i]) + g * k_head_bytes
                 : static_cast<const char*>(v[i]) + g * v_head_bytes,
            is_k ? k_bytes : v_bytes);
      }
      if (++run == 4) {
        run = 0;
        if (++g == heads) {
          g = 0;
          ++key;
        }
      }
    }
  }
  /// Whatever the steps left.
  void finish() { step(slots()); }
};

}  // namespace flashback::cpu_fast

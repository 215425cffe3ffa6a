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
/// or take() rows and prefetch their lines one by one inside their own loops, so the stream
/// runs a tile ahead at the rate the data is used (one burst per tile, or per head, left the
/// prefetches queued behind each other and the loads the FMAs wait on behind them; a burst of
/// 8 lines before each of the scores' dot products cost 6-7 % in cache, session 41).
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
  /// Slots of a tile of n keys over `heads` KV heads (about 2 · n · heads rows): four per
  /// (key of the first half, head), a slot whose run has no key there (n odd) left empty.
  static int64_t slots_for(int64_t n, int64_t heads) { return 4 * ((n + 1) / 2) * heads; }

  /// The stream over a tile's rows (key i of head g at k[i] + g · k_head_bytes, V likewise), its
  /// row addresses laid out in stream order in `list` (slots_for(n, heads) entries, the
  /// caller's). Worked out slot by slot as the stream went, the bookkeeping cost ~100
  /// instructions per (key, KV head) in decode, a fifth of the kernel's (session 40).
  NextRows(const void* const* k, const void* const* v, int64_t n, int64_t heads,
           int64_t k_head_bytes, int64_t v_head_bytes, int64_t k_bytes, int64_t v_bytes,
           const char** list)
      : list_(list), slots_(slots_for(n, heads)), k_bytes_(k_bytes), v_bytes_(v_bytes) {
    const int64_t h = (n + 1) / 2;
    for (int64_t w = 0; w < h; ++w) {
      const bool second = h + w < n;
      const auto* k0 = static_cast<const char*>(k[w]);
      const auto* k1 = second ? static_cast<const char*>(k[h + w]) : nullptr;
      const auto* v0 = static_cast<const char*>(v[w]);
      const auto* v1 = second ? static_cast<const char*>(v[h + w]) : nullptr;
      for (int64_t g = 0; g < heads; ++g, list += 4) {
        list[0] = k0 + g * k_head_bytes;
        list[1] = second ? k1 + g * k_head_bytes : nullptr;
        list[2] = v0 + g * v_head_bytes;
        list[3] = second ? v1 + g * v_head_bytes : nullptr;
      }
    }
  }

  /// Slots issued so far.
  int64_t at = 0;

  int64_t slots() const { return slots_; }
  /// Issues the next `rows` slots. A row's lines go out from one prefetch in a loop. Unrolled
  /// (a row's 4 prefetches back to back, 6 instructions a row besides them instead of ~25),
  /// decode took 7-8 % less time in cache but 8-20 % more from DRAM on a Zen 3 host, and
  /// neither nops between the prefetches nor the loop with the row size hoisted (3-9 % slower
  /// from DRAM) won that back; why was not found (no counters there; PERFORMANCE_CPU.md,
  /// session 40).
  void step(int64_t rows) {
    visit(rows, [](const char* row, int64_t bytes) {
      for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
    });
  }
  /// The next `rows` slots in order: use(row address, its bytes) for each slot holding a row.
  template <class Use>
  void visit(int64_t rows, Use&& use) {
    const int64_t end = std::min(at + rows, slots_);
    for (int64_t i = at; i < end; ++i)
      if (const char* row = list_[i]; row != nullptr) use(row, (i & 2) ? v_bytes_ : k_bytes_);
    at = std::max(at, end);
  }
  /// Whatever the steps left.
  void finish() { step(slots_); }

  /// The next slot's row, the slot taken; an empty slot, or none left, gives spare(): a kernel
  /// that issues a few rows' lines from inside its own loop (one line per iteration, no branch)
  /// takes its rows here instead of calling step().
  const char* take() {
    const char* row = at < slots_ ? list_[at] : nullptr;
    ++at;
    return row != nullptr ? row : spare();
  }
  /// Zeros to prefetch in place of a missing row (rows of up to kSpareBytes).
  static constexpr int64_t kSpareBytes = 1024;
  static const char* spare() {
    alignas(64) static const char zeros[kSpareBytes] = {};
    return zeros;
  }
  int64_t k_bytes() const { return k_bytes_; }
  int64_t v_bytes() const { return v_bytes_; }

 private:
  const char* const* list_;
  int64_t slots_, k_bytes_, v_bytes_;
};

}  // namespace flashback::cpu_fast

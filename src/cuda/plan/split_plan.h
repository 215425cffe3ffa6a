// Split-KV planning for the short-query kernel: pure C++ (no CUDA headers), so it is testable
// anywhere. The grid is fixed on the host from shapes alone (batch, heads, page-table width,
// SM count); how many keys each split of each entry covers is decided on the device from the
// entry's own length, so CUDA-graph replay with new lengths needs no host work.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashback::cuda {

// Deterministic mode: every split covers this many keys from the entry's first visible key, so
// a request's splits (and their combine order) never depend on the rest of the batch.
constexpr int kDeterministicSplitKeys = 1024;
// Default mode: no split shorter than this (the combine and per-split prologue would dominate).
constexpr int kMinSplitKeys = 512;
constexpr int kMaxSplits = 256;

struct SplitPlan {
  int num_splits = 1;
  int split_chunk = 0;  // > 0: fixed keys per split
  bool use_workspace = false;
};

/// How the default (non-deterministic) mode sizes the grid for a kernel.
enum class SplitRule {
  // Kernels whose shapes vary more (kernel.cuh, warps splitting the output columns): about eight
  // CTAs per SM over the launch (several waves), so the tail wave is short.
  kManyWaves,
  // Kernels that hold their SM slot for the whole split (the Hopper MLA kernel, one CTA per SM;
  // the warps-split-keys kernel, up to three): the fewest splits that keep at least 90 % of the
  // SM slots (SMs x resident CTAs) of the launch's waves busy (or the best there is below that),
  // which for one long request is one wave of long splits. Each split reloads Q and adds to the
  // combine, so a few per cent of tail is not worth many more splits. On the H200 (session 6)
  // against kManyWaves for the warps-split-keys kernel: decode_b1_L128k 0.188 -> 0.159 ms,
  // decode_b8_L32k 0.299 -> 0.283, decode_b128_ragged 1.245 -> 1.216, the rest within 1.5 %.
  kOneWave,
};

/// The kOneWave split count in [1, cap]: busy fraction of k splits = ctas k / (waves sms).
inline int64_t one_wave_splits(int64_t ctas, int64_t sms, int64_t cap) {
  ctas = std::max<int64_t>(ctas, 1);
  sms = std::max<int64_t>(sms, 1);
  cap = std::max<int64_t>(cap, 1);
  auto busy = [&](int64_t k) {
    const int64_t waves = (ctas * k + sms - 1) / sms;
    return static_cast<double>(ctas * k) / static_cast<double>(waves * sms);
  };
  double best = 0;
  for (int64_t k = 1; k <= cap; ++k) best = std::max(best, busy(k));
  const double enough = std::min(0.9, best);
  for (int64_t k = 1; k <= cap; ++k)
    if (busy(k) >= enough - 1e-9) return k;
  return 1;
}

// Longest-first entry order (decode/entry.cuh, longest_first_entry): every CTA of the
// warps-split-keys kernel ranks the batch itself, so only batches up to this many entries.
constexpr int kLongestFirstMax = 252;

/// Whether the warps-split-keys kernel should take entries longest first: the grid
/// (`grid_ctas`, splits included) is deeper than the SMs' `slots` (SMs x resident CTAs), so which
/// CTAs start last decides the tail, and the batch is small enough to rank (a uniform batch
/// keeps index order: ties go by index). One wave has no tail to shape.
inline bool order_longest_first(int64_t batch, int64_t grid_ctas, int64_t slots) {
  return batch > 1 && batch <= kLongestFirstMax && grid_ctas > slots;
}

/// `max_keys`: an upper bound on any entry's key range (page-table width in keys).
/// `ctas`: CTAs of one split (entries x KV heads x row blocks). `requested`: Exec/params
/// num_splits (0 = heuristic). `resident`: the kernel's CTAs per SM (kOneWave's slots).
inline SplitPlan plan_splits(int64_t ctas, int64_t max_keys, int num_sms, int requested,
                             bool deterministic, SplitRule rule = SplitRule::kManyWaves,
                             int resident = 1) {
  SplitPlan s;
  max_keys = std::max<int64_t>(max_keys, 1);
  if (deterministic) {
    s.split_chunk = kDeterministicSplitKeys;
    s.num_splits =
        static_cast<int>((max_keys + kDeterministicSplitKeys - 1) / kDeterministicSplitKeys);
    s.use_workspace = true;  // always combine, so one split and many give the same bits
    return s;
  }
  const int64_t cap = std::min<int64_t>((max_keys + kMinSplitKeys - 1) / kMinSplitKeys, kMaxSplits);
  if (requested > 0) {
    s.num_splits = std::min(requested, kMaxSplits);
  } else if (rule == SplitRule::kOneWave) {
    s.num_splits =
        static_cast<int>(one_wave_splits(ctas, int64_t{num_sms} * std::max(resident, 1), cap));
  } else {
    // Never splits shorter than kMinSplitKeys.
    const int64_t target = 8LL * std::max(num_sms, 1);
    const int64_t want = (target + std::max<int64_t>(ctas, 1) - 1) / std::max<int64_t>(ctas, 1);
    s.num_splits = static_cast<int>(std::clamp<int64_t>(std::min(want, cap), 1, kMaxSplits));
  }
  s.use_workspace = s.num_splits > 1;
  return s;
}

}  // namespace flashback::cuda

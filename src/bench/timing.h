// Timing of one workload on a device: median of repeated runs over rotating input copies whose
// total exceeds the caches (CPU: the LLC; GPU: the 60 MB L2), so every run reads K/V from memory
// as a serving engine does, never from a cache warmed by the previous run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/workload.h"

namespace flashback::bench {

class ReadProbe;  // bench/ceilings.h

struct RunOptions {
  int threads = 0;             // CPU threads (0 = all)
  bool deterministic = false;  // Exec::deterministic
  double budget_s = 1.0;       // measuring time per workload, after the warm-up
  int min_runs = 3;
  int max_runs = 200;
  int64_t max_copy_bytes = int64_t{6} << 30;         // memory all copies together may take
  std::function<void(const std::string&)> progress;  // status line; may be empty
  // CPU: a read pass before the timed runs, after every fourth and after the last, its best
  // kept as Timing::window_read_TBps (null: none).
  ReadProbe* read_probe = nullptr;
  // CPU: likewise an FMA pass (fma_pass_TFLOPs), its best kept as Timing::window_peak_TFLOPs.
  bool peak_passes = false;
  // CPU: time one input copy over and over (K/V stay cached where they fit): compute time alone.
  bool in_cache = false;
};

struct Timing {
  double median_ms = 0, min_ms = 0;
  int runs = 0, copies = 0;
  double window_read_TBps = 0;    // best read pass among the runs (RunOptions::read_probe), or 0
  double window_peak_TFLOPs = 0;  // best FMA pass among the runs (RunOptions::peak_passes), or 0
};

/// Median of `samples` (not empty).
double median(std::vector<double> samples);

/// How many copies of `copy_bytes` each to rotate so that they exceed `cache_bytes` twice over:
/// at least 2, at most what fits in `max_bytes` (but never 0) and 64.
int copies_for(int64_t copy_bytes, int64_t cache_bytes, int64_t max_bytes);

/// How many timed runs fit the budget given one run's estimated time.
int runs_for(double estimate_s, const RunOptions& o);

/// Times the workload with flashback's CPU kernels (Exec::CpuImpl::kFast).
Timing time_cpu(const Workload& w, const RunOptions& o);

}  // namespace flashback::bench

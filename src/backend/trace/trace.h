/// @brief The serving trace (issue #5 item 3): a small engine that drives AttentionBackend the way
/// a serving engine does — requests arriving with shared prefixes, chunked prefill mixed with
/// decodes, EAGLE draft decode + TARGET_VERIFY + DRAFT_EXTEND, CUDA-graph style replay, requests
/// finishing and their rows/pages reused — with random q/k/v per token instead of a model. Every
/// attention output of every step is compared with a dense recomputation by the fp64 oracle from
/// that request's own token history.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashback/tensor.h"

namespace flashback::trace {

struct TraceOptions {
  int32_t page_size = 1;  ///< P of the KV pools (1 = token slots).
  uint64_t seed = 1;
  int32_t steps = 700;  ///< engine steps per model (a step is 1..5 forward passes).
  /// Backend CPU threads (0 = all). The trace's batches are small: one thread avoids OpenMP
  /// start/spin costs that dominate on a busy 2-core machine.
  int num_threads = 1;
  /// Test hook: after this many steps of each model, overwrite one cached key of a running
  /// request behind the backend's back; the trace must then report failures (-1 = off).
  int32_t corrupt_at_step = -1;
  /// Where the backend runs: the CPU, or a CUDA device (every tensor it reads or writes is
  /// copied there, outputs come back for the check; the models then take head dims the CUDA
  /// kernels are built for: 64, 128, 256, MLA 512 + 64 and the 192/128 chunked prefix).
  Device device{};
  /// The GPU models (those head dims) whatever the device: how a CPU test checks the models a
  /// GPU trace runs.
  bool gpu_dims = false;
};

/// Results of one (model, mode, layer kind): how many attention calls and query tokens were
/// checked, the worst errors seen and the failures.
struct KindStats {
  std::string model, mode, kind;
  int64_t calls = 0, tokens = 0, failures = 0;
  double max_abs = 0, max_rel = 0, max_lse = 0;
  std::string first_failure;
};

struct TraceReport {
  std::vector<KindStats> rows;
  int64_t forward_passes = 0;
  int64_t requests = 0;       ///< admitted
  int64_t shared_prefix = 0;  ///< admitted reusing a running request's pages
  int64_t finished = 0;       ///< finished, their rows and pages returned for reuse
  int64_t reused_rows = 0;    ///< admitted into a request row a finished request freed
  int64_t failures() const;
  /// Kinds and modes that were never exercised (a trace that skipped something is not a pass).
  std::vector<std::string> missing() const;
  /// One line per failing (model, mode, kind) with its first failure, then the missing ones;
  /// empty for a clean run (test messages).
  std::string describe() const;
};

/// Called after each engine step with (steps done, steps total).
using Progress = std::function<void(int64_t, int64_t)>;

/// Runs both models (MHA of every layer kind + EAGLE draft; MLA with chunked prefix).
TraceReport run_trace(const TraceOptions& o, const Progress& progress = {});

}  // namespace flashback::trace

// Results of a bench run: one row per workload (shaped like shared/bench/peers.py's JSON rows),
// the ceilings they are judged against, a table for people and a JSON document for compare.py.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "bench/cost.h"
#include "bench/timing.h"

namespace flashback::bench {

struct Row {
  std::string workload;
  Cost cost;
  Timing timing;
  double TBps = 0, TFLOPs = 0;
  std::string bound;  // "memory" or "compute": the ceiling this workload is judged against
  double pct = 0;     // % of that ceiling
  // CPU rows timed with passes of their ceiling among their runs (read passes: memory-bound;
  // FMA passes: compute-bound): % of the best of those passes (the ceiling of the same minutes;
  // 0 when not measured).
  double pct_window = 0;
  std::string error;  // non-empty: the workload could not run (the reason)
};

/// Fills TBps, TFLOPs, bound and pct from cost and timing. A workload is memory-bound when its
/// arithmetic intensity (FLOPs per byte) is below the ridge point peak / bandwidth.
Row make_row(const std::string& name, const Cost& cost, const Timing& t, const Ceilings& c);

/// Whether a workload of this cost is compute-bound against these ceilings (its FLOPs per byte
/// at or past the ridge point), as make_row sets Row::bound.
bool compute_bound(const Cost& cost, const Ceilings& c);

/// The commit this build was configured from (`git describe --always --dirty`).
std::string build_commit();

struct RunInfo {
  std::string device_kind;  // "cpu" or "cuda"
  std::string workloads_file;
  std::string commit;  // flashback's git commit at build time
  std::string date;    // UTC, ISO 8601
  int threads = 0;
  bool deterministic = false;
  bool in_cache = false;  // one input copy reused (RunOptions::in_cache)
};

void print_table(std::ostream& os, const RunInfo& info, const Ceilings& c,
                 const std::vector<Row>& rows);

/// {"device", "peer": "flashback", "ceilings": {...}, "rows": [{workload, peer, ms, TBps, TFLOPs,
/// ...}], "failed": [{workload, error}]}: rows read like peers.py's.
std::string to_json(const RunInfo& info, const Ceilings& c, const std::vector<Row>& rows);

}  // namespace flashback::bench

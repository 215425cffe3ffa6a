#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "build_commit.h"  // FLASHBACK_GIT_COMMIT, written at build time

namespace flashback::bench {

std::string build_commit() { return FLASHBACK_GIT_COMMIT; }

bool compute_bound(const Cost& cost, const Ceilings& c) {
  const double ridge = c.read_TBps > 0 ? c.peak_TFLOPs / c.read_TBps : 0;  // FLOP per byte
  const double intensity = cost.bytes > 0 ? static_cast<double>(cost.flops) / cost.bytes : 1e30;
  return c.peak_TFLOPs > 0 && intensity >= ridge;
}

Row make_row(const std::string& name, const Cost& cost, const Timing& t, const Ceilings& c) {
  Row r;
  r.workload = name;
  r.cost = cost;
  r.timing = t;
  if (t.median_ms > 0) {
    // Same units as peers.py: bytes / ms / 1e9 = TB/s, flops / ms / 1e9 = TFLOP/s.
    r.TBps = static_cast<double>(cost.bytes) / t.median_ms / 1e9;
    r.TFLOPs = static_cast<double>(cost.flops) / t.median_ms / 1e9;
  }
  if (!compute_bound(cost, c)) {
    r.bound = "memory";
    r.pct = c.read_TBps > 0 ? 100.0 * r.TBps / c.read_TBps : 0;
    if (t.window_read_TBps > 0) r.pct_window = 100.0 * r.TBps / t.window_read_TBps;
  } else {
    r.bound = "compute";
    r.pct = 100.0 * r.TFLOPs / c.peak_TFLOPs;
    if (t.window_peak_TFLOPs > 0) r.pct_window = 100.0 * r.TFLOPs / t.window_peak_TFLOPs;
  }
  return r;
}

namespace {

// Four significant digits in fixed notation: CPU TB/s are ~1e-4, GPU ms ~1e-2, prefill ms ~1e3.
std::string sig4(double v) {
  if (!(v > 0) || !std::isfinite(v)) return v == 0 ? "0" : "-";
  const int decimals = std::clamp(3 - static_cast<int>(std::floor(std::log10(v))), 0, 9);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

void print_table(std::ostream& os, const RunInfo& info, const Ceilings& c,
                 const std::vector<Row>& rows) {
  char line[512];
  os << "# flashback bench  device " << info.device_kind << ": " << c.device << "  commit "
     << info.commit << "  " << info.date << (info.deterministic ? "  deterministic" : "")
     << (info.in_cache ? "  in-cache (one input copy, reused: compute time, not bandwidth)" : "")
     << "\n";
  std::snprintf(line, sizeof line, "# ceilings: read %.4g TB/s (%s); peak %.4g TFLOP/s (%s)\n",
                c.read_TBps, c.read_method.c_str(), c.peak_TFLOPs, c.peak_method.c_str());
  os << line;
  // %win: CPU rows against the best read pass (memory-bound) or FMA pass (compute-bound) run
  // among their own timed runs.
  bool window = false;
  for (const Row& r : rows) window = window || r.pct_window > 0;
  std::snprintf(line, sizeof line, "%-26s %10s %10s %10s %8s %7s %5s %4s%s\n", "workload", "ms",
                "TB/s", "TFLOP/s", "bound", "%ceil", "runs", "copy", window ? "   %win" : "");
  os << line;
  int failed = 0;
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      ++failed;
      os << std::string(r.workload).append(26 > r.workload.size() ? 26 - r.workload.size() : 0, ' ')
         << " unsupported: " << r.error << "\n";
      continue;
    }
    std::snprintf(line, sizeof line, "%-26s %10s %10s %10s %8s %6.1f%% %5d %4d", r.workload.c_str(),
                  sig4(r.timing.median_ms).c_str(), sig4(r.TBps).c_str(), sig4(r.TFLOPs).c_str(),
                  r.bound.c_str(), r.pct, r.timing.runs, r.timing.copies);
    os << line;
    if (r.pct_window > 0) {
      std::snprintf(line, sizeof line, " %6.1f%%", r.pct_window);
      os << line;
    } else if (window) {
      os << "       -";
    }
    os << "\n";
  }
  os << rows.size() - failed << " ran, " << failed << " unsupported\n";
}

std::string to_json(const RunInfo& info, const Ceilings& c, const std::vector<Row>& rows) {
  using nlohmann::json;
  json doc;
  doc["device"] = c.device;
  doc["device_kind"] = info.device_kind;
  doc["peer"] = "flashback";
  doc["commit"] = info.commit;
  doc["date"] = info.date;
  doc["workloads_file"] = info.workloads_file;
  doc["threads"] = info.threads;
  doc["deterministic"] = info.deterministic;
  doc["in_cache"] = info.in_cache;
  doc["ceilings"] = {{"read_TBps", c.read_TBps},
                     {"peak_TFLOPs", c.peak_TFLOPs},
                     {"read_method", c.read_method},
                     {"peak_method", c.peak_method}};
  json ok = json::array(), failed = json::array();
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      failed.push_back({{"workload", r.workload}, {"error", r.error}});
      continue;
    }
    ok.push_back({{"workload", r.workload},
                  {"peer", "flashback"},
                  {"ms", r.timing.median_ms},
                  {"TBps", r.TBps},
                  {"TFLOPs", r.TFLOPs},
                  {"min_ms", r.timing.min_ms},
                  {"runs", r.timing.runs},
                  {"copies", r.timing.copies},
                  {"bytes", r.cost.bytes},
                  {"flops", r.cost.flops},
                  {"bound", r.bound},
                  {"pct_of_ceiling", r.pct}});
    if (r.pct_window > 0) {
      if (r.bound == "memory")
        ok.back()["window_read_TBps"] = r.timing.window_read_TBps;
      else
        ok.back()["window_peak_TFLOPs"] = r.timing.window_peak_TFLOPs;
      ok.back()["pct_of_window_ceiling"] = r.pct_window;
    }
  }
  doc["rows"] = ok;
  doc["failed"] = failed;
  return doc.dump(1) + "\n";
}

}  // namespace flashback::bench

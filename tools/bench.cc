// `flashback bench`: times the standard workloads (bench/workloads.json) on the CPU or a GPU,
// against ceilings measured on the same machine, and prints a table (stdout) and optionally JSON
// rows shaped like shared/bench/peers.py's so bench/compare.py can put peers side by side.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "bench/cost.h"
#include "bench/cuda_bench.h"
#include "bench/report.h"
#include "bench/timing.h"
#include "bench/workload.h"
#include "commands.h"
#include "flashback/error.h"

namespace flashback::tools {
namespace {

void usage() {
  std::printf(
      "usage: flashback bench [--device cpu|cuda] [--workloads FILE] [--only NAMES] [--json OUT]\n"
      "                       [--deterministic] [--threads N] [--budget SECONDS] [--in-cache]\n"
      "  --device         cpu (default) runs the file's \"cpu\" workloads, cuda its \"gpu\" ones\n"
      "  --workloads      workloads file (default: %s)\n"
      "  --only           comma-separated workload names\n"
      "  --json           write the results, ceilings and device as JSON to OUT\n"
      "  --deterministic  batch-invariant kernels (Exec::deterministic)\n"
      "  --threads        CPU threads (default: all)\n"
      "  --budget         measuring time per workload after warm-up (default 1 s CPU, 0.5 s GPU)\n"
      "  --in-cache       cpu: one input copy, reused, so K/V stay in the caches where they fit\n"
      "                   (the kernels' compute time; not a bandwidth figure)\n"
      "Times are medians of repeated runs over rotating input copies larger than the caches.\n"
      "Exit status: 0 when every workload ran, 1 when some could not (listed as unsupported).\n",
      bench::default_workloads_path().c_str());
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int to_int(const std::string& flag, const std::string& v, int lo) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > 1 << 20)
    throw Error(flag, "an integer >= " + std::to_string(lo), "'" + v + "'");
  return static_cast<int>(x);
}

}  // namespace

int run_bench(int argc, char** argv) {
  std::string device = "cpu", file, only, json_out;
  bench::RunOptions opt;
  double budget = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(a, "a value after it", "the end of the arguments");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else if (a == "--device") {
      device = value();
      if (device != "cpu" && device != "cuda") throw Error("--device", "cpu or cuda", device);
    } else if (a == "--workloads") {
      file = value();
    } else if (a == "--only") {
      only = value();
    } else if (a == "--json") {
      json_out = value();
    } else if (a == "--deterministic") {
      opt.deterministic = true;
    } else if (a == "--threads") {
      opt.threads = to_int("--threads", value(), 0);
    } else if (a == "--in-cache") {
      opt.in_cache = true;
    } else if (a == "--budget") {
      const std::string v = value();
      char* end = nullptr;
      budget = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(budget > 0 && budget < 3600))
        throw Error("--budget", "seconds in (0, 3600)", "'" + v + "'");
    } else {
      throw Error("flashback bench", "an option from --help", "'" + a + "'");
    }
  }
  const bool gpu = device == "cuda";
  if (gpu && opt.in_cache) throw Error("--in-cache", "--device cpu", "--device cuda");
  if (gpu && !bench::cuda_built()) bench::measure_cuda_ceilings();  // throws the clear error
  if (file.empty()) file = bench::default_workloads_path();
  const auto workloads =
      bench::select_workloads(bench::load_workloads(file, gpu ? "gpu" : "cpu"), only);
  if (gpu) {
    opt.budget_s = budget > 0 ? budget : 0.5;
    opt.min_runs = 10;
    opt.max_runs = 1000;
    opt.max_copy_bytes = int64_t{40} << 30;
  } else {
    opt.budget_s = budget > 0 ? budget : 1.0;
  }

  // Progress goes to stderr and only to a terminal, so redirected output stays clean.
  const bool tty = isatty(STDERR_FILENO);
  std::string current;
  int index = 0;
  auto last = std::chrono::steady_clock::now();
  opt.progress = [&](const std::string& s) {
    if (!tty) return;
    // Run counters come fast; redraw them at most 10 times a second.
    const auto now = std::chrono::steady_clock::now();
    if (s.rfind("run ", 0) == 0 && now - last < std::chrono::milliseconds(100)) return;
    last = now;
    std::fprintf(stderr, "\r\033[K[%d/%zu] %s: %s", index, workloads.size(), current.c_str(),
                 s.c_str());
    std::fflush(stderr);
  };

  current = "ceilings";
  opt.progress("measuring");
  const bench::Ceilings ceil =
      gpu ? bench::measure_cuda_ceilings() : bench::measure_cpu_ceilings(opt.threads);

  // CPU: read passes among each workload's runs (bench/timing.h), against a busy host's drift.
  std::unique_ptr<bench::ReadProbe> probe;
  if (!gpu && !opt.in_cache) {  // (the passes would evict what --in-cache keeps cached)
    probe = std::make_unique<bench::ReadProbe>(opt.threads, bench::cpu_llc_bytes());
    opt.read_probe = probe.get();
  }
  std::vector<bench::Row> rows;
  for (const auto& w : workloads) {
    ++index;
    current = w.name;
    const bench::Cost cost = bench::cost(w);
    if (probe) {  // passes of the workload's own ceiling among its runs (%win)
      const bool compute = bench::compute_bound(cost, ceil);
      opt.read_probe = compute ? nullptr : probe.get();
      opt.peak_passes = compute;
    }
    try {
      const bench::Timing t = gpu ? bench::time_cuda(w, opt) : bench::time_cpu(w, opt);
      rows.push_back(bench::make_row(w.name, cost, t, ceil));
    } catch (const Error& e) {
      // One workload the build cannot run (a head dim not instantiated, no GPU kernel yet) is
      // reported and the rest still run.
      bench::Row r;
      r.workload = w.name;
      r.cost = cost;
      r.error = e.what();
      rows.push_back(r);
    } catch (const std::bad_alloc&) {
      // The copies of a large workload may not fit this machine; the smaller ones still run.
      bench::Row r;
      r.workload = w.name;
      r.cost = cost;
      r.error = "out of host memory building its inputs";
      rows.push_back(r);
    }
  }
  if (tty) std::fprintf(stderr, "\r\033[K");

  bench::RunInfo info;
  info.device_kind = device;
  info.workloads_file = file;
  info.commit = bench::build_commit();
  info.date = utc_now();
  info.threads = opt.threads;
  info.deterministic = opt.deterministic;
  info.in_cache = opt.in_cache;
  bench::print_table(std::cout, info, ceil, rows);
  if (!json_out.empty()) {
    std::ofstream out(json_out);
    if (!out) throw Error("--json", "a writable file", json_out);
    out << bench::to_json(info, ceil, rows);
  }
  for (const auto& r : rows)
    if (!r.error.empty()) return 1;
  return 0;
}

}  // namespace flashback::tools

#include "bench/timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench/ceilings.h"
#include "bench/inputs.h"

namespace flashback::bench {

double median(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

int copies_for(int64_t copy_bytes, int64_t cache_bytes, int64_t max_bytes) {
  copy_bytes = std::max<int64_t>(copy_bytes, 1);
  int64_t n = std::max<int64_t>(2, (2 * cache_bytes + copy_bytes - 1) / copy_bytes);
  n = std::min<int64_t>({n, 64, std::max<int64_t>(1, max_bytes / copy_bytes)});
  return static_cast<int>(n);
}

int runs_for(double estimate_s, const RunOptions& o) {
  const double n = estimate_s > 0 ? std::floor(o.budget_s / estimate_s) : o.max_runs;
  return static_cast<int>(std::clamp<double>(n, o.min_runs, o.max_runs));
}

Timing time_cpu(const Workload& w, const RunOptions& o) {
  using clock = std::chrono::steady_clock;
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  Exec exec;
  exec.num_threads = o.threads;
  exec.deterministic = o.deterministic;
  exec.cpu_impl = Exec::CpuImpl::kFast;

  say("building inputs");
  std::vector<Inputs> copies;
  copies.push_back(make_inputs(w, 1));
  const int n = o.in_cache ? 1 : copies_for(copies[0].nbytes(), cpu_llc_bytes(), o.max_copy_bytes);
  for (int i = 1; i < n; ++i) copies.push_back(make_inputs(w, 1 + static_cast<uint64_t>(i)));

  auto run = [&](const Inputs& in) {
    const auto t0 = clock::now();
    if (in.ragged) {
      ragged_attention(in.rag.params, exec);
    } else {
      paged_attention(in.paged.params, exec);
    }
    return std::chrono::duration<double>(clock::now() - t0).count();
  };

  // Warm-up (thread pool start, code paths) that also estimates a run. The fill already touched
  // every page of every copy, so a few runs suffice.
  say("warm-up");
  double warm = 0;
  for (size_t i = 0; i < std::min<size_t>(copies.size(), 3); ++i) warm = run(copies[i]);
  const int runs = runs_for(warm, o);
  std::vector<double> ms;
  double window_read = 0, window_peak = 0;
  auto ceiling_pass = [&] {  // the passes of RunOptions::read_probe / peak_passes
    if (o.read_probe) window_read = std::max(window_read, o.read_probe->pass_TBps());
    if (o.peak_passes) window_peak = std::max(window_peak, fma_pass_TFLOPs(o.threads));
  };
  ceiling_pass();
  for (int r = 0; r < runs; ++r) {
    if (r % 8 == 0) say("run " + std::to_string(r + 1) + "/" + std::to_string(runs));
    ms.push_back(1e3 * run(copies[static_cast<size_t>(r) % copies.size()]));
    if (r % 4 == 3 || r == runs - 1) ceiling_pass();
  }
  Timing t;
  t.window_read_TBps = window_read;
  t.window_peak_TFLOPs = window_peak;
  t.median_ms = median(ms);
  t.min_ms = *std::min_element(ms.begin(), ms.end());
  t.runs = runs;
  t.copies = n;
  return t;
}

}  // namespace flashback::bench

// The ceilings a workload's time is judged against, measured on the machine the bench runs on:
// memory read bandwidth and the arithmetic peak (CPU: fp32 FMA; GPU: bf16 tensor-core GEMM).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace flashback::bench {

struct Ceilings {
  std::string device;       // e.g. "AMD EPYC (2 threads)", "NVIDIA H200"
  double read_TBps = 0;     // streaming read bandwidth, all threads / the whole GPU
  double peak_TFLOPs = 0;   // arithmetic peak
  std::string read_method;  // how read_TBps was measured
  std::string peak_method;  // how peak_TFLOPs was measured
};

/// A parallel streaming read of a buffer of 8x the LLC (256 MiB to 1 GiB), one pass at a time.
/// The read ceiling is the best of several passes; the bench also runs a pass between a
/// workload's timed runs (RunOptions::read_probe), so that on a host whose neighbours come and go
/// the workload's bandwidth can be set against the bandwidth of the same minutes.
class ReadProbe {
 public:
  ReadProbe(int threads, int64_t llc);
  /// One pass over the buffer, in TB/s (0 if the buffer could not be allocated).
  double pass_TBps();

 private:
  int threads_;
  int64_t bytes_;
  std::unique_ptr<uint64_t, void (*)(void*)> buf_;
};

/// One pass of the FMA peak's kernel (measure_cpu_ceilings) with `threads` threads (0 = all), in
/// TFLOP/s, ~40 ms: the bench runs it among a compute-bound workload's timed runs
/// (RunOptions::peak_passes), as ReadProbe's passes among a memory-bound one's.
double fma_pass_TFLOPs(int threads);

/// Largest CPU cache (the LLC) in bytes, from sysfs; a conservative 64 MiB when unknown.
int64_t cpu_llc_bytes();

/// Measures the CPU ceilings with `threads` threads (0 = all). Takes about a second.
Ceilings measure_cpu_ceilings(int threads);

}  // namespace flashback::bench

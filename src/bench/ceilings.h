// The ceilings a workload's time is judged against, measured on the machine the bench runs on:
// memory read bandwidth and the arithmetic peak (CPU: fp32 FMA; GPU: bf16 tensor-core GEMM).
#pragma once

#include <cstdint>
#include <string>

namespace flashback::bench {

struct Ceilings {
  std::string device;       // e.g. "AMD EPYC (2 threads)", "NVIDIA H200"
  double read_TBps = 0;     // streaming read bandwidth, all threads / the whole GPU
  double peak_TFLOPs = 0;   // arithmetic peak
  std::string read_method;  // how read_TBps was measured
  std::string peak_method;  // how peak_TFLOPs was measured
};

/// Largest CPU cache (the LLC) in bytes, from sysfs; a conservative 64 MiB when unknown.
int64_t cpu_llc_bytes();

/// Measures the CPU ceilings with `threads` threads (0 = all). Takes about a second.
Ceilings measure_cpu_ceilings(int threads);

}  // namespace flashback::bench

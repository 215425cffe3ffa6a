#include "bench/ceilings.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/inputs.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FLASHBACK_BENCH_X86 1
#endif

namespace flashback::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "CPU";
}

// Read bandwidth: every thread sums its share of a buffer far larger than the LLC. Integer
// sums are associative, so the compiler vectorises the loop without -ffast-math; the result is
// kept so the loads cannot be removed. The best of several passes, as STREAM reports.
double measure_read_TBps(int threads, int64_t llc) {
  ReadProbe probe(threads, llc);
  double best = 0;
  for (int pass = 0; pass < 8; ++pass) best = std::max(best, probe.pass_TBps());
  return best;
}

// FMA peak: each thread runs independent accumulator chains, enough to cover the FMA latency
// on every pipe (Zen 3 / Skylake: 2 pipes x 4-5 cycles -> 10+ chains), so the loop is bound by
// FMA throughput alone. Returns flops per call; the accumulators go to `sink`.
constexpr int64_t kFmaIters = 1 << 24;  // ~40 ms per pass at 2 FMA/cycle: timer noise is negligible

#ifdef FLASHBACK_BENCH_X86
__attribute__((target("avx512f"))) double fma_loop_avx512(float* sink) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kFmaIters; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  alignas(64) float lanes[16];  // (_mm512_reduce_add_ps trips a GCC 12 -Wuninitialized)
  _mm512_store_ps(lanes, s);
  for (float x : lanes) *sink += x;
  return 2.0 * 16 * 12 * kFmaIters;
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(float* sink) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j) * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kFmaIters; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  for (float x : lanes) *sink += x;
  return 2.0 * 8 * 12 * kFmaIters;
}
#endif

// Portable fallback: 4-wide vectors, multiply-add (the compiler fuses it where it can).
double fma_loop_generic(float* sink) {
  typedef float v4 __attribute__((vector_size(16)));
  v4 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = v4{} + static_cast<float>(j) * 1e-3f;
  const v4 m = v4{} + 0.999999f, c = v4{} + 1e-7f;
  for (int64_t i = 0; i < kFmaIters; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = acc[j] * m + c;
  for (int j = 0; j < 12; ++j)
    for (int l = 0; l < 4; ++l) *sink += acc[j][l];
  return 2.0 * 4 * 12 * kFmaIters;
}

struct FmaKernel {
  double (*fn)(float*);
  const char* name;
};

FmaKernel pick_fma() {
#ifdef FLASHBACK_BENCH_X86
  if (__builtin_cpu_supports("avx512f")) return {fma_loop_avx512, "AVX-512 FMA"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {fma_loop_avx2, "AVX2 FMA"};
#endif
  return {fma_loop_generic, "4-wide multiply-add"};
}

double fma_pass(int threads, const FmaKernel& k) {
  double flops = 0;
  float sink = 0;
  const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : flops, sink)
  { flops += k.fn(&sink); }
  const double dt = now_s() - t0;
  if (sink == 12345.f) flops += 1;  // keeps the result observable
  return flops / dt / 1e12;
}

double measure_fma_TFLOPs(int threads, const FmaKernel& k) {
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) best = std::max(best, fma_pass(threads, k));
  return best;
}

}  // namespace

ReadProbe::ReadProbe(int threads, int64_t llc)
    : threads_(threads > 0 ? threads : omp_get_max_threads()),
      bytes_(std::clamp<int64_t>(8 * llc, int64_t{256} << 20, int64_t{1} << 30)),
      buf_(static_cast<uint64_t*>(std::aligned_alloc(64, static_cast<size_t>(bytes_))),
           &std::free) {
  if (!buf_) return;
  uint64_t* a = buf_.get();
  const int64_t n = bytes_ / 8;
  advise_huge_pages(a, bytes_);
  // First touch by the threads that read, so pages sit near them on NUMA machines.
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<uint64_t>(i);
}

double ReadProbe::pass_TBps() {
  if (!buf_) return 0;
  const uint64_t* a = buf_.get();
  const int64_t n = bytes_ / 8;
  static volatile uint64_t sink = 0;
  uint64_t total = 0;
  const double t0 = now_s();
#pragma omp parallel for num_threads(threads_) schedule(static) reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += a[i];
  const double dt = now_s() - t0;
  sink = sink + total;
  return static_cast<double>(bytes_) / dt / 1e12;
}

double fma_pass_TFLOPs(int threads) {
  return fma_pass(threads > 0 ? threads : omp_get_max_threads(), pick_fma());
}

int64_t cpu_llc_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(in >> s) || s.empty()) continue;
    int64_t v = std::atoll(s.c_str());
    const char unit = s.back();
    if (unit == 'K') v <<= 10;
    if (unit == 'M') v <<= 20;
    if (unit == 'G') v <<= 30;
    best = std::max(best, v);
  }
  return best > 0 ? best : int64_t{64} << 20;
}

Ceilings measure_cpu_ceilings(int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  Ceilings c;
  c.device = cpu_model() + " (" + std::to_string(threads) + " threads)";
  c.read_TBps = measure_read_TBps(threads, cpu_llc_bytes());
  c.read_method = "parallel integer sum over a buffer of 8x LLC (best of 8)";
  const FmaKernel k = pick_fma();
  c.peak_TFLOPs = measure_fma_TFLOPs(threads, k);
  c.peak_method = std::string("fp32 ") + k.name + ", 12 register-blocked chains per thread";
  return c;
}

}  // namespace flashback::bench

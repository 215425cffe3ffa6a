// CPU kernel benchmark: measures this machine's ceilings (STREAM-like memory read bandwidth, fp32
// FMA peak) and times the fast CPU paged attention on the `cpu` workloads of
// bench/workloads.json, counting bytes and FLOPs as its "about" says (K/V read once; FLOPs
// 2·Hq·visible keys·(D + Dv) per query token). Pages are placed randomly (make_paged).
// Prints a table on stdout; --json FILE writes rows shaped like peers.py's.
//
//   bench_cpu_kernels [--threads N] [--reps R] [--json FILE] [--only NAME_PART]
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "flashback/numeric.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace {

using flashback::DType;
using flashback::Tensor;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds used by the whole process (all threads). On a shared machine the wall clock
// measures the time slices we were given; rates per CPU-second ("per busy core") do not depend
// on them, so the bench reports both. Run with OMP_WAIT_POLICY=passive so waiting threads sleep
// instead of spinning (spinning would count as busy CPU).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Rate {
  double wall = 0, per_cpu = 0;  // per second of wall time; per CPU-second
};

// Read bandwidth: every thread streams its share of a buffer far larger than the caches and
// sums it (so the loads cannot be elided). Best of several passes, like STREAM.
__attribute__((target("avx2"))) double sum_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float r[8];
  _mm256_store_ps(r, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  double s = 0;
  for (float x : r) s += x;
  return s;
}

void advise_huge(const Tensor& t);

Rate read_bandwidth_gbs(int threads) {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of floats
  Tensor buf(DType::kF32, {n});
  advise_huge(buf);
  float* p = buf.ptr<float>();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
  Rate best;
  double sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const int64_t per = n / omp_get_num_threads() / 32 * 32;
      sink += sum_avx2(p + per * omp_get_thread_num(), per);
    }
    const double wall = seconds_since(t0), cpu = cpu_seconds() - c0;
    best.wall = std::max(best.wall, double(n) * 4 / wall / 1e9);
    best.per_cpu = std::max(best.per_cpu, double(n) * 4 / cpu / 1e9);
  }
  if (sink < 0) std::printf("%f\n", sink);
  return best;
}

// FMA peak: 12 independent accumulator chains per thread cover the FMA latency × throughput.
__attribute__((target("avx2,fma"))) float fma_loop(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  float s = 0;
  for (int i = 0; i < 12; ++i) s += _mm256_cvtss_f32(acc[i]);
  return s;
}

// The same with 512-bit vectors: the kernels run Highway's AVX-512 target where it exists, so
// that is their ceiling there.
__attribute__((target("avx512f"))) float fma_loop512(int64_t iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  float s = 0;
  for (int i = 0; i < 12; ++i) s += _mm512_cvtss_f32(acc[i]);
  return s;
}

Rate fma_peak_gflops(int threads, bool wide) {
  const int64_t iters = 50'000'000;
  Rate best;
  double sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += wide ? fma_loop512(iters) : fma_loop(iters);
    const double flop = double(iters) * 12 * (wide ? 16 : 8) * 2 * threads;
    best.wall = std::max(best.wall, flop / seconds_since(t0) / 1e9);
    best.per_cpu = std::max(best.per_cpu, flop / (cpu_seconds() - c0) / 1e9);
  }
  if (sink < 0) std::printf("%f\n", sink);
  return best;
}

struct Workload {
  const char* name;
  bool decode;
  int batch, q_len, ctx, heads_q, heads_kv, head_dim, page_size;
};

// The "cpu" section of bench/workloads.json (bf16 q and KV, causal).
const Workload kWorkloads[] = {
    {"cpu_decode_b4_L4k", true, 4, 1, 4096, 32, 8, 128, 16},
    {"cpu_decode_b1_L32k", true, 1, 1, 32768, 32, 8, 128, 16},
    {"cpu_prefill_1x2k", false, 1, 2048, 2048, 32, 8, 128, 16},
    {"cpu_extend_b4_p2k_e128", false, 4, 128, 2176, 32, 8, 128, 16},
};

// Engines allocate KV pools with huge pages where they can; without them every 2 KB key row of
// a head-strided cache costs a TLB miss. Asks for them on t's whole 2 MiB pages (before first
// touch); applied to the bandwidth buffer too so the ceiling is measured the same way.
void advise_huge(const Tensor& t) {
  const auto lo =
      (reinterpret_cast<uintptr_t>(t.data()) + (2u << 20) - 1) & ~uintptr_t{(2u << 20) - 1};
  const auto hi = (reinterpret_cast<uintptr_t>(t.data()) + t.nbytes()) & ~uintptr_t{(2u << 20) - 1};
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

// Fast fill with roughly unit-variance values (xorshift; Box-Muller is needlessly slow for GiBs).
void fill_fast(Tensor& t, uint64_t seed) {
  const int64_t n = t.numel();
#pragma omp parallel
  {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1 + uint64_t(omp_get_thread_num()) * 7919;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      const float x = float(int64_t(s >> 40) - (int64_t{1} << 23)) * (1.7f / float(1 << 23));
      if (t.dtype() == DType::kBF16)
        t.ptr<uint16_t>()[i] = flashback::f32_to_bf16(x);
      else
        t.set(i, x);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads(), reps = 10;
  const char* json = nullptr;
  const char* only = nullptr;  // run only workloads whose name contains this
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--json")) json = argv[i + 1];
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "the ceiling measurements need AVX2 + FMA\n");
    return 1;
  }
  const Rate bw = read_bandwidth_gbs(threads);
  // The kernels are built without Highway's AVX-512 targets for now (src/cpu/sources.cmake),
  // so their ceiling is the AVX2 FMA peak even on AVX-512 machines.
  const bool wide = false;
  const Rate peak = fma_peak_gflops(threads, wide);
  std::printf(
      "threads %d\nmemory read bandwidth %.1f GB/s (%.1f per busy core)\n"
      "fp32 FMA peak (%s) %.1f GFLOP/s (%.1f per busy core)\n\n",
      threads, bw.wall, bw.per_cpu, wide ? "AVX-512" : "AVX2", peak.wall, peak.per_cpu);
  std::printf("%-24s %9s %9s %8s %9s %8s %8s %8s\n", "workload", "ms (min)", "ms (med)", "GB/s",
              "GFLOP/s", "ceiling", "cpu ms", "ceil/cpu");
  std::FILE* js = json ? std::fopen(json, "w") : nullptr;
  if (js) std::fprintf(js, "[\n");
  bool first = true;
  for (const Workload& w : kWorkloads) {
    if (only && !std::strstr(w.name, only)) continue;
    flashback::testing::AttentionCase c;
    c.name = w.name;
    c.q_lens.assign(w.batch, w.q_len);
    c.kv_lens.assign(w.batch, w.ctx);
    c.heads_q = w.heads_q;
    c.heads_kv = w.heads_kv;
    c.head_dim = w.head_dim;
    c.page_size = w.page_size;
    c.dtype = c.kv_dtype = DType::kBF16;
    c.fill_values = false;
    auto d = flashback::testing::make_paged(c, 1);
    advise_huge(d.k_cache);
    advise_huge(d.v_cache);
    fill_fast(d.q, 2);
    fill_fast(d.k_cache, 3);
    fill_fast(d.v_cache, 4);
    const flashback::Exec exec{nullptr, threads, flashback::Exec::CpuImpl::kFast};
    flashback::paged_attention(d.params, exec);  // warm-up
    std::vector<double> ms;
    const double c0 = cpu_seconds();
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      flashback::paged_attention(d.params, exec);
      ms.push_back(seconds_since(t0) * 1e3);
    }
    const double cpu_ms = (cpu_seconds() - c0) * 1e3 / reps;  // CPU ms per call, all threads
    std::sort(ms.begin(), ms.end());
    const double best = ms.front(), med = ms[ms.size() / 2];
    // Bytes: K and V rows of every key once. FLOPs: 2·Hq·visible·(D + Dv) per query token.
    double bytes = 0, flops = 0;
    for (int b = 0; b < w.batch; ++b) {
      bytes += double(w.ctx) * w.heads_kv * (2.0 * w.head_dim) * 2;
      for (int i = 0; i < w.q_len; ++i)
        flops += 2.0 * w.heads_q * (w.ctx - w.q_len + i + 1) * (2.0 * w.head_dim);
    }
    const double gbs = bytes / (med * 1e-3) / 1e9, gflops = flops / (med * 1e-3) / 1e9;
    const double frac = w.decode ? gbs / bw.wall : gflops / peak.wall;
    // The same fraction per busy core: work per CPU-second against the ceiling per CPU-second.
    const double work = w.decode ? bytes : flops;
    const double frac_cpu = work / (cpu_ms * 1e-3) / 1e9 / (w.decode ? bw.per_cpu : peak.per_cpu);
    std::printf("%-24s %9.3f %9.3f %8.1f %9.1f %7.0f%% %8.2f %7.0f%%\n", w.name, best, med, gbs,
                gflops, 100 * frac, cpu_ms, 100 * frac_cpu);
    if (js)
      std::fprintf(js,
                   "%s  {\"workload\": \"%s\", \"peer\": \"flashback\", \"ms\": %.4f, \"TBps\": "
                   "%.5f, \"TFLOPs\": %.5f, \"threads\": %d, \"ceiling_fraction\": %.3f, "
                   "\"cpu_ms\": %.4f, \"ceiling_fraction_per_cpu\": %.3f}",
                   first ? "" : ",\n", w.name, med, gbs / 1e3, gflops / 1e3, threads, frac, cpu_ms,
                   frac_cpu);
    first = false;
  }
  if (js) {
    std::fprintf(js, "\n]\n");
    std::fclose(js);
  }
  std::printf(
      "\nceiling: decode = GB/s / read bandwidth, prefill/extend = GFLOP/s / FMA peak (wall "
      "clock);\nceil/cpu: the same per CPU-second (time slices on a shared machine factored "
      "out; use OMP_WAIT_POLICY=passive)\n");
  return 0;
}

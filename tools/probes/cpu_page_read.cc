// How fast one CPU core reads paged K/V while computing on it: the CPU decode's memory pattern
// (pages of 16 keys x 8 KV heads x 256-byte bf16 rows = 32 KB each, placed at random) read in
// order within each page, F fp32 FMAs per 64-byte line on the widened bf16 values (decode does
// ~8 FMAs per line, but its whole score and P·V path costs about what F = 24 costs here), with a
// software prefetch `dist` bytes ahead in the read order. Standalone (not part of the build):
//   g++ -O3 -march=native -fopenmp tools/probes/cpu_page_read.cc -o cpr
//   OMP_NUM_THREADS=1 ./cpr F MODE DIST [IN_CACHE [S]]
// F in {0, 8, 12, 16, 24}; MODE 0 none, 1 T0, 2 T1, 3 T2; DIST bytes; IN_CACHE = 1 reads a 1 MB
// buffer (the compute rate alone), else 1.5 GB with huge pages (as flashback bench's inputs).
// S > 1 (session 30): pages in groups of S; MODE 0 reads a group's pages side by side, a line of
// each in turn; MODE 4 reads them page after page while prefetching (T1) the next group's pages
// side by side, a 256-byte row of each in turn, one line per line read (decode's NextRows).
// Each thread reads every T-th page. Prints GB/s (best of 3 passes).
// Session 29's Intel host (PERFORMANCE_CPU.md): one core, no compute 11.5-12.7 GB/s whatever the
// prefetch; F = 8 with T1 4 KB ahead 12.2; F = 24 (in cache 14.9) 4.7 without prefetch, 9.4-9.6
// with T0/T1/T2 at any distance from 4 to 32 KB.
// Session 30, same host class, two threads, alternated (the host read 25-27 GB/s): MODE 4 with
// S = 4 (decode's pattern since session 30) 23.8-25.3 GB/s at F = 0 and 18.4-20.5 at F = 24,
// against 15.9-16.5 for a T1 prefetch one page ahead (MODE 2, DIST 32768) at F = 24; plain reads,
// no prefetch: 20.9-21.5 at F = 0 (S = 1), 17.7-17.9 at F = 24 side by side over S = 8 pages.
// Session 31, a Zen 1 host (AVX2 consumer), two threads: F = 0 15.4-15.9; F = 8 11.0-13.8 with
// MODE 4 S = 4; F = 12 9.3 in page order without prefetch, 9.6 with T0 1-4 KB ahead, 5.1-5.8
// with MODE 4 S = 4 (10.2 in cache).
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

namespace {

constexpr size_t kPage = 32768;

// The compute on the lines read: F FMAs per line on its widened bf16 values, in 8 chains (on
// AVX2, two 256-bit FMAs per 512-bit one: the same work).
#ifdef __AVX512F__
template <int F>
struct Consumer {
  __m512 acc[8];
  const __m512 k = _mm512_set1_ps(1e-6f);
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));

  Consumer() {
    for (auto& a : acc) a = _mm512_setzero_ps();
  }
  void operator()(const char* line) {
    const __m512i v = _mm512_load_si512(line);
    const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
#pragma GCC unroll 32
    for (int f = 0; f < F; ++f) acc[f & 7] = _mm512_fmadd_ps(f & 1 ? hi : lo, k, acc[f & 7]);
    if (F == 0) acc[0] = _mm512_add_ps(acc[0], lo);
  }
  float sum() const {
    __m512 s = acc[0];
    for (int i = 1; i < 8; ++i) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
  }
};
#else
template <int F>
struct Consumer {
  __m256 acc[8];
  const __m256 k = _mm256_set1_ps(1e-6f);
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));

  Consumer() {
    for (auto& a : acc) a = _mm256_setzero_ps();
  }
  void operator()(const char* line) {
    __m256 w[4];
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32 * h));
      w[2 * h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      w[2 * h + 1] = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
    }
#pragma GCC unroll 64
    for (int f = 0; f < 2 * F; ++f) acc[f & 7] = _mm256_fmadd_ps(w[f & 3], k, acc[f & 7]);
    if (F == 0) acc[0] = _mm256_add_ps(acc[0], _mm256_add_ps(w[0], w[2]));
  }
  float sum() const {
    __m256 s = acc[0];
    for (int i = 1; i < 8; ++i) s = _mm256_add_ps(s, acc[i]);
    alignas(32) float t[8];
    _mm256_store_ps(t, s);
    float r = 0;
    for (float x : t) r += x;
    return r;
  }
};
#endif

template <int F>
float read_pages(const std::vector<const char*>& pages, int mode, size_t dist) {
  Consumer<F> consume;
  const size_t n = pages.size();
  for (size_t c = 0; c < n; ++c)
    for (size_t o = 0; o < kPage; o += 64) {
      if (mode != 0) {
        const size_t ahead = o + dist, pc = c + ahead / kPage;
        if (pc < n) {
          const char* q = pages[pc] + ahead % kPage;
          if (mode == 1) _mm_prefetch(q, _MM_HINT_T0);
          if (mode == 2) _mm_prefetch(q, _MM_HINT_T1);
          if (mode == 3) _mm_prefetch(q, _MM_HINT_T2);
        }
      }
      consume(pages[c] + o);
    }
  return consume.sum();
}

// Groups of S pages: MODE 0 reads a group side by side (a line of each page in turn); MODE 4
// reads it page after page while prefetching the next group side by side (a row of each in
// turn).
template <int F>
float read_groups(const std::vector<const char*>& pages, int mode, size_t S) {
  Consumer<F> consume;
  const size_t n = pages.size() / S * S, lines = kPage / 64;
  for (size_t c = 0; c < n; c += S) {
    if (mode == 0) {
      for (size_t l = 0; l < lines; ++l)
        for (size_t p = 0; p < S; ++p) consume(pages[c + p] + l * 64);
      continue;
    }
    size_t i = 0;  // lines read in this group; line i prefetches slot i of the next group
    for (size_t p = 0; p < S; ++p)
      for (size_t l = 0; l < lines; ++l, ++i) {
        const size_t row = i / 4, next = c + S + row % S;  // 4 lines (a row) per turn
        if (next < n) _mm_prefetch(pages[next] + ((row / S) * 4 + i % 4) * 64, _MM_HINT_T1);
        consume(pages[c + p] + l * 64);
      }
  }
  return consume.sum();
}

float run(int f, const std::vector<const char*>& pages, int mode, size_t dist, size_t S) {
  if (S > 1) {
    switch (f) {
      case 0:
        return read_groups<0>(pages, mode, S);
      case 8:
        return read_groups<8>(pages, mode, S);
      default:
        return read_groups<24>(pages, mode, S);
    }
  }
  switch (f) {
    case 0:
      return read_pages<0>(pages, mode, dist);
    case 8:
      return read_pages<8>(pages, mode, dist);
    case 12:
      return read_pages<12>(pages, mode, dist);
    case 16:
      return read_pages<16>(pages, mode, dist);
    default:
      return read_pages<24>(pages, mode, dist);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s F MODE DIST [IN_CACHE [S]]\n", argv[0]);
    return 2;
  }
  const int f = std::atoi(argv[1]), mode = std::atoi(argv[2]);
  const size_t dist = std::strtoul(argv[3], nullptr, 10);
  const bool in_cache = argc > 4 && std::atoi(argv[4]) != 0;
  const size_t S = argc > 5 ? std::strtoul(argv[5], nullptr, 10) : 1;
  const size_t total = in_cache ? size_t{1} << 20 : size_t{1536} << 20;
  const int reps = in_cache ? 4000 : 3, threads = omp_get_max_threads();
  auto* buf = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, total));
  if (buf == nullptr) return 1;
  madvise(buf, total, MADV_HUGEPAGE);
  auto* u = reinterpret_cast<uint16_t*>(buf);
  for (size_t i = 0; i < total / 2; ++i) u[i] = 0x3F80;  // bf16 1.0
  std::vector<size_t> order(total / kPage);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  std::vector<std::vector<const char*>> lists(static_cast<size_t>(threads));
  for (size_t i = 0; i < order.size(); ++i) lists[i % threads].push_back(buf + order[i] * kPage);
  double best = 1e30;
  float sink = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
    for (int r = 0; r < reps; ++r) sink += run(f, lists[omp_get_thread_num()], mode, dist, S);
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("F=%d mode=%d dist=%zu S=%zu threads=%d %s: %.2f GB/s%s\n", f, mode, dist, S, threads,
              in_cache ? "in cache" : "1.5 GB", static_cast<double>(total) * reps / best / 1e9,
              sink == 12345.f ? " " : "");
  std::free(buf);
  return 0;
}

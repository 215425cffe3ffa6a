// Two builds of libflashback timed in one process, call by call: an A/B between commits that
// holds on a shared host whose speed moves 1.5-2x within minutes (separate processes could not
// resolve 5 % there; PERFORMANCE_CPU.md, sessions 18 and 37). Each library is loaded with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so its kernels and thread-local scratch stay its own; the
// inputs come from this tree's bench library (bench/workloads.json shapes, random page
// placement, huge pages) and rotate over the copies, one call of A, B, B, A per round.
// Built with the tools (target cpu_ab_libs); scripts/cpu_ab.sh builds the two libraries and runs
// it. The public structs (PagedAttentionParams, Exec) must have the same layout in both builds
// and in this tree. By hand:
//   cmake --preset cpu -B /tmp/so_a -DBUILD_SHARED_LIBS=ON -DCMAKE_POSITION_INDEPENDENT_CODE=ON
//   cmake --build /tmp/so_a --target flashback     (likewise /tmp/so_b from the other tree)
//   build/cpu/tools/cpu_ab_libs /tmp/so_a/libflashback.so /tmp/so_b/libflashback.so \
//     [NAMES [ROUNDS [THREADS [WORKLOADS_FILE]]]]
// Prints, per workload, each library's median ms and the median of the per-round ratios B/A.
// Session 37 (a Zen 3 host), e8ee164 (A) against 7cefcfb (B), 20-50 rounds, both orders:
// cpu_decode_b4_L4k B/A 0.95-1.05 (median of six runs ~0.99), b1_L32k 0.94-1.02 (~0.975).
// AB_IN_CACHE=1 times one input copy over and over instead of rotating copies.
// Before timing, both run on the first copy and their out and lse are compared byte for byte
// ("same bits" or "bits differ": a kernel change meant to keep the results says so here).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "bench/inputs.h"
#include "bench/timing.h"
#include "bench/workload.h"
#include "flashback/ops.h"

namespace {

using PagedFn = void (*)(const flashback::PagedAttentionParams&, const flashback::Exec&);

PagedFn load(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    std::exit(1);
  }
  // flashback::paged_attention(PagedAttentionParams const&, Exec const&)
  auto* f = reinterpret_cast<PagedFn>(
      dlsym(h, "_ZN9flashback15paged_attentionERKNS_20PagedAttentionParamsERKNS_4ExecE"));
  if (f == nullptr) {
    std::fprintf(stderr, "%s: no flashback::paged_attention\n", path);
    std::exit(1);
  }
  return f;
}

// Whether A and B give the same out and lse bytes on `d`'s inputs.
bool same_bits(const PagedFn (&fn)[2], const flashback::testing::PagedData& d,
               const flashback::Exec& exec) {
  std::vector<char> got[2];
  for (int lib : {0, 1}) {
    flashback::testing::PagedData c = flashback::testing::with_fresh_outputs(d);
    fn[lib](c.params, exec);
    for (const flashback::Tensor* t : {&c.out, &c.lse}) {
      if (t->data() == nullptr) continue;  // no lse asked for
      const char* p = static_cast<const char*>(t->data());
      got[lib].insert(got[lib].end(), p, p + t->nbytes());
    }
  }
  return got[0] == got[1];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flashback;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LIB_A LIB_B [NAMES [ROUNDS [THREADS [WORKLOADS]]]]\n", argv[0]);
    return 2;
  }
  const PagedFn fn[2] = {load(argv[1]), load(argv[2])};
  const std::string only = argc > 3 ? argv[3] : "cpu_decode_b4_L4k,cpu_decode_b1_L32k";
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 20;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  const std::string file = argc > 6 ? argv[6] : bench::default_workloads_path();
  for (const bench::Workload& w :
       bench::select_workloads(bench::load_workloads(file, "cpu"), only)) {
    if (w.mode == bench::Mode::kRagged) continue;  // paged workloads only
    std::vector<bench::Inputs> copies;
    copies.push_back(bench::make_inputs(w, 1));
    // AB_IN_CACHE=1: one copy, timed over and over (K/V stay in the caches where they fit).
    const char* in_cache = std::getenv("AB_IN_CACHE");
    const int n =
        in_cache != nullptr && in_cache[0] == '1'
            ? 1
            : bench::copies_for(copies[0].nbytes(), bench::cpu_llc_bytes(), int64_t{8} << 30);
    for (int i = 1; i < n; ++i)
      copies.push_back(bench::make_inputs(w, 1 + static_cast<uint64_t>(i)));
    Exec exec;
    exec.num_threads = threads;
    exec.cpu_impl = Exec::CpuImpl::kFast;
    const bool same = same_bits(fn, copies[0].paged, exec);
    std::vector<double> ms[2], ratio;
    size_t c = 0;
    for (int r = -1; r < rounds; ++r) {  // round -1 warms both up
      double t[2] = {0, 0};
      for (int lib : {0, 1, 1, 0}) {
        const auto t0 = std::chrono::steady_clock::now();
        fn[lib](copies[c++ % copies.size()].paged.params, exec);
        t[lib] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count();
      }
      if (r < 0) continue;
      for (int lib : {0, 1}) ms[lib].push_back(t[lib] / 2);
      ratio.push_back(t[1] / t[0]);
    }
    std::printf("%-26s A %.3f ms  B %.3f ms  B/A %.3f (rounds' ratios %.3f-%.3f), %s\n",
                w.name.c_str(), bench::median(ms[0]), bench::median(ms[1]), bench::median(ratio),
                *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()), same ? "same bits" : "bits differ");
  }
  return 0;
}

// `flashback check`: the serving trace (src/backend/trace: a small engine driving the backend
// through every forward mode and layer kind, each output checked against the oracle) for
// P = 1 and 16 — or the --page-size given — followed by randomized kernel suites (ragged lengths,
// GQA, windows, softcap, FP8, MLA, both page-table forms) that run each case two ways that must
// agree. Prints, per mode and layer kind (and per suite), tokens/cases, max error and pass/fail,
// ending with `N passed, M failed`; exits non-zero on any failure.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/trace/trace.h"
#include "commands.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback::tools {
namespace {

using testing::AttentionCase;
using testing::Comparison;
using testing::PagedData;

struct Options {
  std::string device = "cpu";
  uint64_t seed = 1;
  int steps = -1;     // trace: engine steps per model (-1: 700, on CUDA 120); suites: steps / 4
  int page_size = 0;  // trace: 0 = both 1 and 16; suites: 0 = random per case
};

const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};

AttentionCase random_case(std::mt19937_64& rng, const Options& o) {
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  AttentionCase c;
  const int B = pick({0, 1, 2, 3, 5});
  const bool decode = coin(0.4);
  for (int b = 0; b < B; ++b) {
    const int q = decode ? pick({0, 1, 1, 1, 4}) : pick({0, 1, 3, 7, 17});
    c.q_lens.push_back(q);
    c.kv_lens.push_back(q + pick({0, 0, 1, 5, 16, 33}));
  }
  c.mla = coin(0.15);
  if (c.mla) {
    c.heads_kv = 1;
    c.heads_q = pick({1, 4});
    c.head_dim = 16;
    c.head_dim_v = 32;
  } else {
    c.heads_kv = pick({1, 2});
    c.heads_q = c.heads_kv * pick({1, 2, 4});
    c.head_dim = pick({8, 16, 32});
    c.head_dim_v = coin(0.2) ? 24 : 0;
  }
  c.page_size = o.page_size > 0 ? o.page_size : pick({1, 4, 16});
  c.table_holds_slots = coin(0.3);
  c.dtype = static_cast<DType>(pick({int(DType::kF32), int(DType::kF16), int(DType::kBF16)}));
  c.kv_dtype = static_cast<DType>(pick({int(DType::kF32), int(DType::kBF16), int(DType::kF16),
                                        int(DType::kF8E4M3), int(DType::kF8E5M2)}));
  c.causal = coin(0.8);
  if (coin(0.3)) c.window_left = pick({0, 2, 7});
  if (!c.causal && coin(0.3)) c.window_right = pick({0, 3});
  if (coin(0.2)) c.softcap = 30.0f;
  c.lse_transposed = coin(0.5);
  c.per_head_descale = coin(0.5);
  return c;
}

// Runs two ways and compares; returns the comparison.
using Suite = std::function<Comparison(std::mt19937_64&, const Options&)>;

Comparison fast_vs_oracle(std::mt19937_64& rng, const Options& o) {
  const AttentionCase c = random_case(rng, o);
  PagedData ref = testing::make_paged(c, rng());
  PagedData fast = testing::with_fresh_outputs(ref);
  paged_attention(ref.params, kRef);
  paged_attention(fast.params, Exec{});
  return testing::compare(fast.out, ref.out, fast.lse, ref.lse);
}

Comparison page_size_invariance(std::mt19937_64& rng, const Options& o) {
  // Page ids with P > 1 vs the same pool read through a per-token slot table: identical bits.
  AttentionCase c = random_case(rng, o);
  c.table_holds_slots = false;
  PagedData a = testing::make_paged(c, rng());
  PagedData b = testing::with_fresh_outputs(a);
  const int64_t B = a.page_table.size(0), w = a.page_table.size(1), P = c.page_size;
  Tensor slots(DType::kI32, {B, w * P});
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < w * P; ++t) {
      const int32_t page = a.page_table.ptr<int32_t>()[r * w + t / P];
      slots.ptr<int32_t>()[r * w * P + t] =
          page < 0 ? page : static_cast<int32_t>(page * P + t % P);
    }
  b.params.page_table = slots;
  b.params.table_holds_slots = true;
  paged_attention(a.params, kRef);
  paged_attention(b.params, kRef);
  Comparison r = testing::compare(b.out, a.out, b.lse, a.lse);
  for (int64_t i = 0; i < a.out.numel() && r.ok; ++i)
    if (a.out.get(i) != b.out.get(i) && !(std::isnan(a.out.get(i)) && std::isnan(b.out.get(i)))) {
      r.ok = false;
      r.why = "not bitwise identical";
    }
  return r;
}

Comparison merge_halves(std::mt19937_64& rng, const Options&) {
  // Attention over keys [0, K) equals merge_state of attention over [0, s) and [s, K).
  const int T = std::uniform_int_distribution<int>(1, 6)(rng);
  const int K = std::uniform_int_distribution<int>(1, 40)(rng);
  const int split = std::uniform_int_distribution<int>(0, K)(rng);
  const int H = 2, D = 16;
  Tensor q(DType::kF32, {T, H, D}), k(DType::kF32, {K, H, D}), v(DType::kF32, {K, H, D});
  testing::fill_normal(q, rng);
  testing::fill_normal(k, rng);
  testing::fill_normal(v, rng);
  auto cu = [](int n) {
    Tensor t(DType::kI32, {2});
    t.ptr<int32_t>()[0] = 0;
    t.ptr<int32_t>()[1] = n;
    return t;
  };
  auto run = [&](int lo, int hi, Tensor& out, Tensor& lse) {
    out = Tensor(DType::kF32, {T, H, D});
    lse = Tensor(DType::kF32, {T, H});
    out.poison();
    lse.poison();
    Tensor cq = cu(T), ck = cu(hi - lo);
    RaggedAttentionParams r;
    r.q = q;
    r.k = k.view().slice(0, lo, hi);
    r.v = v.view().slice(0, lo, hi);
    r.cu_seqlens_q = cq;
    r.cu_seqlens_k = ck;
    r.out = out;
    r.lse = lse;
    r.causal = false;
    ragged_attention(r, kRef);
  };
  Tensor ow, lw, oa, la, ob, lb;
  run(0, K, ow, lw);
  run(0, split, oa, la);
  run(split, K, ob, lb);
  merge_state({oa, la, ob, lb, oa, la}, kRef);
  return testing::compare(oa, ow, la, lw);
}

void progress(const char* name, int64_t done, int64_t total) {
  if (!isatty(fileno(stderr))) return;
  const int width = 30, filled = total ? static_cast<int>(done * width / total) : width;
  std::fprintf(stderr, "\r%-24s [%.*s%*s] %lld/%lld", name, filled,
               "##############################", width - filled, "", static_cast<long long>(done),
               static_cast<long long>(total));
  if (done == total) std::fprintf(stderr, "\r%*s\r", 80, "");
  std::fflush(stderr);
}

// The serving trace at page size P: one line per (model, mode, layer kind), each a pass or fail,
// plus a failing line for anything the trace should have exercised and did not.
void run_trace_section(const Options& o, int P, int& passed, int& failed) {
  trace::TraceOptions t;
  t.page_size = P;
  t.seed = o.seed;
  t.steps = o.steps;
  if (o.device == "cuda") t.device = Device{DeviceType::kCUDA, 0};
  const std::string bar = "trace P=" + std::to_string(P);
  const auto t0 = std::chrono::steady_clock::now();
  const trace::TraceReport rep =
      trace::run_trace(t, [&](int64_t d, int64_t n) { progress(bar.c_str(), d, n); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "\nserving trace, page size %d: %lld forward passes, %lld requests (%lld reusing a "
      "prefix, %lld finished and freed, %lld in a reused row) in %.1f s\n",
      P, static_cast<long long>(rep.forward_passes), static_cast<long long>(rep.requests),
      static_cast<long long>(rep.shared_prefix), static_cast<long long>(rep.finished),
      static_cast<long long>(rep.reused_rows), secs);
  std::printf("%-7s %-22s %-19s %6s %7s %10s %10s %9s  %s\n", "model", "mode", "layer kind",
              "calls", "tokens", "max |err|", "max rel", "max lse", "result");
  for (const trace::KindStats& s : rep.rows) {
    std::printf(
        "%-7s %-22s %-19s %6lld %7lld %10.3g %10.3g %9.3g  %s%s\n", s.model.c_str(), s.mode.c_str(),
        s.kind.c_str(), static_cast<long long>(s.calls), static_cast<long long>(s.tokens),
        s.max_abs, s.max_rel, s.max_lse, s.failures ? "FAIL" : "pass",
        s.failures ? (" (" + std::to_string(s.failures) + "x: " + s.first_failure + ")").c_str()
                   : "");
    (s.failures ? failed : passed) += 1;
  }
  for (const std::string& m : rep.missing()) {
    std::printf("%-50s FAIL (%s)\n", "coverage", m.c_str());
    ++failed;
  }
}

int usage(int code) {
  std::printf(
      "usage: flashback check [--device cpu|cuda] [--seed N] [--steps N] [--page-size P]\n"
      "Runs the serving trace (every forward mode and layer kind through the backend, each\n"
      "output checked against the fp64 oracle; --device cuda: the backend on GPU 0 with the\n"
      "head dims its kernels are built for) for page sizes 1 and 16 (or --page-size P), with\n"
      "--steps engine steps per model (default 700; 120 with --device cuda), then randomized\n"
      "kernel suites (CPU kernels) of\n"
      "steps / 4 cases each (a run too short to reach every mode and layer kind reports the\n"
      "missing ones as failures). Prints, per mode and layer kind, tokens, max error and\n"
      "pass/fail; "
      "the last line is `N passed, M failed`; the exit code is non-zero on any failure.\n");
  return code;
}

}  // namespace

int run_check(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) throw Error(flag, "a value", "nothing");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h"))
      return usage(0);
    else if (!std::strcmp(argv[i], "--device"))
      o.device = value("--device");
    else if (!std::strcmp(argv[i], "--seed"))
      o.seed = std::strtoull(value("--seed"), nullptr, 10);
    else if (!std::strcmp(argv[i], "--steps")) {
      const char* v = value("--steps");
      o.steps = std::atoi(v);
      FLASHBACK_CHECK(o.steps > 0, "--steps", "a positive count", v);
    } else if (!std::strcmp(argv[i], "--page-size"))
      o.page_size = std::atoi(value("--page-size"));
    else
      throw Error("flashback check", "--device, --seed, --steps or --page-size", argv[i]);
  }
  FLASHBACK_CHECK(o.device == "cpu" || o.device == "cuda", "--device", "cpu or cuda", o.device);
  // The GPU models' head dims make the oracle's recomputation ~10x dearer than the CPU models'.
  if (o.steps < 0) o.steps = o.device == "cuda" ? 120 : 700;
  FLASHBACK_CHECK(o.page_size >= 0, "--page-size",
                  ">= 0 (0 = both 1 and 16 in the trace, random in the suites)",
                  std::to_string(o.page_size));

  std::printf("flashback check  device=%s seed=%llu steps=%d page-size=%s\n", o.device.c_str(),
              static_cast<unsigned long long>(o.seed), o.steps,
              o.page_size ? std::to_string(o.page_size).c_str() : "1,16");
  int passed = 0, failed = 0;
  const std::vector<int> page_sizes =
      o.page_size > 0 ? std::vector<int>{o.page_size} : std::vector<int>{1, 16};
  for (int P : page_sizes) run_trace_section(o, P, passed, failed);

  const std::vector<std::pair<const char*, Suite>> suites = {
      {"paged: fast vs oracle", fast_vs_oracle},
      {"paged: page-size forms", page_size_invariance},
      {"merge: halves = whole", merge_halves},
  };
  const int cases = std::max(1, o.steps / 4);
  std::printf("\nkernel suites (%s)\n", o.page_size ? "given page size" : "random page sizes");
  std::printf("%-26s %7s %12s %12s  %s\n", "suite", "cases", "max |err|", "max rel", "result");
  std::mt19937_64 rng(o.seed);
  for (const auto& [name, suite] : suites) {
    double max_abs = 0, max_rel = 0;
    int bad = 0;
    std::string first_why;
    for (int s = 0; s < cases; ++s) {
      const Comparison c = suite(rng, o);
      max_abs = std::max(max_abs, c.max_abs);
      max_rel = std::max(max_rel, c.rel_l2);
      if (!c.ok && bad++ == 0) first_why = c.why;
      progress(name, s + 1, cases);
    }
    std::printf("%-26s %7d %12.3g %12.3g  %s%s\n", name, cases, max_abs, max_rel,
                bad ? "FAIL" : "pass",
                bad ? (" (" + std::to_string(bad) + "x: " + first_why + ")").c_str() : "");
    (bad ? failed : passed) += 1;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

}  // namespace flashback::tools

// Planning benchmark (issue #3): a 256-request decode batch at 8k context, random page placement.
// Not a test. Variants: the record form (no page table: what the kernels need), with a
// chunked-local split, with an explicit page table (P = 1 and P = 16), and a CUDA-graph update.
#include <benchmark/benchmark.h>

#include <random>

#include "host_batch.h"
#include "plan/plan.h"

namespace flashback {
namespace {

constexpr int32_t kRequests = 256, kContext = 8192;

plan_test::HostBatch decode_batch(int32_t page_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  plan_test::HostBatch hb;
  hb.page_size = page_size;
  plan_test::make_req_to_token(hb, kRequests + 1, kContext, rng);
  hb.mode = ForwardMode::kDecode;
  std::vector<int32_t> rows(kRequests);
  for (int32_t b = 0; b < kRequests; ++b) rows[b] = b + 1;  // row 0: graph padding
  std::shuffle(rows.begin(), rows.end(), rng);
  hb.rows = rows;
  hb.seq.resize(kRequests);
  // "8k context": lengths near the 8192 wall (random, so maxima and chunk splits vary).
  for (auto& s : hb.seq) s = std::uniform_int_distribution<int32_t>(kContext - 512, kContext)(rng);
  return hb;
}

void run_planner(benchmark::State& state, plan::PlanConfig cfg) {
  plan_test::HostBatch hb = decode_batch(cfg.page_size, 1);
  const ForwardBatch fb = hb.view();
  plan::Planner planner(cfg);
  for (auto _ : state) {
    const ForwardMetadata& m = planner.plan(fb);
    benchmark::DoNotOptimize(m.self.cu_seqlens_k[kRequests]);
  }
  state.counters["requests"] = kRequests;
}

void BM_DecodePlan(benchmark::State& s) { run_planner(s, {}); }
void BM_DecodePlanLocal(benchmark::State& s) { run_planner(s, {.attention_chunk_size = 8192}); }
void BM_DecodePlanPageTableP1(benchmark::State& s) {
  run_planner(s, {.materialize_page_table = true});
}
void BM_DecodePlanPageTableP16(benchmark::State& s) {
  run_planner(s, {.page_size = 16, .materialize_page_table = true});
}

void BM_DecodeGraphUpdate(benchmark::State& state) {
  plan_test::HostBatch hb = decode_batch(1, 2);
  const ForwardBatch fb = hb.view();
  plan::CudaGraphPlanState graph({}, kRequests, kContext);
  ForwardMetadata m = graph.bind(fb);
  for (auto _ : state) {
    graph.update(m, fb);
    benchmark::DoNotOptimize(m.self.cu_seqlens_k[kRequests]);
  }
}

BENCHMARK(BM_DecodePlan);
BENCHMARK(BM_DecodePlanLocal);
BENCHMARK(BM_DecodePlanPageTableP1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodePlanPageTableP16)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeGraphUpdate);

}  // namespace
}  // namespace flashback

BENCHMARK_MAIN();

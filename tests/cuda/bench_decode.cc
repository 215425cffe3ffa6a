// Benchmark driver for the short-query GPU workloads of workloads.json (decode, verify, window,
// softcap, cross, MLA): builds each workload through the shared case (random page placement),
// fills q and K/V on the device, times paged_attention with CUDA events (warm-up, median of
// many runs; every K/V set is several times the 60 MB L2) and prints a table; --json writes
// rows shaped like peers.py's. Bytes and FLOPs are counted exactly as peers.py counts them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_fill.h"
#include "device_data.h"
#include "flashback/ops.h"
#include "testing/case.h"

namespace fb = flashback;
using nlohmann::json;

namespace {

struct Cost {
  double bytes = 0, flops = 0;
};

Cost cost_of(const json& w, const std::vector<int>& L) {
  const int hq = w["heads_q"], hk = w["heads_kv"], d = w["head_dim"];
  const int dv = w.value("head_dim_v", d), q = w["q_len"], win = w.value("window_left", -1);
  const bool mla = w.value("mla", false);
  const bool causal = w.value("causal", true) && !w.value("cross", false);
  const int kvb = w["kv_dtype"].get<std::string>().rfind("fp8", 0) == 0 ? 1 : 2;
  Cost c;
  for (int l : L) {
    const double touched = win >= 0 ? std::min(l, win + q) : l;
    c.bytes += touched * (mla ? d : hk * (d + dv)) * kvb;
    double vis = 0;
    for (int i = 0; i < q; ++i) {
      const int p = l - q + i;
      const int lo = win >= 0 ? std::max(0, p - win) : 0;
      vis += causal ? (p - lo + 1) : l;
    }
    c.flops += 2.0 * hq * vis * (d + dv);
  }
  return c;
}

struct Row {
  std::string workload;
  double ms, tbps, tflops;
};

Row bench_one(const json& w, bool deterministic, int reps, int splits = 0) {
  const std::string name = w["name"];
  std::vector<int> L;
  if (w.contains("ctx_list"))
    L = w["ctx_list"].get<std::vector<int>>();
  else
    L.assign(w["batch"].get<int>(), w["ctx"].get<int>());
  fb::testing::AttentionCase c;
  c.name = name;
  c.kv_lens = L;
  c.q_lens.assign(L.size(), w["q_len"].get<int>());
  c.heads_q = w["heads_q"];
  c.heads_kv = w["heads_kv"];
  c.page_size = w["page_size"];
  const bool mla = w.value("mla", false);
  if (mla) {
    c.mla = true;
    c.head_dim = w["head_dim"].get<int>() - w["head_dim_v"].get<int>();
    c.head_dim_v = w["head_dim_v"];
  } else {
    c.head_dim = w["head_dim"];
    c.head_dim_v = w.value("head_dim_v", 0);
  }
  c.dtype = w["dtype"] == "fp16" ? fb::DType::kF16 : fb::DType::kBF16;
  const std::string kv = w["kv_dtype"];
  c.kv_dtype = kv == "fp8_e4m3"   ? fb::DType::kF8E4M3
               : kv == "fp8_e5m2" ? fb::DType::kF8E5M2
                                  : c.dtype;
  c.causal = w.value("causal", true) && !w.value("cross", false);
  c.window_left = w.value("window_left", -1);
  c.softcap = w.value("softcap", 0.0f);
  c.fill_values = false;
  fb::testing::PagedData d = fb::testing::make_paged(c, 1234);
  d.params.max_seqlen_q = w["q_len"];
  d.params.num_splits = splits;
  fb::testing::DevicePaged dp = fb::testing::to_device(d, /*copy_values=*/false);
  uint64_t seed = 1;
  for (const fb::Tensor* t : {&d.q, &d.k_cache, &d.v_cache}) {
    if (t->numel() == 0) continue;
    const float sd = t->dtype() == fb::DType::kF8E4M3   ? 24.f
                     : t->dtype() == fb::DType::kF8E5M2 ? 2000.f
                                                        : 1.f;
    fb::testing::fill_random_device(dp.mirror.device_ptr(*t), t->numel(), t->dtype(), seed++, sd);
  }
  FB_TEST_CUDA(cudaDeviceSynchronize());
  fb::Exec exec;
  exec.deterministic = deterministic;
  fb::testing::attach_workspace(dp, exec);
  cudaEvent_t e0, e1;
  FB_TEST_CUDA(cudaEventCreate(&e0));
  FB_TEST_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) fb::paged_attention(dp.params, exec);
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    FB_TEST_CUDA(cudaEventRecord(e0));
    fb::paged_attention(dp.params, exec);
    FB_TEST_CUDA(cudaEventRecord(e1));
    FB_TEST_CUDA(cudaEventSynchronize(e1));
    float t = 0;
    FB_TEST_CUDA(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  FB_TEST_CUDA(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const Cost k = cost_of(w, L);
  FB_TEST_CUDA(cudaEventDestroy(e0));
  FB_TEST_CUDA(cudaEventDestroy(e1));
  const std::string tag = deterministic ? "[deterministic]"
                          : splits > 0  ? "[splits=" + std::to_string(splits) + "]"
                                        : "";
  return {name + tag, med, k.bytes / (med * 1e-3) / 1e12, k.flops / (med * 1e-3) / 1e12};
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "workloads.json", out_json, only;
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--workloads" && i + 1 < argc)
      path = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      out_json = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::stoi(argv[++i]);
  }
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 2;
  }
  const json all = json::parse(f);
  std::vector<Row> rows;
  int failed = 0;
  for (const json& w : all["gpu"]) {
    const std::string name = w["name"], mode = w["mode"];
    if (mode != "decode" && mode != "target_verify") continue;  // prefill/ragged: issue #7
    if (!only.empty() && ("," + only + ",").find("," + name + ",") == std::string::npos) continue;
    // Default mode; deterministic mode where its cost is reported; a split sweep on one shape
    // (how sensitive the kernel is to CTA count and per-CTA length).
    std::vector<std::pair<bool, int>> runs = {{false, 0}};
    if (name == "decode_b64_L8k" || name == "decode_b1_L128k") runs.push_back({true, 0});
    if (name == "decode_b64_L8k")
      for (int s : {1, 4, 16}) runs.push_back({false, s});
    for (auto [det, splits] : runs) {
      try {
        rows.push_back(bench_one(w, det, reps, splits));
        const Row& r = rows.back();
        std::fprintf(stderr, "%-36s %9.4f ms %7.3f TB/s %8.2f TFLOP/s\n", r.workload.c_str(), r.ms,
                     r.tbps, r.tflops);
      } catch (const std::exception& e) {
        ++failed;
        std::fprintf(stderr, "%-36s FAILED: %s\n", name.c_str(), e.what());
      }
    }
  }
  std::printf("%-36s %10s %8s %9s\n", "workload", "ms", "TB/s", "TFLOP/s");
  for (const Row& r : rows)
    std::printf("%-36s %10.4f %8.3f %9.2f\n", r.workload.c_str(), r.ms, r.tbps, r.tflops);
  if (!out_json.empty()) {
    json j = json::array();
    for (const Row& r : rows)
      j.push_back({{"workload", r.workload},
                   {"peer", "flashback"},
                   {"ms", r.ms},
                   {"TBps", r.tbps},
                   {"TFLOPs", r.tflops}});
    std::ofstream(out_json) << json{{"rows", j}}.dump(1) << "\n";
  }
  return failed ? 1 : 0;
}

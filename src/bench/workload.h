// A standard workload (one entry of bench/workloads.json): the one description the bench times and
// counts (DESIGN.md principle 7). Parsing is strict so a typo in a workload file is an Error that
// names the entry and the field rather than a silently different benchmark.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashback/tensor.h"

namespace flashback::bench {

enum class Mode : uint8_t { kDecode, kTargetVerify, kExtend, kRagged };
const char* mode_name(Mode m);

struct Workload {
  std::string name;
  Mode mode = Mode::kDecode;
  int batch = 0;
  int q_len = 1;             // new tokens per request
  std::vector<int> kv_lens;  // KV length per request ("ctx" repeated, or "ctx_list")
  int heads_q = 0, heads_kv = 0;
  int head_dim = 0;    // q/k head dim; MLA: latent + rope (576)
  int head_dim_v = 0;  // resolved: "head_dim_v" or head_dim
  int page_size = 1;   // 0 only for ragged (contiguous K/V)
  DType dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  bool mla = false;
  bool cross = false;  // cross-attention: not causal
  bool causal = true;  // as written in the file ("causal", default true)
  int window_left = -1;
  float softcap = 0;
  int chunk = 0;  // chunked local attention (0 = off)

  /// Causal as the kernels see it: cross-attention never is (peers.py's causal_of()).
  bool effective_causal() const { return causal && !cross; }
};

/// Parses the `section` ("cpu" or "gpu") of a workloads document. `source` names the file in
/// error messages. Throws Error naming `source`, the entry (index and name) and the field.
std::vector<Workload> parse_workloads(const std::string& json_text, const std::string& section,
                                      const std::string& source);

/// The standard workloads file: bench/workloads.json in the source tree this was built from, else
/// in the current directory, else beside the executable's build tree (build/<preset>/tools/..).
std::string default_workloads_path();

/// Reads and parses a workloads file.
std::vector<Workload> load_workloads(const std::string& path, const std::string& section);

/// Keeps the workloads named in `only` (comma-separated; empty keeps all), in file order.
/// An unknown name is an Error listing the known ones.
std::vector<Workload> select_workloads(const std::vector<Workload>& all, const std::string& only);

}  // namespace flashback::bench

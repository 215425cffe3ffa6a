#include "bench/workload.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace flashback::bench {
namespace {

using nlohmann::json;

// Reads the fields of one entry. Every accessor records the key so that unknown keys (typos such
// as "head_dimv") can be reported instead of silently ignored.
class EntryReader {
 public:
  EntryReader(const json& e, std::string where) : e_(e), where_(std::move(where)) {}

  std::string arg(const std::string& field) const { return where_ + "." + field; }

  bool has(const std::string& k) {
    seen_.insert(k);
    return e_.contains(k);
  }

  [[noreturn]] void fail(const std::string& field, const std::string& expected) const {
    throw Error(arg(field), expected, e_.contains(field) ? e_.at(field).dump() : "nothing");
  }

  std::string str(const std::string& k) {
    if (!has(k)) fail(k, "a string");
    const json& v = e_.at(k);
    if (!v.is_string()) fail(k, "a string");
    return v.get<std::string>();
  }

  int integer(const std::string& k, int lo, const std::string& expected) {
    if (!has(k)) fail(k, expected);
    return as_int(e_.at(k), k, lo, expected);
  }
  int integer_or(const std::string& k, int fallback, int lo, const std::string& expected) {
    return has(k) ? as_int(e_.at(k), k, lo, expected) : fallback;
  }
  int as_int(const json& v, const std::string& k, int lo, const std::string& expected) const {
    if (!v.is_number_integer()) fail(k, expected);
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > std::numeric_limits<int>::max()) fail(k, expected);
    return static_cast<int>(x);
  }

  bool boolean_or(const std::string& k, bool fallback) {
    if (!has(k)) return fallback;
    if (!e_.at(k).is_boolean()) fail(k, "true or false");
    return e_.at(k).get<bool>();
  }

  double number_or(const std::string& k, double fallback, double lo, const std::string& expected) {
    if (!has(k)) return fallback;
    const json& v = e_.at(k);
    if (!v.is_number() || v.get<double>() < lo) fail(k, expected);
    return v.get<double>();
  }

  std::vector<int> int_list(const std::string& k, int lo, const std::string& expected) {
    has(k);
    const json& v = e_.at(k);
    if (!v.is_array()) fail(k, expected);
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i) {
      const json& x = v[i];
      if (!x.is_number_integer() || x.get<int64_t>() < lo ||
          x.get<int64_t>() > std::numeric_limits<int>::max())
        throw Error(arg(k) + "[" + std::to_string(i) + "]", expected, x.dump());
      out.push_back(static_cast<int>(x.get<int64_t>()));
    }
    return out;
  }

  void reject_unknown() const {
    for (const auto& [k, v] : e_.items())
      if (!seen_.count(k))
        throw Error(arg(k),
                    "a known field (name, mode, batch, q_len, ctx|ctx_list, heads_q, "
                    "heads_kv, head_dim, head_dim_v, page_size, dtype, kv_dtype, mla, "
                    "cross, causal, window_left, softcap, chunk)",
                    "an unknown field");
  }

 private:
  const json& e_;
  std::string where_;
  std::set<std::string> seen_;
};

DType parse_dtype(EntryReader& r, const std::string& k, bool allow_fp8) {
  const std::string s = r.str(k);
  if (s == "bf16") return DType::kBF16;
  if (s == "fp16") return DType::kF16;
  if (s == "fp32") return DType::kF32;
  if (allow_fp8 && s == "fp8_e4m3") return DType::kF8E4M3;
  if (allow_fp8 && s == "fp8_e5m2") return DType::kF8E5M2;
  r.fail(k, allow_fp8 ? "one of bf16, fp16, fp32, fp8_e4m3, fp8_e5m2" : "one of bf16, fp16, fp32");
}

Workload parse_entry(const json& e, const std::string& where) {
  EntryReader r(e, where);
  Workload w;
  w.name = r.str("name");
  if (w.name.empty()) r.fail("name", "a non-empty string");

  const std::string mode = r.str("mode");
  if (mode == "decode")
    w.mode = Mode::kDecode;
  else if (mode == "target_verify")
    w.mode = Mode::kTargetVerify;
  else if (mode == "extend")
    w.mode = Mode::kExtend;
  else if (mode == "ragged")
    w.mode = Mode::kRagged;
  else
    r.fail("mode", "one of decode, target_verify, extend, ragged");

  w.batch = r.integer("batch", 1, "a positive integer");
  w.q_len = r.integer("q_len", 1, "a positive integer");
  if (w.mode == Mode::kDecode && w.q_len != 1) r.fail("q_len", "1 in decode mode");

  const bool has_ctx = r.has("ctx"), has_list = r.has("ctx_list");
  if (has_ctx == has_list) r.fail(has_ctx ? "ctx_list" : "ctx", "exactly one of ctx, ctx_list");
  if (has_ctx) {
    w.kv_lens.assign(static_cast<size_t>(w.batch),
                     r.integer("ctx", 0, "a non-negative integer (KV length per request)"));
  } else {
    w.kv_lens = r.int_list("ctx_list", 0, "a list of non-negative integers (KV lengths)");
    if (static_cast<int>(w.kv_lens.size()) != w.batch)
      throw Error(r.arg("ctx_list"), std::to_string(w.batch) + " lengths (one per request)",
                  std::to_string(w.kv_lens.size()) + " lengths");
  }

  w.heads_q = r.integer("heads_q", 1, "a positive integer");
  w.heads_kv = r.integer("heads_kv", 1, "a positive integer");
  if (w.heads_q % w.heads_kv != 0)
    throw Error(r.arg("heads_kv"), "a divisor of heads_q (" + std::to_string(w.heads_q) + ")",
                std::to_string(w.heads_kv));
  w.head_dim = r.integer("head_dim", 1, "a positive integer");
  w.head_dim_v = r.integer_or("head_dim_v", w.head_dim, 1, "a positive integer");
  w.page_size = w.mode == Mode::kRagged
                    ? r.integer_or("page_size", 0, 0, "a non-negative integer (ignored for ragged)")
                    : r.integer("page_size", 1, "a positive integer");
  w.dtype = parse_dtype(r, "dtype", false);
  w.kv_dtype = parse_dtype(r, "kv_dtype", true);
  if (!is_fp8(w.kv_dtype) && w.kv_dtype != w.dtype)
    r.fail("kv_dtype",
           std::string("fp8_e4m3, fp8_e5m2 or the same as dtype (") + dtype_name(w.dtype) + ")");
  if (w.mode == Mode::kRagged && is_fp8(w.kv_dtype))
    r.fail("kv_dtype", "not fp8 in ragged mode (contiguous K/V are bf16/fp16/fp32)");

  w.mla = r.boolean_or("mla", false);
  if (w.mla) {
    if (w.mode == Mode::kRagged) r.fail("mla", "false in ragged mode");
    if (w.heads_kv != 1) r.fail("heads_kv", "1 for MLA (one latent row per token)");
    if (w.head_dim <= w.head_dim_v)
      r.fail("head_dim", "latent + rope width, greater than head_dim_v for MLA");
  }
  w.cross = r.boolean_or("cross", false);
  w.causal = r.boolean_or("causal", true);
  w.window_left = r.integer_or("window_left", -1, -1, "an integer >= -1 (-1 = off)");
  w.softcap = static_cast<float>(r.number_or("softcap", 0.0, 0.0, "a number >= 0 (0 = off)"));
  w.chunk = r.integer_or("chunk", 0, 0, "a non-negative integer (0 = off)");
  if (w.chunk > 0 && (w.mode == Mode::kRagged || w.cross))
    r.fail("chunk", "0 for ragged and cross-attention workloads");
  for (int l : w.kv_lens)
    if (w.chunk > 0 && l < w.q_len)
      r.fail(has_ctx ? "ctx" : "ctx_list", "KV lengths >= q_len with chunked local attention");
  r.reject_unknown();
  return w;
}

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kDecode:
      return "decode";
    case Mode::kTargetVerify:
      return "target_verify";
    case Mode::kExtend:
      return "extend";
    case Mode::kRagged:
      return "ragged";
  }
  return "?";
}

std::vector<Workload> parse_workloads(const std::string& json_text, const std::string& section,
                                      const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw Error(source, "valid JSON", e.what());
  }
  if (!doc.is_object())
    throw Error(source, "a JSON object with \"cpu\"/\"gpu\" arrays", doc.type_name());
  if (!doc.contains(section) || !doc.at(section).is_array())
    throw Error(source + "." + section, "an array of workloads",
                doc.contains(section) ? doc.at(section).type_name() : "nothing");
  std::vector<Workload> out;
  std::set<std::string> names;
  const json& list = doc.at(section);
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    std::string where = source + ": " + section + "[" + std::to_string(i) + "]";
    if (!e.is_object()) throw Error(where, "a workload object", e.dump());
    if (e.contains("name") && e.at("name").is_string())
      where += " \"" + e.at("name").get<std::string>() + "\"";
    Workload w = parse_entry(e, where);
    if (!names.insert(w.name).second)
      throw Error(where + ".name", "a unique name", w.name + " (repeated)");
    out.push_back(std::move(w));
  }
  return out;
}

std::string default_workloads_path() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates = {fs::path(FLASHBACK_SOURCE_DIR) / "bench/workloads.json",
                                      fs::path("bench/workloads.json")};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / "../../../bench/workloads.json");
  for (const auto& c : candidates)
    if (fs::exists(c, ec)) return c.lexically_normal().string();
  return candidates.front().string();
}

std::vector<Workload> load_workloads(const std::string& path, const std::string& section) {
  std::ifstream in(path);
  if (!in) throw Error("--workloads", "a readable workloads file", path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_workloads(text.str(), section, path);
}

std::vector<Workload> select_workloads(const std::vector<Workload>& all, const std::string& only) {
  if (only.empty()) return all;
  std::set<std::string> wanted;
  std::stringstream s(only);
  for (std::string n; std::getline(s, n, ',');)
    if (!n.empty()) wanted.insert(n);
  std::vector<Workload> out;
  for (const auto& w : all)
    if (wanted.erase(w.name)) out.push_back(w);
  if (!wanted.empty()) {
    std::string known;
    for (const auto& w : all) known += (known.empty() ? "" : ", ") + w.name;
    throw Error("--only", "names of workloads in this section (" + known + ")", *wanted.begin());
  }
  return out;
}

}  // namespace flashback::bench

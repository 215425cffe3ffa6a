#include "backend/trace/trace.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "backend/trace/engine.h"

namespace flashback::trace {

int64_t TraceReport::failures() const {
  int64_t n = 0;
  for (const KindStats& s : rows) n += s.failures;
  return n;
}

std::vector<std::string> TraceReport::missing() const {
  // What each model must have exercised: every mode (eager and graph where captured) and
  // every layer kind with at least one checked token.
  const std::vector<std::pair<std::string, std::vector<std::string>>> modes = {
      {"hybrid",
       {"EXTEND", "MIXED", "DECODE", "DECODE (graph)", "TARGET_VERIFY", "TARGET_VERIFY (graph)",
        "DRAFT_DECODE", "DRAFT_DECODE (graph)", "DRAFT_EXTEND", "IDLE"}},
      {"mla",
       {"EXTEND", "MIXED", "DECODE", "DECODE (graph)", "TARGET_VERIFY", "TARGET_VERIFY (graph)",
        "IDLE"}}};
  const std::vector<std::pair<std::string, std::vector<Kind>>> kinds = {
      {"hybrid",
       {Kind::kFull, Kind::kSliding, Kind::kLocal, Kind::kSoftcap, Kind::kCross, Kind::kFp8E4M3,
        Kind::kFp8E5M2, Kind::kDraft}},
      {"mla", {Kind::kMla, Kind::kMlaFp8, Kind::kMlaChunked}}};
  std::vector<std::string> out;
  for (const auto& [model, list] : modes)
    for (const std::string& mode : list) {
      bool seen = false;
      for (const KindStats& s : rows)
        seen |= s.model == model && s.mode == mode && (s.tokens > 0 || mode == "IDLE");
      if (!seen) out.push_back(model + ": mode " + mode + " never ran");
    }
  for (const auto& [model, list] : kinds)
    for (Kind k : list) {
      bool seen = false;
      for (const KindStats& s : rows)
        seen |= s.model == model && s.kind == kind_name(k) && s.tokens;
      if (!seen) out.push_back(model + ": layer kind " + kind_name(k) + " never checked");
    }
  return out;
}

std::string TraceReport::describe() const {
  std::string s;
  for (const KindStats& k : rows)
    if (k.failures)
      s += k.model + " " + k.mode + " " + k.kind + ": " + std::to_string(k.failures) + "x, " +
           k.first_failure + "\n";
  for (const std::string& m : missing()) s += m + "\n";
  return s;
}

TraceReport run_trace(const TraceOptions& o, const Progress& progress) {
  FLASHBACK_CHECK(o.page_size >= 1 && o.page_size <= 256, "page_size", "1 .. 256",
                  std::to_string(o.page_size));
  FLASHBACK_CHECK(o.steps >= 0, "steps", ">= 0", std::to_string(o.steps));
  StatsTable stats;
  TraceReport rep;
  const bool gpu = o.device.type == DeviceType::kCUDA || o.gpu_dims;
  const std::vector<ModelSpec> models = {hybrid_model(gpu), mla_model(gpu)};
  const int64_t total = int64_t{o.steps} * static_cast<int64_t>(models.size());
  int64_t done = 0;
  for (size_t m = 0; m < models.size(); ++m) {
    Engine engine(models[m], o, o.seed * 0x9E3779B97F4A7C15ull + m, stats);
    for (int32_t s = 0; s < o.steps; ++s) {
      try {
        engine.step();
      } catch (const Error& e) {
        // The backend refused a valid batch: a failure; the cache no longer matches the
        // histories, so this model's trace stops here.
        KindStats& ks = stats.at(models[m].name, "engine", "error");
        ++ks.failures;
        ks.first_failure = "step " + std::to_string(s) + ": " + e.what();
        done += o.steps - s - 1;
        break;
      }
      if (progress) progress(++done, total);
    }
    rep.forward_passes += engine.forward_passes();
    rep.requests += engine.requests();
    rep.shared_prefix += engine.shared_prefix();
    rep.finished += engine.finished();
    rep.reused_rows += engine.reused_rows();
  }
  rep.rows = std::move(stats.rows());
  // Report order: model, then modes in a serving step's order, then layer kinds.
  const std::vector<std::string> mode_order = {"EXTEND",        "MIXED",
                                               "DECODE",        "DECODE (graph)",
                                               "DRAFT_DECODE",  "DRAFT_DECODE (graph)",
                                               "TARGET_VERIFY", "TARGET_VERIFY (graph)",
                                               "DRAFT_EXTEND",  "IDLE"};
  auto rank = [&](const KindStats& s) {
    const int model = s.model == models[0].name ? 0 : 1;
    const int mode = static_cast<int>(std::find(mode_order.begin(), mode_order.end(), s.mode) -
                                      mode_order.begin());
    int kind = 99;
    for (int k = 0; k <= static_cast<int>(Kind::kMlaChunked); ++k)
      if (s.kind == kind_name(static_cast<Kind>(k))) kind = k;
    return std::tuple(model, mode, kind);
  };
  std::stable_sort(rep.rows.begin(), rep.rows.end(),
                   [&](const KindStats& a, const KindStats& b) { return rank(a) < rank(b); });
  return rep;
}

}  // namespace flashback::trace

// The trace's small serving engine for one model: request admission (with prefix sharing),
// scheduling of forward passes of every mode, slot/page management, and the per-layer check of
// every output against the oracle's recomputation from the request's history.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/trace/device.h"
#include "backend/trace/history.h"
#include "backend/trace/model.h"
#include "backend/trace/trace.h"
#include "flashback/backend.h"
#include "flashback/kv_cache.h"
#include "flashback/metadata.h"

namespace flashback::trace {

/// Per (model, mode, kind) statistics, in first-seen order.
class StatsTable {
 public:
  KindStats& at(const std::string& model, const std::string& mode, const std::string& kind);
  std::vector<KindStats>& rows() { return rows_; }

 private:
  std::vector<KindStats> rows_;
};

class Engine {
 public:
  Engine(ModelSpec model, const TraceOptions& o, uint64_t seed, StatsTable& stats);
  ~Engine();
  void step();  ///< one scheduling step: admissions, then one kind of work (1..5 passes)
  int64_t forward_passes() const { return passes_; }
  int64_t requests() const { return next_id_; }
  int64_t shared_prefix() const { return shared_; }
  int64_t finished() const { return finished_; }
  int64_t reused_rows() const { return reused_; }

 private:
  static constexpr int32_t kMaxRows = 16;    // req_to_token rows; row 0 = graph padding row
  static constexpr int32_t kMaxActive = 10;  // running requests
  static constexpr int32_t kMaxPrompt = 160, kMaxGen = 80, kMaxChunk = 48;
  static constexpr int32_t kDraftSteps = 4;    // EAGLE steps: drafts at 0..2, the last samples
  static constexpr int32_t kVerifyTokens = 4;  // N of TARGET_VERIFY (chain, topk = 1)

  struct Request {
    int32_t id = 0, row = 0, enc = 0, prompt = 0, target = 0;
    int32_t len = 0;    // committed decoder tokens (their K/V are in every target layer)
    int32_t alloc = 0;  // decoder positions holding slots (verify/draft may run ahead of len)
    bool enc_cached = true;
    std::vector<LayerHistory> hist, enc_hist;  // per layer; enc_hist only for cross layers
  };

  struct Row {
    Request* r = nullptr;
    int32_t q_len = 0;  // new tokens
    int32_t first = 0;  // decoder position of the first new token
    int32_t seq = 0;    // the seq_lens entry
    bool write_enc = false;
  };

  struct Pass {
    ForwardMode mode = ForwardMode::kDecode;
    SpecInfo spec;
    std::vector<Row> rows;
    int32_t padded = -1;  // CUDA-graph batch size (rows past rows.size() are padding); -1 = eager
    std::vector<int32_t> layers;
    int32_t q_per_row() const {
      return mode == ForwardMode::kTargetVerify ? spec.num_draft_tokens : 1;
    }
    std::string label() const {
      std::string s = mode == ForwardMode::kDecode && spec.draft_step >= 0
                          ? "DRAFT_DECODE"
                          : forward_mode_name(mode);
      return padded >= 0 ? s + " (graph)" : s;
    }
  };

  struct Batch {
    Tensor rows, seq, ext, prefix, enc, loc, enc_loc;
    ForwardBatch fb;
    std::vector<int32_t> q_off;  // first q row of each batch row
    int32_t total_q = 0;         // incl. CUDA-graph padding rows
    int32_t enc_rows = 0;        // encoder rows written this pass
  };

  void admit();
  void finish_done();
  void ensure_slots(Request& r, int32_t positions);
  void extend_step(bool mixed);
  void decode_step();
  void spec_step();
  void idle_step();
  void corrupt();

  Batch build(const Pass& p);
  void run_layers(const Pass& p, const Batch& b, AttentionBackend& be);
  void run_chunked_mla(const Pass& p, const Batch& b, AttentionBackend& be, int32_t li);
  void check(const Pass& p, int32_t li, const std::vector<int32_t>& q_off, const Tensor& q,
             const Tensor& out, const TensorView& lse);
  AttentionBackend& graph_backend(const Pass& p, int32_t bs);
  MultiStepDraftBackend& draft_graph(int32_t bs);
  // Sizes `slot` for CUDA graphs of bs rows and captures its metadata with a dummy batch of
  // one-token rows (a graph runner captures before any request exists).
  template <typename Backend>
  void capture(Backend& slot, int32_t bs, ForwardMode mode, const SpecInfo& spec);
  BackendConfig backend_config() const;
  // On a GPU (TraceOptions::device): `on_dev` uploads a host tensor and returns its device
  // view, `dv` maps a view of an uploaded one, `download` brings an output back; on the CPU
  // the views are the host ones and `download` does nothing.
  TensorView on_dev(const TensorView& host);
  TensorView dv(const TensorView& host) const;
  void download(const TensorView& host) const;
  LayerCache cache_of(int32_t li) const;
  TensorView req_to_token_view() const;
  std::vector<Request*> pick(std::vector<Request*> from, int max_n);

  ModelSpec model_;
  TraceOptions opt_;
  Rng rng_;
  StatsTable& stats_;
  int32_t chunk_ = 0, max_enc_ = 0, capacity_ = 0;
  ReqToTokenPool r2t_;
  PagedAllocator alloc_;
  std::vector<std::unique_ptr<KVPool>> pools_;  // one per layer
  std::unique_ptr<DeviceCopies> dev_;           // the pools' and each pass's device copies
  std::unique_ptr<AttentionBackend> backend_, draft_extend_;
  std::unique_ptr<MultiStepDraftBackend> draft_;
  std::map<int64_t, std::unique_ptr<AttentionBackend>> graphs_;
  std::map<int32_t, std::unique_ptr<MultiStepDraftBackend>> draft_graphs_;
  std::vector<std::unique_ptr<Request>> active_;
  int32_t next_id_ = 0;
  int64_t passes_ = 0;
  int64_t steps_ = 0;
  int64_t shared_ = 0, finished_ = 0, reused_ = 0;
  std::vector<uint8_t> row_used_ = std::vector<uint8_t>(kMaxRows, 0);
};

}  // namespace flashback::trace

// Test support for the plan layer: a ForwardBatch with its own host arrays and a req_to_token
// whose pages are placed randomly (page 0 reserved), plus random batches for every mode, and the
// DIRECT visible-slot computation — SPEC.md's definitions applied to req_to_token with no plan
// code involved, the independent side of the property test.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "flashback/batch.h"

namespace flashback::plan_test {

struct HostBatch {
  ForwardMode mode = ForwardMode::kDecode;
  SpecInfo spec;
  int32_t page_size = 1;
  int32_t max_reqs = 0, width = 0;  // req_to_token shape
  std::vector<int32_t> r2t;
  std::vector<int32_t> rows, seq, ext, prefix, enc;
  bool has_prefix = false, has_enc = false;
  bool extend_with_prefix = true;  // random_batch(kExtend): false = no prefix anywhere
  bool int64_arrays = false;       // hand the engine's arrays over as int64 (SGLang's dtype)

  int32_t batch_size() const { return static_cast<int32_t>(rows.size()); }
  /// Views of the arrays (valid while this object lives and is not modified).
  ForwardBatch view();
  int32_t q_len(int32_t b) const;
  int32_t kv_len(int32_t b) const;
  int32_t total_q() const;

 private:
  std::vector<int64_t> rows64_, seq64_, ext64_, prefix64_, enc64_;
};

/// Allocates req_to_token [max_reqs, width] with every row's pages placed randomly in the pool.
void make_req_to_token(HostBatch& hb, int32_t max_reqs, int32_t width, std::mt19937_64& rng);

struct RandomSpec {
  int32_t max_bs = 8;
  int32_t max_seq = 40;
  bool encoder = false;
  int32_t max_enc = 12;  // rounded down to multiples of the page size
};

/// A random batch of `mode` (spec fields set by the caller beforehand are kept) on `hb`'s
/// req_to_token; lengths cover 0, 1 and page/chunk boundaries.
void random_batch(HostBatch& hb, ForwardMode mode, const RandomSpec& rs, std::mt19937_64& rng);

/// Slots query `token` sees by SPEC.md's definitions: absolute query position
/// p = kv_len - q_len + i; causal keys 0..p, window keys >= p - window, chunked-local keys >=
/// floor(p / chunk)·chunk; cross attention: the first encoder_lens[b] slots of the row. Decoder
/// key t of request b is req_to_token[row, encoder_lens[b] + t].
std::vector<int32_t> direct_visible_slots(const HostBatch& hb, const Layer& layer, int32_t chunk,
                                          int32_t token);

}  // namespace flashback::plan_test

// The two models the trace runs: their attention layers (one Layer plus the cache dtype each)
// and what a layer kind needs from the engine (encoder K/V, a latent cache, MHA prefix rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashback/batch.h"
#include "flashback/tensor.h"

namespace flashback::trace {

enum class Kind : uint8_t {
  kFull,
  kSliding,
  kLocal,  // chunked-local (BackendConfig::attention_chunk_size)
  kSoftcap,
  kCross,
  kFp8E4M3,
  kFp8E5M2,
  kDraft,       // the EAGLE draft model's layer
  kMla,         // absorbed MLA
  kMlaFp8,      // absorbed MLA over an e4m3 latent cache
  kMlaChunked,  // absorbed in decode/verify; chunked-prefix MHA + merge_state in extend
};
const char* kind_name(Kind k);
constexpr bool is_mla_kind(Kind k) {
  return k == Kind::kMla || k == Kind::kMlaFp8 || k == Kind::kMlaChunked;
}

struct LayerSpec {
  Kind kind;
  Layer layer;
  DType cache_dtype;
  // kMlaChunked: heads and widths of the decompressed MHA q/k and v of the extend path.
  int32_t mha_heads = 0, mha_qk_dim = 0, mha_v_dim = 0;

  bool mla() const { return is_mla_kind(kind); }
  int64_t kv_heads() const { return mla() ? 1 : layer.num_kv_heads; }
  int64_t k_dim() const { return layer.head_dim; }  // MLA: the whole latent row R + Dr
  int64_t out_dim() const { return layer.v_head_dim; }
};

struct ModelSpec {
  std::string name;
  DType act = DType::kBF16;       // q / k / v / out dtype
  std::vector<LayerSpec> layers;  // target layers (layer_id = index)
  bool encoder = false;           // encoder-decoder requests (cross layers)
  int32_t draft_layer = -1;       // index of the EAGLE draft layer in `layers`, -1 = none
  bool use_page_table = false;    // BackendConfig::use_page_table
  bool deterministic = false;     // BackendConfig::deterministic
};

/// Model 1: full, sliding-window, chunked-local, softcap, cross, FP8 e4m3 / e5m2 + a draft layer.
ModelSpec hybrid_model(bool gpu_dims = false);
/// Model 2: MLA (absorbed over an f16 latent, over an FP8 latent, chunked-prefix layer).
ModelSpec mla_model(bool gpu_dims = false);

}  // namespace flashback::trace

#include "backend/trace/model.h"

#include <cmath>

namespace flashback::trace {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kFull:
      return "full";
    case Kind::kSliding:
      return "sliding-window";
    case Kind::kLocal:
      return "chunked-local";
    case Kind::kSoftcap:
      return "softcap";
    case Kind::kCross:
      return "cross";
    case Kind::kFp8E4M3:
      return "fp8-e4m3";
    case Kind::kFp8E5M2:
      return "fp8-e5m2";
    case Kind::kDraft:
      return "eagle-draft";
    case Kind::kMla:
      return "mla";
    case Kind::kMlaFp8:
      return "mla-fp8";
    case Kind::kMlaChunked:
      return "mla-chunked-prefix";
  }
  return "?";
}

namespace {
LayerSpec mha(Kind kind, int32_t hq, int32_t hk, int32_t d, int32_t dv, DType cache) {
  LayerSpec s{kind, Layer{}, cache};
  s.layer.num_q_heads = hq;
  s.layer.num_kv_heads = hk;
  s.layer.head_dim = d;
  s.layer.v_head_dim = dv;
  s.layer.scaling = static_cast<float>(1.0 / std::sqrt(double(d)));
  return s;
}
}  // namespace

ModelSpec hybrid_model(bool gpu_dims) {
  ModelSpec m;
  m.name = "hybrid";
  m.act = DType::kBF16;
  m.encoder = true;
  // Head dims: small on the CPU (a fast trace); on a GPU the ones its kernels are built for
  // (D = Dv in 64, 128, 256), GQA ratios 1 to 4 either way.
  auto d = [&](int32_t cpu, int32_t gpu) { return gpu_dims ? gpu : cpu; };
  auto& L = m.layers;
  L.push_back(mha(Kind::kFull, d(4, 8), 2, d(32, 128), d(32, 128), DType::kBF16));
  L.back().layer.scaling = 0;  // the kernels' default scale, D^-1/2
  L.push_back(mha(Kind::kSliding, 4, 1, 64, 64, DType::kBF16));
  L.back().layer.sliding_window_size = 23;  // a window of 24 keys
  L.push_back(mha(Kind::kLocal, 2, 2, d(32, 128), d(32, 128), DType::kBF16));
  L.back().layer.uses_chunked_local_attention = true;
  // Scale 1 makes logits ~N(0, D) so a cap of 10 actually bends them.
  L.push_back(mha(Kind::kSoftcap, 4, 2, d(32, 256), d(48, 256), DType::kBF16));
  L.back().layer.scaling = 1.0f;
  L.back().layer.logit_cap = 10.0f;
  L.push_back(mha(Kind::kCross, 4, 2, d(32, 128), d(32, 128), DType::kBF16));
  L.back().layer.is_cross_attention = true;
  // Power-of-two scales: stored·scale is exact in bf16, so the history is what the cache holds.
  L.push_back(mha(Kind::kFp8E4M3, 4, 2, d(32, 128), d(32, 128), DType::kF8E4M3));
  L.back().layer.k_scale = 0.5f;
  L.back().layer.v_scale = 2.0f;
  L.push_back(mha(Kind::kFp8E5M2, 4, 1, 64, 64, DType::kF8E5M2));
  L.back().layer.k_scale = 4.0f;
  L.back().layer.v_scale = 0.25f;
  L.push_back(mha(Kind::kDraft, 4, 2, d(32, 128), d(32, 128), DType::kBF16));
  m.draft_layer = static_cast<int32_t>(L.size()) - 1;
  for (size_t i = 0; i < L.size(); ++i) L[i].layer.layer_id = static_cast<int32_t>(i);
  return m;
}

ModelSpec mla_model(bool gpu_dims) {
  ModelSpec m;
  m.name = "mla";
  m.act = DType::kF16;
  m.use_page_table = true;  // the FA3 page-table form; model 1 reads req_to_token directly
  m.deterministic = true;   // batch-invariant kernels; model 1 runs the default ones
  // R and Dr: DeepSeek's 512 and 64 on a GPU (the CUDA kernels' only MLA shape), else 64 and 32.
  const int32_t kLatent = gpu_dims ? 512 : 64, kRope = gpu_dims ? 64 : 32;
  auto mla = [&](Kind kind, DType cache) {
    LayerSpec s{kind, Layer{}, cache};
    s.layer.num_q_heads = gpu_dims ? 16 : 4;
    s.layer.num_kv_heads = 1;
    s.layer.head_dim = kLatent + kRope;
    s.layer.v_head_dim = kLatent;
    s.layer.scaling = static_cast<float>(1.0 / std::sqrt(double(kLatent + kRope)));
    return s;
  };
  m.layers.push_back(mla(Kind::kMla, DType::kF16));
  m.layers.back().layer.scaling = 0;  // default (R + Dr)^-1/2
  m.layers.push_back(mla(Kind::kMlaFp8, DType::kF8E4M3));
  m.layers.back().layer.k_scale = m.layers.back().layer.v_scale = 0.5f;  // one latent scale
  m.layers.push_back(mla(Kind::kMlaChunked, DType::kF16));
  m.layers.back().mha_heads = 4;
  m.layers.back().mha_qk_dim = gpu_dims ? 192 : 48;  // DeepSeek: 192 (128 nope + 64 rope)
  m.layers.back().mha_v_dim = gpu_dims ? 128 : 32;   // DeepSeek: 128
  for (size_t i = 0; i < m.layers.size(); ++i) m.layers[i].layer.layer_id = static_cast<int32_t>(i);
  return m;
}

}  // namespace flashback::trace

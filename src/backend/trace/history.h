// A request's token history per layer — what the KV cache holds for it, by decoder position —
// and the dense recomputation of a layer's outputs from it with THE oracle
// (reference::ragged_attention), never a second hand-written attention.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "backend/trace/model.h"
#include "flashback/tensor.h"

namespace flashback::trace {

/// Random values of unit variance (uniform: cheap, and every code path sees the same spread).
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(g_); }
  float value() { return (static_cast<float>(g_() >> 40) * 0x1p-24f * 2.0f - 1.0f) * 1.7320508f; }
  uint64_t next() { return g_(); }
  std::mt19937_64& engine() { return g_; }

 private:
  std::mt19937_64 g_;
};

/// Fills a contiguous f32/f16/bf16 tensor with rng.value().
void fill_random(const Tensor& t, Rng& rng);

/// One layer of one request: K/V rows (MLA: latent rows in k) by position, already rounded the way
/// the cache stores them (FP8: fp8(x / scale) · scale, exact in the activation dtype because the
/// scales are powers of two), kept in the activation dtype so the oracle reads exactly what the
/// kernels read. kMlaChunked also keeps the decompressed MHA rows its extend path passes in.
struct LayerHistory {
  Tensor k, v;
  Tensor mha_k, mha_v;
  std::vector<uint8_t> mha_valid;
};

LayerHistory make_history(const LayerSpec& s, DType act, int64_t capacity);
/// Position `pos` := row `row` of k (and v) as the cache stores it.
void record(LayerHistory& h, const LayerSpec& s, int64_t pos, const TensorView& k,
            const TensorView& v, int64_t row);
/// kMlaChunked: position `pos` := row `row` of the decompressed MHA k/v the extend path passes.
void record_mha(LayerHistory& h, int64_t pos, const TensorView& k, const TensorView& v,
                int64_t row);
/// kMlaChunked: the decompressed MHA rows of a prefix position computed by no extend pass of this
/// trace (decoded tokens) are random, drawn once and then fixed, as a model's would be.
void ensure_mha(LayerHistory& h, int64_t pos, Rng& rng);
/// Prefix sharing: dst's first n positions are src's.
void copy_prefix(LayerHistory& dst, const LayerHistory& src, int64_t n);

/// The oracle's output and LSE (f32) of queries q [n, Hq, Dq] sitting at the last n of kv_len
/// positions over keys k [kv_len, Hk, Dq] / v [kv_len, Hk, Dv]. `chunk` > 0: chunked-local
/// attention (a query at p sees [p - p mod chunk, p]); otherwise causal (unless !causal) with the
/// layer's window and softcap.
void oracle(const TensorView& q, const TensorView& k, const TensorView& v, const Layer& layer,
            bool causal, int32_t chunk, const Tensor& out, const Tensor& lse);

}  // namespace flashback::trace

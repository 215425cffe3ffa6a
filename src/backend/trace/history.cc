#include "backend/trace/history.h"

#include <cstring>

#include "flashback/numeric.h"
#include "flashback/ops.h"

namespace flashback::trace {

namespace {

float load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default:
      throw Error("trace", "an f32/f16/bf16 activation", dtype_name(t));
  }
}

void store(DType t, void* base, int64_t i, float x) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[i] = x;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(x);
      return;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16(x);
      return;
    default:
      throw Error("trace", "an f32/f16/bf16 activation", dtype_name(t));
  }
}

// What the cache returns for x: rounded to the cache dtype (FP8: x / scale in fp32, as the store
// does) and dequantised as the kernels do (stored · descale).
float through_cache(DType cache, float x, float scale) {
  switch (cache) {
    case DType::kF32:
      return x;
    case DType::kBF16:
      return bf16_to_f32(f32_to_bf16(x));
    case DType::kF16:
      return f16_to_f32(f32_to_f16(x));
    case DType::kF8E4M3:
      return fp8_e4m3_to_f32(f32_to_fp8_e4m3(x / scale)) * scale;
    case DType::kF8E5M2:
      return fp8_e5m2_to_f32(f32_to_fp8_e5m2(x / scale)) * scale;
    default:
      throw Error("trace", "a float cache dtype", dtype_name(cache));
  }
}

void copy_row(const TensorView& src, int64_t row, const Tensor& dst, int64_t pos, DType cache,
              float scale) {
  // src: [T, H, D] with the last dim contiguous; dst: contiguous [cap, H, D].
  const int64_t H = src.shape[1], D = src.shape[2];
  const int64_t es = dtype_size(src.dtype);
  for (int64_t h = 0; h < H; ++h) {
    const char* s =
        static_cast<const char*>(src.data) + (row * src.strides[0] + h * src.strides[1]) * es;
    const int64_t o = (pos * H + h) * D;
    for (int64_t d = 0; d < D; ++d)
      store(dst.dtype(), dst.data(), o + d, through_cache(cache, load(src.dtype, s, d), scale));
  }
}

}  // namespace

void fill_random(const Tensor& t, Rng& rng) {
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store(t.dtype(), t.data(), i, rng.value());
}

LayerHistory make_history(const LayerSpec& s, DType act, int64_t capacity) {
  LayerHistory h;
  h.k = Tensor(act, {capacity, s.kv_heads(), s.k_dim()});
  h.k.zero();
  if (!s.mla()) {
    h.v = Tensor(act, {capacity, s.kv_heads(), s.layer.v_head_dim});
    h.v.zero();
  }
  if (s.kind == Kind::kMlaChunked) {
    h.mha_k = Tensor(act, {capacity, s.mha_heads, s.mha_qk_dim});
    h.mha_v = Tensor(act, {capacity, s.mha_heads, s.mha_v_dim});
    h.mha_valid.assign(static_cast<size_t>(capacity), 0);
  }
  return h;
}

void record(LayerHistory& h, const LayerSpec& s, int64_t pos, const TensorView& k,
            const TensorView& v, int64_t row) {
  FLASHBACK_CHECK(pos >= 0 && pos < h.k.size(0), "trace.record", "a position within capacity",
                  std::to_string(pos));
  copy_row(k, row, h.k, pos, s.cache_dtype, s.layer.k_scale);
  if (!s.mla()) copy_row(v, row, h.v, pos, s.cache_dtype, s.layer.v_scale);
}

void record_mha(LayerHistory& h, int64_t pos, const TensorView& k, const TensorView& v,
                int64_t row) {
  copy_row(k, row, h.mha_k, pos, h.mha_k.dtype(), 1.0f);
  copy_row(v, row, h.mha_v, pos, h.mha_v.dtype(), 1.0f);
  h.mha_valid[pos] = 1;
}

void ensure_mha(LayerHistory& h, int64_t pos, Rng& rng) {
  if (h.mha_valid[pos]) return;
  for (const Tensor* t : {&h.mha_k, &h.mha_v}) {
    const int64_t w = t->numel() / t->size(0);
    for (int64_t i = 0; i < w; ++i) store(t->dtype(), t->data(), pos * w + i, rng.value());
  }
  h.mha_valid[pos] = 1;
}

void copy_prefix(LayerHistory& dst, const LayerHistory& src, int64_t n) {
  auto rows = [n](Tensor& d, const Tensor& s) {
    if (!s.data()) return;
    const int64_t row_bytes = s.nbytes() / s.size(0);
    std::memcpy(d.data(), s.data(), static_cast<size_t>(n * row_bytes));
  };
  rows(dst.k, src.k);
  rows(dst.v, src.v);
  rows(dst.mha_k, src.mha_k);
  rows(dst.mha_v, src.mha_v);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(src.mha_valid.size()); ++i)
    dst.mha_valid[i] = src.mha_valid[i];
}

void oracle(const TensorView& q, const TensorView& k, const TensorView& v, const Layer& layer,
            bool causal, int32_t chunk, const Tensor& out, const Tensor& lse) {
  const int64_t n = q.shape[0], kv_len = k.shape[0];
  if (n == 0) return;
  const Exec ref{nullptr, 1, Exec::CpuImpl::kReference};
  // One oracle call over queries [i0, i1) whose keys are [k0, k1).
  auto run = [&](int64_t i0, int64_t i1, int64_t k0, int64_t k1, bool is_causal) {
    int32_t cu_q[2] = {0, static_cast<int32_t>(i1 - i0)};
    int32_t cu_k[2] = {0, static_cast<int32_t>(k1 - k0)};
    RaggedAttentionParams p;
    p.q = q.slice(0, i0, i1);
    p.k = k.slice(0, k0, k1);
    p.v = v.slice(0, k0, k1);
    p.cu_seqlens_q = TensorView(cu_q, DType::kI32, {2});
    p.cu_seqlens_k = TensorView(cu_k, DType::kI32, {2});
    p.out = out.view().slice(0, i0, i1);
    p.lse = lse.view().slice(0, i0, i1);
    p.softmax_scale = layer.scaling;
    p.softcap = layer.logit_cap;
    p.causal = is_causal;
    if (is_causal && layer.sliding_window_size > -1) p.window_left = layer.sliding_window_size;
    ragged_attention(p, ref);
  };
  if (chunk <= 0) {
    run(0, n, 0, kv_len, causal);
    return;
  }
  // Chunked-local: the queries of one chunk share its first key; bottom-right causal within it.
  for (int64_t i0 = 0; i0 < n;) {
    const int64_t pos0 = kv_len - n + i0, c0 = pos0 - pos0 % chunk;
    int64_t i1 = i0 + 1;
    while (i1 < n && kv_len - n + i1 < c0 + chunk) ++i1;
    run(i0, i1, c0, kv_len - n + i1, true);
    i0 = i1;
  }
}

}  // namespace flashback::trace

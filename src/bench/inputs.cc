#include "bench/inputs.h"

#include <sys/mman.h>

#include <cmath>
#include <cstdint>

#include "flashback/numeric.h"

namespace flashback::bench {
namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename T, typename Convert>
void fill_typed(T* data, int64_t n, uint64_t seed, double stddev, Convert convert) {
  constexpr int64_t kBlock = 1 << 14;
  // Four 16-bit uniforms summed: mean 2, variance 4/12, so scale by sqrt(3) for unit variance.
  const double scale = stddev * std::sqrt(3.0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kBlock - 1) / kBlock; ++b) {
    uint64_t s = seed ^ (static_cast<uint64_t>(b) * 0xD1B54A32D192ED03ull);
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) {
      const uint64_t r = splitmix(s);
      const double u =
          ((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48)) / 65536.0;
      data[i] = convert(static_cast<float>((u - 2.0) * scale));
    }
  }
}

void fill_cache(Tensor& t, DType kv_dtype, uint64_t seed) {
  // As make_paged: fp8 caches spread over the format's range; its descales bring them back.
  const double sd = kv_dtype == DType::kF8E4M3 ? 24.0 : kv_dtype == DType::kF8E5M2 ? 2000.0 : 1.0;
  fill_random(t, seed, sd);
}

RaggedData make_ragged(const Workload& w, uint64_t seed) {
  RaggedData d;
  const int64_t B = w.batch, Hq = w.heads_q, Hk = w.heads_kv, D = w.head_dim, Dv = w.head_dim_v;
  d.cu_seqlens_q = Tensor(DType::kI32, {B + 1});
  d.cu_seqlens_k = Tensor(DType::kI32, {B + 1});
  int32_t* cq = d.cu_seqlens_q.ptr<int32_t>();
  int32_t* ck = d.cu_seqlens_k.ptr<int32_t>();
  cq[0] = ck[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    cq[b + 1] = cq[b] + w.q_len;
    ck[b + 1] = ck[b] + w.kv_lens[static_cast<size_t>(b)];
  }
  const int64_t total_q = cq[B], total_k = ck[B];
  d.q = Tensor(w.dtype, {total_q, Hq, D});
  d.k = Tensor(w.kv_dtype, {total_k, Hk, D});
  d.v = Tensor(w.kv_dtype, {total_k, Hk, Dv});
  for (Tensor* t : {&d.q, &d.k, &d.v}) advise_huge_pages(t->data(), t->nbytes());
  fill_random(d.q, seed * 3 + 1, 1.0);
  fill_random(d.k, seed * 3 + 2, 1.0);
  fill_random(d.v, seed * 3 + 3, 1.0);
  d.out = Tensor(w.dtype, {total_q, Hq, Dv});
  d.out.poison();
  // The MLA prefix-chunk calls this mode stands for return LSE for merge_state.
  d.lse = Tensor(DType::kF32, {total_q, Hq});
  d.lse.poison();
  RaggedAttentionParams& p = d.params;
  p.q = d.q;
  p.k = d.k;
  p.v = d.v;
  p.cu_seqlens_q = d.cu_seqlens_q;
  p.cu_seqlens_k = d.cu_seqlens_k;
  p.out = d.out;
  p.lse = d.lse;
  p.causal = w.effective_causal();
  p.window_left = w.window_left;
  p.softcap = w.softcap;
  return d;
}

}  // namespace

void advise_huge_pages(void* p, int64_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi =
      (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);  // advice only
}

void fill_random(Tensor& t, uint64_t seed, double stddev) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32:
      return fill_typed(t.ptr<float>(), n, seed, stddev, [](float x) { return x; });
    case DType::kBF16:
      return fill_typed(t.ptr<uint16_t>(), n, seed, stddev, [](float x) { return f32_to_bf16(x); });
    case DType::kF16:
      return fill_typed(t.ptr<uint16_t>(), n, seed, stddev, [](float x) { return f32_to_f16(x); });
    case DType::kF8E4M3:
      return fill_typed(t.ptr<uint8_t>(), n, seed, stddev,
                        [](float x) { return f32_to_fp8_e4m3(x); });
    case DType::kF8E5M2:
      return fill_typed(t.ptr<uint8_t>(), n, seed, stddev,
                        [](float x) { return f32_to_fp8_e5m2(x); });
    default:
      throw Error("fill_random.dtype", "a float dtype", dtype_name(t.dtype()));
  }
}

testing::AttentionCase to_case(const Workload& w) {
  testing::AttentionCase c;
  c.name = w.name;
  for (int l : w.kv_lens) {
    if (w.chunk <= 0) {
      c.q_lens.push_back(w.q_len);
      c.kv_lens.push_back(l);
      continue;
    }
    // Chunked local attention: the queries at positions [l - q_len, l) split at multiples of
    // chunk; each piece attends causally to its chunk's keys up to its last query.
    const int64_t first = std::max<int64_t>(0, int64_t{l} - w.q_len);
    for (int64_t start = first; start < l;) {
      const int64_t chunk_begin = start / w.chunk * w.chunk;
      const int64_t end = std::min<int64_t>(l, chunk_begin + w.chunk);
      c.q_lens.push_back(static_cast<int>(end - start));
      c.kv_lens.push_back(static_cast<int>(end - chunk_begin));
      start = end;
    }
  }
  c.heads_q = w.heads_q;
  c.heads_kv = w.heads_kv;
  c.mla = w.mla;
  // MLA workloads name the latent+rope width as head_dim (576 = 512 + 64); the case wants the
  // rope part as head_dim and the latent as head_dim_v.
  c.head_dim = w.mla ? w.head_dim - w.head_dim_v : w.head_dim;
  c.head_dim_v = w.head_dim_v;
  c.page_size = w.page_size;
  c.dtype = w.dtype;
  c.kv_dtype = w.kv_dtype;
  c.causal = w.effective_causal();
  c.window_left = w.window_left;
  c.softcap = w.softcap;
  c.with_lse = false;          // decode/extend callers of the engine do not ask for LSE
  c.per_head_descale = false;  // SGLang passes one per-layer scale, broadcast (stride 0)
  c.fill_values = false;       // make_inputs fills them, ~50x faster
  return c;
}

int64_t Inputs::nbytes() const {
  int64_t n = 0;
  if (ragged) {
    for (const Tensor* t : {&rag.q, &rag.k, &rag.v, &rag.out, &rag.lse}) n += t->nbytes();
  } else {
    for (const Tensor* t :
         {&paged.q, &paged.k_cache, &paged.v_cache, &paged.out, &paged.page_table})
      n += t->nbytes();
  }
  return n;
}

Inputs make_inputs(const Workload& w, uint64_t seed) {
  Inputs in;
  if (w.mode == Mode::kRagged) {
    in.ragged = true;
    in.rag = make_ragged(w, seed);
    return in;
  }
  const testing::AttentionCase c = to_case(w);
  in.paged = testing::make_paged(c, seed);
  // make_paged left q and the caches untouched (fill_values = false): advise before filling.
  for (Tensor* t : {&in.paged.q, &in.paged.k_cache, &in.paged.v_cache})
    if (t->data() != nullptr) advise_huge_pages(t->data(), t->nbytes());
  fill_random(in.paged.q, seed * 3 + 1, 1.0);
  fill_cache(in.paged.k_cache, w.kv_dtype, seed * 3 + 2);
  if (!w.mla) fill_cache(in.paged.v_cache, w.kv_dtype, seed * 3 + 3);
  return in;
}

}  // namespace flashback::bench

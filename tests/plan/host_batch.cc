#include "host_batch.h"

#include <algorithm>
#include <numeric>

namespace flashback::plan_test {
namespace {

TensorView view_of(std::vector<int32_t>& v, std::vector<int64_t>& v64, bool as64) {
  if (!as64) return TensorView(v.data(), DType::kI32, {static_cast<int64_t>(v.size())});
  v64.assign(v.begin(), v.end());
  return TensorView(v64.data(), DType::kI64, {static_cast<int64_t>(v64.size())});
}

}  // namespace

ForwardBatch HostBatch::view() {
  ForwardBatch fb;
  fb.forward_mode = mode;
  fb.batch_size = batch_size();
  fb.spec = spec;
  fb.req_to_token = TensorView(r2t.data(), DType::kI32, {max_reqs, width});
  fb.req_pool_indices = view_of(rows, rows64_, int64_arrays);
  fb.seq_lens = view_of(seq, seq64_, int64_arrays);
  if (is_extend_like(mode)) fb.extend_seq_lens = view_of(ext, ext64_, int64_arrays);
  if (is_extend_like(mode) && has_prefix)
    fb.extend_prefix_lens = view_of(prefix, prefix64_, int64_arrays);
  if (has_enc) fb.encoder_lens = view_of(enc, enc64_, int64_arrays);
  return fb;
}

int32_t HostBatch::q_len(int32_t b) const {
  if (is_decode_or_idle(mode)) return 1;
  if (mode == ForwardMode::kTargetVerify) return spec.num_draft_tokens;
  return ext[b];
}

int32_t HostBatch::kv_len(int32_t b) const {
  if (is_decode_or_idle(mode)) return seq[b] + spec.draft_step + 1;
  if (mode == ForwardMode::kTargetVerify) return seq[b] + spec.num_draft_tokens;
  return seq[b];
}

int32_t HostBatch::total_q() const {
  int32_t n = 0;
  for (int32_t b = 0; b < batch_size(); ++b) n += q_len(b);
  return n;
}

void make_req_to_token(HostBatch& hb, int32_t max_reqs, int32_t width, std::mt19937_64& rng) {
  const int32_t P = hb.page_size;
  const int32_t pages_per_row = (width + P - 1) / P;
  std::vector<int32_t> ids(static_cast<size_t>(max_reqs) * pages_per_row);
  std::iota(ids.begin(), ids.end(), 1);  // page 0 is the reserved padding page
  std::shuffle(ids.begin(), ids.end(), rng);
  hb.max_reqs = max_reqs;
  hb.width = width;
  hb.r2t.resize(static_cast<size_t>(max_reqs) * width);
  for (int32_t r = 0; r < max_reqs; ++r)
    for (int32_t t = 0; t < width; ++t)
      hb.r2t[static_cast<size_t>(r) * width + t] = ids[r * pages_per_row + t / P] * P + t % P;
}

void random_batch(HostBatch& hb, ForwardMode mode, const RandomSpec& rs, std::mt19937_64& rng) {
  auto uni = [&](int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
  };
  hb.mode = mode;
  const int32_t B = mode == ForwardMode::kIdle ? 0 : uni(0, rs.max_bs);
  const int32_t P = hb.page_size;
  hb.rows.assign(B, 0);
  hb.seq.assign(B, 0);
  hb.ext.assign(B, 0);
  hb.prefix.assign(B, 0);
  hb.enc.assign(B, 0);
  hb.has_enc = rs.encoder;
  hb.has_prefix = false;
  // Distinct rows, as an engine has them.
  std::vector<int32_t> all(hb.max_reqs);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  int32_t extra = 0;
  if (is_decode_or_idle(mode)) extra = hb.spec.draft_step + 1;
  if (mode == ForwardMode::kTargetVerify) extra = hb.spec.num_draft_tokens;
  for (int32_t b = 0; b < B; ++b) {
    hb.rows[b] = all[b % hb.max_reqs];
    if (rs.encoder) hb.enc[b] = uni(0, rs.max_enc / P) * P;
    const int32_t room = std::min(rs.max_seq, hb.width - hb.enc[b] - extra);
    // Favour the edges: 0, 1 and exact page multiples.
    const int32_t kind = uni(0, 5);
    int32_t s = kind == 0   ? std::min(room, uni(0, 1))
                : kind == 1 ? std::min(room, uni(0, 4) * P)
                            : uni(0, room);
    if (mode == ForwardMode::kTargetVerify) s = std::max(s, std::min(room, 1));
    hb.seq[b] = s;
    if (is_extend_like(mode)) {
      if (mode == ForwardMode::kExtend && !hb.extend_with_prefix)
        hb.ext[b] = s;
      else if (mode == ForwardMode::kMixed && uni(0, 1) == 0)
        hb.ext[b] = std::min(s, 1);
      else
        hb.ext[b] = uni(0, s);
      hb.prefix[b] = s - hb.ext[b];
    }
  }
  if (is_extend_like(mode)) hb.has_prefix = mode != ForwardMode::kDraftExtend;
}

std::vector<int32_t> direct_visible_slots(const HostBatch& hb, const Layer& layer, int32_t chunk,
                                          int32_t token) {
  int32_t b = 0, start = 0;
  while (start + hb.q_len(b) <= token) start += hb.q_len(b++);
  const int32_t i = token - start;
  const int32_t* row = hb.r2t.data() + static_cast<size_t>(hb.rows[b]) * hb.width;
  const int32_t enc = hb.has_enc ? hb.enc[b] : 0;
  std::vector<int32_t> out;
  if (layer.is_cross_attention) {
    for (int32_t c = 0; c < enc; ++c) out.push_back(row[c]);
    return out;
  }
  const int32_t p = hb.kv_len(b) - hb.q_len(b) + i;
  int32_t lo = 0;
  if (layer.sliding_window_size > -1) lo = std::max(lo, p - layer.sliding_window_size);
  if (layer.uses_chunked_local_attention && p >= 0) lo = std::max(lo, p / chunk * chunk);
  for (int32_t t = lo; t <= p; ++t) out.push_back(row[enc + t]);
  return out;
}

}  // namespace flashback::plan_test

#include "plan/rows.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/validate.h"

namespace flashback::plan {

using detail::concat;

IndexArray host_index(const TensorView& main, const TensorView& cpu, const char* name, int64_t n,
                      bool required) {
  const TensorView& t = cpu.defined() ? cpu : main;
  if (!t.defined()) {
    FLASHBACK_CHECK(!required, name, concat("an int32/int64 array of ", n, " entries"), "none");
    return {};
  }
  // Not expect_rank: an empty batch may come with a null data pointer.
  FLASHBACK_CHECK(t.ndim == 1, name, "1 dimension", concat(t.ndim, " (shape ", t.shape_str(), ")"));
  detail::expect_dtype(t, name, {DType::kI32, DType::kI64});
  FLASHBACK_CHECK(t.device.type == DeviceType::kCPU, name,
                  "a host copy (the host plan reads it; pass the *_cpu view)", to_string(t.device));
  FLASHBACK_CHECK(t.shape[0] == n, name, concat(n, " entries (batch_size)"),
                  concat(t.shape[0], " entries"));
  FLASHBACK_CHECK(n == 0 || t.data != nullptr, name, "data", "a null pointer");
  return {t.data, t.dtype == DType::kI64, t.strides[0], n, true};
}

BatchRows::BatchRows(const PlanConfig& cfg, const ForwardBatch& batch, int32_t padded_bs,
                     int64_t max_context_len)
    : cfg_(cfg), batch_(batch), real_bs_(batch.batch_size), padded_bs_(padded_bs) {
  const ForwardMode mode = batch.forward_mode;
  FLASHBACK_CHECK(mode <= ForwardMode::kMixed, "forward_mode", "a ForwardMode value",
                  concat(static_cast<int>(mode)));
  FLASHBACK_CHECK(real_bs_ >= 0, "batch_size", ">= 0", concat(real_bs_));
  FLASHBACK_CHECK(padded_bs_ >= real_bs_, "batch_size",
                  concat("<= ", padded_bs_, " (the bound CUDA-graph batch size)"),
                  concat(real_bs_));

  const TensorView& r2t = batch.req_to_token;
  detail::expect_rank(r2t, "req_to_token", 2);
  detail::expect_dtype(r2t, "req_to_token", {DType::kI32});
  detail::expect_last_contiguous(r2t, "req_to_token");
  // Only an explicit page table reads req_to_token's contents; otherwise its shape is enough
  // and it may live on the device (kernels read it there).
  FLASHBACK_CHECK(r2t.device.type == DeviceType::kCPU || !cfg.materialize_page_table,
                  "req_to_token", "a host tensor (an explicit page table is built from it)",
                  to_string(r2t.device));
  const int64_t max_reqs = r2t.shape[0];
  int64_t limit = r2t.shape[1];
  if (max_context_len >= 0) limit = std::min(limit, max_context_len);

  // The mode's definition (SPEC.md §3): queries per request and keys on top of seq_lens.
  const SpecInfo& spec = batch.spec;
  FLASHBACK_CHECK(spec.draft_step >= -1, "spec.draft_step", ">= -1", concat(spec.draft_step));
  FLASHBACK_CHECK(spec.draft_step < 0 || mode == ForwardMode::kDecode, "spec.draft_step",
                  "-1 outside DECODE (draft decode is DECODE with a step)",
                  concat(spec.draft_step, " in ", forward_mode_name(mode)));
  std::string extra_what;
  if (is_decode_or_idle(mode)) {
    q_fixed_ = 1;
    kv_extra_ = spec.draft_step + 1;  // 0 for plain decode
    if (spec.draft_step >= 0) extra_what = " + draft_step + 1";
  } else if (mode == ForwardMode::kTargetVerify) {
    FLASHBACK_CHECK(spec.num_draft_tokens >= 1, "spec.num_draft_tokens", ">= 1 in TARGET_VERIFY",
                    concat(spec.num_draft_tokens));
    q_fixed_ = kv_extra_ = spec.num_draft_tokens;
    extra_what = " + num_draft_tokens";
  }

  rows_ = host_index(batch.req_pool_indices, batch.req_pool_indices_cpu, "req_pool_indices",
                     real_bs_, true);
  seq_ = host_index(batch.seq_lens, batch.seq_lens_cpu, "seq_lens", real_bs_, true);
  enc_ = host_index(batch.encoder_lens, batch.encoder_lens_cpu, "encoder_lens", real_bs_, false);
  IndexArray prefix;
  if (q_fixed_ == 0) {
    ext_ = host_index(batch.extend_seq_lens, batch.extend_seq_lens_cpu, "extend_seq_lens", real_bs_,
                      true);
    prefix = host_index(batch.extend_prefix_lens, batch.extend_prefix_lens_cpu,
                        "extend_prefix_lens", real_bs_, false);
  }

  const int64_t P = cfg.page_size;
  auto check_lengths = [&](int64_t b, int64_t enc, int64_t seq, const char* what) {
    FLASHBACK_CHECK(enc >= 0 && enc <= limit, "encoder_lens",
                    concat("0 <= encoder_lens <= max_context_len ", limit),
                    concat(enc, " at ", what, " ", b));
    FLASHBACK_CHECK(P == 1 || enc % P == 0, "encoder_lens",
                    concat("a multiple of page_size ", P, " (encoder regions end on a page)"),
                    concat(enc, " at ", what, " ", b));
    FLASHBACK_CHECK(seq >= 0, "seq_lens", ">= 0", concat(seq, " at ", what, " ", b));
    FLASHBACK_CHECK(
        enc + seq + kv_extra_ <= limit, "seq_lens",
        concat("encoder_lens + seq_lens", extra_what, " <= max_context_len ", limit),
        concat(enc, " + ", seq, extra_what.empty() ? "" : " + ",
               extra_what.empty() ? "" : std::to_string(kv_extra_), " at ", what, " ", b));
  };

  int64_t total_q = 0;
  for (int64_t b = 0; b < real_bs_; ++b) {
    const int64_t row = rows_[b];
    FLASHBACK_CHECK(row >= 0 && row < max_reqs, "req_pool_indices",
                    concat("a row of req_to_token in [0, ", max_reqs, ")"),
                    concat(row, " at request ", b));
    const int64_t seq = seq_[b];
    check_lengths(b, enc_.defined() ? enc_[b] : 0, seq, "request");
    if (q_fixed_ == 0) {
      const int64_t ext = ext_[b];
      FLASHBACK_CHECK(ext >= 0 && ext <= seq, "extend_seq_lens",
                      "0 <= extend_seq_lens <= seq_lens (extend within the sequence)",
                      concat(ext, " with seq_lens ", seq, " at request ", b));
      if (prefix.defined())
        FLASHBACK_CHECK(prefix[b] >= 0 && prefix[b] + ext == seq, "extend_prefix_lens",
                        "extend_prefix_lens + extend_seq_lens == seq_lens",
                        concat(prefix[b], " + ", ext, " vs ", seq, " at request ", b));
      total_q += ext;
    } else {
      total_q += q_fixed_;
    }
  }
  if (padded_bs_ > real_bs_) {
    const int64_t pad_row = cfg.cuda_graph_padding_row;
    FLASHBACK_CHECK(pad_row >= 0 && pad_row < max_reqs, "cuda_graph_padding_row",
                    concat("a row of req_to_token in [0, ", max_reqs, ")"), concat(pad_row));
    FLASHBACK_CHECK(q_fixed_ > 0, "forward_mode", "a mode with fixed queries per request to pad",
                    forward_mode_name(mode));
    check_lengths(real_bs_, 0, cfg.cuda_graph_fill_seq_len, "padded row");
    pad_kv_ = cfg.cuda_graph_fill_seq_len + kv_extra_;
    total_q += int64_t{q_fixed_} * (padded_bs_ - real_bs_);
  }
  FLASHBACK_CHECK(total_q <= std::numeric_limits<int32_t>::max(), "extend_seq_lens",
                  "a total of queries that fits int32", concat(total_q));
}

}  // namespace flashback::plan

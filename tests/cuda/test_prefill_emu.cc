// The prefill kernel (src/cuda/prefill/kernel.cuh, unmodified) run on the CPU under the
// emulation of prefill_emu/emu_rt.h, against the oracle: tiling, masking and tile skipping,
// paging (page ids, slots, table rows, kv_start), GQA, online softmax, softcap, FP8 widening and
// descales, LSE layouts, empty rows, the query-block loop behind a short max_seqlen_q hint, and
// the host-side parameter mapping (make_params.h). Needs no GPU (label cpu); the GPU tests
// (test_prefill.cc) check the same cases on real tensor cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/validate.h"
#include "cuda/prefill/kernel.cuh"
#include "cuda/prefill/make_params.h"
#include "emu_rt.h"  // first: stands in for the CUDA execution model
#include "flashback/ops.h"
#include "testing/case.h"

namespace flashback::cuda::prefill {
// The kernel's `extern __shared__` buffer; CTAs run one at a time.
alignas(16) unsigned char smem[227 * 1024];
}  // namespace flashback::cuda::prefill

namespace flashback {
namespace {

using cuda::KvKind;
using cuda::PrefillParams;
using testing::AttentionCase;
using testing::PagedData;

const Exec kRef{nullptr, 0, Exec::CpuImpl::kReference};

template <int D, int DV, typename T, KvKind KV>
void emu_run(const PrefillParams& p) {
  using Cfg = cuda::PrefillConfig<D, DV, KV != KvKind::kSame>;
  const emu::Dim3 grid{static_cast<unsigned>(p.m_blocks), static_cast<unsigned>(p.heads_q),
                       static_cast<unsigned>(p.batch)};
  emu::launch(grid, Cfg::THREADS, [&] { cuda::prefill::prefill_kernel<Cfg, T, KV>(p); });
}

template <int D, int DV>
void emu_dispatch(PrefillParams p, DType q, DType kv) {
  const bool bf = q == DType::kBF16;
  const KvKind k = kv == DType::kF8E4M3   ? KvKind::kE4M3
                   : kv == DType::kF8E5M2 ? KvKind::kE5M2
                                          : KvKind::kSame;
  auto go = [&]<typename T>() {
    if (k == KvKind::kE4M3) return emu_run<D, DV, T, KvKind::kE4M3>(p);
    if (k == KvKind::kE5M2) return emu_run<D, DV, T, KvKind::kE5M2>(p);
    emu_run<D, DV, T, KvKind::kSame>(p);
  };
  if (bf)
    go.template operator()<cuda::bf16>();
  else
    go.template operator()<cuda::f16>();
}

template <int D, int DV>
int rows() {
  return cuda::PrefillConfig<D, DV, false>::BM;
}

void run_paged(const PagedAttentionParams& p) {
  const detail::PagedShape s = detail::validate(p);
  const int64_t d = s.head_dim, dv = s.head_dim_v;
  const DType q = p.q.dtype, kv = p.k_cache.dtype;
  if (d == 64 && dv == 64)
    return emu_dispatch<64, 64>(cuda::prefill::paged_params(p, s, rows<64, 64>()), q, kv);
  if (d == 80 && dv == 80)
    return emu_dispatch<80, 80>(cuda::prefill::paged_params(p, s, rows<80, 80>()), q, kv);
  if (d == 128 && dv == 128)
    return emu_dispatch<128, 128>(cuda::prefill::paged_params(p, s, rows<128, 128>()), q, kv);
  if (d == 256 && dv == 256)
    return emu_dispatch<256, 256>(cuda::prefill::paged_params(p, s, rows<256, 256>()), q, kv);
  FAIL() << "no emulated instance for D=" << d << " Dv=" << dv;
}

uint64_t next_seed() {
  static uint64_t s = 0xe500;
  return ++s;
}

void check(const AttentionCase& c, int hint = -1,
           const std::function<void(PagedData&)>& mutate = {}) {
  SCOPED_TRACE(c.describe());
  PagedData d = testing::make_paged(c, next_seed());
  d.params.max_seqlen_q = hint < 0 ? *std::max_element(c.q_lens.begin(), c.q_lens.end()) : hint;
  if (mutate) mutate(d);
  PagedData ref = testing::with_fresh_outputs(d);
  paged_attention(ref.params, kRef);
  run_paged(d.params);
  const auto cmp = testing::compare(d.params.out, ref.params.out, d.params.lse, ref.params.lse);
  double big = 0;
  for (int64_t i = 0; i < ref.out.numel(); ++i) big = std::max(big, std::abs(ref.out.get(i)));
  EXPECT_TRUE(cmp.ok) << cmp.why << " (rel " << cmp.rel_l2 << ", max abs " << cmp.max_abs
                      << ", lse " << cmp.lse_max_abs << ", largest |ref| " << big << ")";
}

// Empty entries, one query, 17 and 130 queries (two 128-row blocks at D = 64), prefixes across
// page boundaries, and q_len > kv_len (causal rows with no key).
AttentionCase small(int D, int P) {
  AttentionCase c;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.head_dim = D;
  c.page_size = P;
  c.q_lens = {0, 1, 17, 130, 20};
  c.kv_lens = {7, 200, 17 + P, 130 + 3 * P + 5, 5};
  return c;
}

TEST(PrefillEmu, PagedD64Variants) {
  {
    AttentionCase c = small(64, 16);
    c.name = "causal";
    check(c);
  }
  {
    AttentionCase c = small(64, 1);
    c.name = "non-causal, P = 1, transposed lse, fp16";
    c.causal = false;
    c.lse_transposed = true;
    c.dtype = c.kv_dtype = DType::kF16;
    check(c);
  }
  {
    AttentionCase c = small(64, 16);
    c.name = "window + softcap + slots";
    c.window_left = 45;
    c.softcap = 4.f;
    c.table_holds_slots = true;
    check(c);
  }
  {
    AttentionCase c = small(64, 16);
    c.name = "two-sided window, non-causal";
    c.causal = false;
    c.window_left = 30;
    c.window_right = 10;
    check(c);
  }
  {
    AttentionCase c = small(64, 16);
    c.name = "fp8 e4m3 per-head descale, GQA 4";
    c.heads_q = 4;
    c.kv_dtype = DType::kF8E4M3;
    check(c);
  }
  {
    AttentionCase c = small(64, 64);
    c.name = "fp8 e5m2 scalar descale, fp16 q";
    c.kv_dtype = DType::kF8E5M2;
    c.dtype = DType::kF16;
    c.per_head_descale = false;
    check(c);
  }
  {
    AttentionCase c = small(64, 16);
    c.name = "hint 17 (block loop), no lse";
    c.with_lse = false;
    check(c, 17);
  }
}

TEST(PrefillEmu, TableRowsAndKvStart) {
  AttentionCase c = small(64, 16);
  c.name = "virtual requests";
  c.q_lens = {30, 130, 0, 17, 1};
  c.kv_lens = {200, 300, 64, 150, 90};
  Tensor rows(DType::kI32, {5}), start(DType::kI32, {5});
  // Entry b reads row r[b] from key position st[b]: within that row's 200/300/64/150/90 keys.
  const int r[5] = {3, 1, 0, 4, 1}, st[5] = {10, 20, 0, 60, 37}, len[5] = {40, 230, 5, 17, 1};
  for (int b = 0; b < 5; ++b) {
    rows.ptr<int32_t>()[b] = r[b];
    start.ptr<int32_t>()[b] = st[b];
  }
  check(c, -1, [&](PagedData& d) {
    for (int b = 0; b < 5; ++b) d.cache_seqlens.ptr<int32_t>()[b] = len[b];
    d.params.table_rows = rows;
    d.params.kv_start = start;
  });
}

TEST(PrefillEmu, PagedWideHeads) {
  AttentionCase c = small(128, 16);
  c.name = "D 128";
  check(c);
  c = small(80, 16);
  c.name = "D 80 (five k-steps), fp16 q, fp8 e5m2";
  c.dtype = DType::kF16;
  c.kv_dtype = DType::kF8E5M2;
  check(c);
  c = small(256, 16);
  // fp16 q/out: with bf16 outputs of magnitude >= 4 (frequent with fp8's wide values), one bf16
  // ulp (0.03125) already exceeds DESIGN.md's 2e-2 max-abs, and P rounded to 16 bits for the
  // tensor cores (as FlashAttention does) can flip that last bit; the D = 64 cases cover bf16.
  c.name = "D 256 fp8 e4m3, fp16 q";
  c.kv_dtype = DType::kF8E4M3;
  c.dtype = DType::kF16;
  check(c);
}

TEST(PrefillEmu, Ragged192x128) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    std::mt19937_64 rng(next_seed());
    const std::vector<int> ql = {0, 1, 17, 70, 20, 9}, kl = {3, 1, 40, 70, 5, 0};
    const int B = static_cast<int>(ql.size()), Hq = 4, Hk = 2;
    Tensor cq(DType::kI32, {B + 1}), ck(DType::kI32, {B + 1});
    int tq = 0, tk = 0;
    cq.ptr<int32_t>()[0] = ck.ptr<int32_t>()[0] = 0;
    for (int b = 0; b < B; ++b) {
      cq.ptr<int32_t>()[b + 1] = tq += ql[b];
      ck.ptr<int32_t>()[b + 1] = tk += kl[b];
    }
    Tensor q(DType::kBF16, {tq, Hq, 192}), k(DType::kBF16, {tk, Hk, 192}),
        v(DType::kBF16, {tk, Hk, 128});
    testing::fill_normal(q, rng);
    testing::fill_normal(k, rng);
    testing::fill_normal(v, rng);
    Tensor out(DType::kBF16, {tq, Hq, 128}), lse(DType::kF32, {tq, Hq}),
        ref_out(DType::kBF16, {tq, Hq, 128}), ref_lse(DType::kF32, {tq, Hq});
    out.poison();
    lse.poison();
    ref_out.poison();
    ref_lse.poison();
    RaggedAttentionParams p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.cu_seqlens_q = cq;
    p.cu_seqlens_k = ck;
    p.causal = causal;
    p.out = ref_out;
    p.lse = ref_lse;
    ragged_attention(p, kRef);
    p.out = out;
    p.lse = lse;
    const detail::RaggedShape s = detail::validate(p);
    emu_dispatch<192, 128>(cuda::prefill::ragged_params(p, s, rows<192, 128>()), DType::kBF16,
                           DType::kBF16);
    const auto cmp = testing::compare(out, ref_out, lse, ref_lse);
    EXPECT_TRUE(cmp.ok) << cmp.why << " (rel " << cmp.rel_l2 << ", max abs " << cmp.max_abs
                        << ", lse " << cmp.lse_max_abs << ")";
  }
}

}  // namespace
}  // namespace flashback

// NaN in the inputs on the GPU (ARCHITECTURE.md, "NaN inputs"; the rule and the check are
// testing/nan.h's, as for the CPU kernels in tests/cpu/test_fast_nan.cc): a NaN in q, K or V
// reaches the rows that see it and no other request's or KV head's rows, and every other
// element matches the oracle, on the short-query kernels (decode, extend, fp8, MHA, a window,
// split-KV through the workspace, MLA) and the long-query ones (prefill, with a window, where a
// tile holds keys some rows see and others do not). Outputs are filled with a finite value
// before each run, on the device too, so a NaN in the result is the kernel's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "device_data.h"
#include "flashback/ops.h"
#include "testing/case.h"
#include "testing/nan.h"

namespace flashback {
namespace {

using testing::AttentionCase;
using testing::NanIn;
using testing::NanPoison;
using testing::NanShape;
using testing::PagedData;

const Exec kRef{nullptr, 1, Exec::CpuImpl::kReference};

void run_shape(const NanShape& s, uint64_t& seed) {
  const AttentionCase c = s.to_case();
  for (const NanPoison& p : s.poisons()) {
    const std::string what = std::string(s.name) + ", " + p.describe();
    SCOPED_TRACE(what);
    PagedData d = testing::make_paged(c, ++seed);
    d.params.max_seqlen_q = 0;
    for (int q : s.q_lens) d.params.max_seqlen_q = std::max(d.params.max_seqlen_q, q);
    d.params.num_splits = s.num_splits;
    testing::put_nan(d, c, p);
    PagedData ref = testing::with_fresh_outputs(d);
    paged_attention(ref.params, kRef);
    testing::fill_all(d.params.out, testing::kFilled);
    if (d.params.lse.defined()) testing::fill_all(d.params.lse, testing::kFilled);
    testing::DevicePaged dp = testing::to_device(d);
    testing::run_on_device(dp, d, {});
    EXPECT_EQ(testing::check_nan_where_seen(d, ref, c, p, false), "");
  }
}

// Head dim 128: built in every CUDA configuration (FLASHBACK_HEAD_DIMS, cuda-ci's included).
TEST(CudaNan, ReachesTheRowsThatSeeItAndNoOthers) {
  const DType bf16 = DType::kBF16, f16 = DType::kF16, e4m3 = DType::kF8E4M3;
  const std::vector<NanShape> shapes = {
      {"decode gqa 4", {1, 1, 1}, {40, 100, 7}, 8, 2, 128, 16, bf16, bf16},
      {"decode gqa 8", {1, 1}, {70, 33}, 16, 2, 128, 16, bf16, bf16},
      {"extend gqa 4", {1, 5, 3}, {40, 100, 60}, 8, 2, 128, 16, bf16, bf16},
      {"decode mha f16", {1, 1}, {40, 100}, 2, 2, 128, 1, f16, f16},
      {"decode fp8", {1, 1}, {40, 100}, 8, 2, 128, 16, bf16, e4m3},
      {"extend window", {2, 6}, {40, 100}, 8, 2, 128, 16, bf16, bf16, 20},
      {"decode split through the workspace", {1, 1}, {40, 1100}, 8, 2, 128, 16, bf16, bf16, -1, 4},
      {"prefill", {1, 200, 3}, {40, 300, 60}, 8, 2, 128, 16, bf16, bf16},
      {"prefill window", {1, 200}, {40, 300}, 8, 2, 128, 64, bf16, bf16, 50},
      {"prefill fp8", {1, 150}, {40, 260}, 4, 4, 128, 16, bf16, e4m3},
  };
  uint64_t seed = 7000;
  for (const NanShape& s : shapes) run_shape(s, seed);
}

#if FLASHBACK_TEST_MLA
TEST(CudaNan, MlaLatentIsKeyAndValue) {
  const DType bf16 = DType::kBF16;
  const std::vector<NanShape> shapes = {
      {"mla decode", {1, 1}, {40, 100}, 16, 1, 64, 64, bf16, bf16, -1, 0, true},
      {"mla decode h128", {1, 1}, {40, 300}, 128, 1, 64, 64, bf16, bf16, -1, 0, true},
      {"mla extend", {1, 5}, {40, 100}, 16, 1, 64, 64, bf16, bf16, -1, 0, true},
      {"mla prefill", {1, 120}, {40, 200}, 16, 1, 64, 64, bf16, bf16, -1, 0, true},
  };
  uint64_t seed = 7100;
  for (const NanShape& s : shapes) run_shape(s, seed);
}
#endif

}  // namespace
}  // namespace flashback

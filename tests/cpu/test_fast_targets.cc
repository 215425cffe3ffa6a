// The fast CPU attention on every SIMD target Highway compiled and this CPU supports (e.g.
// EMU128, SSE4, AVX2, AVX-512): the run-time dispatch is forced to each in turn and a sample of
// cases covering both kernel paths (in-place decode, transposed prefill) and the fp32-copy path
// (fp8, MLA, odd head dims) is checked against the oracle.
#include <string>

#include "hwy/targets.h"
#include "test_fast_common.h"

namespace flashback {
namespace {

using testing::AttentionCase;

std::vector<AttentionCase> sample_cases() {
  std::vector<AttentionCase> v;
  AttentionCase c;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.page_size = 16;
  c.q_lens = {1, 1, 9, 1};
  c.kv_lens = {0, 600, 45, 17};
  c.name = "bf16 decode + extend";
  v.push_back(c);
  c.name = "f16 head dim 80, window, softcap";
  c.dtype = c.kv_dtype = DType::kF16;
  c.head_dim = 80;
  c.window_left = 20;
  c.softcap = 3.0f;
  v.push_back(c);
  // Softcap on the decode paths alone (tanh_f32 inlined into the per-row softmax came out wrong
  // on AVX3 with GCC 12, simd-inl.h): bf16 K/V read in place as pairs, and fp16 at head dim 128.
  AttentionCase dc = c;
  dc.name = "bf16 decode, softcap (pairs in place)";
  dc.dtype = dc.kv_dtype = DType::kBF16;
  dc.head_dim = 128;
  dc.window_left = -1;
  dc.q_lens = {1, 1, 1, 1};
  v.push_back(dc);
  dc.name = "f16 decode, softcap";
  dc.dtype = dc.kv_dtype = DType::kF16;
  v.push_back(dc);
  AttentionCase m;
  m.name = "MLA fp8 e5m2";
  m.mla = true;
  m.heads_q = 16;
  m.heads_kv = 1;
  m.head_dim = 64;
  m.head_dim_v = 512;
  m.kv_dtype = DType::kF8E5M2;
  m.q_lens = {1, 2};
  m.kv_lens = {530, 33};
  v.push_back(m);
  AttentionCase f;
  f.name = "f32 MHA, req_to_token table";
  f.dtype = f.kv_dtype = DType::kF32;
  f.heads_q = f.heads_kv = 3;
  f.table_holds_slots = true;
  f.q_lens = {1, 40};
  f.kv_lens = {70, 40};
  v.push_back(f);
  return v;
}

TEST(FastTargets, EverySupportedSimdTargetMatchesTheOracle) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  std::string names;
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    names += std::string(hwy::TargetName(target)) + " ";
    uint64_t seed = 900;
    for (const AttentionCase& c : sample_cases()) {
      testing::PagedData d = testing::make_paged(c, ++seed);
      EXPECT_CLOSE(fast_test::check_paged(d, fast_test::fast(2)),
                   std::string(hwy::TargetName(target)) + ": " + c.describe());
    }
  }
  hwy::SetSupportedTargetsForTest(0);  // back to the CPU's real targets
  std::printf("targets exercised: %s\n", names.c_str());
#if HWY_ARCH_X86
  // At least the portable fallback and one x86 SIMD target.
  EXPECT_GE(targets.size(), 2u) << names;
#endif
}

}  // namespace
}  // namespace flashback

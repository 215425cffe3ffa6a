// The fast CPU attention on every SIMD target Highway compiled and this CPU supports (e.g.
// EMU128, SSE4, AVX2, AVX-512): the run-time dispatch is forced to each in turn and a sample of
// cases covering both kernel paths (in-place decode, transposed prefill) and the fp32-copy path
// (fp8, MLA, odd head dims) is checked against the oracle.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/fast/attention.h"
#include "cpu/fast/convert.h"
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

// K/V rows widened to fp32 on every target, against the scalar conversions, bit for bit: every
// fp8 code (NaN codes NaN), bf16 and fp16 rows of random bits, at every start offset and length
// mod a vector (the SIMD body and the scalar tail).
TEST(FastTargets, RowWideningMatchesTheScalarConversions) {
  std::vector<uint8_t> bytes(2 * 512 + 64);
  uint64_t x = 12345;
  for (uint8_t& b : bytes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);  // every fp8 code first
  std::vector<float> got(512);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (DType dt : {DType::kF8E4M3, DType::kF8E5M2, DType::kBF16, DType::kF16}) {
      const int64_t esz = dtype_size(dt);
      for (int64_t start = 0; start < 3; ++start)
        for (int64_t n : {int64_t{256}, int64_t{255}, int64_t{37}}) {
          const uint8_t* src = bytes.data() + start * esz;
          cpu_fast::widen_row(src, dt, n, got.data());
          int64_t bad = 0;
          for (int64_t i = 0; i < n; ++i) {
            const float want = cpu_fast::load_f32(src, dt, i);
            const bool same =
                std::isnan(want) ? std::isnan(got[i]) : std::memcmp(&want, &got[i], 4) == 0;
            if (!same && bad++ < 3)
              ADD_FAILURE() << hwy::TargetName(target) << " " << dtype_name(dt) << " start "
                            << start << " element " << i << ": " << got[i] << " want " << want;
          }
        }
    }
    // fp8 as bf16 (decode's staged tiles): 32 at a time and the 16 after.
    for (DType dt : {DType::kF8E4M3, DType::kF8E5M2})
      for (int64_t start = 0; start < 3; ++start) {
        std::vector<uint16_t> b16(512);
        const uint8_t* src = bytes.data() + start;
        cpu_fast::fp8_row_to_bf16(src, dt, 272, b16.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < 272; ++i) {
          const float want = cpu_fast::load_f32(src, dt, i);
          const float g = bf16_to_f32(b16[i]);
          const bool same = std::isnan(want) ? std::isnan(g) : std::memcmp(&want, &g, 4) == 0;
          if (!same && bad++ < 3)
            ADD_FAILURE() << hwy::TargetName(target) << " " << dtype_name(dt) << " as bf16, start "
                          << start << " element " << i << ": " << g << " want " << want;
        }
      }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace flashback

// Cost counting: hand-computed bytes/FLOPs on small shapes, and the values shared/bench/peers.py's
// cost() gives for every standard workload (so flashback's TB/s and the peers' compare 1:1).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "bench/cost.h"
#include "bench/workload.h"
#include "test_workloads.h"

namespace flashback::bench {
namespace {

Workload small(Mode mode, int q, std::vector<int> kv) {
  return test::make_workload(mode, q, std::move(kv), 1, 1, 2, 1);
}

TEST(Cost, DecodeByHand) {
  // 2 requests of 10 and 3 keys, Hq 4, Hk 2, D = Dv = 8, bf16: bytes = 13 keys * 2 heads *
  // (8 + 8) * 2 B = 832; FLOPs = 2 * 4 heads * 13 keys * 16 = 1664.
  Workload w = small(Mode::kDecode, 1, {10, 3});
  w.heads_q = 4;
  w.heads_kv = 2;
  w.head_dim = w.head_dim_v = 8;
  const Cost c = cost(w);
  EXPECT_EQ(c.bytes, 832);
  EXPECT_EQ(c.flops, 1664);
  w.kv_dtype = DType::kF8E4M3;  // one byte per element
  EXPECT_EQ(cost(w).bytes, 416);
  EXPECT_EQ(cost(w).flops, 1664);
}

TEST(Cost, CausalPrefillByHand) {
  // q = kv = 4, causal: 1 + 2 + 3 + 4 = 10 visible keys; D + Dv = 4.
  const Workload w = small(Mode::kExtend, 4, {4});
  EXPECT_EQ(cost(w).bytes, 4 * 4 * 2);
  EXPECT_EQ(cost(w).flops, 2 * 10 * 4);
  // Extend with a prefix: q = 2 over kv = 5: positions 3 and 4 see 4 and 5 keys.
  EXPECT_EQ(cost(small(Mode::kExtend, 2, {5})).flops, 2 * 9 * 4);
}

TEST(Cost, NonCausalAndCross) {
  Workload w = small(Mode::kRagged, 3, {5});
  w.causal = false;
  EXPECT_EQ(cost(w).flops, 2 * 15 * 4);  // every query sees all 5 keys
  Workload x = small(Mode::kDecode, 1, {7});
  x.cross = true;  // causal in the file, but cross-attention never is
  EXPECT_EQ(cost(x).flops, 2 * 7 * 4);
}

TEST(Cost, WindowCountsOnlyReachableKeys) {
  // kv 10, q 2, window_left 3: positions 8, 9 see [5, 8] and [6, 9]: 4 + 4 keys; keys some
  // query can see: min(10, 3 + 2) = 5 (keys 5..9).
  Workload w = small(Mode::kExtend, 2, {10});
  w.window_left = 3;
  EXPECT_EQ(cost(w).bytes, 5 * 4 * 2);
  EXPECT_EQ(cost(w).flops, 2 * 8 * 4);
  // Decode with a window longer than the sequence reads the whole sequence.
  Workload d = small(Mode::kDecode, 1, {3});
  d.window_left = 100;
  EXPECT_EQ(cost(d).bytes, 3 * 4 * 2);
  EXPECT_EQ(cost(d).flops, 2 * 3 * 4);
}

TEST(Cost, ChunkedLocal) {
  // q = kv = 8, chunk 4: each chunk is causal on its own: (1 + 2 + 3 + 4) * 2 = 20 keys.
  Workload w = small(Mode::kExtend, 8, {8});
  w.chunk = 4;
  EXPECT_EQ(cost(w).flops, 2 * 20 * 4);
  EXPECT_EQ(cost(w).bytes, 8 * 4 * 2);
  // SPEC.md §4's example request R0: prefix 3, extend 3, C = 4: positions 3, 4, 5 see 4, 1, 2.
  Workload r0 = small(Mode::kExtend, 3, {6});
  r0.chunk = 4;
  EXPECT_EQ(cost(r0).flops, 2 * 7 * 4);
}

TEST(Cost, MlaCountsOneLatentRow) {
  // MLA: a token's K/V is one latent row of head_dim (576) elements; FLOPs use D + Dv.
  Workload w = small(Mode::kDecode, 1, {100});
  w.mla = true;
  w.heads_q = 16;
  w.head_dim = 576;
  w.head_dim_v = 512;
  EXPECT_EQ(cost(w).bytes, 100 * 576 * 2);
  EXPECT_EQ(cost(w).flops, int64_t{2} * 16 * 100 * (576 + 512));
}

TEST(Cost, Fp32CountsFourBytes) {
  Workload w = small(Mode::kDecode, 1, {10});
  w.dtype = w.kv_dtype = DType::kF32;
  EXPECT_EQ(cost(w).bytes, 10 * 4 * 4);
}

// (bytes, flops) from shared/bench/peers.py's cost() on bench/workloads.json, obtained by
// executing only its lengths/causal_of/cost functions (peers.py itself needs torch):
//   tree = ast.parse(open("peers.py").read()); exec the three FunctionDefs; cost(w, lengths(w))
TEST(Cost, MatchesPeersOnStandardWorkloads) {
  const std::map<std::string, std::pair<int64_t, int64_t>> peers = {
      {"decode_b64_L8k", {2147483648, 8589934592}},
      {"decode_b64_L8k_p1", {2147483648, 8589934592}},
      {"decode_b8_L32k", {1073741824, 4294967296}},
      {"decode_b1_L128k", {536870912, 2147483648}},
      {"decode_b128_ragged", {4755677184, 19022708736}},
      {"decode_mha_b32_L4k", {2147483648, 2147483648}},
      {"decode_fp8_b64_L8k", {1073741824, 8589934592}},
      {"window_b32_L32k_w4k", {1073741824, 2147483648}},
      {"decode_b64_L4k", {1073741824, 4294967296}},
      {"verify_b64_q4_L4k", {1073741824, 17173577728}},
      {"prefill_1x16k", {67108864, 2199157473280}},
      {"prefill_8x2k", {67108864, 275012124672}},
      {"extend_b16_p4k_e512", {301989888, 584182661120}},
      {"mla_decode_b64_L4k_h128", {301989888, 73014444032}},
      {"mla_decode_b128_L4k_h16", {603979776, 18253611008}},
      {"softcap_b32_L8k_hd256", {2147483648, 4294967296}},
      {"cross_b64_enc1601", {419692544, 1678770176}},
      {"local_prefill_1x32k_c8k", {134217728, 2749114613760}},
      {"mla_prefix_chunk_8x4k", {2684354560, 10995116277760}},
      {"cpu_decode_b4_L4k", {67108864, 268435456}},
      {"cpu_decode_b1_L32k", {134217728, 536870912}},
      {"cpu_prefill_1x2k", {8388608, 34376515584}},
      {"cpu_extend_b4_p2k_e128", {35651584, 17720934400}},
  };
  size_t seen = 0;
  for (const char* section : {"gpu", "cpu"}) {
    for (const Workload& w : load_workloads(FLASHBACK_BENCH_WORKLOADS, section)) {
      const auto it = peers.find(w.name);
      ASSERT_NE(it, peers.end()) << "no peers.py value for " << w.name;
      const Cost c = cost(w);
      EXPECT_EQ(c.bytes, it->second.first) << w.name;
      EXPECT_EQ(c.flops, it->second.second) << w.name;
      ++seen;
    }
  }
  EXPECT_EQ(seen, peers.size());
}

}  // namespace
}  // namespace flashback::bench

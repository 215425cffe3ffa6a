// The workloads parser: the standard file parses to what it says, and every kind of malformed
// entry is an Error naming the file, the entry (index and name) and the field.
#include <gtest/gtest.h>

#include <string>

#include "bench/workload.h"

namespace flashback::bench {
namespace {

const char* kGood =
    R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
        "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16")";

// One entry: kGood with `extra` spliced in (later keys override nothing: JSON objects keep the
// first duplicate in nlohmann, so tests that change a field build the entry themselves).
std::string doc(const std::string& entry) { return R"({"gpu": [)" + entry + "]}"; }
std::string good_with(const std::string& extra) { return doc(std::string(kGood) + extra + "}"); }

// Parses `text` and returns the Error message ("" when it parsed).
std::string error_of(const std::string& text, const std::string& section = "gpu") {
  try {
    parse_workloads(text, section, "wl.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_names(const std::string& msg, const std::string& entry, const std::string& field) {
  EXPECT_NE(msg.find("wl.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find(entry), std::string::npos) << msg;
  EXPECT_NE(msg.find("." + field), std::string::npos) << msg;
}

TEST(Workloads, StandardFileParses) {
  const auto gpu = load_workloads(FLASHBACK_BENCH_WORKLOADS, "gpu");
  const auto cpu = load_workloads(FLASHBACK_BENCH_WORKLOADS, "cpu");
  ASSERT_EQ(gpu.size(), 19u);
  ASSERT_EQ(cpu.size(), 4u);
  EXPECT_EQ(gpu[0].name, "decode_b64_L8k");
  EXPECT_EQ(gpu[0].kv_lens, std::vector<int>(64, 8192));
  const auto ragged = select_workloads(gpu, "decode_b128_ragged");
  ASSERT_EQ(ragged.size(), 1u);
  EXPECT_EQ(ragged[0].kv_lens.size(), 128u);
  EXPECT_EQ(ragged[0].kv_lens[0], 14091);
  const auto mla = select_workloads(gpu, "mla_decode_b64_L4k_h128")[0];
  EXPECT_TRUE(mla.mla);
  EXPECT_EQ(mla.head_dim, 576);
  EXPECT_EQ(mla.head_dim_v, 512);
  const auto chunk = select_workloads(gpu, "mla_prefix_chunk_8x4k")[0];
  EXPECT_EQ(chunk.mode, Mode::kRagged);
  EXPECT_FALSE(chunk.effective_causal());
  EXPECT_EQ(chunk.page_size, 0);
  const auto cross = select_workloads(gpu, "cross_b64_enc1601")[0];
  EXPECT_TRUE(cross.causal);
  EXPECT_FALSE(cross.effective_causal());
  EXPECT_EQ(select_workloads(gpu, "decode_fp8_b64_L8k")[0].kv_dtype, DType::kF8E4M3);
  EXPECT_EQ(select_workloads(gpu, "window_b32_L32k_w4k")[0].window_left, 4095);
  EXPECT_EQ(select_workloads(gpu, "local_prefill_1x32k_c8k")[0].chunk, 8192);
  EXPECT_FLOAT_EQ(select_workloads(gpu, "softcap_b32_L8k_hd256")[0].softcap, 50.0f);
}

TEST(Workloads, GoodEntryAndDefaults) {
  const auto w = parse_workloads(good_with(""), "gpu", "wl.json");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].head_dim_v, 64);
  EXPECT_EQ(w[0].window_left, -1);
  EXPECT_EQ(w[0].chunk, 0);
  EXPECT_TRUE(w[0].effective_causal());
  EXPECT_EQ(w[0].kv_lens, std::vector<int>({64, 64}));
}

TEST(Workloads, MissingField) {
  const std::string e = doc(R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1,
      "ctx": 64, "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16",
      "kv_dtype": "bf16"})");
  const std::string msg = error_of(e);
  expect_names(msg, "gpu[0] \"w\"", "heads_q");
  EXPECT_NE(msg.find("got nothing"), std::string::npos) << msg;
}

TEST(Workloads, WrongTypesAndValues) {
  struct Bad {
    const char* entry;
    const char* field;
  };
  const Bad bad[] = {
      {R"({"name": "w", "mode": "decode", "batch": "2", "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16"})",
       "batch"},
      {R"({"name": "w", "mode": "prefill", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16"})",
       "mode"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf8", "kv_dtype": "bf16"})",
       "dtype"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 3, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16"})",
       "heads_kv"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 4, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16"})",
       "q_len"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 0, "dtype": "bf16", "kv_dtype": "bf16"})",
       "page_size"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "fp16"})",
       "kv_dtype"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": -5, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16"})",
       "ctx"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16",
           "window_left": -2})",
       "window_left"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16",
           "softcap": "50"})",
       "softcap"},
      {R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1, "ctx": 64, "heads_q": 8,
           "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16", "kv_dtype": "bf16",
           "mla": 1})",
       "mla"},
      {R"({"name": "w", "mode": "decode", "mla": true, "batch": 2, "q_len": 1, "ctx": 64,
           "heads_q": 8, "heads_kv": 2, "head_dim": 576, "head_dim_v": 512, "page_size": 64,
           "dtype": "bf16", "kv_dtype": "bf16"})",
       "heads_kv"},
      {R"({"name": "w", "mode": "extend", "batch": 1, "q_len": 64, "ctx": 32, "chunk": 16,
           "heads_q": 8, "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16",
           "kv_dtype": "bf16"})",
       "ctx"},
  };
  for (const Bad& b : bad) {
    const std::string msg = error_of(doc(b.entry));
    SCOPED_TRACE(b.entry);
    ASSERT_FALSE(msg.empty());
    expect_names(msg, "gpu[0] \"w\"", b.field);
  }
}

TEST(Workloads, CtxAndCtxList) {
  expect_names(error_of(good_with(R"(, "ctx_list": [1, 2])")), "gpu[0] \"w\"", "ctx_list");
  const std::string no_ctx = doc(R"({"name": "w", "mode": "decode", "batch": 2, "q_len": 1,
      "heads_q": 8, "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16",
      "kv_dtype": "bf16"})");
  expect_names(error_of(no_ctx), "gpu[0] \"w\"", "ctx");
  const std::string list = R"({"name": "w", "mode": "decode", "batch": 3, "q_len": 1,
      "heads_q": 8, "heads_kv": 2, "head_dim": 64, "page_size": 16, "dtype": "bf16",
      "kv_dtype": "bf16", "ctx_list": )";
  const std::string short_list = error_of(doc(list + "[5, 6]}"));
  expect_names(short_list, "gpu[0] \"w\"", "ctx_list");
  EXPECT_NE(short_list.find("3 lengths"), std::string::npos) << short_list;
  expect_names(error_of(doc(list + "[5, -1, 7]}")), "gpu[0] \"w\"", "ctx_list[1]");
  const auto ok = parse_workloads(doc(list + "[5, 0, 7]}"), "gpu", "wl.json");
  EXPECT_EQ(ok[0].kv_lens, std::vector<int>({5, 0, 7}));
}

TEST(Workloads, UnknownFieldIsNamed) {
  const std::string msg = error_of(good_with(R"(, "head_dimv": 64)"));
  expect_names(msg, "gpu[0] \"w\"", "head_dimv");
  EXPECT_NE(msg.find("unknown field"), std::string::npos) << msg;
}

TEST(Workloads, SecondEntryIsNamedByIndexAndName) {
  std::string second = kGood;
  second.replace(second.find("\"w\""), 3, "\"other\"");
  second.replace(second.find("\"heads_q\": 8"), 12, "\"heads_q\": 0");
  const std::string msg = error_of(R"({"gpu": [)" + std::string(kGood) + "}, " + second + "}]}");
  expect_names(msg, "gpu[1] \"other\"", "heads_q");
}

TEST(Workloads, DuplicateNames) {
  const std::string msg = error_of(R"({"gpu": [)" + std::string(kGood) + "}, " + kGood + "}]}");
  expect_names(msg, "gpu[1] \"w\"", "name");
}

TEST(Workloads, DocumentLevelErrors) {
  EXPECT_NE(error_of("{\"gpu\": [").find("valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("wl.json"), std::string::npos);
  EXPECT_NE(error_of(good_with(""), "cpu").find("wl.json.cpu"), std::string::npos);
  EXPECT_NE(error_of(R"({"gpu": {"name": "w"}})").find("wl.json.gpu"), std::string::npos);
  EXPECT_NE(error_of(R"({"gpu": [3]})").find("gpu[0]"), std::string::npos);
  EXPECT_NE(error_of(R"({"gpu": [{"mode": "decode"}]})").find("gpu[0].name"), std::string::npos);
}

TEST(Workloads, MissingFileNamesTheFlag) {
  try {
    load_workloads("/nonexistent/wl.json", "gpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "--workloads");
  }
}

TEST(Workloads, SelectByName) {
  const auto all = load_workloads(FLASHBACK_BENCH_WORKLOADS, "cpu");
  EXPECT_EQ(select_workloads(all, "").size(), 4u);
  const auto two = select_workloads(all, "cpu_prefill_1x2k,cpu_decode_b4_L4k");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].name, "cpu_decode_b4_L4k");  // file order
  try {
    select_workloads(all, "cpu_decode_b4_L4k,nope");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "--only");
    EXPECT_EQ(e.actual(), "nope");
  }
}

}  // namespace
}  // namespace flashback::bench

// Rows, roofline bound and JSON shape (peers.py's keys), checked with hand-computed figures.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/cuda_bench.h"
#include "bench/report.h"

namespace flashback::bench {
namespace {

Ceilings ceilings() {
  Ceilings c;
  c.device = "test";
  c.read_TBps = 1.0;  // ridge point: 10 FLOP per byte
  c.peak_TFLOPs = 10.0;
  return c;
}

TEST(Report, MemoryBoundRow) {
  Timing t;
  t.median_ms = 2.0;
  const Row r = make_row("m", Cost{1'000'000'000, 2'000'000'000}, t, ceilings());
  EXPECT_DOUBLE_EQ(r.TBps, 0.5);  // 1e9 B in 2 ms
  EXPECT_DOUBLE_EQ(r.TFLOPs, 1.0);
  EXPECT_EQ(r.bound, "memory");
  EXPECT_DOUBLE_EQ(r.pct, 50.0);
}

TEST(Report, WindowCeilingIsEachRowsOwnCeiling) {
  Timing t;
  t.median_ms = 2.0;
  t.window_read_TBps = 0.8;  // the read passes among the runs
  const Row m = make_row("m", Cost{1'000'000'000, 2'000'000'000}, t, ceilings());
  EXPECT_DOUBLE_EQ(m.pct, 50.0);
  EXPECT_DOUBLE_EQ(m.pct_window, 62.5);  // 0.5 of 0.8 TB/s
  t.median_ms = 20.0;
  const Row c = make_row("c", Cost{1'000'000'000, 100'000'000'000}, t, ceilings());
  EXPECT_EQ(c.bound, "compute");
  EXPECT_DOUBLE_EQ(c.pct_window, 0.0);  // read passes do not judge a compute-bound row
  t.window_peak_TFLOPs = 8.0;           // the FMA passes among the runs
  const Row cw = make_row("cw", Cost{1'000'000'000, 100'000'000'000}, t, ceilings());
  EXPECT_DOUBLE_EQ(cw.pct, 50.0);
  EXPECT_DOUBLE_EQ(cw.pct_window, 62.5);  // 5 of 8 TFLOP/s
  t.median_ms = 2.0;
  t.window_read_TBps = 0;  // FMA passes do not judge a memory-bound row
  EXPECT_DOUBLE_EQ(make_row("m2", Cost{1'000'000'000, 2'000'000'000}, t, ceilings()).pct_window,
                   0.0);
  EXPECT_FALSE(compute_bound(Cost{1'000'000'000, 2'000'000'000}, ceilings()));
  EXPECT_TRUE(compute_bound(Cost{1'000'000'000, 10'000'000'000}, ceilings()));  // at the ridge

  RunInfo info;
  info.device_kind = "cpu";
  info.in_cache = true;
  std::ostringstream table;
  print_table(table, info, ceilings(), {m, c, cw});
  EXPECT_NE(table.str().find("in-cache (one input copy"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("%win"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("62.5%"), std::string::npos) << table.str();
  const auto doc = nlohmann::json::parse(to_json(info, ceilings(), {m, c, cw}));
  EXPECT_DOUBLE_EQ(doc["rows"][0]["window_read_TBps"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(doc["rows"][0]["pct_of_window_ceiling"].get<double>(), 62.5);
  EXPECT_FALSE(doc["rows"][0].contains("window_peak_TFLOPs"));
  EXPECT_FALSE(doc["rows"][1].contains("pct_of_window_ceiling"));
  EXPECT_DOUBLE_EQ(doc["rows"][2]["window_peak_TFLOPs"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(doc["rows"][2]["pct_of_window_ceiling"].get<double>(), 62.5);
  EXPECT_FALSE(doc["rows"][2].contains("window_read_TBps"));
  EXPECT_TRUE(doc["in_cache"].get<bool>());
}

TEST(Report, ComputeBoundRow) {
  Timing t;
  t.median_ms = 20.0;
  const Row r = make_row("c", Cost{1'000'000'000, 100'000'000'000}, t, ceilings());
  EXPECT_DOUBLE_EQ(r.TFLOPs, 5.0);
  EXPECT_EQ(r.bound, "compute");
  EXPECT_DOUBLE_EQ(r.pct, 50.0);
}

TEST(Report, JsonRowsReadLikePeers) {
  Timing t;
  t.median_ms = 2.0;
  t.runs = 9;
  t.copies = 3;
  std::vector<Row> rows = {make_row("a", Cost{1'000'000'000, 2'000'000'000}, t, ceilings())};
  Row bad;
  bad.workload = "b";
  bad.error = "head_dim: expected one of 64, 128, got 80";
  rows.push_back(bad);
  RunInfo info;
  info.device_kind = "cpu";
  const auto doc = nlohmann::json::parse(to_json(info, ceilings(), rows));
  ASSERT_EQ(doc["rows"].size(), 1u);
  const auto& r = doc["rows"][0];
  EXPECT_EQ(r["workload"], "a");
  EXPECT_EQ(r["peer"], "flashback");
  EXPECT_DOUBLE_EQ(r["ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(r["TBps"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["TFLOPs"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(doc["ceilings"]["read_TBps"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(doc["ceilings"]["peak_TFLOPs"].get<double>(), 10.0);
  EXPECT_EQ(doc["device"], "test");
  ASSERT_EQ(doc["failed"].size(), 1u);
  EXPECT_EQ(doc["failed"][0]["workload"], "b");

  std::ostringstream table;
  print_table(table, info, ceilings(), rows);
  EXPECT_NE(table.str().find("b                          unsupported: head_dim"), std::string::npos)
      << table.str();
  EXPECT_NE(table.str().find("1 ran, 1 unsupported"), std::string::npos) << table.str();
}

TEST(Report, CudaInCpuBuildIsAClearError) {
  if (cuda_built()) GTEST_SKIP() << "this build has CUDA: the error path does not exist";
  try {
    measure_cuda_ceilings();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "--device");
    EXPECT_NE(std::string(e.what()).find("no CUDA support"), std::string::npos);
  }
}

}  // namespace
}  // namespace flashback::bench

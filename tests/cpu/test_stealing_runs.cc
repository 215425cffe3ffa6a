// Split-KV's deal of units to threads (src/cpu/fast/stealing_runs.h): every unit runs exactly
// once whoever takes it, an owner takes its run's units in order, a thread with nothing left
// takes from a slow one, and runs no thread owns (a smaller team than asked for) still run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cpu/fast/stealing_runs.h"

namespace flashback::cpu_fast {
namespace {

struct Taken {
  std::vector<int64_t> units;    // in the order taken
  std::vector<size_t> steal_at;  // units.size() at each steal
  int steals = 0;
};

// `workers` threads run runs [bounds[r], bounds[r + 1]); thread 0 sleeps `slow` per unit.
std::vector<Taken> run_all(const std::vector<int64_t>& bounds, int workers,
                           std::chrono::microseconds slow) {
  const int runs_n = static_cast<int>(bounds.size()) - 1;
  StealingRuns runs(runs_n);
  for (int r = 0; r < runs_n; ++r) runs.set(r, bounds[r], bounds[r + 1]);
  std::vector<Taken> taken(static_cast<size_t>(workers));
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r)
    threads.emplace_back([&, r] {
      Taken& mine = taken[static_cast<size_t>(r)];
      for (;;) {
        int64_t u;
        if (!runs.take(r, u)) {
          if (!runs.steal(r)) break;
          ++mine.steals;
          mine.steal_at.push_back(mine.units.size());
          continue;
        }
        mine.units.push_back(u);
        if (r == 0) std::this_thread::sleep_for(slow);
      }
    });
  for (auto& t : threads) t.join();
  return taken;
}

void expect_each_once(const std::vector<Taken>& taken, int64_t units) {
  std::vector<int> count(static_cast<size_t>(units), 0);
  for (const Taken& t : taken)
    for (int64_t u : t.units) {
      ASSERT_GE(u, 0);
      ASSERT_LT(u, units);
      ++count[static_cast<size_t>(u)];
    }
  for (int64_t u = 0; u < units; ++u) EXPECT_EQ(count[static_cast<size_t>(u)], 1) << "unit " << u;
  // Between a thread's steals its units are consecutive (run_splits relies on it: a take that
  // succeeds is the next split of the range).
  for (const Taken& t : taken)
    for (size_t i = 1; i < t.units.size(); ++i) {
      bool stole_here = false;
      for (size_t at : t.steal_at) stole_here |= at == i;
      if (!stole_here) EXPECT_EQ(t.units[i], t.units[i - 1] + 1);
    }
}

TEST(StealingRuns, OwnerInOrderAndSlowRunIsShared) {
  // Thread 0 owns all 64 units and is slow; thread 1 owns none and must take from it.
  const auto taken = run_all({0, 64, 64}, 2, std::chrono::microseconds(500));
  expect_each_once(taken, 64);
  EXPECT_GT(taken[1].steals, 0);
  EXPECT_FALSE(taken[1].units.empty());
  // What thread 1 took first is the back half of thread 0's run.
  EXPECT_GE(taken[1].units.front(), 32);
}

TEST(StealingRuns, UnevenRunsManyThreads) {
  for (int rep = 0; rep < 20; ++rep) {
    const auto taken = run_all({0, 3, 40, 41, 100, 100, 180}, 6, std::chrono::microseconds(20));
    expect_each_once(taken, 180);
  }
}

TEST(StealingRuns, RunsWithoutAThreadStillRun) {
  // Six runs, two threads: runs 2-5 have no owner and are taken by stealing.
  const auto taken = run_all({0, 10, 20, 30, 40, 50, 60}, 2, std::chrono::microseconds(0));
  expect_each_once(taken, 60);
}

TEST(StealingRuns, EmptyAndSingleUnitRuns) {
  expect_each_once(run_all({0, 0, 0}, 2, std::chrono::microseconds(0)), 0);
  expect_each_once(run_all({0, 1, 1}, 2, std::chrono::microseconds(100)), 1);
  expect_each_once(run_all({0, 1, 2}, 2, std::chrono::microseconds(100)), 2);
}

}  // namespace
}  // namespace flashback::cpu_fast

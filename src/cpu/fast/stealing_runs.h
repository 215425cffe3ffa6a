// Split-KV's deal of work units to threads (attention.cc run_tasks): contiguous runs, one per
// thread, which a thread that has finished its own may take from.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace flashback::cpu_fast {

// Units [front, back) of each thread's run not yet begun, one atomic word per run. The owner
// takes units from the front, one at a time and in order; a thread whose run is empty moves
// the back half (rounded up) of the largest other run into its own and goes on from there.
class StealingRuns {
 public:
  explicit StealingRuns(int n) : runs_(static_cast<size_t>(n)) {}
  void set(int r, int64_t front, int64_t back) { runs_[r].store(pack(front, back)); }
  // The front unit of run r to u; false when the run is empty.
  bool take(int r, int64_t& u) {
    uint64_t cur = runs_[r].load();
    while (front(cur) < back(cur))
      if (runs_[r].compare_exchange_weak(cur, pack(front(cur) + 1, back(cur)))) {
        u = front(cur);
        return true;
      }
    return false;
  }
  // Moves the back half of the largest other run to run r (empty); false when all are empty.
  bool steal(int r) {
    for (;;) {
      int victim = -1;
      int64_t most = 0;
      uint64_t seen = 0;
      for (int v = 0; v < static_cast<int>(runs_.size()); ++v) {
        const uint64_t c = runs_[v].load();
        if (v != r && back(c) - front(c) > most) {
          most = back(c) - front(c);
          victim = v;
          seen = c;
        }
      }
      if (victim < 0) return false;
      const int64_t mid = front(seen) + most / 2;
      if (runs_[victim].compare_exchange_strong(seen, pack(front(seen), mid))) {
        set(r, mid, back(seen));
        return true;
      }
    }
  }

 private:
  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(back) << 32 | static_cast<uint64_t>(front);
  }
  static int64_t front(uint64_t w) { return static_cast<int64_t>(w & 0xFFFFFFFFu); }
  static int64_t back(uint64_t w) { return static_cast<int64_t>(w >> 32); }
  std::vector<std::atomic<uint64_t>> runs_;
};

}  // namespace flashback::cpu_fast

// The decode prefetch stream (src/cpu/fast/next_rows.h): whatever the step sizes, every K and V
// row of the tile (each key of each KV head) comes exactly once, in turns of the four runs (K's
// first half, K's second half, V's first half, V's second half), and nothing past the tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "cpu/fast/next_rows.h"

namespace flashback::cpu_fast {
namespace {

// The stream over rows k[i], v[i] (one per key) of `heads` KV heads head_bytes apart, with K and
// V rows of k_bytes and v_bytes, its list in `list` (resized to fit).
NextRows stream_over(const std::vector<const char*>& k, const std::vector<const char*>& v,
                     int64_t heads, int64_t head_bytes, int64_t k_bytes, int64_t v_bytes,
                     std::vector<const char*>& list) {
  const auto n = static_cast<int64_t>(k.size());
  list.resize(static_cast<size_t>(NextRows::slots_for(n, heads)));
  return NextRows{reinterpret_cast<const void* const*>(k.data()),
                  reinterpret_cast<const void* const*>(v.data()),
                  n,
                  heads,
                  head_bytes,
                  head_bytes,
                  k_bytes,
                  v_bytes,
                  list.data()};
}

TEST(NextRows, EveryRowOnceInTurns) {
  constexpr int64_t kHeadBytes = 256, kKeyBytes = 8 * kHeadBytes, kVBase = 1 << 20;
  std::mt19937 rng(7);
  for (int64_t n : {1, 2, 3, 15, 16, 17, 31, 32})
    for (int64_t heads : {1, 3, 8}) {
      // Fake row addresses: K key i at i · kKeyBytes, V key i at kVBase + i · kKeyBytes.
      std::vector<const char*> k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
      const std::vector<char> memory(static_cast<size_t>(kVBase + n * kKeyBytes));
      const char* base = memory.data();  // the rows are addresses only, never read
      for (int64_t i = 0; i < n; ++i) {
        k[static_cast<size_t>(i)] = base + i * kKeyBytes;
        v[static_cast<size_t>(i)] = base + kVBase + i * kKeyBytes;
      }
      std::vector<const char*> list;
      NextRows s = stream_over(k, v, heads, kHeadBytes, 128, 192, list);
      std::vector<std::tuple<bool, int64_t, int64_t>> seen;  // (is V, key, head)
      auto record = [&](const char* row, int64_t bytes) {
        const int64_t off = row - base;
        const bool is_v = off >= kVBase;
        EXPECT_EQ(bytes, is_v ? 192 : 128);
        const int64_t r = is_v ? off - kVBase : off;
        seen.emplace_back(is_v, r / kKeyBytes, r % kKeyBytes / kHeadBytes);
      };
      std::uniform_int_distribution<int64_t> size(0, 5);
      while (s.at < s.slots()) s.visit(size(rng), record);
      s.visit(10, record);  // past the end: nothing
      const std::string what = "n=" + std::to_string(n) + " heads=" + std::to_string(heads);
      ASSERT_EQ(seen.size(), static_cast<size_t>(2 * n * heads)) << what;
      std::map<std::tuple<bool, int64_t, int64_t>, int> count;
      for (const auto& x : seen) ++count[x];
      for (bool is_v : {false, true})
        for (int64_t i = 0; i < n; ++i)
          for (int64_t g = 0; g < heads; ++g)
            EXPECT_EQ((count[{is_v, i, g}]), 1) << what << " V=" << is_v << " key " << i;
      // The turn order: K key w, K key h + w, V key w, V key h + w (those that exist), head
      // by head, then the next w.
      const int64_t h = (n + 1) / 2;
      size_t at = 0;
      for (int64_t w = 0; w < h; ++w)
        for (int64_t g = 0; g < heads; ++g)
          for (int run = 0; run < 4; ++run) {
            const int64_t key = (run & 1) * h + w;
            if (key >= n) continue;
            ASSERT_LT(at, seen.size());
            EXPECT_EQ(seen[at], std::make_tuple(run >= 2, key, g)) << what << " slot " << at;
            ++at;
          }
    }
}

// take() hands out the slots in the order step() issues them, spare() for an empty slot and
// for every call past the last one, so a kernel that takes a fixed number of rows per step
// prefetches exactly the tile's rows and harmless zeros besides.
TEST(NextRows, TakeGivesTheSlotsInOrderAndSpareForEmptyOnes) {
  constexpr int64_t kHeadBytes = 256, kKeyBytes = 8 * kHeadBytes, kVBase = 1 << 20;
  for (int64_t n : {1, 2, 3, 16, 17, 32})
    for (int64_t heads : {1, 8}) {
      const std::vector<char> memory(static_cast<size_t>(kVBase + n * kKeyBytes));
      std::vector<const char*> k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        k[static_cast<size_t>(i)] = memory.data() + i * kKeyBytes;
        v[static_cast<size_t>(i)] = memory.data() + kVBase + i * kKeyBytes;
      }
      std::vector<const char*> list;
      NextRows b = stream_over(k, v, heads, kHeadBytes, 256, 256, list);
      const int64_t slots = b.slots();
      const std::vector<const char*> issued = list;  // the slots, in the order step() goes
      std::vector<const char*> taken;
      for (int64_t i = 0; i < slots + 3; ++i) taken.push_back(b.take());
      const std::string what = "n=" + std::to_string(n) + " heads=" + std::to_string(heads);
      int64_t rows = 0;
      for (int64_t i = 0; i < slots + 3; ++i) {
        const char* want = i < slots ? issued[static_cast<size_t>(i)] : nullptr;
        if (want == nullptr) {
          EXPECT_EQ(taken[static_cast<size_t>(i)], NextRows::spare()) << what << " slot " << i;
        } else {
          EXPECT_EQ(taken[static_cast<size_t>(i)], want) << what << " slot " << i;
          ++rows;
        }
      }
      EXPECT_EQ(rows, 2 * n * heads) << what;
      EXPECT_EQ(b.at, slots + 3) << what;
    }
  const char* z = NextRows::spare();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z) % 64, 0u);
  EXPECT_TRUE(std::all_of(z, z + NextRows::kSpareBytes, [](char c) { return c == 0; }));
}

TEST(NextRows, EvenShareAddsUpAndDiffersByAtMostOne) {
  for (int64_t n : {0, 1, 7, 16, 31, 64, 256})
    for (int64_t steps : {1, 2, 3, 8, 13, 64}) {
      int64_t sum = 0, lo = n, hi = 0;
      for (int64_t c = 0; c < steps; ++c) {
        const int64_t m = even_share(n, c, steps);
        sum += m;
        lo = std::min(lo, m);
        hi = std::max(hi, m);
      }
      EXPECT_EQ(sum, n) << n << " over " << steps;
      EXPECT_LE(hi - lo, 1) << n << " over " << steps;
    }
}

}  // namespace
}  // namespace flashback::cpu_fast

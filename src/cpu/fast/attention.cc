// Fast CPU paged and ragged attention: plans work items (tasks of ≤ kMaxRows rows of one KV
// head, each over fixed kSplitKeys-key splits) and runs them on OpenMP threads. When there are
// few tasks (small-batch decode) the splits of each task run in parallel and are merged after;
// otherwise a task runs its splits itself. Both paths merge the same partial states in the same
// order, so the choice (thread count, batch composition) never changes a result bit.
#include "cpu/fast/attention.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "cpu/fast/fast.h"
#include "cpu/fast/stealing_runs.h"
#include "cpu/reference.h"

namespace flashback::cpu_fast {
namespace {

int32_t at(const TensorView& t, int64_t i) { return t.ptr<const int32_t>()[i * t.strides[0]]; }

struct Entry {
  int64_t q0, q_len, kv_len, kv_start, table_row;
};

// Splits the entries into tasks: a task holds whole q tokens and every q head of a KV group
// (so each K/V tile is converted once for the group), and, when its rows leave room, several
// adjacent KV heads, so a decode step reads each slot's K/V heads as one contiguous run. The
// split depends only on the entry itself, never on the rest of the batch.
std::vector<Task> plan_tasks(const AttnArgs& a, const std::vector<Entry>& entries,
                             int64_t heads_kv) {
  const int64_t heads_per_task = std::min<int64_t>(a.group, kMaxRows);
  const int64_t tokens_per_task = std::max<int64_t>(1, kMaxRows / a.group);
  std::vector<Task> tasks;
  for (int64_t b = 0; b < static_cast<int64_t>(entries.size()); ++b) {
    const Entry& e = entries[b];
    const int64_t nt_max = std::min(tokens_per_task, std::max<int64_t>(1, e.q_len));
    const int64_t kv_per_task =
        std::min(heads_kv, std::max<int64_t>(1, kMaxRows / (nt_max * heads_per_task)));
    for (int64_t t0 = 0; t0 < e.q_len; t0 += tokens_per_task) {
      const int64_t nt = std::min(tokens_per_task, e.q_len - t0);
      int64_t lo = e.kv_len, hi = -1;
      for (int64_t i = t0; i < t0 + nt; ++i) {
        const auto kr =
            reference::visible_keys(i, e.q_len, e.kv_len, a.causal, a.window_left, a.window_right);
        if (kr.lo <= kr.hi) {
          lo = std::min(lo, kr.lo);
          hi = std::max(hi, kr.hi);
        }
      }
      for (int64_t g = 0; g < heads_kv; g += kv_per_task)
        for (int64_t h0 = 0; h0 < a.group; h0 += heads_per_task) {
          Task t;
          t.b = b;
          t.g = g;
          t.ng = std::min(kv_per_task, heads_kv - g);
          t.h0 = h0;
          t.nh = std::min(heads_per_task, a.group - h0);
          t.t0 = t0;
          t.nt = nt;
          t.q0 = e.q0;
          t.q_len = e.q_len;
          t.kv_len = e.kv_len;
          t.kv_start = e.kv_start;
          t.table_row = e.table_row;
          t.split_lo = lo <= hi ? lo / kSplitKeys : 0;
          t.split_hi = lo <= hi ? hi / kSplitKeys + 1 : 0;
          tasks.push_back(t);
        }
    }
  }
  return tasks;
}

// allow_split = false (num_splits == 1) runs each task's splits in order on one thread; the
// result bits are the same either way, only the parallelism differs.
void run_tasks(const AttnArgs& a, const std::vector<Task>& tasks, const Exec& exec,
               bool allow_split) {
  const int threads = thread_count(exec);
  const int64_t n = static_cast<int64_t>(tasks.size());
  const int64_t sf = state_floats(a);
  int64_t splits = 0;
  for (const Task& t : tasks) splits += t.split_hi - t.split_lo;
  // Split-KV pays off when tasks alone cannot keep every thread busy.
  const bool split = allow_split && threads > 1 && n < 4 * threads && splits > n;
  if (!split) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) {
      thread_local LineVector<float> state;
      state.resize(static_cast<size_t>(sf));
      const Task& t = tasks[i];
      run_splits(a, t, t.split_lo, t.split_hi, state.data());
      finish(a, t, state.data(), 1);
    }
    return;
  }
  // Units (task, split) in task order, dealt to the threads as contiguous runs of about equal
  // work (keys × rows): a thread's run continues one task's splits with no break in the
  // next-tile prefetches, where units dealt one at a time each began on a cold tile. A thread
  // done with its run takes the back half of the largest run left (StealingRuns), so one slowed
  // by its host (a shared core) does not hold the others at the barrier. Every split still
  // writes its own state, merged in split order by finish.
  std::vector<int64_t> first(static_cast<size_t>(n + 1), 0);
  std::vector<std::pair<int64_t, int64_t>> units;  // (task, split)
  std::vector<double> work_before(1, 0.0);         // work of units [0, u)
  for (int64_t i = 0; i < n; ++i) {
    const Task& t = tasks[i];
    first[i + 1] = first[i] + (t.split_hi - t.split_lo);
    const int64_t last = t.kv_len - 1;
    for (int64_t s = t.split_lo; s < t.split_hi; ++s) {
      units.emplace_back(i, s);
      const int64_t keys = std::min(last, (s + 1) * kSplitKeys - 1) - s * kSplitKeys + 1;
      work_before.push_back(work_before.back() +
                            static_cast<double>(std::max<int64_t>(1, keys) * t.rows()));
    }
  }
  LineVector<float> states(static_cast<size_t>(std::max<int64_t>(1, splits) * sf));
  // First unit of thread r's run: where the work before it reaches r / threads of the total.
  auto run_start = [&](int64_t r) {
    const double target = work_before.back() * static_cast<double>(r) / threads;
    return static_cast<int64_t>(std::lower_bound(work_before.begin(), work_before.end(), target) -
                                work_before.begin());
  };
  StealingRuns runs(threads);
  for (int r = 0; r < threads; ++r) runs.set(r, run_start(r), run_start(r + 1));
#pragma omp parallel num_threads(threads)
  {
    // Runs of threads the team lacks (a smaller team than asked for) are taken by stealing.
    const int r = omp_get_thread_num();
    struct Claim {
      StealingRuns* runs;
      int r;
    } claim{&runs, r};
    const SplitClaim take_next{[](void* c) {
                                 auto* cl = static_cast<Claim*>(c);
                                 int64_t u;
                                 return cl->runs->take(cl->r, u);
                               },
                               &claim};
    for (;;) {
      int64_t u;
      if (!runs.take(r, u)) {
        if (!runs.steal(r)) break;
        continue;
      }
      // Unit u and the task's units after it, as long as this thread's run still holds them
      // (only the owner takes from a run's front, so a successful take is the next unit).
      const Task& t = tasks[units[u].first];
      run_splits(a, t, units[u].second, t.split_hi, states.data() + u * sf, sf, take_next);
    }
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i)
      finish(a, tasks[i], states.data() + first[i] * sf, first[i + 1] - first[i]);
  }
}

// What paged and ragged attention fill alike: q, the head dims and GQA group, the masking,
// softcap and scale, and the outputs (P: the entry point's params, S: its validated shape).
template <typename P, typename S>
void set_query_and_outputs(AttnArgs& a, const P& p, const S& s) {
  a.q = p.q.data;
  a.q_dtype = p.q.dtype;
  a.q_s0 = p.q.strides[0];
  a.q_s1 = p.q.strides[1];
  a.head_dim = s.head_dim;
  a.head_dim_v = s.head_dim_v;
  a.group = s.heads_q / s.heads_kv;
  a.causal = p.causal;
  a.window_left = p.window_left;
  a.window_right = p.window_right;
  a.softcap = p.softcap;
  a.scale = s.scale;
  a.out = p.out.data;
  a.out_dtype = p.out.dtype;
  a.out_s0 = p.out.strides[0];
  a.out_s1 = p.out.strides[1];
  if (p.lse.defined()) {
    a.lse = p.lse.template ptr<float>();
    a.lse_s0 = p.lse.strides[0];
    a.lse_s1 = p.lse.strides[1];
  }
}

}  // namespace

int thread_count(const Exec& exec) {
  return exec.num_threads > 0 ? exec.num_threads : omp_get_max_threads();
}

void key_offsets(const AttnArgs& a, const Task& t, int64_t t0, int64_t n, int64_t* k_off,
                 int64_t* v_off) {
  if (!a.paged) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = t.kv_start + t0 + i;
      k_off[i] = row * a.k_s0 + t.g * a.k_head;
      v_off[i] = row * a.v_s0 + t.g * a.v_head;
    }
    return;
  }
  const int32_t* tab = a.table + t.table_row * a.table_s0;
  const int64_t P = a.page_size;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = t.kv_start + t0 + i;
    const int64_t slot = a.table_holds_slots ? int64_t{tab[pos * a.table_s1]}
                                             : int64_t{tab[(pos / P) * a.table_s1]} * P + pos % P;
    if (a.four_d) {
      const int64_t page = slot / P, in_page = slot % P;
      k_off[i] = page * a.k_s0 + in_page * a.k_s1 + t.g * a.k_head;
      v_off[i] = page * a.v_s0 + in_page * a.v_s1 + t.g * a.v_head;
    } else {
      k_off[i] = slot * a.k_s0 + t.g * a.k_head;
      v_off[i] = slot * a.v_s0 + t.g * a.v_head;
    }
  }
}

void paged_attention(const PagedAttentionParams& p, const detail::PagedShape& s, const Exec& exec) {
  AttnArgs a;
  set_query_and_outputs(a, p, s);
  if (p.qv.defined()) {
    a.qv = p.qv.data;
    a.qv_s0 = p.qv.strides[0];
    a.qv_s1 = p.qv.strides[1];
  }
  a.head_dim_qv = s.head_dim_qv;
  a.k = p.k_cache.data;
  a.v = p.v_cache.data;
  a.kv_dtype = p.k_cache.dtype;
  a.paged = true;
  a.four_d = p.k_cache.ndim == 4;
  a.page_size = s.page_size;
  a.k_s0 = p.k_cache.strides[0];
  a.v_s0 = p.v_cache.strides[0];
  if (a.four_d) {
    a.k_s1 = p.k_cache.strides[1];
    a.v_s1 = p.v_cache.strides[1];
  }
  a.k_head = p.k_cache.strides[p.k_cache.ndim - 2];
  a.v_head = p.v_cache.strides[p.v_cache.ndim - 2];
  a.table = p.page_table.ptr<const int32_t>();
  a.table_s0 = p.page_table.strides[0];
  a.table_s1 = p.page_table.strides[1];
  a.table_holds_slots = p.table_holds_slots;
  if (p.k_descale.defined()) {
    a.k_descale = p.k_descale.ptr<const float>();
    a.kd_s0 = p.k_descale.strides[0];
    a.kd_s1 = p.k_descale.strides[1];
  }
  if (p.v_descale.defined()) {
    a.v_descale = p.v_descale.ptr<const float>();
    a.vd_s0 = p.v_descale.strides[0];
    a.vd_s1 = p.v_descale.strides[1];
  }

  std::vector<Entry> entries(static_cast<size_t>(s.batch));
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t q0 = at(p.cu_seqlens_q, b);
    entries[b] = {q0, at(p.cu_seqlens_q, b + 1) - q0, at(p.cache_seqlens, b),
                  p.kv_start.defined() ? at(p.kv_start, b) : 0,
                  p.table_rows.defined() ? at(p.table_rows, b) : b};
  }
  run_tasks(a, plan_tasks(a, entries, s.heads_kv), exec, p.num_splits != 1);
}

void ragged_attention(const RaggedAttentionParams& p, const detail::RaggedShape& s,
                      const Exec& exec) {
  AttnArgs a;
  set_query_and_outputs(a, p, s);
  a.k = p.k.data;
  a.v = p.v.data;
  a.kv_dtype = p.k.dtype;
  a.paged = false;
  a.k_s0 = p.k.strides[0];
  a.k_head = p.k.strides[1];
  a.v_s0 = p.v.strides[0];
  a.v_head = p.v.strides[1];

  std::vector<Entry> entries(static_cast<size_t>(s.batch));
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t q0 = at(p.cu_seqlens_q, b), k0 = at(p.cu_seqlens_k, b);
    entries[b] = {q0, at(p.cu_seqlens_q, b + 1) - q0, at(p.cu_seqlens_k, b + 1) - k0, k0, 0};
  }
  run_tasks(a, plan_tasks(a, entries, s.heads_kv), exec, true);
}

}  // namespace flashback::cpu_fast

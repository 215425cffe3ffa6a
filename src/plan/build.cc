#include "plan/build.h"

#include <algorithm>

namespace flashback::plan {
namespace {

constexpr size_t kAlign = 16;  // int32 elements: 64-byte aligned arrays (cache lines, GPU copies)

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int32_t ceil_div(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

size_t list_elements(const ListShape& s) {
  const size_t cap = static_cast<size_t>(s.capacity);
  return 4 * round_up(cap) + 2 * round_up(cap + 1) + round_up(cap * static_cast<size_t>(s.width));
}

void carve_list(const ListShape& s, int32_t*& cursor, EntryList& l) {
  const size_t cap = static_cast<size_t>(s.capacity);
  auto take = [&](size_t n) {
    int32_t* p = cursor;
    cursor += round_up(n);
    return p;
  };
  l.capacity = s.capacity;
  l.table_rows = take(cap);
  l.kv_start = take(cap);
  l.cache_seqlens = take(cap);
  l.source_row = take(cap);
  l.cu_seqlens_q = take(cap + 1);
  l.cu_seqlens_k = take(cap + 1);
  l.page_table_width = s.width;
  l.page_table = s.width > 0 ? take(cap * static_cast<size_t>(s.width)) : nullptr;
  l.size = 0;
}

// Appends entries to a list, keeping the running sums and maxima in locals: the int32 stores
// into the arrays may alias the list's own int32 fields, which would force a reload per entry.
class Writer {
 public:
  Writer(EntryList& l, bool causal) : l_(l) {
    l_.causal = causal;
    l_.cu_seqlens_q[0] = l_.cu_seqlens_k[0] = 0;
  }
  ~Writer() {
    l_.size = e_;
    l_.max_seqlen_q = max_q_;
    l_.max_seqlen_k = max_k_;
  }
  void add(int32_t row, int32_t start, int32_t kv_len, int32_t q_len, int32_t source) {
    const int32_t e = e_++;
    l_.table_rows[e] = row;
    l_.kv_start[e] = start;
    l_.cache_seqlens[e] = kv_len;
    l_.source_row[e] = source;
    l_.cu_seqlens_q[e + 1] = sum_q_ += q_len;
    l_.cu_seqlens_k[e + 1] = sum_k_ += kv_len;
    max_q_ = std::max(max_q_, q_len);
    max_k_ = std::max(max_k_, kv_len);
  }

 private:
  EntryList& l_;
  int32_t e_ = 0, sum_q_ = 0, sum_k_ = 0, max_q_ = 0, max_k_ = 0;
};

// Chunked-local virtual requests of one request (SPEC.md §4): one per chunk its queries touch,
// each a bottom-right causal attention over the chunk's keys up to its last query. `slots` > 0
// pads to exactly that many entries (graph-stable layout); the padding entries are empty.
void add_local(Writer& w, const RowInfo& r, int32_t b, int32_t chunk, int32_t slots) {
  int32_t added = 0;
  const int32_t first = r.kv_len - r.q_len;  // position of the first query
  if (r.q_len == 1 && r.kv_len > 0) {
    // Decode fast path (one division): the query's chunk starts at the last multiple of C.
    const int32_t cs = first - first % chunk;
    w.add(r.row, r.enc + cs, r.kv_len - cs, 1, b);
    added = 1;
  } else if (r.q_len > 0 && first < 0) {
    // Decode over an empty sequence (a padded graph row): one query, no keys.
    w.add(r.row, r.enc, 0, r.q_len, b);
    added = 1;
  } else if (r.q_len > 0) {
    const int32_t last = r.kv_len - 1;
    for (int32_t c = first / chunk; c <= last / chunk; ++c, ++added) {
      const int32_t cs = c * chunk;
      const int32_t qb = std::max(first, cs), qe = std::min(last, cs + chunk - 1);
      w.add(r.row, r.enc + cs, qe - cs + 1, qe - qb + 1, b);
    }
  }
  for (; added < slots; ++added) w.add(r.row, r.enc, 0, 0, b);
}

// Explicit table row e: page ids of the entry's keys, starting at its first key (page-aligned,
// checked by validation); columns past its length hold the reserved page 0.
void fill_page_table(const EntryList& l, const TensorView& r2t, int32_t P) {
  if (l.page_table == nullptr) return;
  const int32_t* base = r2t.ptr<const int32_t>();
  const int64_t s0 = r2t.strides[0], s1 = r2t.strides[1];
  const int32_t W = l.page_table_width;
  for (int32_t e = 0; e < l.size; ++e) {
    int32_t* out = l.page_table + static_cast<int64_t>(e) * W;
    const int32_t* row = base + l.table_rows[e] * s0;
    const int32_t n = ceil_div(l.cache_seqlens[e], P);
    const int64_t start = l.kv_start[e];
    if (P == 1 && s1 == 1) {
      std::copy(row + start, row + start + n, out);  // slots are the page ids: a plain copy
    } else {
      for (int32_t j = 0; j < n; ++j) out[j] = row[(start + int64_t{j} * P) * s1] / P;
    }
    std::fill(out + n, out + W, 0);
  }
}

}  // namespace

int32_t local_entries_per_request(ForwardMode mode, int32_t num_draft_tokens, int32_t chunk) {
  if (is_decode_or_idle(mode)) return 1;
  if (mode == ForwardMode::kTargetVerify)
    return 1 + ceil_div(std::max(num_draft_tokens, 1) - 1, chunk);
  return 0;
}

Layout fresh_layout(const PlanConfig& cfg, const BatchRows& rows) {
  Layout L;
  const int32_t B = rows.size(), P = cfg.page_size, C = cfg.attention_chunk_size;
  L.has_local = C > 0;
  L.has_cross = rows.has_encoder();
  L.self.capacity = L.cross.capacity = B;
  const int32_t slots = L.has_local
                            ? local_entries_per_request(rows.batch().forward_mode,
                                                        rows.batch().spec.num_draft_tokens, C)
                            : 0;
  int32_t max_kv = 0, max_enc = 0, locals = 0;
  // Sizes that depend on lengths: only the compact local layout and explicit tables need a pass.
  const bool scan = (L.has_local && slots == 0) || cfg.materialize_page_table;
  for (int32_t b = 0; scan && b < B; ++b) {
    const RowInfo r = rows(b);
    max_kv = std::max(max_kv, r.kv_len);
    max_enc = std::max(max_enc, r.enc);
    if (L.has_local && slots == 0 && r.q_len > 0)
      locals += (r.kv_len - 1) / C - (r.kv_len - r.q_len) / C + 1;
  }
  L.local.capacity = slots > 0 ? slots * B : locals;
  if (cfg.materialize_page_table) {
    // At least one column, so the table is a proper [B, width] tensor even when empty.
    L.self.width = std::max(1, ceil_div(max_kv, P));
    L.cross.width = std::max(1, ceil_div(max_enc, P));
    L.local.width = std::max(1, std::min(ceil_div(C, P), ceil_div(max_kv, P)));
  }
  if (!L.has_local) L.local = {};
  if (!L.has_cross) L.cross = {};
  return L;
}

Layout graph_layout(const PlanConfig& cfg, int32_t max_bs, int32_t max_context_len) {
  const int32_t P = cfg.page_size, C = cfg.attention_chunk_size;
  const int32_t pages = ceil_div(max_context_len, P);
  Layout L;
  L.has_local = C > 0;
  L.has_cross = true;  // decided per bind (encoder lengths or not); reserved either way
  L.self = L.cross = {max_bs, cfg.materialize_page_table ? pages : 0};
  if (L.has_local) {
    // Worst case: a verify request straddling chunk boundaries (two entries when N <= C).
    const int32_t per_request =
        std::max(local_entries_per_request(ForwardMode::kDecode, 0, C),
                 local_entries_per_request(ForwardMode::kTargetVerify, cfg.max_draft_tokens, C));
    L.local = {max_bs * per_request,
               cfg.materialize_page_table ? std::min(pages, ceil_div(C, P)) : 0};
  }
  return L;
}

size_t arena_elements(const Layout& L) {
  return list_elements(L.self) + list_elements(L.local) + list_elements(L.cross);
}

void carve(const Layout& L, int32_t* arena, ForwardMetadata& m) {
  int32_t* cursor = arena;
  carve_list(L.self, cursor, m.self);
  carve_list(L.local, cursor, m.local);
  carve_list(L.cross, cursor, m.cross);
  m.has_local = L.has_local;
  m.has_cross = L.has_cross;
}

void write_metadata(const PlanConfig& cfg, const BatchRows& rows, ForwardMetadata& m) {
  const ForwardBatch& batch = rows.batch();
  const int32_t B = rows.size(), C = cfg.attention_chunk_size;
  m.mode = batch.forward_mode;
  m.batch_size = B;
  m.page_size = cfg.page_size;
  m.spec = batch.spec;
  m.attention_chunk_size = C;

  {
    Writer self(m.self, true);
    for (int32_t b = 0; b < B; ++b) {
      const RowInfo r = rows(b);
      // Decoder tokens follow the encoder's in the row (SPEC.md §4, cross-attention).
      self.add(r.row, r.enc, r.kv_len, r.q_len, b);
    }
  }
  if (m.has_cross) {
    Writer cross(m.cross, false);
    for (int32_t b = 0; b < B; ++b) {
      const RowInfo r = rows(b);
      cross.add(r.row, 0, r.enc, r.q_len, b);
    }
  }
  if (m.has_local) {
    const int32_t slots =
        local_entries_per_request(batch.forward_mode, batch.spec.num_draft_tokens, C);
    Writer local(m.local, true);
    for (int32_t b = 0; b < B; ++b) add_local(local, rows(b), b, C, slots);
  }
  const TensorView& r2t = rows.req_to_token();
  fill_page_table(m.self, r2t, cfg.page_size);
  if (m.has_local) fill_page_table(m.local, r2t, cfg.page_size);
  if (m.has_cross) fill_page_table(m.cross, r2t, cfg.page_size);
}

}  // namespace flashback::plan

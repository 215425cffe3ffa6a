// flashback._C: thin nanobind bindings of the entry points in flashback/ops.h. Arrays come in as
// views (no copies); outputs are caller-allocated (the Python layer allocates them in the
// caller's framework), so this file never owns memory. The GIL is released while kernels run.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "backend.h"
#include "convert.h"
#include "flashback/error.h"
#include "flashback/ops.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashback::python {
namespace {

Exec make_exec(uintptr_t stream, bool reference, bool deterministic, int num_threads) {
  Exec e;
  e.stream = reinterpret_cast<void*>(stream);
  e.cpu_impl = reference ? Exec::CpuImpl::kReference : Exec::CpuImpl::kFast;
  e.deterministic = deterministic;
  e.num_threads = num_threads;
  return e;
}

void paged_attention(const Array& q, const Array& k_cache, const Array& v_cache,
                     const Array& page_table, const Array& cache_seqlens, const Array& cu_seqlens_q,
                     const Array& out, const Array& qv, const Array& lse, const Array& k_descale,
                     const Array& v_descale, const Array& table_rows, const Array& kv_start,
                     const Array& workspace, nb::object workspace_alloc, bool table_holds_slots,
                     const std::optional<std::string>& kv_dtype, float softmax_scale, bool causal,
                     int window_left, int window_right, float softcap, int max_seqlen_q,
                     int num_splits, uintptr_t stream, bool reference, bool deterministic,
                     int num_threads) {
  const auto cache_dtype = parse_kv_dtype(kv_dtype);
  PagedAttentionParams p;
  p.q = to_view(q, "q");
  p.qv = to_view(qv, "qv");
  p.k_cache = to_view(k_cache, "k_cache", cache_dtype);
  p.v_cache = to_view(v_cache, "v_cache", cache_dtype);
  p.page_table = to_view(page_table, "page_table");
  p.table_holds_slots = table_holds_slots;
  p.table_rows = to_view(table_rows, "table_rows");
  p.kv_start = to_view(kv_start, "kv_start");
  p.cache_seqlens = to_view(cache_seqlens, "cache_seqlens");
  p.cu_seqlens_q = to_view(cu_seqlens_q, "cu_seqlens_q");
  p.k_descale = to_view(k_descale, "k_descale");
  p.v_descale = to_view(v_descale, "v_descale");
  p.out = to_view(out, "out");
  p.lse = to_view(lse, "lse");
  p.softmax_scale = softmax_scale;
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = softcap;
  p.max_seqlen_q = max_seqlen_q;
  p.num_splits = num_splits;
  p.workspace = to_view(workspace, "workspace");
  const Exec exec = make_exec(stream, reference, deterministic, num_threads);

  // The workspace is sized by the library but allocated by the caller's framework (its
  // allocator, its stream semantics), through the callback the Python layer passes.
  Array allocated;
  if (!p.workspace.defined()) {
    const int64_t bytes = flashback::paged_attention_workspace_bytes(p, exec);
    if (bytes > 0) {
      FLASHBACK_CHECK(!workspace_alloc.is_none(), "workspace",
                      detail::concat("an array of ", bytes, " bytes or a workspace_alloc callback"),
                      "none");
      allocated = nb::cast<Array>(workspace_alloc(bytes));
      p.workspace = to_view(allocated, "workspace");
    }
  }
  nb::gil_scoped_release release;
  flashback::paged_attention(p, exec);
}

void ragged_attention(const InArray& q, const InArray& k, const InArray& v,
                      const InArray& cu_seqlens_q, const InArray& cu_seqlens_k, const Array& out,
                      const Array& lse, float softmax_scale, bool causal, int window_left,
                      int window_right, float softcap, int max_seqlen_q, int max_seqlen_k,
                      uintptr_t stream, bool reference, bool deterministic, int num_threads) {
  RaggedAttentionParams p;
  p.q = to_view(q, "q");
  p.k = to_view(k, "k");
  p.v = to_view(v, "v");
  p.cu_seqlens_q = to_view(cu_seqlens_q, "cu_seqlens_q");
  p.cu_seqlens_k = to_view(cu_seqlens_k, "cu_seqlens_k");
  p.out = to_view(out, "out");
  p.lse = to_view(lse, "lse");
  p.softmax_scale = softmax_scale;
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = softcap;
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  const Exec exec = make_exec(stream, reference, deterministic, num_threads);
  nb::gil_scoped_release release;
  flashback::ragged_attention(p, exec);
}

void merge_state(const InArray& out_a, const InArray& lse_a, const InArray& out_b,
                 const InArray& lse_b, const Array& out, const Array& lse, uintptr_t stream,
                 bool reference, int num_threads) {
  MergeStateParams p;
  p.out_a = to_view(out_a, "out_a");
  p.lse_a = to_view(lse_a, "lse_a");
  p.out_b = to_view(out_b, "out_b");
  p.lse_b = to_view(lse_b, "lse_b");
  p.out = to_view(out, "out");
  p.lse = to_view(lse, "lse");
  const Exec exec = make_exec(stream, reference, false, num_threads);
  nb::gil_scoped_release release;
  flashback::merge_state(p, exec);
}

void kv_store(const InArray& k, const InArray& v, const InArray& loc, const Array& k_cache,
              const Array& v_cache, float k_scale, float v_scale,
              const std::optional<std::string>& kv_dtype, uintptr_t stream, bool reference,
              int num_threads) {
  const auto cache_dtype = parse_kv_dtype(kv_dtype);
  KVStoreParams p;
  p.k = to_view(k, "k");
  p.v = to_view(v, "v");
  p.loc = to_view(loc, "loc");
  p.k_cache = to_view(k_cache, "k_cache", cache_dtype);
  p.v_cache = to_view(v_cache, "v_cache", cache_dtype);
  p.k_scale = k_scale;
  p.v_scale = v_scale;
  const Exec exec = make_exec(stream, reference, false, num_threads);
  nb::gil_scoped_release release;
  flashback::kv_store(p, exec);
}

}  // namespace
}  // namespace flashback::python

NB_MODULE(_C, m) {
  using namespace flashback::python;
  m.doc() = "flashback's C++ entry points (flashback/ops.h). Use the flashback package instead.";

  // flashback::Error names the argument; it arrives in Python as flashback.Error (a ValueError).
  nb::exception<flashback::Error>(m, "Error", PyExc_ValueError);

  m.def("paged_attention", &paged_attention, "q"_a, "k_cache"_a, "v_cache"_a, "page_table"_a,
        "cache_seqlens"_a, "cu_seqlens_q"_a, "out"_a, nb::kw_only(), "qv"_a.none() = nb::none(),
        "lse"_a.none() = nb::none(), "k_descale"_a.none() = nb::none(),
        "v_descale"_a.none() = nb::none(), "table_rows"_a.none() = nb::none(),
        "kv_start"_a.none() = nb::none(), "workspace"_a.none() = nb::none(),
        "workspace_alloc"_a = nb::none(), "table_holds_slots"_a = false, "kv_dtype"_a = nb::none(),
        "softmax_scale"_a = 0.0f, "causal"_a = true, "window_left"_a = -1, "window_right"_a = -1,
        "softcap"_a = 0.0f, "max_seqlen_q"_a = 0, "num_splits"_a = 0, "stream"_a = 0,
        "reference"_a = false, "deterministic"_a = false, "num_threads"_a = 0,
        "Paged attention (PagedAttentionParams). q/out are [total_q, H, D]; lse is f32 "
        "[total_q, H] with any strides. reference=True runs the fp64 CPU oracle.");
  m.def("ragged_attention", &ragged_attention, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a,
        "cu_seqlens_k"_a, "out"_a, nb::kw_only(), "lse"_a.none() = nb::none(),
        "softmax_scale"_a = 0.0f, "causal"_a = true, "window_left"_a = -1, "window_right"_a = -1,
        "softcap"_a = 0.0f, "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0, "stream"_a = 0,
        "reference"_a = false, "deterministic"_a = false, "num_threads"_a = 0,
        "Attention over contiguous varlen K/V (RaggedAttentionParams).");
  m.def("merge_state", &merge_state, "out_a"_a, "lse_a"_a, "out_b"_a, "lse_b"_a, "out"_a,
        nb::kw_only(), "lse"_a.none() = nb::none(), "stream"_a = 0, "reference"_a = false,
        "num_threads"_a = 0, "Merges two partial attention states (MergeStateParams).");
  m.def("kv_store", &kv_store, "k"_a, "v"_a.none(), "loc"_a, "k_cache"_a, "v_cache"_a.none(),
        nb::kw_only(), "k_scale"_a = 1.0f, "v_scale"_a = 1.0f, "kv_dtype"_a = nb::none(),
        "stream"_a = 0, "reference"_a = false, "num_threads"_a = 0,
        "Writes K/V rows to cache slots, quantising to fp8 caches (KVStoreParams).");

  bind_backend(m);
}

// AttentionBackend for Python engines. A ForwardBatch arrives as any Python object with the
// attributes of flashback::ForwardBatch (flashback.ForwardBatch is the dataclass for it); its
// arrays are viewed without copies. The backend keeps views of the batch (req_to_token, ...)
// between init_forward_metadata and forward, so the Python wrapper keeps the batch alive.
#include "backend.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "convert.h"
#include "flashback/backend.h"
#include "flashback/batch.h"
#include "flashback/error.h"

namespace nb = nanobind;
using namespace nb::literals;

// MultiStepDraftBackend holds unique_ptrs in a vector, whose copy constructor is declared (but
// ill-formed): tell nanobind the class cannot be copied.
template <>
struct nanobind::detail::is_copy_constructible<flashback::MultiStepDraftBackend> : std::false_type {
};

namespace flashback::python {
namespace {

// An optional array attribute of `obj` (absent or None: an absent view).
TensorView array_attr(nb::handle obj, const char* name) {
  if (!nb::hasattr(obj, name)) return {};
  nb::object value = nb::getattr(obj, name);
  if (value.is_none()) return {};
  InArray a;
  FLASHBACK_CHECK(nb::try_cast(value, a), name, "an array (DLPack) or None",
                  nb::type_name(value.type()).c_str());
  return to_view(a, name);
}

template <typename T>
T scalar_attr(nb::handle obj, const char* name, T fallback) {
  if (!nb::hasattr(obj, name)) return fallback;
  nb::object value = nb::getattr(obj, name);
  return value.is_none() ? fallback : nb::cast<T>(value);
}

ForwardBatch batch_from(nb::handle obj) {
  ForwardBatch b;
  b.forward_mode = nb::cast<ForwardMode>(nb::getattr(obj, "forward_mode"));
  b.batch_size = scalar_attr<int32_t>(obj, "batch_size", 0);
  b.req_to_token = array_attr(obj, "req_to_token");
  b.req_pool_indices = array_attr(obj, "req_pool_indices");
  b.req_pool_indices_cpu = array_attr(obj, "req_pool_indices_cpu");
  b.seq_lens = array_attr(obj, "seq_lens");
  b.seq_lens_cpu = array_attr(obj, "seq_lens_cpu");
  b.out_cache_loc = array_attr(obj, "out_cache_loc");
  b.extend_seq_lens = array_attr(obj, "extend_seq_lens");
  b.extend_seq_lens_cpu = array_attr(obj, "extend_seq_lens_cpu");
  b.extend_prefix_lens = array_attr(obj, "extend_prefix_lens");
  b.extend_prefix_lens_cpu = array_attr(obj, "extend_prefix_lens_cpu");
  b.encoder_lens = array_attr(obj, "encoder_lens");
  b.encoder_lens_cpu = array_attr(obj, "encoder_lens_cpu");
  b.encoder_out_cache_loc = array_attr(obj, "encoder_out_cache_loc");
  b.spec.draft_step = scalar_attr<int32_t>(obj, "draft_step", -1);
  b.spec.num_draft_tokens = scalar_attr<int32_t>(obj, "num_draft_tokens", 0);
  return b;
}

// The arguments every forward variant shares, converted once.
struct ForwardArgs {
  TensorView q, k, v, out, lse;
  LayerCache cache;
};

ForwardArgs forward_args(const InArray& q, const InArray& k, const InArray& v, const Array& out,
                         const Array& k_cache, const Array& v_cache, const Array& lse,
                         const std::optional<std::string>& kv_dtype) {
  const auto cache_dtype = parse_kv_dtype(kv_dtype);
  return {to_view(q, "q"),
          to_view(k, "k"),
          to_view(v, "v"),
          to_view(out, "out"),
          to_view(lse, "lse"),
          {to_view(k_cache, "k_cache", cache_dtype), to_view(v_cache, "v_cache", cache_dtype)}};
}

using ForwardFn = void (AttentionBackend::*)(const TensorView&, const TensorView&,
                                             const TensorView&, const TensorView&, const Layer&,
                                             const ForwardBatch&, const LayerCache&, bool,
                                             const TensorView&);

template <ForwardFn fn>
void forward(AttentionBackend& be, const InArray& q, const InArray& k, const InArray& v,
             const Array& out, const Layer& layer, nb::handle batch, const Array& k_cache,
             const Array& v_cache, bool save_kv, const Array& lse,
             const std::optional<std::string>& kv_dtype) {
  const ForwardArgs a = forward_args(q, k, v, out, k_cache, v_cache, lse, kv_dtype);
  const ForwardBatch b = batch_from(batch);
  nb::gil_scoped_release release;
  (be.*fn)(a.q, a.k, a.v, a.out, layer, b, a.cache, save_kv, a.lse);
}

BackendConfig make_config(int32_t page_size, int32_t attention_chunk_size, bool deterministic,
                          int num_threads, uintptr_t stream, bool use_page_table,
                          int32_t cuda_graph_fill_seq_len, int32_t max_draft_tokens) {
  BackendConfig c;
  c.page_size = page_size;
  c.attention_chunk_size = attention_chunk_size;
  c.deterministic = deterministic;
  c.num_threads = num_threads;
  c.stream = reinterpret_cast<void*>(stream);
  c.use_page_table = use_page_table;
  c.cuda_graph_fill_seq_len = cuda_graph_fill_seq_len;
  c.max_draft_tokens = max_draft_tokens;
  return c;
}

// Keyword arguments of BackendConfig, shared by both backend classes.
#define FLASHBACK_CONFIG_ARGS                                                                      \
  "page_size"_a = 1, "attention_chunk_size"_a = 0, "deterministic"_a = false, "num_threads"_a = 0, \
  "stream"_a = 0, "use_page_table"_a = false, "cuda_graph_fill_seq_len"_a = 1,                     \
  "max_draft_tokens"_a = 0

#define FLASHBACK_FORWARD_ARGS                                                          \
  "q"_a, "k"_a.none(), "v"_a.none(), "out"_a, "layer"_a, "batch"_a, "k_cache"_a,        \
      "v_cache"_a.none() = nb::none(), "save_kv"_a = true, "lse"_a.none() = nb::none(), \
      "kv_dtype"_a = nb::none()

template <typename Class>
void bind_graph_api(Class& cls) {
  using T = typename Class::Type;
  cls.def(
         "init_cuda_graph_state",
         [](T& be, int32_t max_bs, int32_t max_context_len) {
           be.init_cuda_graph_state(max_bs, max_context_len);
         },
         "max_bs"_a, "max_context_len"_a)
      .def(
          "init_forward_metadata_capture_cuda_graph",
          [](T& be, nb::handle batch) {
            be.init_forward_metadata_capture_cuda_graph(batch_from(batch));
          },
          "batch"_a)
      .def(
          "init_forward_metadata_replay_cuda_graph",
          [](T& be, nb::handle batch) {
            be.init_forward_metadata_replay_cuda_graph(batch_from(batch));
          },
          "batch"_a);
}

}  // namespace

void bind_backend(nb::module_& m) {
  nb::enum_<ForwardMode>(m, "ForwardMode")
      .value("DECODE", ForwardMode::kDecode)
      .value("IDLE", ForwardMode::kIdle)
      .value("TARGET_VERIFY", ForwardMode::kTargetVerify)
      .value("EXTEND", ForwardMode::kExtend)
      .value("DRAFT_EXTEND", ForwardMode::kDraftExtend)
      .value("MIXED", ForwardMode::kMixed);

  nb::class_<Layer>(m, "Layer", "One attention layer (per tensor-parallel rank), SPEC.md §1.")
      .def(
          "__init__",
          [](Layer* l, int32_t layer_id, int32_t num_q_heads, int32_t num_kv_heads,
             int32_t head_dim, int32_t v_head_dim, float scaling, float logit_cap,
             int32_t sliding_window_size, bool is_cross_attention,
             bool uses_chunked_local_attention, float k_scale, float v_scale) {
            new (l) Layer{layer_id,
                          num_q_heads,
                          num_kv_heads,
                          head_dim,
                          v_head_dim,
                          scaling,
                          logit_cap,
                          sliding_window_size,
                          is_cross_attention,
                          uses_chunked_local_attention,
                          k_scale,
                          v_scale};
          },
          nb::kw_only(), "layer_id"_a = 0, "num_q_heads"_a, "num_kv_heads"_a, "head_dim"_a,
          "v_head_dim"_a, "scaling"_a = 0.0f, "logit_cap"_a = 0.0f, "sliding_window_size"_a = -1,
          "is_cross_attention"_a = false, "uses_chunked_local_attention"_a = false,
          "k_scale"_a = 1.0f, "v_scale"_a = 1.0f)
      .def_rw("layer_id", &Layer::layer_id)
      .def_rw("num_q_heads", &Layer::num_q_heads)
      .def_rw("num_kv_heads", &Layer::num_kv_heads)
      .def_rw("head_dim", &Layer::head_dim)
      .def_rw("v_head_dim", &Layer::v_head_dim)
      .def_rw("scaling", &Layer::scaling)
      .def_rw("logit_cap", &Layer::logit_cap)
      .def_rw("sliding_window_size", &Layer::sliding_window_size)
      .def_rw("is_cross_attention", &Layer::is_cross_attention)
      .def_rw("uses_chunked_local_attention", &Layer::uses_chunked_local_attention)
      .def_rw("k_scale", &Layer::k_scale)
      .def_rw("v_scale", &Layer::v_scale);

  auto be = nb::class_<AttentionBackend>(m, "AttentionBackend");
  be.def(
        "__init__",
        [](AttentionBackend* self, int32_t page_size, int32_t attention_chunk_size,
           bool deterministic, int num_threads, uintptr_t stream, bool use_page_table, int32_t fill,
           int32_t max_draft_tokens) {
          new (self) AttentionBackend(make_config(page_size, attention_chunk_size, deterministic,
                                                  num_threads, stream, use_page_table, fill,
                                                  max_draft_tokens));
        },
        nb::kw_only(), FLASHBACK_CONFIG_ARGS)
      .def(
          "init_forward_metadata",
          [](AttentionBackend& self, nb::handle batch) {
            const ForwardBatch b = batch_from(batch);
            nb::gil_scoped_release release;
            self.init_forward_metadata(b);
          },
          "batch"_a)
      .def("forward", &forward<&AttentionBackend::forward>, FLASHBACK_FORWARD_ARGS)
      .def("forward_extend", &forward<&AttentionBackend::forward_extend>, FLASHBACK_FORWARD_ARGS)
      .def("forward_decode", &forward<&AttentionBackend::forward_decode>, FLASHBACK_FORWARD_ARGS)
      .def(
          "forward_extend_mha",
          [](AttentionBackend& self, const InArray& q, const InArray& k, const InArray& v,
             const Array& out, const Array& lse, nb::handle batch) {
            const TensorView tq = to_view(q, "q"), tk = to_view(k, "k"), tv = to_view(v, "v"),
                             to = to_view(out, "out"), tl = to_view(lse, "lse");
            const ForwardBatch b = batch_from(batch);
            nb::gil_scoped_release release;
            self.forward_extend_mha(tq, tk, tv, to, tl, b);
          },
          "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "batch"_a)
      .def(
          "forward_prefix_chunk",
          [](AttentionBackend& self, const InArray& q, const InArray& k, const InArray& v,
             const Array& out, const Array& lse, nb::handle batch, const InArray& cu_seq_lens,
             int32_t max_seq_len) {
            const TensorView tq = to_view(q, "q"), tk = to_view(k, "k"), tv = to_view(v, "v"),
                             to = to_view(out, "out"), tl = to_view(lse, "lse");
            const ForwardBatch b = batch_from(batch);
            const PrefixChunk chunk{to_view(cu_seq_lens, "cu_seq_lens"), max_seq_len};
            nb::gil_scoped_release release;
            self.forward_prefix_chunk(tq, tk, tv, to, tl, b, chunk);
          },
          "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "batch"_a, "cu_seq_lens"_a, "max_seq_len"_a);
  bind_graph_api(be);

  auto ms = nb::class_<MultiStepDraftBackend>(m, "MultiStepDraftBackend");
  ms.def(
        "__init__",
        [](MultiStepDraftBackend* self, int32_t num_steps, int32_t page_size,
           int32_t attention_chunk_size, bool deterministic, int num_threads, uintptr_t stream,
           bool use_page_table, int32_t fill, int32_t max_draft_tokens) {
          new (self) MultiStepDraftBackend(
              make_config(page_size, attention_chunk_size, deterministic, num_threads, stream,
                          use_page_table, fill, max_draft_tokens),
              num_steps);
        },
        "num_steps"_a, nb::kw_only(), FLASHBACK_CONFIG_ARGS)
      .def_prop_ro("num_steps", &MultiStepDraftBackend::num_steps)
      .def(
          "init_forward_metadata",
          [](MultiStepDraftBackend& self, nb::handle batch) {
            self.init_forward_metadata(batch_from(batch));
          },
          "batch"_a)
      .def("step", &MultiStepDraftBackend::step, "s"_a, nb::rv_policy::reference_internal);
  bind_graph_api(ms);
}

}  // namespace flashback::python

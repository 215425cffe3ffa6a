#include "device_data.h"

#include <cstdint>
#include <sstream>
#include <string>

namespace flashback::testing {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  void* p = nullptr;
  FB_TEST_CUDA(cudaMalloc(&p, bytes > 0 ? bytes : 16));
  ptr_ = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

void DeviceMirror::add(const Tensor& t, bool copy) {
  if (t.data() == nullptr || find(t.data()) != nullptr) return;
  const size_t bytes = static_cast<size_t>(t.nbytes());
  Entry e{t.data(), bytes, DeviceBuffer(bytes)};
  if (copy) FB_TEST_CUDA(cudaMemcpy(e.dev.get(), t.data(), bytes, cudaMemcpyHostToDevice));
  entries_.push_back(std::move(e));
}

void DeviceMirror::add_view(const TensorView& v) {
  if (!v.defined() || v.data == nullptr || find(v.data) != nullptr) return;
  const size_t bytes = static_cast<size_t>(v.numel() * dtype_size(v.dtype));
  Entry e{v.data, bytes, DeviceBuffer(bytes)};
  FB_TEST_CUDA(cudaMemcpy(e.dev.get(), v.data, bytes, cudaMemcpyHostToDevice));
  entries_.push_back(std::move(e));
}

const DeviceMirror::Entry* DeviceMirror::find(const void* host_ptr) const {
  const auto* p = static_cast<const unsigned char*>(host_ptr);
  for (const Entry& e : entries_) {
    const auto* h = static_cast<const unsigned char*>(e.host);
    if (p >= h && p < h + (e.bytes > 0 ? e.bytes : 1)) return &e;
  }
  return nullptr;
}

TensorView DeviceMirror::rebase(const TensorView& host) const {
  if (!host.defined() || host.data == nullptr) return host;
  const Entry* e = find(host.data);
  FLASHBACK_CHECK(e != nullptr, "DeviceMirror::rebase", "a view into a mirrored tensor",
                  "an unknown pointer");
  TensorView d = host;
  d.data =
      static_cast<unsigned char*>(e->dev.get()) +
      (static_cast<const unsigned char*>(host.data) - static_cast<const unsigned char*>(e->host));
  d.device = Device{DeviceType::kCUDA, 0};
  return d;
}

void DeviceMirror::download(const Tensor& t) const {
  const Entry* e = find(t.data());
  FLASHBACK_CHECK(e != nullptr, "DeviceMirror::download", "a mirrored tensor", "unknown");
  FB_TEST_CUDA(cudaMemcpy(t.data(), e->dev.get(), e->bytes, cudaMemcpyDeviceToHost));
}

void DeviceMirror::upload(const Tensor& t) const {
  const Entry* e = find(t.data());
  FLASHBACK_CHECK(e != nullptr, "DeviceMirror::upload", "a mirrored tensor", "unknown");
  FB_TEST_CUDA(cudaMemcpy(e->dev.get(), t.data(), e->bytes, cudaMemcpyHostToDevice));
}

DevicePaged to_device(const PagedData& d, bool copy_values) {
  DevicePaged dp;
  for (const Tensor* t : {&d.q, &d.qv, &d.k_cache, &d.v_cache}) dp.mirror.add(*t, copy_values);
  for (const Tensor* t : {&d.page_table, &d.cache_seqlens, &d.cu_seqlens_q, &d.k_descale,
                          &d.v_descale, &d.out, &d.lse})
    dp.mirror.add(*t);
  // Index arrays a test attached to the params outside PagedData (table_rows, kv_start).
  dp.mirror.add_view(d.params.table_rows);
  dp.mirror.add_view(d.params.kv_start);
  const PagedAttentionParams& h = d.params;
  PagedAttentionParams& p = dp.params;
  p = h;
  p.q = dp.mirror.rebase(h.q);
  p.qv = dp.mirror.rebase(h.qv);
  p.k_cache = dp.mirror.rebase(h.k_cache);
  p.v_cache = dp.mirror.rebase(h.v_cache);
  p.page_table = dp.mirror.rebase(h.page_table);
  p.table_rows = dp.mirror.rebase(h.table_rows);
  p.kv_start = dp.mirror.rebase(h.kv_start);
  p.cache_seqlens = dp.mirror.rebase(h.cache_seqlens);
  p.cu_seqlens_q = dp.mirror.rebase(h.cu_seqlens_q);
  p.k_descale = dp.mirror.rebase(h.k_descale);
  p.v_descale = dp.mirror.rebase(h.v_descale);
  p.out = dp.mirror.rebase(h.out);
  p.lse = dp.mirror.rebase(h.lse);
  return dp;
}

void attach_workspace(DevicePaged& dp, const Exec& exec) {
  const int64_t bytes = paged_attention_workspace_bytes(dp.params, exec);
  if (bytes > 0) {
    if (dp.workspace.bytes() < static_cast<size_t>(bytes))
      dp.workspace = DeviceBuffer(static_cast<size_t>(bytes));
    dp.params.workspace =
        TensorView(dp.workspace.get(), DType::kU8, {bytes}, Device{DeviceType::kCUDA, 0});
  } else {
    dp.params.workspace = TensorView();
  }
}

void run_on_device(DevicePaged& dp, const PagedData& d, const Exec& exec) {
  attach_workspace(dp, exec);
  paged_attention(dp.params, exec);
  FB_TEST_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream)));
  dp.mirror.download(d.out);
  if (d.lse.data() != nullptr) dp.mirror.download(d.lse);
}

std::vector<AttentionCase> storage_variants(const AttentionCase& base) {
  std::vector<AttentionCase> out;
  AttentionCase c = base;
  c.name = "req_to_token slots";
  c.table_holds_slots = true;
  out.push_back(c);
  c = base;
  c.name = "fp16, transposed lse";
  c.dtype = c.kv_dtype = DType::kF16;
  c.lse_transposed = true;
  out.push_back(c);
  c = base;
  c.name = "no lse";
  c.with_lse = false;
  out.push_back(c);
  for (DType f8 : {DType::kF8E4M3, DType::kF8E5M2})
    for (bool per_head : {true, false})
      for (DType q : {DType::kBF16, DType::kF16}) {
        c = base;
        c.name = "fp8";
        c.kv_dtype = f8;
        c.dtype = q;
        c.per_head_descale = per_head;
        out.push_back(c);
      }
  return out;
}

std::vector<int> head_dims(const char* list) {
  std::vector<int> v;
  std::stringstream s(list);
  for (std::string x; std::getline(s, x, ',');)
    if (!x.empty()) v.push_back(std::stoi(x));
  return v;
}

}  // namespace flashback::testing

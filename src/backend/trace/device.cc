#include "backend/trace/device.h"

#include <algorithm>
#include <string>

#include "flashback/error.h"
#ifdef FLASHBACK_WITH_CUDA
#include "cuda/memory.h"
#endif

namespace flashback::trace {

#ifdef FLASHBACK_WITH_CUDA
struct DeviceCopies::Copy {
  cuda::DeviceBuffer buf;
  size_t bytes = 0;
  bool lasting = false;
};

DeviceCopies::DeviceCopies(Device device) : device_(device) {}
DeviceCopies::~DeviceCopies() = default;

namespace {
size_t span_bytes(const TensorView& t) {
  FLASHBACK_CHECK(t.is_contiguous(), "trace device copy", "a contiguous tensor", t.shape_str());
  return static_cast<size_t>(t.numel() * dtype_size(t.dtype));
}
}  // namespace

void DeviceCopies::put(const TensorView& host, bool lasting) {
  if (!host.defined() || host.data == nullptr) return;
  const size_t bytes = span_bytes(host);
  auto& c = copies_[reinterpret_cast<uintptr_t>(host.data)];
  if (!c || c->bytes != bytes) c = std::make_unique<Copy>();
  c->buf.reserve(bytes, device_);
  c->bytes = bytes;
  c->lasting = c->lasting || lasting;
  cuda::copy_to_device(c->buf.data(), host.data, bytes);
}

char* DeviceCopies::find(const void* p) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = copies_.upper_bound(a);
  FLASHBACK_CHECK(it != copies_.begin(), "trace device copy", "a view of an uploaded tensor",
                  "an address before every copy");
  --it;
  // (An empty tensor's copy is a 256-byte allocation: its own address maps.)
  FLASHBACK_CHECK(a < it->first + std::max<size_t>(it->second->bytes, 1), "trace device copy",
                  "a view of an uploaded tensor", "an address past its copy");
  return static_cast<char*>(it->second->buf.data()) + (a - it->first);
}

TensorView DeviceCopies::on_device(const TensorView& host) const {
  if (!host.defined()) return host;
  TensorView d = host;
  if (host.data != nullptr) d.data = find(host.data);  // (an empty tensor may have none)
  d.device = device_;
  return d;
}

void DeviceCopies::get(const TensorView& host) const {
  if (!host.defined() || host.data == nullptr) return;
  cuda::copy_to_host(host.data, find(host.data), span_bytes(host));
}

void DeviceCopies::release() {
  for (auto it = copies_.begin(); it != copies_.end();)
    it = it->second->lasting ? std::next(it) : copies_.erase(it);
}
#else
struct DeviceCopies::Copy {};
DeviceCopies::DeviceCopies(Device device) : device_(device) {
  throw Error("--device", "cpu (this build has no CUDA)", to_string(device));
}
DeviceCopies::~DeviceCopies() = default;
void DeviceCopies::put(const TensorView&, bool) {}
TensorView DeviceCopies::on_device(const TensorView& host) const { return host; }
void DeviceCopies::get(const TensorView&) const {}
void DeviceCopies::release() {}
char* DeviceCopies::find(const void*) const { return nullptr; }
#endif

}  // namespace flashback::trace

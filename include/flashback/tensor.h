/// @brief TensorView — a non-owning view (data, dtype, device, shape, strides) that every entry
/// point takes — and Tensor, a small owning host buffer for tests and tools. No CUDA headers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "flashback/error.h"

namespace flashback {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kI32, kI64, kU8 };
enum class DeviceType : uint8_t { kCPU, kCUDA };

/// Bytes per element.
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    default:
      return 1;
  }
}
const char* dtype_name(DType t);
constexpr bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }
constexpr bool is_float(DType t) { return t <= DType::kF8E5M2; }

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device&) const = default;
};
std::string to_string(Device d);

/// A non-owning strided view. Strides are in elements. A default-constructed view (data ==
/// nullptr, ndim == 0) means "absent" for optional arguments.
struct TensorView {
  static constexpr int kMaxDims = 6;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};

  TensorView() = default;
  /// Contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = {});
  /// Strided view; strides.size() must equal shape.size().
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides, Device device = {});

  bool defined() const { return data != nullptr || ndim > 0; }
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  int64_t numel() const;
  bool is_contiguous() const;
  bool last_dim_contiguous() const {
    return ndim == 0 || shape[ndim - 1] <= 1 || strides[ndim - 1] == 1;
  }
  std::string shape_str() const;

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  /// Element offset of an index tuple (no bounds checks; validation happens at the API edge).
  template <typename... I>
  int64_t offset(I... idx) const {
    int64_t o = 0;
    int d = 0;
    ((o += static_cast<int64_t>(idx) * strides[d++]), ...);
    return o;
  }
  /// Same view with dims a and b swapped.
  TensorView transposed(int a, int b) const;
  /// Sub-range [begin, end) of dimension d.
  TensorView slice(int d, int64_t begin, int64_t end) const;
};

/// An owning, 64-byte-aligned host tensor. For tests, tools and the CPU path; the library's
/// entry points never allocate outputs themselves.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::initializer_list<int64_t> shape);
  Tensor(DType dtype, const int64_t* shape, int ndim);

  TensorView view() const { return view_; }
  operator TensorView() const { return view_; }  // NOLINT: a Tensor is usable wherever a view is
  void* data() const { return view_.data; }
  const std::shared_ptr<void>& storage() const { return storage_; }
  template <typename T>
  T* ptr() const {
    return view_.ptr<T>();
  }
  int64_t numel() const { return view_.numel(); }
  int64_t nbytes() const { return numel() * dtype_size(view_.dtype); }
  DType dtype() const { return view_.dtype; }
  int64_t size(int d) const { return view_.size(d); }

  /// Reads element i (flat, contiguous) as double; writes a double, rounding to the dtype.
  double get(int64_t i) const;
  void set(int64_t i, double v);
  /// Fills every byte with 0xFF: NaN for every float dtype (fp8 e4m3 0xFF is NaN too), -1 for
  /// integers. Tests poison outputs with it so an unwritten element fails.
  void poison();
  void zero();

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

/// Generic element access through a view (any dtype, any strides): slow, for the oracle,
/// tests and validation code only.
double load_as_double(const TensorView& t, int64_t element_offset);
void store_from_double(const TensorView& t, int64_t element_offset, double v);

}  // namespace flashback

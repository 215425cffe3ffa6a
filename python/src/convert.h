// Conversion of Python arrays (nanobind ndarrays: anything that speaks DLPack or the buffer
// protocol) to flashback::TensorView, without copies. Validation of shapes and dtypes is left
// to the entry points (common/validate), which name the argument in their errors.
#pragma once

#include <nanobind/ndarray.h>

#include <optional>
#include <string>

#include "flashback/tensor.h"

namespace flashback::python {

namespace nb = nanobind;

/// Parses a cache dtype name as accepted by the Python API ("fp8_e4m3", "fp8_e5m2"; None,
/// "" and "auto" mean "the array's own dtype").
std::optional<DType> parse_kv_dtype(const std::optional<std::string>& name);

/// Arrays the entry points write (outputs, caches being stored to).
using Array = nb::ndarray<>;
/// Arrays they only read. Read-only arrays are accepted (NumPy refuses to export read-only or
/// broadcast arrays, such as a stride-0 descale, as writable).
using InArray = nb::ndarray<nb::ro>;

/// A view of `a`; an invalid array (None, for arguments declared `.none()`) gives an absent
/// (default) view. `as_dtype` reinterprets a uint8 array as fp8 (DLPack before 1.0 has no fp8
/// codes); any other reinterpretation is an error naming `name`.
TensorView to_view(const Array& a, const char* name, std::optional<DType> as_dtype = std::nullopt);
TensorView to_view(const InArray& a, const char* name,
                   std::optional<DType> as_dtype = std::nullopt);

}  // namespace flashback::python

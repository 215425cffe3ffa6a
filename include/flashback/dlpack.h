/// @brief DLPack interop. DLPack before 1.0 has no fp8 codes: an fp8 tensor crosses as uint8 and
/// the caller names the real dtype. Needs DLPack's header (Debian: libdlpack-dev).
#pragma once

#include <dlpack/dlpack.h>

#include <optional>

#include "flashback/tensor.h"

namespace flashback {

/// A view of a DLPack tensor (no copy). `as_dtype` reinterprets a uint8 tensor as fp8
/// (kF8E4M3 / kF8E5M2); any other reinterpretation is an error. Strides of 0 are kept
/// (broadcast); a null strides pointer means contiguous.
TensorView from_dlpack(const DLTensor& t, std::optional<DType> as_dtype = std::nullopt);

/// Exports an owning host tensor; the DLManagedTensor keeps the storage alive until its deleter
/// runs. fp8 tensors are exported as uint8.
DLManagedTensor* to_dlpack(const Tensor& t);

}  // namespace flashback

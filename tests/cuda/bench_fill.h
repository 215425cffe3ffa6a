#pragma once

#include <cstdint>

#include "flashback/tensor.h"

namespace flashback::testing {

/// Fills n elements of `dtype` at device pointer p with ~N(0, sd) values (default stream).
void fill_random_device(void* p, int64_t n, DType dtype, uint64_t seed, float sd);

}  // namespace flashback::testing

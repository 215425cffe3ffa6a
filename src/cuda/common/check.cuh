// Error checking for CUDA calls and launches: every runtime call and every launch is checked,
// and a failure becomes a flashback::Error naming the call (DESIGN.md: "check every CUDA call").
#pragma once

#include <cuda_runtime.h>

#include "flashback/error.h"

#define FLASHBACK_CUDA_CHECK(call)                                                 \
  do {                                                                             \
    const cudaError_t fb_err_ = (call);                                            \
    if (fb_err_ != cudaSuccess)                                                    \
      throw ::flashback::Error(#call, "cudaSuccess", cudaGetErrorString(fb_err_)); \
  } while (0)

// After a launch: configuration errors surface from cudaGetLastError, not the launch itself.
#define FLASHBACK_CUDA_CHECK_LAUNCH(name) \
  FLASHBACK_CUDA_CHECK((static_cast<void>(name), cudaGetLastError()))

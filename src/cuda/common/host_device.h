// FLASHBACK_HOST_DEVICE: marks the pure functions of the CUDA side that CPU tests also compile
// (blocks.h, sw128.h); __host__ __device__ under nvcc, nothing for a plain C++ compiler.
#pragma once

#if defined(__CUDACC__)
#define FLASHBACK_HOST_DEVICE __host__ __device__
#else
#define FLASHBACK_HOST_DEVICE
#endif

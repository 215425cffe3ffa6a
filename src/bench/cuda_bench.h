// The GPU side of the bench, behind a CUDA-free header: ceilings measured on the GPU (a device
// read-bandwidth kernel and a bf16 cuBLAS GEMM) and CUDA-event timing of a workload. In a build
// without CUDA these throw an Error naming --device.
#pragma once

#include "bench/ceilings.h"
#include "bench/timing.h"
#include "bench/workload.h"

namespace flashback::bench {

/// True when this build can run the bench on a GPU.
bool cuda_built();

/// Read bandwidth (streaming kernel over a buffer far larger than L2) and bf16 tensor-core peak
/// (cuBLAS GEMM 8192^3 on pseudo-random operands) of the current GPU.
Ceilings measure_cuda_ceilings();

/// Times the workload on the current GPU: inputs built on the host through the shared case,
/// uploaded into enough copies to exceed L2 twice, CUDA events around every run.
Timing time_cuda(const Workload& w, const RunOptions& o);

}  // namespace flashback::bench

// The one tensor-core primitive the prefill kernel needs beyond cuda/common/mma.cuh: ldmatrix
// .x4 .trans, which loads the B operand of P V (two n8 tiles) straight from row-major V (keys x
// columns). A header of its own so the CPU emulation test (tests/cuda/prefill_emu) can stand in
// for it, as it does for mma.cuh.
#pragma once

#include <cstdint>

#include "cuda/common/mma.cuh"

namespace flashback::cuda::prefill {

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(ptr)));
}

}  // namespace flashback::cuda::prefill

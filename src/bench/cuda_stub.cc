// Stand-in for cuda_bench.cu in builds without CUDA: asking for the GPU is a clear error.
#include "bench/cuda_bench.h"
#include "flashback/error.h"

namespace flashback::bench {
namespace {

[[noreturn]] void no_cuda() {
  throw Error("--device",
              "cpu (this build of flashback has no CUDA support; configure with "
              "-DFLASHBACK_CUDA=ON)",
              "cuda");
}

}  // namespace

bool cuda_built() { return false; }
Ceilings measure_cuda_ceilings() { no_cuda(); }
Timing time_cuda(const Workload&, const RunOptions&) { no_cuda(); }

}  // namespace flashback::bench

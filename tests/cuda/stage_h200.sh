#!/usr/bin/env bash
# Stages what tests/cuda/run_h200.sh needs into build/h200 (small enough to carry to the GPU
# machine): the gpu test and bench binaries from build/cuda, the shared libraries the GPU image
# may lack, workloads.json and peers.py.
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build/cuda}
S=build/h200
rm -rf $S && mkdir -p $S/lib
for t in cuda_test_decode cuda_test_batch_graph cuda_test_merge_store cuda_bench_decode; do
  cp $B/tests/cuda/$t $S/
done
for l in libhwy.so.1 libgomp.so.1; do
  p=$(ldconfig -p | awk -v l=$l '$1 == l {print $NF; exit}')
  [[ -n $p ]] && cp -L "$p" $S/lib/
done
SHARED=${FLASHBACK_SHARED:-$(cd .. && pwd)/shared}
cp "$SHARED/bench/workloads.json" "$SHARED/bench/peers.py" $S/
{ echo "staged $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet -- src/cuda tests/cuda || echo +local)"; \
  grep -E "FLASHBACK_HEAD_DIMS|FLASHBACK_CUDA_MLA|FLASHBACK_CUDA_ARCHS" $B/CMakeCache.txt; } > $S/STAGED
du -sh $S

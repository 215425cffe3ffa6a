#!/usr/bin/env bash
# Stages what tests/cuda/run_h200.sh needs into build/h200: the gpu test and bench binaries from
# build/cuda (stripped), the shared libraries the GPU image may lack, workloads.json and
# peers.py; then packs it as build/h200pkg/h200.tar.xz (~14 MB with every head dim: the
# unpacked binaries exceed the 64 MiB a GPU call may carry). Carry ["build/h200pkg"].
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build/cuda}
S=build/h200
rm -rf $S && mkdir -p $S/lib
for t in cuda_test_decode cuda_test_batch_graph cuda_test_merge_store cuda_test_device_plan \
  cuda_bench_decode; do
  cp $B/tests/cuda/$t $S/
done
for l in libhwy.so.1 libgomp.so.1; do
  p=$(ldconfig -p | awk -v l=$l '$1 == l {print $NF; exit}')
  [[ -n $p ]] && cp -L "$p" $S/lib/
done
SHARED=${FLASHBACK_SHARED:-$(cd .. && pwd)/shared}
cp "$SHARED/bench/workloads.json" "$SHARED/bench/peers.py" $S/
{ echo "staged $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet -- src/cuda tests/cuda || echo +local)"; \
  grep -E "CMAKE_HOME_DIRECTORY|FLASHBACK_HEAD_DIMS|FLASHBACK_CUDA_MLA|FLASHBACK_CUDA_ARCHS" $B/CMakeCache.txt; } > $S/STAGED
strip $S/cuda_* 2>/dev/null || true
mkdir -p build/h200pkg
tar cJf build/h200pkg/h200.tar.xz -C $S .
du -sh $S build/h200pkg

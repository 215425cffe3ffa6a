#!/usr/bin/env bash
# Session 17's last GPU call: bench/compare.py with peers.py in the same run, then every gpu test
# and sanitizer subset in parallel (gpu_ptests.sh ALL=1) beside `flashback check --device cuda`
# (the main job's GPU path: 120 steps at page sizes 1 and 16), then ncu of prefill_8x2k.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; B=build/gpustage
rm -rf $B && mkdir -p $B $OUT/bench && tar xJf build/gpupkg/pkg.tar.xz -C $B
export LD_LIBRARY_PATH=$PWD/$B/lib
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/env.txt 2>&1
t0=$SECONDS; timeout 230 python3 $B/compare.py run --bin $B/flashback --peers-py $B/peers.py \
  --outdir $OUT/bench --name h200 > $OUT/bench.log 2>&1; echo "bench rc=$? $((SECONDS - t0))s"
(t0=$SECONDS; timeout 200 $B/flashback check --device cuda > $OUT/check_cuda.txt 2>&1
 echo "check rc=$? $((SECONDS - t0))s $(tail -1 $OUT/check_cuda.txt)") &
TO=240 ALL=1 bash scripts/gpu_ptests.sh
wait
K=regex:prefill_wgmma W=prefill_8x2k timeout 120 bash scripts/gpu_ncu.sh | tail -8
echo "== bench"; grep -vE '^\s*$' $OUT/bench.log | tail -40

#!/usr/bin/env bash
# One GPU call for a finished prefill change when little device time is left: every gpu test and
# sanitizer subset in parallel (gpu_ptests.sh ALL=1) beside `flashback check --device cuda` (the
# main job's GPU path: 120 steps at page sizes 1 and 16), then bench/compare.py with peers.py in
# the same run on the prefill workloads (W= to change them).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; B=build/gpustage
rm -rf $B && mkdir -p $B $OUT/bench && tar xJf build/gpupkg/pkg.tar.xz -C $B
export LD_LIBRARY_PATH=$PWD/$B/lib
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/env.txt 2>&1
(t0=$SECONDS; timeout ${TO:-200} $B/flashback check --device cuda > $OUT/check_cuda.txt 2>&1
 echo "check rc=$? $((SECONDS - t0))s $(tail -1 $OUT/check_cuda.txt)") &
TO=${TO:-200} ALL=1 bash scripts/gpu_ptests.sh
wait
W=${W:-prefill_1x16k,prefill_8x2k,extend_b16_p4k_e512,local_prefill_1x32k_c8k,mla_prefix_chunk_8x4k}
t0=$SECONDS; timeout ${BTO:-150} python3 $B/compare.py run --bin $B/flashback --peers-py $B/peers.py \
  --only "$W" --outdir $OUT/bench --name h200 > $OUT/bench.log 2>&1; echo "bench rc=$? $((SECONDS - t0))s"
grep -vE '^\s*$' $OUT/bench.log | tail -30

#!/usr/bin/env bash
# One GPU-machine call: Nsight Compute on one launch of one kernel of one workload, with source
# counters, so stall reasons can be read per SASS instruction on the build machine (which has no
# ncu). Writes under $OUT: details.txt (every section), source.csv (SASS with its samples).
#   run (GPU machine): K=regex:prefill_wgmma W=mla_prefix_chunk_8x4k bash scripts/gpu_ncu.sh
#   (carry ["build/gpupkg"], staged by `bash scripts/gpu_final.sh stage BUILD_DIR`)
#   STAGED=1: the package is already unpacked in build/gpustage (gpu_ab.sh's NCU step); the
#   environment (kernel switches) passes through to the profiled run.
#   Read source.csv.gz by loop region with scripts/ncu_regions.py.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; mkdir -p "$OUT"
B=build/gpustage
if [[ -z ${STAGED:-} ]]; then rm -rf "$B"; mkdir -p "$B"; tar xJf build/gpupkg/pkg.tar.xz -C "$B"; fi
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
timeout 300 ncu --clock-control none --set full --import-source no -k "${K:?}" \
  --launch-skip "${SKIP:-2}" --launch-count 1 -o "$OUT/rep" \
  "$B/flashback" bench --device cuda --workloads "$B/workloads.json" --only "${W:?}" --budget 0.1 \
  > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"; tail -3 "$OUT/ncu.log"
ncu -i "$OUT/rep.ncu-rep" --page details > "$OUT/details.txt" 2>&1
ncu -i "$OUT/rep.ncu-rep" --page source --csv --print-source sass > "$OUT/source.csv" 2>&1
echo "source.csv rc=$? lines $(wc -l < "$OUT/source.csv")"
grep -E 'Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issued Warp|L2 Hit|Registers Per' \
  "$OUT/details.txt" | head -12
rm -f "$OUT/rep.ncu-rep"
gzip -f "$OUT/source.csv"

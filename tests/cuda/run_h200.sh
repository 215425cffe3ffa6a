#!/usr/bin/env bash
# One GPU-machine run for the CUDA kernels (issue #6): gpu tests, compute-sanitizer memcheck and
# racecheck on a representative subset, the decode benchmark and peers.py in the same run, then a
# short table (printed last). Logs go under $OUT (or ./out-h200 when OUT is unset).
#
# Binaries: build/h200pkg/h200.tar.xz (or build/h200) as staged by tests/cuda/stage_h200.sh on
# the build machine (carry ["build/h200pkg"]);
# without it, this script configures and builds here (slow: needs nvcc, GTest, nlohmann_json).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out-h200}
FINAL=$OUT
OUT=$FINAL/logs  # every log here; the few files that matter are copied up at the end (the GPU
mkdir -p "$OUT"  # machine returns at most 8 files) and the rest packed into logs.tgz
BIN=build/h200
if [[ -f build/h200pkg/h200.tar.xz ]]; then  # the carried package wins over stale leftovers
  rm -rf $BIN && mkdir -p $BIN  # python's lzma: no reliance on an xz binary on the GPU image
  python3 -c "import tarfile; tarfile.open('build/h200pkg/h200.tar.xz').extractall('$BIN')"
fi
if [[ ! -x $BIN/cuda_test_decode ]]; then
  echo "== building (no staged binaries)"
  cmake -S . -B build/cuda -DFLASHBACK_CUDA=ON -DFLASHBACK_CUDA_ARCHS=90a \
    -DFLASHBACK_HEAD_DIMS="64;128;256" -DFLASHBACK_PYTHON=OFF >"$OUT/build.log" 2>&1 &&
    cmake --build build/cuda -j"$(nproc)" --target cuda_test_decode cuda_test_batch_graph \
      cuda_test_merge_store cuda_test_device_plan cuda_bench_decode >>"$OUT/build.log" 2>&1 &&
    bash tests/cuda/stage_h200.sh || { tail -30 "$OUT/build.log"; exit 1; }
fi
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
{ date -u; cat $BIN/STAGED 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem \
  --format=csv; } >"$OUT/env.log" 2>&1
cat "$OUT/env.log"

summary=()
run() {  # name, log, command...
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  "$@" >"$OUT/$log" 2>&1
  local rc=$?
  local line
  line=$(grep -E "^\[  (PASSED|FAILED)  \]|ERROR SUMMARY" "$OUT/$log" | tr '\n' ' ')
  summary+=("$(printf '%-34s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$line")")
  echo "${summary[-1]}"
  grep -E "^\[  FAILED  \]|Failure|error" "$OUT/$log" | head -20
}

echo "== gpu tests"
for t in cuda_test_decode cuda_test_batch_graph cuda_test_merge_store cuda_test_device_plan; do
  run "$t" "$t.log" timeout 240 "$BIN/$t"
done

echo "== compute-sanitizer"
CS=compute-sanitizer
SUB='CudaDecode.Splits:CudaDecode.TableRowsAndKvStart:CudaDecode.VerifyAndRaggedShortQueries'
run "memcheck decode subset" memcheck_decode.log timeout 300 \
  $CS --tool memcheck --error-exitcode 9 "$BIN/cuda_test_decode" --gtest_filter="$SUB"
run "memcheck merge/store" memcheck_merge_store.log timeout 120 \
  $CS --tool memcheck --error-exitcode 9 "$BIN/cuda_test_merge_store"
run "racecheck decode subset" racecheck_decode.log timeout 240 \
  $CS --tool racecheck --error-exitcode 9 "$BIN/cuda_test_decode" \
  --gtest_filter='CudaDecode.Splits:CudaDecode.NoMaxSeqlenHint'
run "racecheck plan" racecheck_plan.log timeout 120 \
  $CS --tool racecheck --error-exitcode 9 "$BIN/cuda_test_device_plan"

echo "== benchmark"
# Where the time goes in one default-mode decode launch (hardware counters; clocks untouched).
timeout 150 ncu --clock-control none -k regex:decode_kernel -c 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section LaunchStats "$BIN/cuda_bench_decode" --workloads $BIN/workloads.json \
  --only decode_b64_L8k --reps 1 >"$OUT/ncu_decode.txt" 2>&1
echo "ncu rc=$?"
"$BIN/cuda_bench_decode" --workloads $BIN/workloads.json --json "$OUT/bench.json" \
  >"$OUT/bench.txt" 2>"$OUT/bench.err"
echo "bench rc=$?"
if [[ ${PEERS:-1} == 1 ]]; then
  ONLY=decode_b64_L8k,decode_b64_L8k_p1,decode_b1_L128k,decode_b128_ragged,decode_b64_L4k,verify_b64_q4_L4k,window_b32_L32k_w4k,decode_fp8_b64_L8k,mla_decode_b64_L4k_h128,mla_decode_b128_L4k_h16
  timeout 200 python3 $BIN/peers.py --only "$ONLY" --json "$OUT/peers.json" >"$OUT/peers.txt" 2>&1
  echo "peers rc=$?"
fi

echo
echo "== peers (same run)"
grep -vE "^\s*$" "$OUT/peers.txt" 2>/dev/null | tail -45
echo
echo "== summary"
printf '%s\n' "${summary[@]}"
cat "$OUT/bench.txt"
{ printf '%s\n' "${summary[@]}"; echo; cat "$OUT/bench.txt"; } >"$FINAL/summary.txt"
cp "$OUT/bench.json" "$OUT/peers.json" "$OUT/ncu_decode.txt" "$FINAL/" 2>/dev/null
tar czf "$FINAL/logs.tgz" -C "$OUT" . && rm -rf "$OUT"

#!/usr/bin/env bash
# Runs the long-query (prefill / ragged) GPU tests and timings on the H200 through the device
# tool, from a tree built here into build/prefill (-DFLASHBACK_CUDA_ARCHS=90a) and carried:
#   run(command="bash tests/cuda/run_prefill_h200.sh", carry=["build/prefill"], timeout_s=240)
# Logs go under $OUT: prefill.log (gtest), bench.log (timings), memcheck.log (compute-sanitizer
# on a small filter; it may be unsupported on gVisor machines, which the log then says).
set -uo pipefail
OUT=${OUT:-/tmp/prefill_out}
B=${1:-build/prefill}
mkdir -p "$OUT"
# Highway and libgomp travel with the build (rt/); a newer libstdc++ (rt2/) only if needed.
export LD_LIBRARY_PATH="$PWD/$B/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! "$B/tests/cuda/cuda_test_prefill" --gtest_list_tests >/dev/null 2>"$OUT/probe.txt"; then
  export LD_LIBRARY_PATH="$PWD/$B/rt2:$LD_LIBRARY_PATH"
fi
nvidia-smi -L >"$OUT/gpu.txt" 2>&1
timeout 140 "$B/tests/cuda/cuda_test_prefill" 2>&1 | tee "$OUT/prefill.log" | grep -E "^\[  (FAILED|PASSED) |OK \]|FAILED|Failure|expected|rel " | head -80
rc=${PIPESTATUS[0]}
echo "gtest rc $rc"
timeout 35 "$B/tests/cuda/cuda_bench_prefill" 2>&1 | tee "$OUT/bench.log"
timeout 30 compute-sanitizer --tool memcheck "$B/tests/cuda/cuda_test_prefill" \
  --gtest_filter='CudaRagged.MlaChunkedPrefixShapes:CudaPrefill.HintsAndLongEntries' \
  >"$OUT/memcheck.log" 2>&1
echo "memcheck rc $?" | tee -a "$OUT/memcheck.log"
tail -4 "$OUT/memcheck.log"
exit "$rc"

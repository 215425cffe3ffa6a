#!/usr/bin/env bash
# One GPU-machine call that checks and measures everything CUDA: every gpu test binary and the
# compute-sanitizer subsets, all at once (scripts/gpu_ptests.sh ALL=1, which holds their list),
# then `flashback bench --device cuda` and peers.py in the same run (bench/compare.py run).
# Short table last; logs under $OUT (tests in tlogs.tgz).
#   stage (build machine):  bash scripts/gpu_final.sh stage BUILD_DIR   -> build/gpupkg/pkg.tar.xz
#   run (GPU machine):      bash scripts/gpu_final.sh run               (carry ["build/gpupkg"])
#   SKIP_ALT=1 leaves out the prefill tests on the mma.sync kernel and with forced pairs;
#   SKIP_MODES=1 the MLA-on-mma.sync and deterministic-mode benchmarks (a shorter call);
#   PART=tests runs only the tests and sanitizers (~3-5 minutes; TO= each step's limit, default
#   420: on the H200 of session 36 the prefill forms took over 300 s beside the rest), PART=bench only the
#   measurements; ONLY=REGEX only the steps whose name
#   matches (e.g. ONLY='prefill|^bench$' after a prefill-only change).
set -u -o pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
TESTS=${TESTS:-"cuda_test_wgmma cuda_test_decode cuda_test_batch_graph cuda_test_merge_store cuda_test_device_plan cuda_test_prefill cuda_test_backend_cuda cuda_test_trace cuda_test_nan"}
if [[ $mode == stage ]]; then
  B=$2 S=build/gpustage
  rm -rf $S && mkdir -p $S/lib build/gpupkg
  for t in $TESTS; do cp $B/tests/cuda/$t $S/; done
  cp $B/tools/flashback $S/
  for l in libhwy.so.1 libgomp.so.1; do
    p=$(ldconfig -p | awk -v l=$l '$1 == l {print $NF; exit}'); [[ -n $p ]] && cp -L "$p" $S/lib/
  done
  cp bench/workloads.json bench/compare.py ../shared/bench/peers.py $S/
  grep -E "FLASHBACK_HEAD_DIMS|FLASHBACK_CUDA_MLA" $B/CMakeCache.txt > $S/STAGED
  strip $S/cuda_* $S/flashback
  # One dictionary larger than a binary: each binary holds the whole static library, so every
  # binary after the first packs to almost nothing (~10 MB in all, against 67 at xz's default).
  tar cf - -C $S . | xz -T1 --lzma2=preset=6,dict=192MiB > build/gpupkg/pkg.tar.xz && du -sh build/gpupkg
  exit 0
fi
OUT=${OUT:-$PWD/out-gpu}; LOGS=$OUT/logs; mkdir -p $LOGS
BIN=build/gpustage
rm -rf $BIN && mkdir -p $BIN
python3 -c "import tarfile; tarfile.open('build/gpupkg/pkg.tar.xz').extractall('$BIN')"
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv > $LOGS/env.txt 2>&1; cat $BIN/STAGED >> $LOGS/env.txt
summary=()
step() {  # name, timeout, command...
  local name=$1 to=$2; shift 2
  [[ -n ${ONLY:-} && ! $name =~ ${ONLY} ]] && return 0  # ONLY=REGEX: the steps whose name matches
  local t0=$SECONDS
  timeout $to "$@" > $LOGS/$name.log 2>&1
  local rc=$?
  summary+=("$(printf '%-28s rc=%-3s %4ss  %s' $name $rc $((SECONDS - t0)) "$(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' $LOGS/$name.log | tr '\n' ' ')")")
  echo "${summary[-1]}"; grep -E '^\[  FAILED  \]' $LOGS/$name.log | head -12
}
if [[ ${PART:-all} != bench ]]; then  # the tests and sanitizers, all at once (gpu_ptests.sh)
  OUT=$OUT ALL=1 TO=${TO:-420} bash scripts/gpu_ptests.sh | tee $LOGS/tests.txt
  mapfile -t -O ${#summary[@]} summary < <(grep -E 'rc=' $LOGS/tests.txt)
fi
if [[ ${PART:-all} != tests ]]; then  # the measurements
if [[ -n ${NCU:-} ]]; then  # one launch of each hot kernel under Nsight Compute (clocks untouched)
  for w in ${NCU_WORKLOADS:-decode_b64_L8k prefill_8x2k}; do
    step ncu_$w 60 ncu --clock-control none --launch-skip 3 --launch-count 1 \
      -k regex:'decode|prefill' --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
      --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
      $BIN/flashback bench --device cuda --workloads $BIN/workloads.json --only $w --budget 1
    grep -E 'Duration|DRAM Throughput|Issued Warp|Achieved Occupancy|Registers Per' $LOGS/ncu_$w.log | head -8
    # stall reasons, largest first (warps per issued instruction)
    grep -E 'issue_stalled_.*ratio' $LOGS/ncu_$w.log | awk '{print $NF, $1}' | sort -rn | head -6 |
      sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | tr '\n' ';'; echo
  done
fi
step bench 170 python3 $BIN/compare.py run --bin $BIN/flashback --peers-py $BIN/peers.py \
  --outdir $OUT/bench --name h200
if [[ -z ${SKIP_ALT:-} ]]; then
  # Long-query kernels: the Hopper path (default on the H200) against the mma.sync one.
  step bench_prefill_mma 60 env FLASHBACK_PREFILL_KERNEL=mma $BIN/flashback bench --device cuda \
    --workloads $BIN/workloads.json --only prefill_1x16k,prefill_8x2k,extend_b16_p4k_e512,mla_prefix_chunk_8x4k \
    --json $OUT/bench/prefill_mma.json
  tail -6 $LOGS/bench_prefill_mma.log
fi
if [[ -z ${SKIP_MODES:-} ]]; then  # SKIP_MODES=1: without the two mode benchmarks below
# MLA decode on kernel.cuh (mma.sync), against the Hopper kernel of the main table.
step bench_mla_mma 60 env FLASHBACK_DECODE_KERNEL=mma $BIN/flashback bench --device cuda \
  --workloads $BIN/workloads.json --only mla_decode_b64_L4k_h128,mla_decode_b128_L4k_h16 \
  --json $OUT/bench/mla_mma.json
tail -4 $LOGS/bench_mla_mma.log
# The deterministic mode's cost (fixed 1024-key splits) on the workloads it matters most for.
step bench_deterministic 60 $BIN/flashback bench --device cuda --workloads $BIN/workloads.json \
  --deterministic --only decode_b64_L8k,decode_b1_L128k,verify_b64_q4_L4k,mla_decode_b64_L4k_h128,mla_decode_b128_L4k_h16 --json $OUT/bench/deterministic.json
cat $LOGS/bench_deterministic.log | tail -10
fi
fi
echo; echo "== bench table"; cat $OUT/bench/*.md 2>/dev/null | head -40
echo; echo "== summary"; printf '%s\n' "${summary[@]}" | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $LOGS . && rm -rf $LOGS
# The device tool brings back only a few files per call: the bench outputs travel as one archive.
[[ -d $OUT/bench ]] && tar czf $OUT/bench.tgz -C $OUT bench && rm -rf $OUT/bench

#!/usr/bin/env bash
# One GPU-machine call that checks and measures everything CUDA: every gpu test binary, a
# compute-sanitizer memcheck subset, then `flashback bench --device cuda` and peers.py in the
# same run (bench/compare.py run). Short table last; logs under $OUT.
#   stage (build machine):  bash scripts/gpu_final.sh stage BUILD_DIR   -> build/gpupkg/pkg.tar.xz
#   run (GPU machine):      bash scripts/gpu_final.sh run               (carry ["build/gpupkg"])
#   SKIP_ALT=1 leaves out the prefill tests on the mma.sync kernel and with forced pairs;
#   SKIP_MODES=1 the MLA-on-mma.sync and deterministic-mode benchmarks (a shorter call);
#   PART=tests runs only the tests and sanitizers, PART=bench only the measurements (two calls
#   when one would outlast the device tool's 600 s limit); ONLY=REGEX only the steps whose name
#   matches (e.g. ONLY='prefill|^bench$' after a prefill-only change).
set -u -o pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
TESTS="cuda_test_wgmma cuda_test_decode cuda_test_batch_graph cuda_test_merge_store cuda_test_device_plan cuda_test_prefill cuda_test_backend_cuda cuda_test_trace"
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
  tar cJf build/gpupkg/pkg.tar.xz -C $S . && du -sh build/gpupkg
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
if [[ ${PART:-all} != bench ]]; then  # the tests and sanitizers
for t in $TESTS; do step $t 180 $BIN/$t; done
# The MLA tests again on kernel.cuh, which the Hopper MLA kernel (mla_wgmma.cuh) otherwise takes.
step cuda_test_decode_mla_mma 120 env FLASHBACK_DECODE_KERNEL=mma $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.Mla*'
# The MLA batches of <= 16 rows again on mla_wgmma.cuh's 64-row kernel (mla_narrow.cuh's otherwise).
step cuda_test_decode_mla_64rows 120 env FLASHBACK_MLA_NARROW=0 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.MlaAbsorbedNarrow'
# The decode tests again as a GPU with 99 KB of shared memory per block (sm_86/89) would choose:
# the warps-split-keys shapes whose Hopper layout does not fit run on kernel.cuh.
step cuda_test_decode_small_smem 150 env FLASHBACK_DECODE_SMEM_BLOCK=101376 $BIN/cuda_test_decode \
  --gtest_filter='-CudaDecode.Mla*'
# The decode tests again with every batch ranked longest first (entry.cuh), not only the deep
# grids the default rule ranks.
step cuda_test_decode_longest_first 180 env FLASHBACK_DECODE_ORDER=length $BIN/cuda_test_decode \
  --gtest_filter='-CudaDecode.Mla*'
if [[ -z ${SKIP_ALT:-} ]]; then  # SKIP_ALT=1: a shorter call when the prefill kernels did not change
  # The sm80 (mma.sync) prefill kernel on the same cases, which the Hopper path otherwise takes.
  step cuda_test_prefill_mma 120 env FLASHBACK_PREFILL_KERNEL=mma $BIN/cuda_test_prefill
  # The Hopper kernel with two query blocks per CTA forced (the tests' grids are too small for
  # the automatic choice to pair them).
  step cuda_test_prefill_pairs 120 env FLASHBACK_PREFILL_PERSISTENT=0 FLASHBACK_PREFILL_PAIRS=1 $BIN/cuda_test_prefill
fi
# The Hopper kernel's persistent schedule with 3 CTAs, so each walks many blocks of many entries
# and heads (ragged batches, empty entries and entries past the max_seqlen_q hint included); the
# tests' grids are too small for the automatic choice. Then under both sanitizers (the block
# slots the producer hands the consumers through shared memory).
step cuda_test_prefill_persistent 200 env FLASHBACK_PREFILL_PERSISTENT=3 $BIN/cuda_test_prefill
step memcheck_prefill_persistent 90 env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $BIN/cuda_test_prefill --gtest_filter='CudaPrefill.Variants:CudaRagged.MlaChunkedPrefixShapes'
step racecheck_prefill_persistent 120 env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool racecheck \
  --error-exitcode 9 $BIN/cuda_test_prefill --gtest_filter='CudaPrefill.Variants:CudaRagged.MlaChunkedPrefixShapes'
step synccheck_prefill_persistent 120 env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool synccheck \
  --error-exitcode 9 $BIN/cuda_test_prefill --gtest_filter='CudaPrefill.Variants:CudaRagged.MlaChunkedPrefixShapes'
step memcheck_decode 45 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.Splits:CudaDecode.TableRowsAndKvStart'
step memcheck_prefill 60 env FLASHBACK_PREFILL_PERSISTENT=0 FLASHBACK_PREFILL_PAIRS=1 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/cuda_test_prefill \
  --gtest_filter='CudaPrefill.Variants:CudaRagged.MlaChunkedPrefixShapes'
step memcheck_backend 45 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/cuda_test_backend_cuda
# The serving trace through the backend on the GPU (device copies of pools, batch arrays, outputs).
step memcheck_trace 240 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/cuda_test_trace \
  --gtest_filter='*P16'
step memcheck_mla 60 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.MlaAbsorbedVariants'
# The longest-first ranking (shared keys, two barriers) under both tools, ranked by force on
# tests whose 16-row blocks take the warps-split-keys kernel (CudaDecode.Splits' 32-row blocks
# take kernel.cuh, which never ranks).
step memcheck_longest_first 60 env FLASHBACK_DECODE_ORDER=length compute-sanitizer --tool memcheck \
  --error-exitcode 9 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.NoMaxSeqlenHint:CudaDecode.VerifyAndRaggedShortQueries'
step racecheck_longest_first 90 env FLASHBACK_DECODE_ORDER=length compute-sanitizer --tool racecheck \
  --error-exitcode 9 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.NoMaxSeqlenHint:CudaDecode.VerifyAndRaggedShortQueries'
# The warps-split-keys kernel's per-warp K/V pipeline at every residency it takes (head dims 64:
# three CTAs per SM, 128: two (bf16) or three (fp8), 256: one). Verify and Variants cover every
# built head dim.
step racecheck_decode 60 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.Splits:CudaDecode.VerifyAndRaggedShortQueries'
step racecheck_decode_variants 90 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.Variants'
step racecheck_mla 60 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN/cuda_test_decode \
  --gtest_filter='CudaDecode.MlaAbsorbed'
# The Hopper prefill kernel's consumer pingpong (named barriers 1 and 2) and TMA stages: the
# 192/128 ring that wraps, and every TMA box form.
step racecheck_prefill 90 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN/cuda_test_prefill \
  --gtest_filter='CudaRagged.MlaChunkedPrefixShapes:CudaPrefill.TmaBoxPageSizes'
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

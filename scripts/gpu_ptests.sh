#!/usr/bin/env bash
# The gpu tests and compute-sanitizer subsets, all at once: the tests are bound by the CPU
# oracle and the GPU machine has 16 cores, so the whole set takes ~3 minutes instead of over 10
# in sequence. The one list of test steps: `gpu_final.sh run` calls this with ALL=1.
# Correctness only: run it after any timing in the same call (e.g. after scripts/gpu_ab.sh,
# which unpacks the binaries; otherwise this unpacks build/gpupkg/pkg.tar.xz).
#   run (GPU machine): [ALL=1] bash scripts/gpu_ptests.sh   (carry ["build/gpupkg"]; logs in $OUT/tlogs.tgz)
#   Without ALL: the prefill steps only (every prefill test form and the prefill sanitizer
#   subsets), after a Hopper prefill change. SKIP_ALT=1 leaves out the prefill tests on the
#   mma.sync kernel and with forced pairs; ONLY=REGEX only the steps whose name matches;
#   TO=SECONDS each step's limit (default 400).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}
B=build/gpustage
if [[ ! -x $B/cuda_test_prefill ]]; then rm -rf $B && mkdir -p $B && tar xJf build/gpupkg/pkg.tar.xz -C $B; fi
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}; L=$OUT/tlogs; mkdir -p $L
CS="compute-sanitizer --error-exitcode 9"
PF='CudaPrefill.Variants:CudaRagged.MlaChunkedPrefixShapes'
run() {  # name, command... : in the background; one line per step when it ends
  local n=$1; shift
  [[ -n ${ONLY:-} && ! $n =~ ${ONLY} ]] && return 0
  ( local t0=$SECONDS; timeout ${TO:-400} "$@" > $L/$n.log 2>&1; local rc=$?
    printf '%-28s rc=%-3s %4ss  %s\n' $n $rc $((SECONDS - t0)) \
      "$(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' $L/$n.log | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' $L/$n.log | head -5 ) &
}
run cuda_test_prefill $B/cuda_test_prefill
if [[ -z ${SKIP_ALT:-} ]]; then  # SKIP_ALT=1: a shorter call when the prefill kernels did not change
  # The sm80 (mma.sync) prefill kernel on the same cases, which the Hopper path otherwise takes.
  run cuda_test_prefill_mma env FLASHBACK_PREFILL_KERNEL=mma $B/cuda_test_prefill
  # The Hopper kernel with two query blocks per CTA forced (the tests' grids are too small for
  # the automatic choice to pair them).
  run cuda_test_prefill_pairs env FLASHBACK_PREFILL_PERSISTENT=0 FLASHBACK_PREFILL_PAIRS=1 $B/cuda_test_prefill
fi
# The Hopper kernel's persistent schedule with 3 CTAs, so each walks many blocks of many entries
# and heads (ragged batches, empty entries and entries past the max_seqlen_q hint included); the
# tests' grids are too small for the automatic choice. Then under every tool (the block slots
# the producer hands the consumers through shared memory, the staged epilogue).
# Head pairs (on by default where the group is even, wgmma_kernel.cuh) off here: one CTA per item.
run cuda_test_prefill_persistent env FLASHBACK_PREFILL_PERSISTENT=3 FLASHBACK_PREFILL_CLUSTER=0 \
  $B/cuda_test_prefill
# head pairs: every even-group case on clusters of two
run cuda_test_prefill_head_pairs env FLASHBACK_PREFILL_PERSISTENT=3 FLASHBACK_PREFILL_CLUSTER=1 \
  $B/cuda_test_prefill
# The same with O stored straight from registers (no staging through shared memory) and without
# the pingpong: the Hopper kernel's other epilogue and turn-free consumers (head pairs on).
run cuda_test_prefill_unstaged env FLASHBACK_PREFILL_PERSISTENT=3 FLASHBACK_PREFILL_STAGED_OUT=0 \
  FLASHBACK_PREFILL_PINGPONG=0 $B/cuda_test_prefill
for tool in memcheck racecheck synccheck; do
  run ${tool}_prefill_persistent env FLASHBACK_PREFILL_PERSISTENT=3 FLASHBACK_PREFILL_CLUSTER=0 $CS --tool $tool $B/cuda_test_prefill --gtest_filter=$PF
done
# head pairs under every tool: the remote `empty` arrivals, the multicast fills, the cluster
# barriers at start and exit
for tool in memcheck racecheck synccheck; do
  run ${tool}_prefill_head_pairs env FLASHBACK_PREFILL_PERSISTENT=3 FLASHBACK_PREFILL_CLUSTER=1 \
    $CS --tool $tool $B/cuda_test_prefill --gtest_filter=$PF:CudaPrefill.PersistentScheduleBatches
done
run memcheck_prefill_pairs env FLASHBACK_PREFILL_PERSISTENT=0 FLASHBACK_PREFILL_PAIRS=1 $CS --tool memcheck \
  $B/cuda_test_prefill --gtest_filter=$PF
# The Hopper prefill kernel's consumer pingpong (named barriers 1 and 2) and TMA stages: the
# 192/128 ring that wraps, and every TMA box form.
run racecheck_prefill $CS --tool racecheck $B/cuda_test_prefill \
  --gtest_filter='CudaRagged.MlaChunkedPrefixShapes:CudaPrefill.TmaBoxPageSizes'
if [[ -n ${ALL:-} ]]; then
  for t in cuda_test_wgmma cuda_test_decode cuda_test_batch_graph cuda_test_merge_store \
    cuda_test_device_plan cuda_test_backend_cuda cuda_test_trace cuda_test_nan; do run $t $B/$t; done
  # NaN inputs on every kernel form (tests/cuda/test_nan.cc), under memcheck.
  run memcheck_nan $CS --tool memcheck $B/cuda_test_nan
  # The MLA tests again on kernel.cuh, which the Hopper MLA kernel (mla_wgmma.cuh) otherwise takes.
  run cuda_test_decode_mla_mma env FLASHBACK_DECODE_KERNEL=mma $B/cuda_test_decode --gtest_filter='CudaDecode.Mla*'
  # The MLA batches of <= 16 rows again on mla_wgmma.cuh's 64-row kernel (mla_narrow.cuh's otherwise).
  run cuda_test_decode_mla_64rows env FLASHBACK_MLA_NARROW=0 $B/cuda_test_decode \
    --gtest_filter='CudaDecode.MlaAbsorbedNarrow'
  # The decode tests again as a GPU with 99 KB of shared memory per block (sm_86/89) would
  # choose: the warps-split-keys shapes whose Hopper layout does not fit run on kernel.cuh.
  run cuda_test_decode_small_smem env FLASHBACK_DECODE_SMEM_BLOCK=101376 $B/cuda_test_decode \
    --gtest_filter='-CudaDecode.Mla*'
  # The decode tests again with every batch ranked longest first (entry.cuh), not only the deep
  # grids the default rule ranks.
  run cuda_test_decode_longest_first env FLASHBACK_DECODE_ORDER=length $B/cuda_test_decode \
    --gtest_filter='-CudaDecode.Mla*'
  run memcheck_decode $CS --tool memcheck $B/cuda_test_decode \
    --gtest_filter='CudaDecode.Splits:CudaDecode.TableRowsAndKvStart'
  run memcheck_backend $CS --tool memcheck $B/cuda_test_backend_cuda
  # The serving trace through the backend on the GPU (device copies of pools, batch arrays, outputs).
  run memcheck_trace $CS --tool memcheck $B/cuda_test_trace --gtest_filter='*P16'
  run memcheck_mla $CS --tool memcheck $B/cuda_test_decode --gtest_filter='CudaDecode.MlaAbsorbedVariants'
  # The longest-first ranking (shared keys, two barriers) under both tools, ranked by force on
  # tests whose 16-row blocks take the warps-split-keys kernel (CudaDecode.Splits' 32-row
  # blocks take kernel.cuh, which never ranks).
  for tool in memcheck racecheck; do
    run ${tool}_longest_first env FLASHBACK_DECODE_ORDER=length $CS --tool $tool $B/cuda_test_decode \
      --gtest_filter='CudaDecode.NoMaxSeqlenHint:CudaDecode.VerifyAndRaggedShortQueries'
  done
  # The warps-split-keys kernel's per-warp K/V pipeline at every residency it takes (head dims
  # 64: three CTAs per SM, 128: two (bf16) or three (fp8), 256: one). Verify and Variants cover
  # every built head dim.
  run racecheck_decode $CS --tool racecheck $B/cuda_test_decode \
    --gtest_filter='CudaDecode.Splits:CudaDecode.VerifyAndRaggedShortQueries'
  run racecheck_decode_variants $CS --tool racecheck $B/cuda_test_decode --gtest_filter='CudaDecode.Variants'
  run racecheck_mla $CS --tool racecheck $B/cuda_test_decode --gtest_filter='CudaDecode.MlaAbsorbed'
fi
wait
tar czf $OUT/tlogs.tgz -C $L . && rm -rf $L

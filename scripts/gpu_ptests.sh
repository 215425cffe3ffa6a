#!/usr/bin/env bash
# One GPU-machine step after a Hopper prefill change: every prefill test form (default, forced
# persistence on 3 CTAs, forced pairs, the mma.sync kernel) and the persistent schedule under
# memcheck, racecheck and synccheck, all at once (the tests are bound by the CPU oracle, and the
# GPU machine has 16 cores: ~2 minutes instead of ~9 in sequence). Correctness only: run it
# after any timing in the same call, e.g. after scripts/gpu_ab.sh, which unpacks the binaries.
#   run (GPU machine): bash scripts/gpu_ptests.sh     (carry ["build/gpupkg"]; logs in $OUT/tlogs.tgz)
#   ALL=1: every other gpu test binary too, the decode reruns and sanitizer subsets of
#   gpu_final.sh (the whole test part of gpu_final.sh in ~3 minutes instead of over 10).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}
B=build/gpustage
if [[ ! -x $B/cuda_test_prefill ]]; then rm -rf $B && mkdir -p $B && tar xJf build/gpupkg/pkg.tar.xz -C $B; fi
export LD_LIBRARY_PATH=$PWD/$B/lib; L=$OUT/tlogs; mkdir -p $L
PF='CudaPrefill.Variants:CudaRagged.MlaChunkedPrefixShapes'
run() { local n=$1; shift; local t0=$SECONDS; timeout ${TO:-400} "$@" > $L/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $((SECONDS-t0))s $(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' $L/$n.log | tr '\n' ' ')"; grep -E '^\[  FAILED  \]' $L/$n.log | head -5; }
run prefill $B/cuda_test_prefill &
run prefill_persist env FLASHBACK_PREFILL_PERSISTENT=3 $B/cuda_test_prefill &
run prefill_pairs env FLASHBACK_PREFILL_PERSISTENT=0 FLASHBACK_PREFILL_PAIRS=1 $B/cuda_test_prefill &
run prefill_mma env FLASHBACK_PREFILL_KERNEL=mma $B/cuda_test_prefill &
run memcheck_persist env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool memcheck --error-exitcode 9 $B/cuda_test_prefill --gtest_filter=$PF &
run racecheck_persist env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool racecheck --error-exitcode 9 $B/cuda_test_prefill --gtest_filter=$PF &
run synccheck_persist env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool synccheck --error-exitcode 9 $B/cuda_test_prefill --gtest_filter=$PF &
run racecheck_tma compute-sanitizer --tool racecheck --error-exitcode 9 $B/cuda_test_prefill --gtest_filter='CudaRagged.MlaChunkedPrefixShapes:CudaPrefill.TmaBoxPageSizes' &
if [[ -n ${ALL:-} ]]; then
  for t in cuda_test_wgmma cuda_test_decode cuda_test_batch_graph cuda_test_merge_store \
    cuda_test_device_plan cuda_test_backend_cuda cuda_test_trace; do run $t $B/$t & done
  run decode_mla_mma env FLASHBACK_DECODE_KERNEL=mma $B/cuda_test_decode --gtest_filter='CudaDecode.Mla*' &
  run decode_mla_64rows env FLASHBACK_MLA_NARROW=0 $B/cuda_test_decode --gtest_filter='CudaDecode.MlaAbsorbedNarrow' &
  run decode_small_smem env FLASHBACK_DECODE_SMEM_BLOCK=101376 $B/cuda_test_decode --gtest_filter='-CudaDecode.Mla*' &
  run decode_longest_first env FLASHBACK_DECODE_ORDER=length $B/cuda_test_decode --gtest_filter='-CudaDecode.Mla*' &
  CS="compute-sanitizer --error-exitcode 9"
  run memcheck_decode $CS --tool memcheck $B/cuda_test_decode --gtest_filter='CudaDecode.Splits:CudaDecode.TableRowsAndKvStart' &
  run memcheck_backend $CS --tool memcheck $B/cuda_test_backend_cuda &
  run memcheck_trace $CS --tool memcheck $B/cuda_test_trace --gtest_filter='*P16' &
  run memcheck_mla $CS --tool memcheck $B/cuda_test_decode --gtest_filter='CudaDecode.MlaAbsorbedVariants' &
  run racecheck_decode $CS --tool racecheck $B/cuda_test_decode --gtest_filter='CudaDecode.Splits:CudaDecode.VerifyAndRaggedShortQueries' &
  run racecheck_decode_variants $CS --tool racecheck $B/cuda_test_decode --gtest_filter='CudaDecode.Variants' &
  run racecheck_mla $CS --tool racecheck $B/cuda_test_decode --gtest_filter='CudaDecode.MlaAbsorbed' &
fi
wait
tar czf $OUT/tlogs.tgz -C $L . && rm -rf $L

#!/usr/bin/env bash
# One GPU-machine call for a kernel change: the gpu tests it touches (with racecheck/memcheck
# subsets), then an A/B of the new flashback binary against a baseline one, alternated round by
# round in one process tree so both see the same GPU, clocks and neighbours (cross-call variance
# on the H200 pool is 1-3 %, same-call A/B well under that). Short table last; logs under $OUT.
#   stage (build machine): bash scripts/gpu_final.sh stage BUILD_DIR        -> build/gpupkg/pkg.tar.xz
#                          tar cJf build/gpupkg/base.tar.xz -C DIR flashback (the baseline binary;
#                          without it, no base column)
#   run (GPU machine):     W=a,b,c R=3 TESTS="cuda_test_decode" RACE='CudaDecode.Variants' \
#                          bash scripts/gpu_ab.sh                       (carry ["build/gpupkg"])
#   PAIRS=1 also runs cuda_test_prefill with two query blocks per CTA forced; PERSIST=1 with the
#   persistent schedule on 3 CTAs, also under racecheck and memcheck.
#   SANBIN=cuda_test_prefill: the binary RACE and MEM run (default cuda_test_decode).
#   ETESTS: tests and sanitizer runs under environment settings (format at its loop).
#   ALT="NAME=VALUE ...[;NAME=VALUE ...]": more columns (alt1, alt2, ...), the new binary under
#   each group of environment settings.
#   Budget: the tests and sanitizer steps, then ~2.5 s per workload per column per round (the
#   call's limit is 600 s; a killed call returns only what was printed, so each round prints its
#   times as it ends, and never pipe this script's output through tail).
#   More binaries: build/gpupkg/var_NAME.tar.xz (a flashback binary, as base.tar.xz) adds a
#   column NAME. SMALL=1 also runs the decode tests as a 99 KB-per-block GPU would choose.
#   WL=FILE times the workloads of another workloads file (e.g. one carried in build/gpupkg).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; L="$OUT/logs"; mkdir -p "$L"
B=build/gpustage; rm -rf "$B"; mkdir -p "$B"
VARS=(); for f in build/gpupkg/var_*.tar.xz; do [[ -e $f ]] && VARS+=("$(basename "$f" .tar.xz)"); done
BASE=(); [[ -e build/gpupkg/base.tar.xz ]] && BASE=(base)  # no base.tar.xz: no base column
python3 scripts/gpu_unpack.py "$B" "${BASE[@]}" "${VARS[@]}"
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
step() {  # name, timeout, command...
  # a variant's test (TESTS="var_x/cuda_test_decode") logs as var_x_cuda_test_decode.log
  local name=$1 to=$2; shift 2; local t0=$SECONDS log="$L/${name//\//_}.log"
  timeout "$to" "$@" > "$log" 2>&1; local rc=$?
  printf '%-26s rc=%-3s %4ss %s\n' "$name" "$rc" $((SECONDS - t0)) \
    "$(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' "$log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$log" | head -8
}
for t in ${TESTS:-cuda_test_decode}; do step "$t" 240 "$B/$t"; done  # decode: ~175 s
# ETESTS="ENV=V,ENV2=W:binary:gtest_filter[:racecheck|memcheck] ...": a test binary (or a
# sanitizer over it) under environment settings, e.g. a kernel schedule behind a switch.
n=0; for t in ${ETESTS:-}; do
  IFS=: read -r ev bin filt tool <<< "$t"; san=(); n=$((n + 1))
  [[ -n $tool ]] && san=(compute-sanitizer --tool "$tool" --error-exitcode 9)
  step "e${n}_${tool:-test}_${bin}" 240 env ${ev//,/ } "${san[@]}" "$B/$bin" --gtest_filter="$filt"
done
[[ -n ${SMALL:-} ]] && step decode_small_smem 150 env FLASHBACK_DECODE_SMEM_BLOCK=101376 \
  "$B/cuda_test_decode" --gtest_filter='-CudaDecode.Mla*'
[[ -n ${PAIRS:-} ]] && step prefill_pairs 150 env FLASHBACK_PREFILL_PERSISTENT=0 FLASHBACK_PREFILL_PAIRS=1 \
  "$B/cuda_test_prefill"
if [[ -n ${PERSIST:-} ]]; then
  PF='CudaPrefill.Variants:CudaRagged.MlaChunkedPrefixShapes'
  step prefill_persistent 150 env FLASHBACK_PREFILL_PERSISTENT=3 "$B/cuda_test_prefill"
  step racecheck_persistent 150 env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool racecheck \
    --error-exitcode 9 "$B/cuda_test_prefill" --gtest_filter="$PF"
  step memcheck_persistent 120 env FLASHBACK_PREFILL_PERSISTENT=3 compute-sanitizer --tool memcheck \
    --error-exitcode 9 "$B/cuda_test_prefill" --gtest_filter="$PF"
fi
# NCU="ENV=V,...:KERNEL_REGEX:WORKLOAD ...": one launch of a kernel under Nsight Compute while
# the bench runs WORKLOAD, by scripts/gpu_ncu.sh (details page and per-SASS source page under
# $OUT/ncu_N; read the source page with scripts/ncu_regions.py).
n=0; for t in ${NCU:-}; do
  IFS=: read -r ev kre wl <<< "$t"; n=$((n + 1))
  step "ncu${n}_${wl}" 320 env ${ev//,/ } OUT="$OUT/ncu_$n" STAGED=1 K="regex:$kre" W="$wl" \
    bash scripts/gpu_ncu.sh
done
SB=$B/${SANBIN:-cuda_test_decode}  # the test binary RACE / MEM filter
[[ -n ${RACE:-} ]] && step racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
  "$SB" --gtest_filter="$RACE"
[[ -n ${MEM:-} ]] && step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$SB" --gtest_filter="$MEM"
W=${W:-decode_b64_L8k,decode_fp8_b64_L8k}
IFS=';' read -ra alts <<< "${ALT:-}"
V="new ${BASE[*]} ${VARS[*]}"; V=$(echo $V); for i in "${!alts[@]}"; do V+=" alt$((i + 1))"; done
for r in $(seq "${R:-3}"); do
  order=$V; (( r % 2 == 0 )) && order=$(tr ' ' '\n' <<< "$V" | tac | tr '\n' ' ')  # alternate
  for v in $order; do
    b=$B/flashback; [[ $v != new && $v != alt* ]] && b=$B/$v/flashback
    e=(); [[ $v == alt* ]] && read -ra e <<< "${alts[${v#alt} - 1]}"
    timeout 120 env "${e[@]}" "$b" bench --device cuda --workloads "${WL:-$B/workloads.json}" --only "$W" \
      --budget "${BUDGET:-0.3}" --json "$L/ab_${v}_$r.json" > "$L/ab_${v}_$r.log" 2>&1
    printf 'round %s %-8s %s\n' "$r" "$v" "$(awk '$2 ~ /^[0-9.]+$/ && NF >= 7 {printf "%s %s  ", $1, $2}' "$L/ab_${v}_$r.log")"
  done
done
# Median over rounds of each workload's time, new against base.
python3 - "$L" "${R:-3}" "${#alts[@]}" "${#BASE[@]}" "${VARS[@]}" <<'EOF'
import json, statistics, sys
L, R, NA, HB, VS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
def times(v):
    out = {}
    for r in range(1, R + 1):
        try:
            for x in json.load(open(f"{L}/ab_{v}_{r}.json"))["rows"]:
                if x.get("ms"): out.setdefault(x["workload"], []).append(x["ms"])
        except (OSError, ValueError, KeyError) as e:
            print(f"{v} round {r}: {e}")
    return out
n, b = times("new"), times("base") if HB else {}
alts = [times(f"alt{i + 1}") for i in range(NA)] + [times(v) for v in VS]
names = [f"alt{i + 1}" for i in range(NA)] + [v.removeprefix("var_") for v in VS]
med = lambda d, w: statistics.median(d.get(w, [float("nan")]))
print(f"{'workload':28} {'new ms':>9} {'base ms':>9} {'new/base':>9}" +
      "".join(f" {nm + '/new':>9}" for nm in names) + f"   (median of {R} rounds)")
for w in list(n) + [w for w in b if w not in n]:
    line = f"{w:28} {med(n, w):9.4f} {med(b, w):9.4f} {med(n, w) / med(b, w):9.3f}"
    line += "".join(f" {med(a, w) / med(n, w):9.3f}" for a in alts)
    print(line)
EOF
tar czf "$OUT/logs.tgz" -C "$L" . && rm -rf "$L"

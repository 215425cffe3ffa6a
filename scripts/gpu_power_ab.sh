#!/usr/bin/env bash
# Session 32's call: an A/B of the prefill workloads (gpu_ab.sh) with the GPU's SM clock, power
# and throttle reasons logged every 250 ms, then prefill_1x16k at growing --budget (how the
# sustained clock sets the median), then the prefill tests and sanitizer subsets on the new build.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; mkdir -p "$OUT"; export OUT
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 250 > "$OUT/smi.csv" 2>&1 & SMI=$!
date +%T.%N
TESTS=" " W=${W:-prefill_1x16k,prefill_8x2k,extend_b16_p4k_e512,local_prefill_1x32k_c8k,mla_prefix_chunk_8x4k} \
  R=${R:-3} bash scripts/gpu_ab.sh
B=build/gpustage; export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
BIN=$B/flashback; [[ -x $B/base/flashback ]] && BIN=$B/base/flashback
for bud in 0.02 0.1 0.3 1 2; do
  sleep 3; echo "budget $bud start $(date +%T.%N)"
  $BIN bench --device cuda --workloads $B/workloads.json --only prefill_1x16k \
    --budget $bud | grep -E '^prefill_1x16k'
done
kill $SMI
python3 - "$OUT/smi.csv" <<'PY'
import sys
rows=[l.split(', ') for l in open(sys.argv[1]) if l.count(',')>=5]
busy=[r for r in rows if float(r[2].split()[0])>300]
if busy:
    clk=[float(r[1].split()[0]) for r in busy]; pw=[float(r[2].split()[0]) for r in busy]
    print(f"smi samples {len(rows)}, >300 W: {len(busy)}: SM clock min/median/max {min(clk):.0f}/{sorted(clk)[len(clk)//2]:.0f}/{max(clk):.0f} MHz, power median {sorted(pw)[len(pw)//2]:.0f} W max {max(pw):.0f} W, limit {busy[0][3]}")
    from collections import Counter; print(Counter(r[5].strip() for r in busy).most_common(4))
PY
TO=240 bash scripts/gpu_ptests.sh
wait

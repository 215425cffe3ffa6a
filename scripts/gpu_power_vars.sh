#!/usr/bin/env bash
# Where the power goes: the staged flashback binary ("new") and each build/gpupkg/var_NAME.tar.xz
# (a flashback built with a part of the kernel's work left out, say) run the workloads W for
# BUDGET seconds each, R rounds in alternating order, with nvidia-smi logging SM clock and power
# every 100 ms. Per binary and workload: TFLOP/s (median over rounds), the median SM clock and
# power over its runs, and joules per PFLOP (power / rate): under the power limit, what a part of
# the work costs in energy is what leaving it out buys in speed.
#   run (GPU machine): W=prefill_1x16k R=2 BUDGET=2 bash scripts/gpu_power_vars.sh
#   (carry ["build/gpupkg"]; stage as scripts/gpu_ab.sh says)
#   ENVS="NAME:BINARY:VAR=VALUE,..." (space-separated) adds variants that run a binary (new or a
#   var_NAME) with settings, e.g. ENVS="pairs:new:FLASHBACK_PREFILL_CLUSTER=1" (a var's own name
#   gives that var settings instead of adding one).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; L="$OUT/logs"; mkdir -p "$L"
B=build/gpustage; rm -rf "$B"; mkdir -p "$B"
VARS=(); for f in build/gpupkg/var_*.tar.xz; do [[ -e $f ]] && VARS+=("$(basename "$f" .tar.xz)"); done
python3 scripts/gpu_unpack.py "$B" "${VARS[@]}"
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 100 > "$L/smi.csv" 2>&1 & SMI=$!
sleep 1
declare -A BIN=([new]=$B/flashback) SET=([new]=)
for v in "${VARS[@]}"; do BIN[$v]=$B/$v/flashback; SET[$v]=; done
for x in ${ENVS:-}; do
  IFS=: read -r n b e <<< "$x"; BIN[$n]=${BIN[$b]}; SET[$n]=${e//,/ }
done
V="new ${VARS[*]}"; for x in ${ENVS:-}; do V+=" ${x%%:*}"; done
V=$(tr ' ' '\n' <<< "$V" | awk 'NF && !seen[$0]++' | tr '\n' ' ')  # a var named again: its settings
for r in $(seq "${R:-2}"); do
  order=$V; (( r % 2 == 0 )) && order=$(tr ' ' '\n' <<< "$V" | tac | tr '\n' ' ')
  for v in $order; do
    b=${BIN[$v]}
    for w in ${W//,/ }; do
      t0=$(date +%s.%N)
      env ${SET[$v]} timeout 120 "$b" bench --device cuda --workloads "$B/workloads.json" --only "$w" \
        --budget "${BUDGET:-2}" --json "$L/${v}_${w}_$r.json" > "$L/${v}_${w}_$r.log" 2>&1
      echo "$v $w $r $t0 $(date +%s.%N)" >> "$L/runs.txt"
      printf 'round %s %-10s %-24s %s\n' "$r" "$v" "$w" "$(awk '$2 ~ /^[0-9.]+$/ && NF >= 7 {print $2, $3, $4}' "$L/${v}_${w}_$r.log")"
      sleep 2
    done
  done
done
kill $SMI
python3 - "$L" <<'EOF'
import json, statistics, sys
from datetime import datetime
L = sys.argv[1]
smi = []
for line in open(f"{L}/smi.csv"):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t, float(f[1].split()[0]), float(f[2].split()[0])))
    except (ValueError, IndexError):
        pass
res = {}
for line in open(f"{L}/runs.txt"):
    v, w, r, t0, t1 = line.split()
    try:
        rows = json.load(open(f"{L}/{v}_{w}_{r}.json"))["rows"]
        tf = next(x["TFLOPs"] for x in rows if x.get("workload") == w)
    except (OSError, ValueError, KeyError, StopIteration):
        tf = float("nan")
    # the run's busy samples: its second half (past the process start and the first launches)
    t0, t1 = float(t0), float(t1)
    s = [x for x in smi if (t0 + t1) / 2 <= x[0] <= t1 and x[2] > 200]
    d = res.setdefault((v, w), {"tf": [], "clk": [], "pw": []})
    d["tf"].append(tf); d["clk"] += [x[1] for x in s]; d["pw"] += [x[2] for x in s]
med = lambda a: statistics.median(a) if a else float("nan")
print(f"{'binary':12} {'workload':24} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>6} {'J/PFLOP':>8}  (medians; smi over each run's second half)")
for (v, w), d in res.items():
    tf, pw = med(d["tf"]), med(d["pw"])
    print(f"{v:12} {w:24} {tf:8.1f} {med(d['clk']):7.0f} {pw:6.0f} {pw / tf * 1e3:8.1f}")
EOF
tar czf "$OUT/logs.tgz" -C "$L" . && rm -rf "$L"

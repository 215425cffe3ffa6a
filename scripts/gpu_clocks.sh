#!/usr/bin/env bash
# One GPU-machine call: SM clock, power and temperature (nvidia-smi, every 50 ms) while
# `flashback bench` and then peers.py run each workload of W for a few seconds, so a time can be
# read against the clock it ran at (a compute-bound kernel can run far below the boost clock
# under sustained load). Prints, per (workload, runner), the median time and the median clock
# and power over its run. Nothing is changed on the card (METHOD.md): the clocks are only read.
#   run (GPU machine): W=mla_prefix_chunk_8x4k,prefill_1x16k bash scripts/gpu_clocks.sh
#   (carry ["build/gpupkg"], staged by `bash scripts/gpu_final.sh stage BUILD_DIR`)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; mkdir -p "$OUT"
B=build/gpustage; rm -rf "$B"; mkdir -p "$B"; tar xJf build/gpupkg/pkg.tar.xz -C "$B"
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits \
  -lms 50 > "$OUT/smi.csv" &
smi=$!
mark() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $*" >> "$OUT/marks.txt"; }
sleep 1
IFS=, read -ra ws <<< "${W:?}"
for w in "${ws[@]}"; do
  mark start flashback "$w"
  "$B/flashback" bench --device cuda --workloads "$B/workloads.json" --only "$w" \
    --budget "${BUDGET:-3}" > "$OUT/fb_$w.log" 2>&1
  mark end flashback "$w"; sleep 2
  mark start peers "$w"
  python3 "$B/peers.py" --only "$w" > "$OUT/peers_$w.log" 2>&1
  mark end peers "$w"; sleep 2
done
kill $smi
python3 - "$OUT" <<'PY'
import sys, statistics, datetime
out = sys.argv[1]
def t(s): return datetime.datetime.strptime(s.strip()[:23], "%Y/%m/%d %H:%M:%S.%f")
smi = []
for line in open(f"{out}/smi.csv"):
    f = line.split(",")
    try: smi.append((t(f[0]), float(f[1]), float(f[2]), float(f[3])))
    except (ValueError, IndexError): pass
marks = [l.split() for l in open(f"{out}/marks.txt")]
for i in range(0, len(marks), 2):
    a, b = marks[i], marks[i + 1]
    t0, t1 = t(a[0] + " " + a[1]), t(b[0] + " " + b[1])
    s = [x for x in smi if t0 <= x[0] <= t1 and x[1] > 0]
    if not s: continue
    clk = statistics.median(x[1] for x in s); pw = statistics.median(x[2] for x in s)
    hot = [x for x in s if x[2] > 0.8 * max(y[2] for y in s)]  # the loaded part of the run
    print(f"{a[4]:28s} {a[3]:9s} samples {len(s):4d}  clock median {clk:6.0f} MHz (loaded "
          f"{statistics.median(x[1] for x in hot):6.0f})  power median {pw:5.0f} W (max "
          f"{max(x[2] for x in s):4.0f})  temp max {max(x[3] for x in s):3.0f} C")
PY
for w in "${ws[@]}"; do grep -E "^$w" "$OUT/fb_$w.log"; grep -E "$w" "$OUT/peers_$w.log" | head -4; done

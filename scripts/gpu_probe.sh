#!/usr/bin/env bash
# One GPU-machine call: the K/V read-pattern probes (tools/probes/kv_pattern.cu), then the same
# memory counters (Nsight Compute) on the probes and on decode's kernel in named workloads, so
# the decode kernel's DRAM traffic and throughput can be set beside a copy-only kernel that reads
# the same bytes the same way; NOPROBE=1 skips the probes. Tests and A/B timings: gpu_ab.sh, in
# the same call after this. Logs under $OUT.
#   build (here):  nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a \
#                    tools/probes/kv_pattern.cu -o build/gpupkg/kvp
#                  bash scripts/gpu_final.sh stage BUILD_DIR     (-> build/gpupkg/pkg.tar.xz)
#   run (GPU):     W=decode_b64_L8k,decode_fp8_b64_L8k bash scripts/gpu_probe.sh
#                  (carry ["build/gpupkg"])
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-gpu}; L="$OUT/logs"; mkdir -p "$L"
B=build/gpustage; rm -rf "$B"; mkdir -p "$B"; tar xJf build/gpupkg/pkg.tar.xz -C "$B"
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum
M=$M,lts__t_sector_op_read_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,dram__cycles_active.avg.pct_of_peak_sustained_elapsed
M=$M,lts__throughput.avg.pct_of_peak_sustained_elapsed

if [[ -z ${NOPROBE:-} ]]; then  # NOPROBE=1: only the decode counters (and the tests)
echo "== probes"; timeout 120 build/gpupkg/kvp 20 | tee "$L/probe.log"
timeout 180 ncu --clock-control none --print-units base --metrics "$M" --csv build/gpupkg/kvp 1 \
  > "$L/probe_ncu.csv" 2>> "$L/ncu.err"; echo "probe ncu rc=$?"
fi
# The staged flashback, and each build/gpupkg/var_NAME.tar.xz (a flashback binary) beside it.
BINS=("$B/flashback")
for f in build/gpupkg/var_*.tar.xz; do
  [[ -e $f ]] || continue
  v=$(basename "$f" .tar.xz); mkdir -p "$B/$v"; tar xJf "$f" -C "$B/$v"; BINS+=("$B/$v/flashback")
done
for bin in "${BINS[@]}"; do
  tag=$(basename "$(dirname "$bin")"); [[ $tag == gpustage ]] && tag=pkg
  for w in ${W//,/ }; do
    timeout 120 ncu --clock-control none --print-units base --metrics "$M" --csv -k regex:decode \
      --launch-skip 2 --launch-count 1 "$bin" bench --device cuda --workloads "$B/workloads.json" \
      --only "$w" --budget 0.1 > "$L/ncu_${tag}_$w.csv" 2>> "$L/ncu.err"
    echo "ncu $tag $w rc=$?"
  done
done
echo "== counters (file, kernel, ms, DRAM GB, DRAM %peak, L2 sectors/request, L2 hit %, warps %)"
python3 - "$L" <<'EOF'
import csv, glob, sys, collections
for f in sorted(glob.glob(sys.argv[1] + "/*ncu*.csv")):
    rows = [r for r in csv.reader(open(f)) if len(r) > 10]
    if not rows: continue
    h = rows[0]; ix = {n: i for i, n in enumerate(h)}
    per = collections.OrderedDict()
    for r in rows[1:]:
        if r[0] == "ID" or "Metric Name" not in ix: continue
        name = r[ix["Kernel Name"]].replace("void ", "").replace("(anonymous namespace)::", "")
        name = name.replace("flashback::cuda::", "").split("(")[0]
        if "probe" in f and int(r[ix["ID"]]) % 4 != 3: continue  # the timed launch of each variant
        key = (r[ix["ID"]], name[:40])
        per.setdefault(key, {})[r[ix["Metric Name"]]] = r[ix["Metric Value"]].replace(",", "")
    for (i, k), m in per.items():
        g = lambda n: float(m.get(n, "nan"))
        line = "%-40s %8.4f %6.3f %5.1f %5.2f %5.1f %5.1f" % (
            k, g("gpu__time_duration.sum") / 1e6, g("dram__bytes_read.sum") / 1e9,
            g("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            g("lts__t_sectors_srcunit_tex_op_read.sum") / max(1, g("lts__t_requests_srcunit_tex_op_read.sum")),
            g("lts__t_sector_op_read_hit_rate.pct"), g("sm__warps_active.avg.pct_of_peak_sustained_active"))
        print(f.split("/")[-1][4:-4][:26], line)
EOF

#!/usr/bin/env python3
"""Where a kernel's warps wait, from an Nsight Compute source page (no -lineinfo needed).

  python3 scripts/ncu_regions.py SRC.csv[.gz] [--top N]
  (SRC: `ncu -i REPORT --page source --csv --print-source sass`, as scripts/gpu_ncu.sh writes it)

Runs of consecutive SASS instructions with the same execution count are one region (a loop body
of one warp role: the MLA kernel's producer, scorer and P V warpgroups each run their own per-tile
loop), printed with their stall samples and main stall reasons; then the N instructions with the
most samples. Samples are per warp: a warpgroup's share of the total is its share of warp time.
"""
import argparse
import collections
import csv
import gzip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--min", type=int, default=40, help="smallest region printed (samples)")
    a = ap.parse_args()
    opener = gzip.open if a.csv.endswith(".gz") else open
    rows = list(csv.reader(opener(a.csv, "rt")))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr, data = rows[head], rows[head + 1:]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda r, k: int(r[ix[k]] or 0)
    samples = lambda r: num(r, "Warp Stall Sampling (All Samples)")
    execs = lambda r: num(r, "Instructions Executed")
    total = sum(samples(r) for r in data)
    print(f"{len(data)} instructions, {total} samples")
    regions = []
    for i, r in enumerate(data):
        if regions and regions[-1][0] == execs(r):
            regions[-1][2] = i
        else:
            regions.append([execs(r), i, i])
    print(f"{'first':>6} {'last':>6} {'executed':>9} {'samples':>8} {'share':>6}  main stalls / first instruction")
    for e, lo, hi in regions:
        part = data[lo:hi + 1]
        s = sum(samples(r) for r in part)
        if s < a.min:
            continue
        why = collections.Counter()
        for r in part:
            for k in stalls:
                why[k[6:]] += num(r, k)
        top = ", ".join(f"{k} {v}" for k, v in why.most_common(3) if v)
        print(f"{lo:6d} {hi:6d} {e:9d} {s:8d} {100 * s / total:5.1f}%  {top} / {part[0][ix['Source']].strip()[:40]}")
    print(f"\ntop {a.top} instructions")
    for i in sorted(sorted(range(len(data)), key=lambda i: -samples(data[i]))[:a.top]):
        r = data[i]
        why = max(stalls, key=lambda k: num(r, k))[6:]
        print(f"{i:6d} {samples(r):6d} {execs(r):8d} {why:12s} {r[ix['Source']].strip()[:60]}")


if __name__ == "__main__":
    main()

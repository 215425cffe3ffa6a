#!/usr/bin/env python3
"""Put flashback's bench results beside the peers' on the same workloads.

Inputs: the JSON of `flashback bench --json OUT` and the JSON of shared/bench/peers.py --json OUT
(rows of workload, peer, ms, TBps, TFLOPs; peers may also list FlashInfer / FA3 rows).
Outputs (default under docs/bench/): a Markdown table with, per workload, flashback's time,
TB/s, TFLOP/s and fraction of the device's measured ceiling, each peer's time and the ratio
peer_ms / flashback_ms (> 1: flashback is faster), and a PNG chart of the roofline fraction of
every implementation per workload.

Usage:
  python3 bench/compare.py FLASHBACK.json PEERS.json [--name h200] [--outdir docs/bench]
  python3 bench/compare.py run --bin build/cuda/tools/flashback --peers-py ../shared/bench/peers.py
                           [--only NAMES] [--outdir DIR]
The `run` form runs `flashback bench --device cuda` and peers.py back to back on the same GPU (one
run), keeps both JSON files in DIR and merges them; without matplotlib (the GPU machine has none)
it writes the table only: re-run the first form where matplotlib is installed for the chart.
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def pct_of_ceiling(tbps, tflops, ceil):
    """Roofline fraction: memory-bound below the ridge point, compute-bound above it."""
    bw, peak = ceil.get("read_TBps", 0), ceil.get("peak_TFLOPs", 0)
    if bw <= 0:
        return None, ""
    intensity = tflops / tbps if tbps > 0 else float("inf")  # FLOP per byte
    if peak > 0 and intensity >= peak / bw:
        return 100.0 * tflops / peak, "compute"
    return 100.0 * tbps / bw, "memory"


def merge(fb, peers):
    """-> (workload order, {workload: flashback row}, {workload: {peer: row}}, peer names)."""
    order, fb_rows, peer_rows, names = [], {}, {}, []
    for r in fb.get("rows", []):
        fb_rows[r["workload"]] = r
        order.append(r["workload"])
    for f in fb.get("failed", []):
        if f["workload"] not in order:
            order.append(f["workload"])
    for r in peers.get("rows", []):
        if r.get("peer") == "flashback":
            continue
        peer_rows.setdefault(r["workload"], {})[r["peer"]] = r
        if r["peer"] not in names:
            names.append(r["peer"])
        if r["workload"] not in order:
            order.append(r["workload"])
    return order, fb_rows, peer_rows, names


def markdown(fb, peers, order, fb_rows, peer_rows, names):
    ceil = fb.get("ceilings", {})
    failed = {f["workload"]: f["error"] for f in fb.get("failed", [])}
    out = [
        f"Device: {fb.get('device', '?')} ({fb.get('device_kind', '?')}); flashback commit "
        f"{fb.get('commit', '?')}, run {fb.get('date', '?')}; peers: {peers.get('device', '?')}"
        + (f", torch {peers['torch']}" if "torch" in peers else ""),
        "",
        f"Ceilings measured by `flashback bench` on that machine: read {ceil.get('read_TBps', 0):.3f} TB/s"
        f" ({ceil.get('read_method', '')}); peak {ceil.get('peak_TFLOPs', 0):.1f} TFLOP/s"
        f" ({ceil.get('peak_method', '')}).",
        "",
        "Ratio = peer time / flashback time (> 1: flashback faster). % ceil = fraction of the read "
        "bandwidth (memory-bound workloads) or of the peak (compute-bound).",
        "",
    ]
    head = ["workload", "flashback ms", "TB/s", "TFLOP/s", "% ceil", "best peer", "ratio vs best"]
    for n in names:
        head += [f"{n} ms", f"ratio vs {n}"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for w in order:
        r = fb_rows.get(w)
        if r:
            pct, bound = pct_of_ceiling(r["TBps"], r["TFLOPs"], ceil)
            cells = [w, f"{r['ms']:.4f}", f"{r['TBps']:.3f}", f"{r['TFLOPs']:.2f}",
                     f"{pct:.1f}% {bound[:3]}" if pct is not None else "—"]
        else:
            cells = [w, "unsupported" if w in failed else "not run", "—", "—", "—"]
        ps = peer_rows.get(w, {})
        best = min(ps, key=lambda n: ps[n]["ms"]) if ps else None
        cells += [f"{best} {ps[best]['ms']:.4f}" if best else "—",
                  f"{ps[best]['ms'] / r['ms']:.2f}x" if best and r else "—"]
        for n in names:
            p = ps.get(n)
            if p is None:
                cells += ["—", "—"]
            else:
                cells += [f"{p['ms']:.4f}", f"{p['ms'] / r['ms']:.2f}x" if r else "—"]
        out.append("| " + " | ".join(cells) + " |")
    if failed:
        out += ["", "Workloads flashback could not run in this build:", ""]
        out += [f"- `{w}`: {e}" for w, e in failed.items()]
    return "\n".join(out) + "\n"


def chart(path, title, fb, order, fb_rows, peer_rows, names):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ceil = fb.get("ceilings", {})
    impls = ["flashback"] + names
    rows = list(reversed(order))  # first workload at the top
    height = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(10, 0.11 * len(rows) * len(impls) + 1.5))
    for k, impl in enumerate(impls):
        ys, xs = [], []
        for i, w in enumerate(rows):
            r = fb_rows.get(w) if impl == "flashback" else peer_rows.get(w, {}).get(impl)
            if not r:
                continue
            pct, _ = pct_of_ceiling(r["TBps"], r["TFLOPs"], ceil)
            if pct is None:
                continue
            ys.append(i + (k - (len(impls) - 1) / 2) * height)
            xs.append(pct)
        ax.barh(ys, xs, height=height, label=impl,
                color="black" if impl == "flashback" else None)
    ax.set_yticks(range(len(rows)))
    failed = {f["workload"] for f in fb.get("failed", [])}
    ax.set_yticklabels([w + ("\n(flashback: unsupported)" if w in failed else "") for w in rows],
                       fontsize=8)
    ax.set_xlabel("% of the measured ceiling (read bandwidth, or peak when compute-bound)")
    ax.axvline(100, color="grey", linestyle="--", linewidth=0.8)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_both(argv):
    import subprocess

    ap = argparse.ArgumentParser(prog="compare.py run")
    ap.add_argument("--bin", required=True, help="the flashback executable (a CUDA build)")
    ap.add_argument("--peers-py", required=True, help="shared/bench/peers.py")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--outdir", default="bench-out")
    ap.add_argument("--name", default="cuda")
    a = ap.parse_args(argv)
    os.makedirs(a.outdir, exist_ok=True)
    fb_json = os.path.join(a.outdir, "flashback.json")
    peers_json = os.path.join(a.outdir, "peers.json")
    only = ["--only", a.only] if a.only else []
    # flashback exits 1 when some workloads cannot run in this build; they are listed in its JSON.
    rc = subprocess.call([a.bin, "bench", "--device", "cuda", "--json", fb_json] + only)
    if rc not in (0, 1) or not os.path.exists(fb_json):
        sys.exit(f"flashback bench failed (exit {rc})")
    subprocess.check_call([sys.executable, a.peers_py, "--json", peers_json] + only)
    try:
        import matplotlib  # noqa: F401

        chart_args = []
    except ImportError:
        print("matplotlib not installed here: table only", file=sys.stderr)
        chart_args = ["--no-chart"]
    main([fb_json, peers_json, "--name", a.name, "--outdir", a.outdir] + chart_args)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        return run_both(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("flashback", help="JSON from `flashback bench --json`")
    ap.add_argument("peers", help="JSON from shared/bench/peers.py --json")
    ap.add_argument("--name", default="", help="suffix of the output files (default: device kind)")
    ap.add_argument("--outdir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "docs", "bench"))
    ap.add_argument("--no-chart", action="store_true", help="table only (no matplotlib needed)")
    a = ap.parse_args(argv)
    fb, peers = load(a.flashback), load(a.peers)
    if fb.get("peer") != "flashback" or "ceilings" not in fb:
        sys.exit(f"{a.flashback}: not a `flashback bench --json` file")
    if "rows" not in peers:
        sys.exit(f"{a.peers}: no \"rows\" (expected peers.py --json output)")
    order, fb_rows, peer_rows, names = merge(fb, peers)
    name = a.name or fb.get("device_kind", "device")
    os.makedirs(a.outdir, exist_ok=True)
    md = markdown(fb, peers, order, fb_rows, peer_rows, names)
    md_path = os.path.join(a.outdir, f"compare_{name}.md")
    with open(md_path, "w") as f:
        f.write(md)
    print(md, end="")
    print(f"wrote {md_path}")
    if not a.no_chart:
        png = os.path.join(a.outdir, f"compare_{name}.png")
        chart(png, f"flashback vs peers on {fb.get('device', '?')} ({fb.get('date', '')[:10]}, "
              f"{fb.get('commit', '?')})", fb, order, fb_rows, peer_rows, names)
        print(f"wrote {png}")


if __name__ == "__main__":
    main()

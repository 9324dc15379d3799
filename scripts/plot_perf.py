#!/usr/bin/env python3
"""Plots nvme_perf sweeps (scripts/perf_sweep.sh JSON lines): IOPS vs queue depth (4K randread) and
GB/s vs block size (sequential read), CPU and GPU paths on one figure each, PNGs into docs/img/.

usage: python3 scripts/plot_perf.py [SWEEP.jsonl] [--out-dir docs/img] [--prefix perf] [--note TEXT]
                                    [--watermark TEXT] [--all] [--markdown]

Uses the points after the last "sweep" record of the file (--all: every point; a later point with the
same path and x wins). --note adds a line under the title (e.g. "sample from the 2-core dev box").
--watermark writes TEXT large and faint across the plot (e.g. "DEV BOX SAMPLE").
--markdown also prints both tables in Markdown, for docs/performance.md. Needs matplotlib
(pip install matplotlib); the JSON can come from another machine.
"""
import argparse
import json
import os
import sys
import textwrap


def load(path, use_all):
    sweeps, points = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"plot_perf: {path}:{n}: not JSON ({e}); skipped", file=sys.stderr)
                continue
            if "sweep" in rec:
                sweeps.append(rec)
                if not use_all:
                    points = []
            elif rec.get("tool") == "nvme_perf":
                points.append(rec)
    return (sweeps[-1] if sweeps else {}), points


def series(points, want):
    """{path: {x: record}} for the records `want` selects (x, or None to skip)."""
    out = {}
    for r in points:
        x = want(r)
        if x is None:
            continue
        if r.get("ios", 0) == 0:
            print(f"plot_perf: skipped a point with no completed command: {r.get('path')} x={x} "
                  f"({r.get('first_error')})", file=sys.stderr)
            continue
        if r.get("errors", 0) or r.get("verify_errors", 0):
            print(f"plot_perf: warning: {r.get('path')} x={x} had errors: {r.get('first_error')}", file=sys.stderr)
        out.setdefault(r["path"], {})[x] = r
    return out


def size_label(b):
    for unit, shift in (("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


STYLE = {"cpu": dict(color="tab:blue", marker="o", label="CPU-initiated (host thread per queue)"),
         "gpu": dict(color="tab:green", marker="s", label="GPU-initiated (warp per queue)")}


def si(v, _pos=None):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:g}{unit}"
    return f"{v:g}"


def figure(plt, data, value, xlabel, ylabel, title, subtitle, xfmt, path, yscale, watermark, ysi):
    from matplotlib.ticker import FuncFormatter
    fig, ax = plt.subplots(figsize=(8, 5.4), dpi=110)
    for p in sorted(data):
        xs = sorted(data[p])
        ax.plot(xs, [value(data[p][x]) for x in xs], **STYLE.get(p, dict(label=p, marker="^")))
    ax.set_xscale("log", base=2)
    if yscale:
        ax.set_yscale(yscale)
    xs_all = sorted({x for p in data for x in data[p]})
    ax.set_xticks(xs_all)
    ax.set_xticklabels([xfmt(x) for x in xs_all])
    if ysi:
        ax.yaxis.set_major_formatter(FuncFormatter(si))
    ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="best")
    lines = [title] + [w for part in subtitle for w in textwrap.wrap(part, 95)]
    ax.set_title("\n".join(lines), fontsize=9)
    if watermark:
        ax.text(0.5, 0.5, watermark, transform=ax.transAxes, fontsize=34, color="gray", alpha=0.18,
                ha="center", va="center", rotation=20, fontweight="bold")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"plot_perf: wrote {path}")


def markdown(data, xname, xfmt):
    paths = sorted(data)
    xs = sorted({x for p in paths for x in data[p]})
    head = f"| {xname} | " + " | ".join(f"{p.upper()} k IOPS | {p.upper()} GB/s | {p.upper()} p50 µs | {p.upper()} p99 µs"
                                       for p in paths) + " |"
    lines = [head, "|" + "---:|" * (1 + 4 * len(paths))]
    for x in xs:
        cells = []
        for p in paths:
            r = data[p].get(x)
            if r is None:
                cells += ["–"] * 4
            else:
                lat = r.get("lat_us", {})
                cells += [f"{r['iops'] / 1e3:,.1f}", f"{r['gbps']:.2f}", f"{lat.get('p50', 0):.1f}", f"{lat.get('p99', 0):.1f}"]
        lines.append(f"| {xfmt(x)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", nargs="?", default="perf_sweep.jsonl")
    ap.add_argument("--out-dir", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "img")))
    ap.add_argument("--prefix", default="perf")
    ap.add_argument("--note", default="")
    ap.add_argument("--watermark", default="")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_perf: matplotlib is missing: pip install matplotlib")
    if not os.path.exists(a.input):
        sys.exit(f"plot_perf: {a.input}: no such file (run scripts/perf_sweep.sh first)")
    meta, points = load(a.input, a.all)
    if not points:
        sys.exit(f"plot_perf: {a.input}: no nvme_perf points" + ("" if a.all else " after the last sweep record"))
    os.makedirs(a.out_dir, exist_ok=True)

    # perf_sweep.sh labels its points "qd-sweep ..." / "bs-sweep ..." ("check ..." are self-checks);
    # unlabelled points are picked by workload.
    def kind(r):
        lab = r.get("label") or ""
        if lab:
            return lab.split()[0]
        if r.get("rw") == "randread" and r.get("bs") == 4096:
            return "qd-sweep"
        if r.get("rw") == "read":
            return "bs-sweep"
        return None

    qd = series(points, lambda r: r["qd"] if kind(r) == "qd-sweep" else None)
    bs = series(points, lambda r: r["bs"] if kind(r) == "bs-sweep" else None)
    for r in points:
        if kind(r) == "check":
            ok = r.get("errors", 1) == 0 and r.get("verify_errors", 1) == 0 and r.get("ios", 0) > 0
            print(f"plot_perf: self-check {'PASS' if ok else 'FAIL'}: {r.get('label')}"
                  + ("" if ok else f" ({r.get('first_error')})"), file=sys.stderr)
    dev = meta.get("device") or (points[0].get("devices") or [points[0].get("device", "?")])[0]
    queues = meta.get("queues", points[0].get("queues", 1))
    sub = [s for s in (meta.get("machine", ""),
                       f"{dev}, {queues} queue(s), {meta.get('time_s', '?')} s per point"
                       + (", filled" if meta.get("fill") else "") + (f", git {meta['git']}" if meta.get("git") else ""),
                       a.note) if s]
    if qd:
        figure(plt, qd, lambda r: r["iops"], "queue depth (per queue)", "IOPS",
               "nvme_perf: IOPS vs queue depth, 4 KiB random reads", sub, str,
               os.path.join(a.out_dir, f"{a.prefix}_iops_vs_qd.png"), None, a.watermark, True)
    else:
        print("plot_perf: no 4K randread points: IOPS vs QD not drawn", file=sys.stderr)
    if bs:
        bs_qd = sorted({r["qd"] for p in bs for r in bs[p].values()})
        figure(plt, bs, lambda r: r["gbps"], "block size", "GB/s (10^9 B/s)",
               f"nvme_perf: bandwidth vs block size, sequential reads, QD {','.join(map(str, bs_qd))}", sub, size_label,
               os.path.join(a.out_dir, f"{a.prefix}_gbps_vs_bs.png"), None, a.watermark, False)
    else:
        print("plot_perf: no sequential read points: GB/s vs block size not drawn", file=sys.stderr)
    if a.markdown:
        if qd:
            print("\n4 KiB random reads by queue depth\n\n" + markdown(qd, "QD", str))
        if bs:
            print("\nSequential reads by block size\n\n" + markdown(bs, "bs", size_label))


if __name__ == "__main__":
    main()

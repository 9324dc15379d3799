#!/usr/bin/env python3
"""Plots nvme_perf sweeps (scripts/perf_sweep.sh JSON lines): IOPS vs queue depth (4K randread) and
GB/s vs block size (sequential read), CPU and GPU paths on one figure each, PNGs into docs/img/.

usage: python3 scripts/plot_perf.py [SWEEP.jsonl] [--out-dir docs/img] [--prefix perf] [--note TEXT]
                                    [--watermark TEXT] [--all] [--markdown]

Uses the points after the last "sweep" record of the file (--all: every point; a later point with the
same path and x wins). --note adds a line under the title (e.g. "sample from the 2-core dev box").
--watermark writes TEXT large and faint across the plot (e.g. "DEV BOX SAMPLE").
--markdown also prints both tables in Markdown. Needs matplotlib
(pip install matplotlib); the JSON can come from another machine.
"""
import argparse
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_data  # noqa: E402  (the shared reader of the benchmarks' raw output)
import output_file  # noqa: E402  (the output rule of runtime/guard/output_file.h, for Python)


def load(path, use_all):
    """(the last "sweep" record, the nvme_perf points after it; with use_all every point)."""
    sweeps, points = [], []
    for rec in perf_data.records(path):
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


def kind(r):
    """perf_sweep.sh labels its points "qd-sweep ..." / "bs-sweep ..." ("check ..." are self-checks);
    unlabelled points are picked by workload."""
    lab = r.get("label") or ""
    if lab:
        return lab.split()[0]
    if r.get("rw") == "randread" and r.get("bs") == 4096:
        return "qd-sweep"
    if r.get("rw") == "read":
        return "bs-sweep"
    return None


def sweep_series(points):
    """({path: {qd: record}} of the 4K randread sweep, {path: {bs: record}} of the sequential-read sweep)."""
    return (series(points, lambda r: r["qd"] if kind(r) == "qd-sweep" else None),
            series(points, lambda r: r["bs"] if kind(r) == "bs-sweep" else None))


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
    with output_file.open_output(path, "wb") as f:  # in place only once complete
        fig.savefig(f, format=os.path.splitext(path)[1][1:] or "png")
    plt.close(fig)
    print(f"plot_perf: wrote {path}")


def render(input_path, out_dir, prefix="perf", note="", watermark="", use_all=False, md=False):
    """Both PNGs (and with md the tables) of one sweep file; exits with a message on a missing input."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_perf: matplotlib is missing: pip install matplotlib")
    if not os.path.exists(input_path):
        sys.exit(f"plot_perf: {input_path}: no such file (run scripts/perf_sweep.sh first)")
    meta, points = load(input_path, use_all)
    if not points:
        sys.exit(f"plot_perf: {input_path}: no nvme_perf points" + ("" if use_all else " after the last sweep record"))
    os.makedirs(out_dir, exist_ok=True)

    qd, bs = sweep_series(points)
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
                       note) if s]
    if qd:
        figure(plt, qd, lambda r: r["iops"], "queue depth (per queue)", "IOPS",
               "nvme_perf: IOPS vs queue depth, 4 KiB random reads", sub, str,
               os.path.join(out_dir, f"{prefix}_iops_vs_qd.png"), None, watermark, True)
    else:
        print("plot_perf: no 4K randread points: IOPS vs QD not drawn", file=sys.stderr)
    if bs:
        bs_qd = sorted({r["qd"] for p in bs for r in bs[p].values()})
        figure(plt, bs, lambda r: r["gbps"], "block size", "GB/s (10^9 B/s)",
               f"nvme_perf: bandwidth vs block size, sequential reads, QD {','.join(map(str, bs_qd))}", sub, size_label,
               os.path.join(out_dir, f"{prefix}_gbps_vs_bs.png"), None, watermark, False)
    else:
        print("plot_perf: no sequential read points: GB/s vs block size not drawn", file=sys.stderr)
    if md:  # the same tables as docs/performance.md's (scripts/perf_tables.py)
        import perf_tables
        src = [{"files": [os.path.basename(input_path)]}]
        for title, block in (("4 KiB random reads by queue depth", perf_tables.nvme_perf_qd),
                             ("Sequential reads by block size", perf_tables.nvme_perf_bs)):
            print(f"\n{title}\n\n" + "\n".join(perf_tables.markdown(*block(src, os.path.dirname(os.path.abspath(input_path))))))


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
    render(a.input, a.out_dir, a.prefix, a.note, a.watermark, a.all, a.markdown)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tables and plots of bench/llm_tokens results (its --json-out files: one JSON object per cell).

usage: python3 bench/llm_tokens_plot.py RESULTS.jsonl [...] [--markdown] [--out-dir docs/img] [--prefix llm_tokens]
                                        [--card "H100 80GB HBM3"]

--markdown prints one Markdown table per model (cells with an error are shown with the error, never a
number). Without it, writes one PNG per model: tokens/s against the drive's rated bandwidth, one line
per (budget, loader), the plan's bound per budget drawn dashed; where several cells share a point
(rounds, repeated drives) the line goes through their median and a bar spans their range. --card names
the GPU in the title (the files do not say; every figure names its card). Plots need matplotlib (pip
install matplotlib); the JSON can come from another machine. docs/performance.md's own tables and plots
come from scripts/perf_render.py, which uses the plot below.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import perf_data  # noqa: E402  (the shared reader of the benchmarks' raw output)
import output_file  # noqa: E402  (the output rule of runtime/guard/output_file.h, for Python)


def prefetch_label(c):
    """' + pre-gating 4' (', first 1' with --expert-pregate-first) / ' + lag prefetch' / '' (older files carry only "prefetch": true)."""
    if not c.get("prefetch"):
        return ""
    if c.get("prefetch_kind") == "pregate":
        first = f", first {c['pregate_first']}" if c.get("pregate_first") else ""
        return f" + pre-gating {c.get('pregate_experts')}{first}"
    return " + lag prefetch" if c.get("prefetch_kind") == "lag" else " + prefetch"



def by_model(cells):
    out = {}
    for c in cells:
        out.setdefault(c["model"], []).append(c)
    return out


def markdown(cells):
    lines = []
    for model, cs in by_model(cells).items():
        lines += [f"**{model}**", "",
                  "| VRAM:RAM | drive | loader | layers V/R/N | tok/s | bound tok/s | efficiency | NVMe MB/token | host CPU (s) | expert cache hits | lag prediction | prefetch hits / read | expert stall (s) |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in cs:
            mode = c["mode"] + prefetch_label(c)
            drive = (f"{c['drives']}x" if c.get("drives", 1) > 1 else "") + c["drive"]
            if c.get("emulator_tokens_per_second"):  # the emulator's own ceiling for this set, and efficiency against the lower
                drive += f" (emu {c['emulator_tokens_per_second']:.3f} tok/s; {100 * c['efficiency_vs_lower']:.0f} % of the lower)"
            head = f"| {c['budget']} | {drive} | {mode} | {c['vram_layers']}/{c['ram_layers']}/{c['nvme_layers']} |"
            if c.get("error"):
                lines.append(head + f" error: {c['error']} | | | | | | | | |")
                continue
            routed = c.get("experts_routed", 0)
            hits = f"{100 * c['expert_hits'] / routed:.0f} %" if routed else "—"
            lag = f"{100 * c['lag_predicted_hits'] / c['lag_routed']:.0f} %" if c.get("lag_routed") else "—"
            pf = f"{c['prefetch_hits']}/{c['prefetch_reads']}" if c.get("prefetch") else "—"
            stall = f"{c['stall_seconds']:.3f}" if "stall_seconds" in c else "—"
            # no bound: every byte in VRAM (nothing crosses a drive or the host link)
            bound = f"{c['bound_tokens_per_second']:.3f}" if c.get("bound_tokens_per_second") else "— (all in VRAM)"
            eff = f"{100 * c['efficiency']:.0f} %" if c.get("efficiency") is not None else "—"
            # what the drives served per timed token (files before b922806 lack it)
            nvme = f"{c['nvme_bytes_per_token'] / 1e6:.0f}" if c.get("nvme_bytes_per_token") is not None else "—"
            lines.append(head + f" {c['tokens_per_second']:.3f} | {bound} | "
                                f"{eff} | {nvme} | {c['host_cpu_seconds']:.3f} | {hits} | {lag} | {pf} | {stall} |")
        lines.append("")
    return "\n".join(lines)


def plot(cells, out_dir, prefix, card=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("llm_tokens_plot: plots need matplotlib (pip install matplotlib); --markdown works without it", file=sys.stderr)
        return 1
    os.makedirs(out_dir, exist_ok=True)
    for model, cs in by_model(cells).items():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        series, bounds = {}, {}
        for c in cs:
            if c.get("error") or not c.get("drive_bytes_per_second"):
                continue
            x = c["drive_bytes_per_second"] / 1e9
            mode = c["mode"] + prefetch_label(c)
            series.setdefault((c["budget"], mode), {}).setdefault(x, []).append(c["tokens_per_second"])
            # The plan's bound: one per budget (each cell's own bound comes from the bytes its drive served,
            # so it differs by loader and prefetch); older files have only that one, which was the plan's.
            plan_bound = c.get("plan_bound_tokens_per_second", c.get("bound_tokens_per_second"))
            if plan_bound:
                bounds.setdefault(c["budget"], {})[x] = plan_bound
        for (budget, mode), pts in sorted(series.items()):
            xs = sorted(pts)
            mid = [statistics.median(pts[x]) for x in xs]
            err = [[m - min(pts[x]) for x, m in zip(xs, mid)], [max(pts[x]) - m for x, m in zip(xs, mid)]]
            ax.errorbar(xs, mid, yerr=err, marker="o", capsize=3, label=f"{budget} {mode}")
        for budget, b in sorted(bounds.items()):
            xs = sorted(b)
            ax.plot(xs, [b[x] for x in xs], linestyle="--", color="gray", label=f"{budget} bound")
        ax.set_xlabel("drive read bandwidth (GB/s, modeled)")
        ax.set_ylabel("tokens/s")
        ax.set_title(f"{model}: tokens/s at the I/O bound\n{card or 'card not named (--card)'}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        path = os.path.join(out_dir, f"{prefix}_{model}.png")
        fig.tight_layout()
        with output_file.open_output(path, "wb") as f:  # in place only once complete
            fig.savefig(f, dpi=120, format="png")
        plt.close(fig)
        print(path)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--out-dir", default="docs/img")
    ap.add_argument("--prefix", default="llm_tokens")
    ap.add_argument("--card", default=None, help="the GPU the cells ran on, for the plots' titles")
    a = ap.parse_args()
    try:
        cells = perf_data.load(a.results, tool="llm_tokens")
    except OSError as e:
        print(f"llm_tokens_plot: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    if not cells:
        print("llm_tokens_plot: no llm_tokens cells in the input", file=sys.stderr)
        return 1
    if a.markdown:
        print(markdown(cells))
        return 0
    return plot(cells, a.out_dir, a.prefix, a.card)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A plot of bench/llm_seqs results (its --json-out files: one JSON object per sequence count).

usage: python3 bench/llm_seqs_plot.py LABEL=RESULTS.jsonl [...] --out FILE.png [--title TEXT]

One line per file: aggregate tokens/s against the number of sequences sharing each pass, the I/O bound
(passes/s the drive allows for the bytes a pass reads, times N) drawn dashed in the same colour. A row
with an error (tokens not equal to the sequence's alone, a failed run) stops the program: no plot is
drawn from a number that was not verified. Both axes are logarithmic (N doubles; so, ideally, does the
rate). The JSON names the card; the title says it. Needs matplotlib.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import output_file  # noqa: E402  (the output rule of runtime/guard/output_file.h, for Python)


def read_rows(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("error") or not r.get("tokens_match_alone"):
                sys.exit(f"llm_seqs_plot: {path} line {n}: {r.get('error') or 'tokens not checked equal to alone'}: no plot from it")
            rows.append(r)
    if not rows:
        sys.exit(f"llm_seqs_plot: {path} holds no rows")
    return sorted(rows, key=lambda r: r["sequences"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("series", nargs="+", metavar="LABEL=FILE")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    series = []
    for s in a.series:
        label, sep, path = s.partition("=")
        if not sep or not label or not path:
            sys.exit(f"llm_seqs_plot: '{s}' is not LABEL=FILE")
        series.append((label, read_rows(path)))
    cards = {r["gpu"] for _, rows in series for r in rows}
    if len(cards) != 1:
        sys.exit(f"llm_seqs_plot: the files come from {len(cards)} cards ({', '.join(sorted(cards))}): one plot, one card")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, rows) in enumerate(series):
        colour = f"C{i}"
        n = [r["sequences"] for r in rows]
        ax.plot(n, [r["tokens_per_second"] for r in rows], "o-", color=colour, label=label)
        bound = [r["bound_tokens_per_second"] for r in rows if r.get("bound_tokens_per_second")]
        if len(bound) == len(rows):
            ax.plot(n, bound, "--", color=colour, alpha=0.6, label=f"{label}: I/O bound")
    from matplotlib.ticker import FuncFormatter
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("sequences sharing each pass")
    ax.set_ylabel("aggregate tokens/s")
    ax.set_title((a.title + "\n" if a.title else "") + next(iter(cards)), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with output_file.open_output(a.out, "wb") as f:  # in place only once complete
        fig.savefig(f, format="png", dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

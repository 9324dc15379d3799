#!/usr/bin/env python3
"""docs/performance.md's tables, the README's numbers and docs/img's plots, rendered from the raw files
in docs/data/ that docs/data/perf_sources.json names for each block (card, commit, date, command).

usage: scripts/perf_render.py [--check] [--plots] [--import DIR] [--root DIR]

  (no flag)     rewrite every generated block: the text between '<!-- perf:begin NAME -->' and
                '<!-- perf:end NAME -->' in README.md, docs/performance.md and docs/measurements.md
  --check       change nothing; exit 1 naming each block whose text differs from what the data gives
                (CI: tests/docs), 2 on a data or marker error
  --plots       also draw the PNGs into docs/img (needs matplotlib: pip install matplotlib)
  --import DIR  first take a scripts/reproduce.sh output folder: copy the raw files its sources.json
                names into docs/data and point the blocks it regenerated at them in perf_sources.json
Every caption names the card its numbers came from; a file that names another card than its source
says is an error, and no ratio is computed across two sources.
"""
import argparse
import filecmp
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_data  # noqa: E402
import perf_tables as pt  # noqa: E402

DOCS = ("README.md", "docs/performance.md", "docs/measurements.md")
DRIVE_NAMES = {"sn530": "SN530", "pcie4": "PCIe 4", "pcie5": "PCIe 5"}
MARK = re.compile(r"(<!-- perf:begin (\S+) -->\n)(.*?)(<!-- perf:end \2 -->)", re.S)


class DataError(Exception):
    pass


def caption(src, link, numbered):
    files = ", ".join(f"[{f}]({link}{f})" for f in src["files"])
    text = f"{src['card']}, commit `{src['commit']}`, {src['date']}: `{src['command']}`; raw: {files}"
    return ("" if not numbered else f"[{numbered}] ") + text + (f". {src['note']}" if src.get("note") else "")


def check_cards(name, srcs, data_dir):
    for s in srcs:
        for key in ("card", "commit", "date", "command", "files"):
            if not s.get(key):
                raise DataError(f"{name}: a source without '{key}' (every number names its card, commit and command)")
        for f in s["files"]:
            p = os.path.join(data_dir, f)
            if not os.path.exists(p):
                raise DataError(f"{name}: {p} is missing")
            if f.endswith((".json", ".jsonl")):
                for r in perf_data.records(p):
                    card = perf_data.card_named(r)
                    if card and card not in s["card"]:
                        raise DataError(f"{name}: {f} names the card '{card}', its source says '{s['card']}'")


def table(head, rows, srcs, link):
    numbered = len(srcs) > 1
    out = pt.markdown(head + (["source"] if numbered else []), rows,
                      (lambda i: " ".join(f"[{k + 1}]" for k in (i if isinstance(i, list) else [i]))) if numbered else None)
    if srcs:
        out.append("")
        out += [f"- {caption(s, link, i + 1 if numbered else 0)}" for i, s in enumerate(srcs)]
    return "\n".join(out) + "\n"


def block_sources(blocks, name):
    """A block's sources; {"from": [blocks]} is the union of those blocks' sources (one list to keep)."""
    b = blocks.get(name)
    if isinstance(b, dict) and "from" in b:
        return [s for other in b["from"] for s in block_sources(blocks, other)]
    return b


def cards_line(blocks):
    """Which card each table's numbers came from: one sentence for the documents' introductions."""
    by = {}
    for name in blocks:
        for s in block_sources(blocks, name):
            by.setdefault(s["card"], []).append(name)
    gpu = {c: n for c, n in by.items() if not c.startswith("no GPU")}
    if len(gpu) == 1:
        return f"Every number measured on a GPU comes from one {next(iter(gpu))}."
    return "The GPU numbers come from: " + "; ".join(f"{c} ({', '.join(sorted(set(n)))})" for c, n in gpu.items()) + \
        ". No ratio mixes two cards."


def render_block(name, sources, data_dir, root):
    if name == "readme":
        return readme(sources["blocks"], data_dir)
    if name == "cards":
        return cards_line(sources["blocks"]) + "\n"
    if name == "tried":
        return table(*pt.tried(sources["tried"], data_dir), [], "data/")
    srcs = block_sources(sources["blocks"], name)
    if not srcs:
        raise DataError(f"block '{name}' has no sources in perf_sources.json")
    check_cards(name, srcs, data_dir)
    head, rows = pt.drive_eff(srcs, data_dir, root) if name == "drive_eff" else pt.BLOCKS[name](srcs, data_dir)
    if not rows:
        raise DataError(f"block '{name}': its sources gave no rows")
    return table(head, rows, srcs, "data/")


def readme(blocks, data_dir):
    """The README's headline numbers, each from the block whose table backs it in docs/performance.md."""
    used = [s for k in ("cmd_rate", "layer_stream_drives", "layer_stream_baselines", "tokens_dense", "tokens_moe")
            for s in block_sources(blocks, k)]
    cards = sorted({s["card"] for s in used})
    rate = pt.cmd_rate_at(blocks["cmd_rate"], data_dir, 64)
    eff = pt.layer_stream_efficiency(blocks["layer_stream_drives"], data_dir)
    vs_mmap, mmap_gbps, limit = pt.layer_stream_vs_mmap(blocks["layer_stream_baselines"], data_dir, "pcie4")
    dense = [g for _, g in pt.dense_groups(blocks["tokens_dense"], data_dir)]
    d_eff = lambda drive: [g["gpunvme"]["efficiency"] for g in dense if g["gpunvme"]["drive"] == drive]
    d_ratio = lambda drive: [pt._ratio(g["gpunvme"], g.get(m)) for g in dense if g["gpunvme"]["drive"] == drive
                             for m in ("mmap", "mmap-evict") if g.get(m)]
    moe = pt.moe_groups(blocks["tokens_moe"], data_dir)
    # A cell with a RAM expert cache counts only where its bound came from the bytes the drive served
    # (llm_tokens since b922806: the JSON has plan_bound_tokens_per_second beside it); the plan's bound of
    # older cells expected a uniform router's hits and is no floor (docs/performance.md, section 3).
    served = lambda c: "plan_bound_tokens_per_second" in c
    m_cells = lambda model, drive=None: [c for _, k, v in moe if k[0].startswith(model) and drive in (None, k[2]) and k[2] != "—"
                                         for c in v["default"] if (k[1].endswith(":0") or served(c)) and not c.get("error")]
    m_eff = lambda model, drive=None: [c["efficiency"] for c in m_cells(model, drive)]
    big_cached = [c for c in m_cells("qwen3-235b") if not c["budget"].endswith(":0")]
    big_tiers = ("VRAM and NVMe, and with a RAM expert cache: of the bytes the drive served" if big_cached
                 else "VRAM and NVMe; with a RAM expert cache the bound is no floor yet")
    p0 = lambda x: pt.pct(x, 0).replace(" %", "")
    p1 = lambda x: pt.pct(x, 1).replace(" %", "")
    x1 = lambda x: f"{x:.1f}"
    card = cards[0] if len(cards) == 1 else None
    lines = [
        "<!-- generated by scripts/perf_render.py from docs/data/ (perf_sources.json); CI checks it: edit the data, not this -->",
        f"Measured on {'one ' + card if card else 'the cards named in docs/performance.md (no ratio mixes two)'}; every number's"
        " command, commit and raw JSON: [docs/performance.md](docs/performance.md); the drive models and their sources:"
        " [docs/drives.md](docs/drives.md).",
        "",
        f"- GPU-issued NVMe commands: {rate:.0f} M/s at 64 queues (null namespace, median of the runs).",
        f"- Layer streaming into GPU memory: {pt.span(list(eff.values()), p1)} % of the modeled"
        f" {' / '.join(DRIVE_NAMES.get(d, d) for d in eff)} drives; on a PCIe 4"
        f" drive {pt.span(vs_mmap, lambda x: f'{x:.2f}')}× the mmap pipeline, whose one memcpy worker moved"
        f" {pt.span(mmap_gbps, x1)} GB/s of the drive's {pt.span(limit, x1)} and varies from run to run.",
        f"- Llama-3-70B-shaped Q6_K with 22 GiB of VRAM, decoded at {pt.span(d_eff('pcie4'), p0)} % of the PCIe 4 bound and"
        f" {pt.span(d_eff('pcie5'), p0)} % of the PCIe 5 bound: {pt.span(d_ratio('pcie5'), x1)}× the mmap loaders on PCIe 5,"
        f" {pt.span(d_ratio('pcie4'), lambda x: f'{x:.2f}')}× on PCIe 4, for"
        f" {pt.span(pt.dense_cpu_ratios(blocks['tokens_dense'], data_dir), lambda x: f'{x:.0f}')}× less host CPU.",
        f"- MoE with the default prefetch, of the NVMe bound: Mixtral-8x7B {pt.span(m_eff('mixtral'), p1)} %, Qwen3-30B-A3B"
        f" {pt.span(m_eff('qwen3-30b', 'pcie4'), p1)} % (PCIe 4) and {pt.span(m_eff('qwen3-30b', 'pcie5'), p1)} % (PCIe 5),"
        f" gpt-oss-120b {pt.span(m_eff('gpt-oss-120b'), p1)} %, Qwen3-235B-A22B (132 GB, more than the machine's RAM)"
        f" {pt.span(m_eff('qwen3-235b'), p1)} % ({big_tiers}).",
    ]
    return "\n".join(lines) + "\n"


def render_file(text, sources, data_dir, root, fname):
    """(new text, [names of blocks that changed])."""
    changed = []

    def sub(m):
        body = render_block(m[2], sources, data_dir, root)
        if body != m[3]:
            changed.append(f"{fname}: {m[2]}")
        return m[1] + body + m[4]
    new = MARK.sub(sub, text)
    if "<!-- perf:begin" in MARK.sub("", text):
        raise DataError(f"{fname}: a '<!-- perf:begin' marker without its matching '<!-- perf:end NAME -->'")
    return new, changed


def merged(old, new):
    """A block's sources after an import: sources with a "slot" replace the old source of that slot (the
    block's other slots stay: a part regenerates only some rows of a table); any without replace them all."""
    if not all(s.get("slot") for s in new):
        return new
    by = {s["slot"]: s for s in new}
    out = [by.pop(s.get("slot"), s) for s in old]
    return out + list(by.values())


def import_run(src_dir, data_dir, sources):
    with open(os.path.join(src_dir, "sources.json")) as f:
        got = json.load(f)
    for step in got.get("steps", []):
        if step["status"] != "ok":
            print(f"perf_render: note: step {step['step']} of that run {step['status']}: its tables keep their old data")
    for name, srcs in got["blocks"].items():
        for s in srcs:
            for fname in s["files"]:
                a, b = os.path.join(src_dir, fname), os.path.join(data_dir, fname)
                if os.path.exists(b) and not filecmp.cmp(a, b, shallow=False):
                    raise DataError(f"{b} exists with other content: not overwritten")
                shutil.copyfile(a, b)
        sources["blocks"][name] = merged(sources["blocks"].get(name) or [], srcs)
        print(f"perf_render: {name}: now from {', '.join(f for s in sources['blocks'][name] for f in s['files'])}")


def plots(sources, data_dir, img_dir):
    import plot_perf
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    import llm_tokens_plot
    b = sources["blocks"]
    for s in block_sources(b, "nvme_perf_qd"):
        sweep = os.path.join(data_dir, s["files"][0])
        named = s["card"] in plot_perf.load(sweep, False)[0].get("machine", "")  # the sweep's own title line
        plot_perf.render(sweep, img_dir, note="" if named else f"{s['card']}, commit {s['commit']}")
    for name in ("tokens_dense", "tokens_moe"):
        srcs = block_sources(b, name)
        cards = sorted({s["card"] for s in srcs})
        if len(cards) != 1:
            raise DataError(f"{name}: sources on {cards}: one plot would mix cards")
        cells = [c for s in srcs for c in pt.where(pt.recs(s, data_dir, "llm_tokens"), s.get("where"))]
        if llm_tokens_plot.plot(cells, img_dir, "llm_tokens", cards[0]):
            raise DataError("plots need matplotlib")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--plots", action="store_true")
    ap.add_argument("--import", dest="import_dir")
    ap.add_argument("--root", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
    a = ap.parse_args()
    data_dir = os.path.join(a.root, "docs", "data")
    src_path = os.path.join(data_dir, "perf_sources.json")
    try:
        with open(src_path) as f:
            sources = json.load(f)
        if a.import_dir:
            import_run(a.import_dir, data_dir, sources)
            with open(src_path, "w") as f:
                json.dump(sources, f, indent=1, ensure_ascii=False)
                f.write("\n")
        changed = []
        for fname in DOCS:
            p = os.path.join(a.root, fname)
            with open(p) as f:
                text = f.read()
            new, ch = render_file(text, sources, data_dir, a.root, fname)
            changed += ch
            if not a.check and new != text:
                with open(p, "w") as f:
                    f.write(new)
        if a.plots:
            plots(sources, data_dir, os.path.join(a.root, "docs", "img"))
    except (DataError, OSError, KeyError, ValueError) as e:
        print(f"perf_render: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if a.check and changed:
        for c in changed:
            print(f"perf_render: {c} differs from what docs/data gives: run scripts/perf_render.py and commit the result",
                  file=sys.stderr)
        return 1
    print("perf_render: " + ("every generated block matches docs/data" if a.check else
                             f"{len(changed)} block(s) rewritten" if changed else "nothing to change"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

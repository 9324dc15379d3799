#!/usr/bin/env python3
"""scripts/perf_data.py (the one reader of the benchmarks' raw output) and scripts/perf_render.py (the
documents' tables and the README's numbers) on known bytes, and the renderer's refusals:
  - JSON lines with a broken line, one indented document, an A/B file's wrapped cells;
  - gpu_cmd_rate's text tables and the probe's lines; a fault-matrix row cut short;
  - --check on a copy of the tree passes, then fails naming the block once a README number is edited,
    once a raw file's value changes, and (exit 2) once a source names another card than its file;
  - the README's MoE line takes a RAM expert cache's cells only with llm_tokens' served-bytes bound;
  - the MoE table: a striped set's cells a row of their own, the emulator's unthrottled cells no row but
    quoted where they are below the drives' bound, a model held whole in VRAM a row without a bound;
  - --import of a reproduce.sh folder replaces only the slots it brings, keeping the block's others.
usage: test_perf_render.py SOURCE_ROOT
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import perf_data  # noqa: E402
import perf_tables  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def render(root, *args):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "perf_render.py"), "--root", root, *args],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def reader_cases(tmp):
    jl = os.path.join(tmp, "cells.jsonl")
    write(jl, '{"tool": "llm_tokens", "efficiency": 0.5}\nnot json\n\n{"tool": "nvme_perf", "iops": 7}\n')
    r = perf_data.records(jl)
    check([x.get("tool") for x in r] == ["llm_tokens", "nvme_perf"], "JSON lines: both records, the broken line skipped")
    check([x["iops"] for x in perf_data.load([jl], "nvme_perf")] == [7], "load() keeps only the tool asked for")
    doc = os.path.join(tmp, "doc.json")
    write(doc, json.dumps({"rows": [1, 2], "consumer": "GPU NVIDIA H200 (device 0)"}, indent=2))
    r = perf_data.records(doc)
    check(len(r) == 1 and r[0]["rows"] == [1, 2], "an indented JSON document is one record")
    check(perf_data.card_named(r[0]) == "H200", "the card a record names: H200")
    ab = os.path.join(tmp, "ab.json")
    write(ab, '{"tree": "abc", "round": 2, "cell": {"tool": "llm_tokens", "efficiency": 0.9}}\n')
    r = perf_data.records(ab)[0]
    check(r["efficiency"] == 0.9 and r["tags"] == {"tree": "abc", "round": 2}, "an A/B cell comes back with its tags")
    check(perf_tables.where([r], {"tags.round": 2}) == [r] and perf_tables.where([r], {"tags.round": 1}) == [],
          "where() reaches into the tags")
    txt = os.path.join(tmp, "rate.txt")
    write(txt, "# header\n== probe\nqueues  1 ctrl-threads 1:  13.48 M cmds/s  served=8\n"
               "queues  1 ctrl-threads 2:  14.00 M cmds/s  served=8\n== cmd new 1\n"
               "queues  ctrl     GPU Mcmd/s     CPU Mcmd/s   probe Mcmd/s  GPU/probe    GPU/CPU\n"
               "     1     1           23.9            0.0            0.0          -          -\n"
               "    64     8          518.1           98.2            0.0          -       5.28\n")
    cr = perf_data.cmd_rate(txt)
    check(cr["probe"] == {1: 14.0}, "the probe: the best row per queue count")
    rows = cr["runs"][0]["rows"]
    check(cr["runs"][0]["label"] == "cmd new 1" and rows[1]["gpu"] == 23.9 and rows[1]["cpu"] is None
          and rows[64] == {"ctrl": 8, "gpu": 518.1, "cpu": 98.2}, "gpu_cmd_rate's table; a skipped path is None, not 0")
    fm = os.path.join(tmp, "fm.txt")
    write(fm, "fault matrix | CSTS.CFS | raw reads | doorbell=gpu | recovered, bytes verified | 1/1 units | 0.0084 s | 1 reset\n"
              "fault matrix | dropped completion | expert fetch | doorbell=cpu | recovered, bytes verified | 40/40 units | 0.\n")
    rows = perf_data.fault_rows(fm)
    check(rows[0]["seconds"] == 0.0084 and rows[0]["cost"] == "1 reset", "a fault-matrix row")
    check(rows[1]["outcome"] is None and rows[1]["workload"] == "expert fetch", "a row cut short: named, not guessed")
    iops = perf_tables.drive_read_iops(ROOT)
    check(iops.get("sn530") == 370e3 and iops.get("pcie5") == 1.85e6, "the drives' IOPS from drive_profiles.cpp")


def copy_tree(dst):
    for rel in ("README.md", "docs/performance.md", "docs/measurements.md", "docs/data", "host/emulator/drive_profiles.cpp"):
        src, out = os.path.join(ROOT, rel), os.path.join(dst, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        (shutil.copytree if os.path.isdir(src) else shutil.copyfile)(src, out)


def renderer_cases(tmp):
    root = os.path.join(tmp, "tree")
    copy_tree(root)
    rc, out = render(root, "--check")
    check(rc == 0, f"--check on the committed tree passes ({out.strip()[-120:]})")

    readme = os.path.join(root, "README.md")
    text = open(readme).read()
    begin = text.index("<!-- perf:begin readme -->")
    edited = text[:begin] + text[begin:].replace(" M/s at 64 queues", "0 M/s at 64 queues", 1)
    check(edited != text, "the README block quotes the command rate")
    write(readme, edited)
    rc, out = render(root, "--check")
    check(rc == 1 and "README.md: readme" in out, "an edited README number fails --check, naming the block")
    rc, _ = render(root)
    check(rc == 0 and open(readme).read() == text, "rendering puts the README back as the data says")

    srcs = json.load(open(os.path.join(root, "docs", "data", "perf_sources.json")))
    ls = srcs["blocks"]["layer_stream_baselines"][0]["files"][0]
    p = os.path.join(root, "docs", "data", ls)
    doc = json.load(open(p))
    row = next(r for r in doc["rows"] if r["mode"] == "gpunvme-gpu" and r["drive"] == "pcie4")
    row["ratios"]["mmap"] += 1.0
    write(p, json.dumps(doc))
    rc, out = render(root, "--check")
    check(rc == 1 and "docs/performance.md: layer_stream_baselines" in out and "README.md: readme" in out,
          "a changed raw value fails --check for the table and the README line it backs")

    card = srcs["blocks"]["layer_stream_baselines"][0]["card"]
    srcs["blocks"]["layer_stream_baselines"][0]["card"] = "NVIDIA H100 80GB HBM3" if "H200" in card else "NVIDIA H200"
    write(os.path.join(root, "docs", "data", "perf_sources.json"), json.dumps(srcs))
    rc, out = render(root, "--check")
    check(rc == 2 and "names the card" in out, "a source whose file names another card is refused")


def served_bound_cases(tmp):
    """The README's MoE line counts a RAM expert cache's cells only where their bound came from the bytes
    the drive served (llm_tokens' plan_bound_tokens_per_second beside it): the plan's is no floor there.
    The data has such cells (Qwen3-235B 22G:32G since 81059ed): they are in the README's range; with their
    served-bytes mark taken away they leave it and the README says so; a changed one moves the range."""
    root = os.path.join(tmp, "tree3")
    copy_tree(root)
    readme = os.path.join(root, "README.md")
    check("of the bytes the drive served" in open(readme).read(), "the README counts the served-bytes RAM cache cells")
    files = sorted({f for s in json.load(open(os.path.join(root, "docs", "data", "perf_sources.json")))["blocks"]["tokens_moe"]
                    for f in s["files"]})

    def rewrite(change):
        """Applies change to every served-bytes Qwen3-235B cell with a RAM budget; how many it changed."""
        n = 0
        for f in files:
            p = os.path.join(root, "docs", "data", f)
            cells = perf_data.records(p)
            hits = [c for c in cells if c.get("tool") == "llm_tokens" and c["model"].startswith("qwen3-235b")
                    and not c["budget"].endswith(":0") and "plan_bound_tokens_per_second" in c]
            for c in hits:
                change(c)
            if hits:
                write(p, "".join(json.dumps(c) + "\n" for c in cells))
            n += len(hits)
        return n

    marked = rewrite(lambda c: c.update(efficiency=0.123))
    check(marked > 0, f"a served-bytes Qwen3-235B cell with a RAM expert cache in the MoE block's sources ({marked})")
    rc, _ = render(root)
    text = open(readme).read()
    check(rc == 0 and "of the bytes the drive served" in text and "12.3" in text,
          "with a served-bytes bound, the cell's efficiency is in the README's Qwen3-235B range")
    rewrite(lambda c: c.pop("plan_bound_tokens_per_second"))
    rc, _ = render(root)
    text = open(readme).read()
    check(rc == 0 and "the bound is no floor yet" in text and "12.3" not in text,
          "a RAM expert cache's cells with the plan's bound leave the README's range, which says so")


def moe_rows_cases(tmp):
    def cell(drive, drives=1, pf="pregate", tps=10.0, bound=12.5, emu=None, routed=100, budget="8G:0", chain=None):
        chained = {"chain_bound_tokens_per_second": chain, "chain_efficiency": tps / chain} if chain else {}
        return {**chained, "tool": "llm_tokens", "model": "m", "budget": budget, "drive": drive, "drives": drives, "mode": "gpunvme",
                "prefetch_kind": pf, "prefetch": pf != "off", "tokens": 4, "tokens_per_second": tps,
                "bound_tokens_per_second": bound, "efficiency": tps / bound if bound else None, "host_cpu_seconds": 0.4,
                "expert_hits": routed // 2, "experts_routed": routed, "emulator_tokens_per_second": emu}
    cells = [cell("none", pf="off", tps=20.0, bound=40.0), cell("none", tps=20.0, bound=40.0),
             cell("pcie4", pf="off", tps=9.0), cell("pcie4", tps=12.0),
             cell("pcie5", pf="off", tps=15.0, bound=25.0, emu=20.0, chain=16.0),
             cell("pcie5", tps=18.0, bound=25.0, emu=20.0), cell("pcie4", drives=2, tps=18.0, bound=25.0, emu=20.0),
             cell("none", pf=None, tps=140.0, bound=None, routed=0, budget="22G:0")]
    write(os.path.join(tmp, "moe", "cells.json"), "".join(json.dumps(c) + "\n" for c in cells))
    head, rows = perf_tables.tokens_moe([{"files": ["cells.json"]}], os.path.join(tmp, "moe"))
    by = {(r[1], r[2]): r for _, r in rows}
    check(sorted(by) == [("22G:0", "— (no I/O)"), ("8G:0", "2 × pcie4"), ("8G:0", "pcie4"), ("8G:0", "pcie5")],
          f"MoE rows: one per drive set, a 2-drive set apart, no row of the unthrottled emulator ({sorted(by)})")
    check(by[("8G:0", "pcie4")][3] == "72.0 %" and by[("8G:0", "pcie4")][4] == "**96.0 %**", "off and auto of one drive in one row")
    check(by[("8G:0", "pcie5")][4] == "**72.0 % (emulator 20.0: 90 %)**",
          "a cell whose emulator fed less than the drive's bound quotes the emulator's rate and its share of it")
    check(by[("8G:0", "pcie5")][3] == "60.0 % (emulator 20.0: 75 %) (chain 93.8 % of 16.00 tok/s)",
          "an off cell whose JSON has the dependent chain's bound adds its efficiency against it (bench/chain_bound.h)")
    check(by[("22G:0", "— (no I/O)")][5] == "140.00" and by[("22G:0", "— (no I/O)")][6] == "—",
          "a model held whole in VRAM: its tok/s, no bound")
    _, rows = perf_tables.tokens_moe([{"files": ["cells.json"], "where": {"budget": "8G:0", "not": {"drive": "pcie5"}}}],
                                     os.path.join(tmp, "moe"))
    check(sorted((r[1], r[2]) for _, r in rows) == [("8G:0", "2 × pcie4"), ("8G:0", "pcie4")],
          "a source's where: its budget, less the cells of its \"not\" (a drive a newer source measures)")


def import_cases(tmp):
    root = os.path.join(tmp, "tree2")
    copy_tree(root)
    run = os.path.join(tmp, "run")
    os.makedirs(run)
    src_file = os.path.join(ROOT, "docs", "data", "llm_tokens_70b_ram_s6_h100.json")
    shutil.copyfile(src_file, os.path.join(run, "repro_x_ram.json"))
    write(os.path.join(run, "sources.json"), json.dumps({"steps": [{"step": "tokens-70b", "status": "ok", "seconds": 1}],
        "blocks": {"tokens_dense_other": [{"files": ["repro_x_ram.json"], "card": "NVIDIA H100 80GB HBM3",
                                            "commit": "abc1234", "date": "2026-11-28", "command": "llm_tokens ...",
                                            "slot": "ram"}]}}))
    rc, out = render(root, "--import", run)
    check(rc == 0, f"--import of a reproduce.sh folder ({out.strip()[-160:]})")
    after = json.load(open(os.path.join(root, "docs", "data", "perf_sources.json")))["blocks"]["tokens_dense_other"]
    check([s.get("slot") for s in after] == ["sn530", "ram", "stripe2", "stripe4"] and after[1]["commit"] == "abc1234",
          "the imported slot replaced, the block's other slots kept in place")
    check(os.path.exists(os.path.join(root, "docs", "data", "repro_x_ram.json")), "the raw file copied into docs/data")
    write(os.path.join(run, "repro_x_ram.json"), "{}\n")
    rc, out = render(root, "--import", run)
    check(rc == 2 and "not overwritten" in out, "an import never overwrites a raw file with other content")


with tempfile.TemporaryDirectory() as tmp:
    reader_cases(tmp)
    renderer_cases(tmp)
    served_bound_cases(tmp)
    moe_rows_cases(tmp)
    import_cases(tmp)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)

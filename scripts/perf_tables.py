"""docs/performance.md's tables and the README's numbers, each computed from the raw files that
docs/data/perf_sources.json names for it (read through perf_data). scripts/perf_render.py puts them
between the documents' markers.

A block function takes its sources (dicts: files, card, commit, date, command, note and its own
selection keys) and the data folder, and returns (header, [(source index, row)]). A ratio is only ever
computed inside one source: one call on one card.
"""
import os
import re

import perf_data as pd


# ---- formatting ------------------------------------------------------------------------------------

def num(x, nd=2):
    return "—" if x is None else f"{x:,.{nd}f}"


def pct(x, nd=1):
    return "—" if x is None else f"{100 * x:.{nd}f} %"


def times(x, nd=2):
    return "—" if x is None else f"{x:.{nd}f}×"


def joined(xs, fmt, sep=" / "):
    return sep.join(fmt(x) for x in xs) if xs else "—"


def span(xs, fmt, unit=""):
    """'a–b unit' over the values (one value: 'a unit'), in the given format."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    lo, hi = fmt(min(xs)), fmt(max(xs))
    return (lo if lo == hi else f"{lo}–{hi}") + unit


def markdown(head, rows, extra=None):
    """A Markdown table; extra(i) adds a last cell per row (the source column)."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if k == 0 else "---:" for k in range(len(head))) + "|"]
    out += ["| " + " | ".join(row + ([extra(i)] if extra else [])) + " |" for i, row in rows]
    return out


def path(src, data_dir, i=0):
    return os.path.join(data_dir, src["files"][i])


def recs(src, data_dir, tool=None):
    return pd.load([os.path.join(data_dir, f) for f in src["files"]], tool)


def where(records, cond):
    """The records whose fields equal cond's values (a dotted key reaches into a dict: 'tags.round'), less
    those whose fields equal every value of cond's "not" (a source's cells that a newer source measures)."""
    def get(r, key):
        for k in key.split("."):
            r = r.get(k) if isinstance(r, dict) else None
        return r
    cond = dict(cond or {})
    out = cond.pop("not", None)
    return [r for r in records if all(get(r, k) == v for k, v in cond.items())
            and not (out and all(get(r, k) == v for k, v in out.items()))]


# ---- 1. GPU command rate ---------------------------------------------------------------------------

def gpu_runs(src, data_dir, prefix):
    """({queues: GPU M cmds/s of each run labelled PREFIX...}, {queues: controller threads}, the probe's
    best per queue count) of a gpu_cmd_rate file."""
    cr = pd.cmd_rate(path(src, data_dir))
    runs = [r for r in cr["runs"] if r["label"].startswith(prefix)]
    if not runs:
        raise ValueError(f"{src['files'][0]}: no gpu_cmd_rate run labelled '{prefix}...'")
    qs = sorted(runs[0]["rows"])
    return ({q: [r["rows"][q]["gpu"] for r in runs if q in r["rows"]] for q in qs},
            {q: runs[0]["rows"][q]["ctrl"] for q in qs}, cr["probe"])


def cmd_rate(srcs, data_dir):
    head = ["queues", "controller threads", "GPU M cmds/s, each run", "median", "probe M cmds/s (best, same call)",
            "median ÷ probe"]
    rows = []
    for i, s in enumerate(srcs):
        gpu, ctrl, probe = gpu_runs(s, data_dir, s["runs"])
        for q, xs in gpu.items():
            med, p = pd.median(xs), probe.get(q)
            rows.append((i, [str(q), str(ctrl[q]), joined(xs, lambda x: f"{x:.1f}", ", "), f"**{med:.1f}**", num(p, 1),
                             times(med / p if p else None)]))
    return head, rows


def cmd_rate_at(srcs, data_dir, queues):
    return pd.median(gpu_runs(srcs[0], data_dir, srcs[0]["runs"])[0][queues])


def nvme_perf_qd(srcs, data_dir):
    import plot_perf
    head = ["QD", "CPU k IOPS", "CPU p50 / p99 µs", "GPU k IOPS", "GPU p50 / p99 µs", "GPU ÷ CPU"]
    rows = []
    for i, s in enumerate(srcs):
        qd, _ = plot_perf.sweep_series(plot_perf.load(path(s, data_dir), False)[1])
        for x in sorted(set(qd.get("cpu", {})) | set(qd.get("gpu", {}))):
            c, g = qd.get("cpu", {}).get(x), qd.get("gpu", {}).get(x)
            lat = lambda r: "—" if r is None else f"{r['lat_us']['p50']:.1f} / {r['lat_us']['p99']:.1f}"
            kiops = lambda r: "—" if r is None else f"{r['iops'] / 1e3:,.1f}"
            rows.append((i, [str(x), kiops(c), lat(c), kiops(g), lat(g), times(g["iops"] / c["iops"] if c and g else None)]))
    return head, rows


def nvme_perf_bs(srcs, data_dir):
    """Sequential reads by block size, one column a size (a row a path)."""
    import plot_perf
    head, rows = ["GB/s by block size"], []
    for i, s in enumerate(srcs):
        _, bs = plot_perf.sweep_series(plot_perf.load(path(s, data_dir), False)[1])
        sizes = sorted(set(bs.get("cpu", {})) | set(bs.get("gpu", {})))
        head = ["GB/s by block size"] + [plot_perf.size_label(x) for x in sizes]
        for p in ("cpu", "gpu"):
            rows.append((i, [f"{p.upper()} path"] + [num(bs.get(p, {}).get(x, {}).get("gbps")) for x in sizes]))
    return head, rows


def doorbell(srcs, data_dir):
    head = ["workload", "doorbells written by", "commands/s", "p50 / p99 µs", "host CPU s (of the run's)"]
    rows = []
    for i, s in enumerate(srcs):
        for r in sorted(recs(s, data_dir, "nvme_perf"), key=lambda r: (r["qd"], r["doorbell"] != "gpu")):
            work = f"{r['rw']} {r['bs'] // 1024} KiB, QD {r['qd']} × {r['queues']} queue(s), `{r['device'].split(',')[0]}`"
            who = "the GPU (BAR0 mapped)" if r["doorbell"] == "gpu" else "a host thread (mailbox)"
            rate = f"{r['iops'] / 1e6:.1f} M" if r["iops"] >= 1e6 else f"{r['iops'] / 1e3:.1f} k"
            rows.append((i, [work, who, rate, f"{r['lat_us']['p50']:.2f} / {r['lat_us']['p99']:.1f}",
                             f"{r['host_cpu_seconds']:.2f} of {r['seconds']:.0f} s"]))
    return head, rows


# ---- 2. Layer streaming ----------------------------------------------------------------------------

def _ls_docs(s, data_dir):
    return [d for d in recs(s, data_dir) if "rows" in d]


def _ls_by_drive(srcs, data_dir):
    """(source index, run, drive profile, {mode: row}) for every profile of every layer_stream run."""
    for i, s in enumerate(srcs):
        for d in _ls_docs(s, data_dir):
            for drive in dict.fromkeys(r["drive"] for r in d["rows"]):
                yield i, d, drive, {r["mode"]: r for r in d["rows"] if r["drive"] == drive}


def layer_stream_drives(srcs, data_dir):
    head = ["drives", "profile", "modeled limit GB/s", "gpunvme-gpu read GB/s", "efficiency", "gpunvme-cpu GB/s",
            "efficiency", "GPU queues a drive"]
    rows = []
    for i, d, drive, m in _ls_by_drive(srcs, data_dir):
        g, c = (r if r and r.get("ran") and r.get("limit_gbps") else None for r in (m.get("gpunvme-gpu"), m.get("gpunvme-cpu")))
        if not (g or c):
            continue
        q = re.match(r"(\d+)", (g or {}).get("note", ""))
        rows.append((i, [str(d["drives"]), drive, num((g or c)["limit_gbps"]),
                         num((g or {}).get("read_gbps")), pct((g or {}).get("efficiency")),
                         num((c or {}).get("read_gbps")), pct((c or {}).get("efficiency")), q[1] if q else "—"]))
    return head, rows


def layer_stream_efficiency(srcs, data_dir):
    """{profile: gpunvme-gpu's efficiency} on one drive (the README's range), in the first source."""
    out = {}
    for d in _ls_docs(srcs[0], data_dir):
        out.update({r["drive"]: r["efficiency"] for r in d["rows"]
                    if d["drives"] == 1 and r["mode"] == "gpunvme-gpu" and r.get("efficiency")})
    return out


_BASE_MODES = ["gpunvme-gpu", "gpunvme-cpu", "mmap", "odirect", "cufile"]


def layer_stream_baselines(srcs, data_dir):
    head = ["profile", "gpunvme-gpu", "gpunvme-cpu", "mmap pipeline", "O_DIRECT + copy", "cuFile",
            "gpunvme-gpu ÷ mmap", "÷ O_DIRECT"]
    rows = []
    cell = lambda r: ("not available" if not r.get("ran") else
                      num(r["io_gbps"]) + (f" ({pct(r['efficiency'])})" if r.get("efficiency") else ""))
    for i, d, drive, m in _ls_by_drive(srcs, data_dir):
        if "mmap" not in m:
            continue
        ratios = m.get("gpunvme-gpu", {}).get("ratios") or {}
        label = "unthrottled (RAM)" if drive == "none" else f"{drive}, baselines paced alike"
        rows.append((i, [label] + [cell(m[k]) if k in m else "—" for k in _BASE_MODES]
                     + [times(ratios.get("mmap")), times(ratios.get("odirect"))]))
    return head, rows


def layer_stream_vs_mmap(srcs, data_dir, drive):
    """([gpunvme-gpu ÷ mmap], [mmap GB/s into the GPU], [the drive's modeled GB/s]) on DRIVE over every source."""
    ratio, mmap, limit = [], [], []
    for s in srcs:
        for d in _ls_docs(s, data_dir):
            for r in d["rows"]:
                if r["drive"] == drive and r["mode"] == "gpunvme-gpu" and (r.get("ratios") or {}).get("mmap"):
                    ratio.append(r["ratios"]["mmap"])
                if r["drive"] == drive and r["mode"] == "mmap" and r.get("ran"):
                    mmap.append(r["io_gbps"])
                    limit.append(r.get("limit_gbps"))
    return ratio, mmap, limit


# ---- 3. Tokens/s at the I/O bound ------------------------------------------------------------------

def _loader_groups(cells):
    """Cells in file order, grouped as llm_tokens runs them: one (budget, drive) after another, each loader once."""
    groups = []
    for c in cells:
        if not groups or c["mode"] in groups[-1] or (c["budget"], c["drive"]) != groups[-1]["_key"]:
            groups.append({"_key": (c["budget"], c["drive"])})
        groups[-1][c["mode"]] = c
    return groups


def _tok(c):
    return "—" if c is None else f"{c['tokens_per_second']:.3f} ({pct(c['efficiency'], 0)})"


def dense_groups(srcs, data_dir):
    """[(source index, group)] of the dense cells that ran gpunvme and at least one mmap loader."""
    out = []
    for i, s in enumerate(srcs):
        for g in _loader_groups(where(recs(s, data_dir, "llm_tokens"), s.get("where"))):
            if "gpunvme" in g and ("mmap" in g or "mmap-evict" in g):
                out.append((i, g))
    return out


def _ratio(a, b):
    return a["tokens_per_second"] / b["tokens_per_second"] if a and b and b["tokens_per_second"] else None


def tokens_dense(srcs, data_dir):
    head = ["drive", "gpunvme tok/s (of the bound)", "mmap, kept mapped", "mmap-evict", "gpunvme ÷ mmap",
            "÷ mmap-evict", "host CPU s over the timed tokens: gpunvme / mmap / mmap-evict"]
    rows = []
    for i, g in dense_groups(srcs, data_dir):
        n, m, e = g["gpunvme"], g.get("mmap"), g.get("mmap-evict")
        cpu = " / ".join("—" if c is None else f"{c['host_cpu_seconds']:.2f}" for c in (n, m, e))
        rows.append((i, [n["drive"], _tok(n), _tok(m), _tok(e), times(_ratio(n, m)), times(_ratio(n, e)), cpu]))
    return head, rows


def tokens_dense_other(srcs, data_dir):
    head = ["plan (VRAM:RAM, layers V/R/N)", "drives", "gpunvme tok/s", "bound", "efficiency (of the lower of bound and emulator)",
            "host CPU s", "mmap tok/s", "gpunvme ÷ mmap"]
    rows = []
    for i, s in enumerate(srcs):
        for g in _loader_groups(where(recs(s, data_dir, "llm_tokens"), s.get("where"))):
            n, m = g.get("gpunvme"), g.get("mmap")
            if n is None:
                continue
            drive = (f"{n['drives']} × " if n.get("drives", 1) > 1 else "") + n["drive"]
            eff = pct(n.get("efficiency_vs_lower") or n["efficiency"])
            if n.get("emulator_tokens_per_second") and n["emulator_tokens_per_second"] < n["bound_tokens_per_second"]:
                eff += f" (emulator {n['emulator_tokens_per_second']:.3f})"
            plan = f"{n['budget']}, {n['vram_layers']}/{n['ram_layers']}/{n['nvme_layers']}"
            rows.append((i, [plan, drive, f"{n['tokens_per_second']:.3f}", f"{n['bound_tokens_per_second']:.3f}", eff,
                             f"{n['host_cpu_seconds']:.2f}", "—" if m is None else f"{m['tokens_per_second']:.3f}",
                             times(_ratio(n, m))]))
    return head, rows


def _prefetch(c):
    return "off" if c.get("prefetch_kind") in (None, "off") or not c.get("prefetch") else "default"


def drive_label(c):
    """'pcie4', or '2 × pcie4' for a striped set's cells (llm_tokens' "drives": its members, each that drive)."""
    return (f"{c['drives']} × " if c.get("drives", 1) > 1 else "") + c["drive"]


def no_io(c):
    """A cell whose plan holds every byte in VRAM: llm_tokens runs it once, on its first drive, with no bound."""
    return not c.get("bound_tokens_per_second") and not c.get("experts_routed")


def moe_groups(srcs, data_dir):
    """[(source index, (model, budget, drive), {"off": [cells], "default": [cells]})], rounds in file order.
    A drive `none` cell that reads experts is the emulator unthrottled: it is no row, its rate is in the paced
    cells of the same call (emulator_tokens_per_second); a cell with nothing to read is a row of its own (drive —)."""
    out = []
    for i, s in enumerate(srcs):
        by = {}
        for c in where(recs(s, data_dir, "llm_tokens"), s.get("where")):
            if no_io(c):
                by.setdefault((c["model"], c["budget"], "—"), {"off": [], "default": []})["default"].append(c)
            elif c["drive"] != "none":
                by.setdefault((c["model"], c["budget"], drive_label(c)), {"off": [], "default": []})[_prefetch(c)].append(c)
        out += [(i, k, v) for k, v in by.items()]
    return out


def _eff_emu(c):
    """A cell's efficiency; where the same call measured the emulator unthrottled below the drives' bound, also
    what share of the emulator's own rate the cell reached (its bound there is the emulator, not NVMe bytes)."""
    if c.get("error"):
        return "error (JSON)"
    e, emu = c["efficiency"], c.get("emulator_tokens_per_second")
    if emu and emu < c["bound_tokens_per_second"]:
        return f"{pct(e)} (emulator {emu:.1f}: {pct(c['tokens_per_second'] / emu, 0)})"
    return pct(e)


def _eff_off(c):
    """A prefetch-off cell's efficiency; where its JSON has the dependent chain's floor (llm_tokens'
    chain_bound_tokens_per_second, bench/chain_bound.h: the time the token spent outside its expert reads,
    measured, plus the expert bytes at the drives' rate), also its efficiency against that floor."""
    e = _eff_emu(c)
    if not c.get("error") and c.get("chain_efficiency"):
        e += f" (chain {pct(c['chain_efficiency'])} of {c['chain_bound_tokens_per_second']:.2f} tok/s)"
    return e


def tokens_moe(srcs, data_dir):
    head = ["model", "VRAM:RAM", "drive", "prefetch off", "default (auto)", "tok/s (default)", "bound tok/s",
            "host CPU s per token", "expert hits (default)", "wrong predictions cut", "bytes read for wrong ones",
            "bytes the cut spared"]
    rows = []
    for i, (model, budget, drive), v in moe_groups(srcs, data_dir):
        eff_off, eff_on = joined(v["off"], _eff_off), joined(v["default"], _eff_emu)
        on = [c for c in v["default"] if not c.get("error")]
        per_tok = joined([c["host_cpu_seconds"] / c["tokens"] for c in on], lambda x: f"{x:.3f}")
        if drive == "—":  # held whole in VRAM: nothing read, no bound
            rows.append((i, [model, budget, "— (no I/O)", "—", "—", joined([c["tokens_per_second"] for c in on], lambda x: f"{x:.2f}"),
                             "—", per_tok, "—", "—", "—", "—"]))
            continue
        mb = lambda key: joined([c.get(key, 0) / 1e6 for c in on], lambda x: f"{x:.0f} MB")
        rows.append((i, [model, budget, drive, eff_off, "**" + eff_on + "**",
                         joined([c["tokens_per_second"] for c in on], lambda x: f"{x:.2f}"),
                         num(on[0]["bound_tokens_per_second"] if on else None), per_tok,
                         joined([c["expert_hits"] / c["experts_routed"] for c in on if c.get("experts_routed")], pct),
                         joined([c.get("prefetch_cut", 0) for c in on], str), mb("prefetch_wasted_bytes"),
                         mb("prefetch_cut_bytes")]))
    return head, rows


# ---- 4. Time to first token and tokens per pass ----------------------------------------------------

def _passes(doc):
    """(ttft rows, pass-cost rows) of a bench_passes output, of session 5's collected file, or of one engine
    JSON (a prompt run on its own). A ttft row: prompt_tokens, seconds, passes, io, stall, cpu."""
    def engine_row(j):
        return {"prompt_tokens": j["prompt_tokens"], "seconds": j["prompt_seconds"], "passes": j["prompt_passes"],
                "io": j.get("io_seconds"), "stall": j.get("stall_seconds"), "cpu": j.get("engine_cpu_seconds")}
    if doc.get("tool") == "llm":
        return [engine_row(doc)], []
    if "prompts" in doc:
        return [engine_row(j) for j in doc["prompts"].values()], doc.get("pass_cost", {}).get("pass_cost", [])
    ttft = [{"prompt_tokens": r["prompt_tokens"], "seconds": r["batched_seconds"], "passes": r["batched_passes"],
             "io": r.get("io_seconds"), "stall": r.get("stall_seconds"), "cpu": r.get("engine_cpu_seconds")}
            for r in doc.get("time_to_first_token", [])]
    return ttft, doc.get("pass_cost", [])


def ttft(srcs, data_dir):
    head = ["prompt tokens", "time to first token", "passes", "÷ one-token pass (same call)", "reads hidden behind compute",
            "engine thread CPU"]
    rows = []
    for i, s in enumerate(srcs):
        for doc in recs(s, data_dir):
            t, cost = _passes(doc)
            one = next((r["seconds_per_pass"] for r in cost if r["k"] == 0), None)
            for r in t:
                hidden = 1 - r["stall"] / r["io"] if r.get("io") and r.get("stall") is not None else None
                rows.append((i, [str(r["prompt_tokens"]), f"{r['seconds']:.2f} s", str(r["passes"]),
                                 num(r["seconds"] / (r["passes"] * one) if one else None), pct(hidden, 0),
                                 "—" if r.get("cpu") is None else f"{1e3 * r['cpu']:.1f} ms"]))
    return head, rows


def pass_cost(srcs, data_dir):
    head = ["drafts k", "tokens per pass", "seconds per pass", "extra over k = 0"]
    rows = []
    for i, s in enumerate(srcs):
        for doc in recs(s, data_dir):
            for r in _passes(doc)[1]:
                extra = "—" if r["k"] == 0 else f"{1e3 * r['extra_seconds_per_pass']:.1f} ms ({pct(r['extra_fraction'])})"
                rows.append((i, [str(r["k"]), str(r["tokens_per_pass"]), f"{r['seconds_per_pass']:.3f}", extra]))
    return head, rows


def pass_compute(srcs, data_dir):
    head = ["tokens per pass", "seconds per pass (median of the runs)", "TFLOP/s"]
    rows = []
    for i, s in enumerate(srcs):
        for doc in recs(s, data_dir):
            runs = doc.get(s["variant"], []) if s.get("variant") else [doc]
            by = {}
            for run in runs:
                for r in run["rows"]:
                    by.setdefault(r["tokens"], []).append(r)
            for n, rs in by.items():
                if s.get("tokens") and n not in s["tokens"]:
                    continue
                rows.append((i, [n, f"{pd.median([r['seconds_per_pass'] for r in rs]):.3f}",
                                 f"{pd.median([r['tflops'] for r in rs]):.2f}"]))
    return head, [(i, [str(r[0])] + r[1:]) for i, r in sorted(rows, key=lambda x: x[1][0])]


def spec_accept(srcs, data_dir):
    rows = []
    head = ["prompt"]
    for i, s in enumerate(srcs):
        for doc in recs(s, data_dir):
            spec = doc.get("speculative", [])
            ks = sorted({r["draft_k"] for r in spec})
            head = ["prompt"] + [f"k = {k}: tokens per pass, drafts accepted" for k in ks]
            for prompt in dict.fromkeys(r["prompt"] for r in spec):
                by = {r["draft_k"]: r for r in spec if r["prompt"] == prompt}
                rows.append((i, [prompt] + [f"{by[k]['tokens_per_pass']:.2f}, {pct(by[k]['acceptance'], 0)}" if k in by else "—"
                                            for k in ks]))
            over = lambda k: [r for r in spec if r["draft_k"] == k]
            rows.append((i, ["all prompts"] + [f"**{sum(r['generated_tokens'] - 1 for r in over(k)) / sum(r['passes'] for r in over(k)):.2f}**"
                                               for k in ks]))
    return head, rows


# ---- 5. Recovery -----------------------------------------------------------------------------------

def recovery_cost(srcs, data_dir):
    head = ["benchmark", "before recovery, median", "this tree, median", "ratio of medians", "median of paired ratios",
            "before recovery, range"]
    rows = []
    for i, s in enumerate(srcs):
        base, new = gpu_runs(s, data_dir, s["base"])[0], gpu_runs(s, data_dir, s["new"])[0]
        for q, b in base.items():
            n = new[q]
            rows.append((i, [f"command rate, {q} queue(s), M cmds/s ({len(b)} + {len(n)} runs)", num(pd.median(b), 1),
                             num(pd.median(n), 1), f"**{pd.median(n) / pd.median(b):.2f}**",
                             f"{pd.median([x / y for x, y in zip(n, b)]):.2f}", span(b, lambda x: f"{x:.1f}")]))
        ls = pd.layer_stream_lines(path(s, data_dir))
        for drive in dict.fromkeys(x["drive"] for x in ls):
            b = [x["read_gbps"] for x in ls if x["drive"] == drive and s["base"].split()[-1] in x["label"]]
            n = [x["read_gbps"] for x in ls if x["drive"] == drive and s["new"].split()[-1] in x["label"]]
            rows.append((i, [f"layer stream, {drive}, read GB/s ({len(b)} + {len(n)} runs)", num(pd.median(b)),
                             num(pd.median(n)), f"**{pd.median(n) / pd.median(b):.2f}**", "—", span(b, num)]))
    return head, rows


def _outcome(recovered, counters, seconds):
    return f"{'recovered' if recovered else 'fails clearly'}: {counters}, {seconds:.3f} s"


def fault_gpu(srcs, data_dir):
    rows, works = [], []
    for i, s in enumerate(srcs):
        fr = [r for r in pd.fault_rows(path(s, data_dir)) if r["doorbell"] == "doorbell=gpu"]
        works = list(dict.fromkeys(r["workload"] for r in fr))

        def cell(r):
            if r is None:
                return "—"
            if r["outcome"] is None:
                return "(row cut short in the raw file)"
            return _outcome(r["outcome"].startswith("recovered"), f"{r['units']}; {r['cost']}", r["seconds"])
        for fault in dict.fromkeys(r["fault"] for r in fr):
            by = {r["workload"]: r for r in fr if r["fault"] == fault}
            rows.append((i, [fault] + [cell(by.get(w)) for w in works]))
    return ["fault (GPU path, doorbell=gpu)"] + works, rows


def fault_cpu(srcs, data_dir):
    rows, works = [], []
    for i, s in enumerate(srcs):
        cells = [c for d in recs(s, data_dir) for c in d.get("cells", [])]
        works = list(dict.fromkeys(c["workload"] for c in cells))
        for fault in dict.fromkeys(c["fault"] for c in cells):
            by = {c["workload"]: c for c in cells if c["fault"] == fault}

            def cell(c):
                cost = ", ".join(f"{v} {k}" for k, v in c["recovery"].items() if v and k != "seconds_lost")
                return ("" if c["as_expected"] else "**NOT AS EXPECTED** ") + _outcome(c["recovered"], cost or "nothing to do", c["seconds"])
            rows.append((i, [fault] + [cell(by[w]) if w in by else "—" for w in works]))
    return ["fault (CPU path)"] + works, rows


# ---- 6. Host CPU -----------------------------------------------------------------------------------

def host_cpu(srcs, data_dir):
    """Host CPU per token and per GB the drive moved, per (model, drive, loader), over every cell of the
    sources; a loader's CPU against gpunvme's only within one run of both (one call)."""
    head = ["model", "drive", "loader", "cells", "host CPU per token", "per GB from the drive", "÷ gpunvme's, each run"]
    by, vs = {}, {}
    for i, s in enumerate(srcs):
        for c in where(recs(s, data_dir, "llm_tokens"), s.get("where")):
            if c.get("error") or c["drive"] == "none" or (c.get("experts_routed") and _prefetch(c) == "off"):
                continue  # MoE: the default prefetch only
            per_tok = c["host_cpu_seconds"] / c["tokens"]
            # The bytes the drives served (llm_tokens since b922806), else the plan's, which only a dense
            # model's cells match (a MoE cell's depend on its cache and prefetch)
            nvme = c.get("nvme_bytes_per_token")
            if nvme is None and not c.get("experts_routed"):
                nvme = c.get("plan", {}).get("nvme_bytes_per_token")
            per_gb = per_tok / (nvme / 1e9) if nvme else None
            by.setdefault((c["model"], c["budget"], drive_label(c), c["mode"]), []).append((i, per_tok, per_gb))
    for _, g in dense_groups(srcs, data_dir):
        for m in ("mmap", "mmap-evict"):
            if m in g:
                n = g["gpunvme"]
                vs.setdefault((n["model"], n["budget"], n["drive"], m), []).append(g[m]["host_cpu_seconds"] / n["host_cpu_seconds"])
    rows = []
    for key, xs in by.items():
        model, budget, drive, mode = key
        rows.append((sorted({i for i, _, _ in xs}), [f"{model} {budget}", drive, mode, str(len(xs)),
                                                     span([t for _, t, _ in xs], lambda x: f"{x:.3f}", " s"),
                                                     span([g for _, _, g in xs], lambda x: f"{1e3 * x:.0f}", " ms"),
                                                     span(vs.get(key, []), lambda x: f"{x:.0f}", "×")]))
    return head, rows


def dense_cpu_ratios(srcs, data_dir):
    """Every (mmap loader's host CPU ÷ gpunvme's) of the dense cells, each within its own group."""
    out = []
    for _, g in dense_groups(srcs, data_dir):
        out += [g[m]["host_cpu_seconds"] / g["gpunvme"]["host_cpu_seconds"] for m in ("mmap", "mmap-evict") if m in g]
    return out


def drive_read_iops(root):
    """{profile: rated 4 KiB read IOPS} from host/emulator/drive_profiles.cpp, the one place they are set."""
    src = open(os.path.join(root, "host", "emulator", "drive_profiles.cpp")).read()
    out = dict(re.findall(r'p\.name = "(\w+)";.*?p\.read_iops = ([\d.e]+);', src, re.S))
    if not out:
        raise ValueError("host/emulator/drive_profiles.cpp: no p.name / p.read_iops pairs found")
    return {k: float(v) for k, v in out.items()}


def drive_eff(srcs, data_dir, root):
    head = ["profile", "drives", "limit k IOPS", "GPU path k IOPS", "efficiency", "host CPU s", "CPU path k IOPS",
            "efficiency", "host CPU s"]
    lim = drive_read_iops(root)
    rows = []
    for i, s in enumerate(srcs):
        pts = {}
        for r in recs(s, data_dir, "nvme_perf"):
            _, prof, x, p = (r.get("label") or "- - x0 -").split()
            pts.setdefault((prof, int(x[1:])), {})[p] = r
        for (prof, n), by in pts.items():
            limit = n * lim[prof]
            cols = []
            for p in ("gpu", "cpu"):
                r = by.get(p)
                cols += ["—"] * 3 if r is None else [f"{r['iops'] / 1e3:,.1f}", pct(r["iops"] / limit), f"{r['host_cpu_seconds']:.2f}"]
            rows.append((i, [prof, str(n), f"{limit / 1e3:,.0f}"] + cols))
    return head, rows


# ---- Tried and measured worse ----------------------------------------------------------------------

def tried(rows_spec, data_dir):
    head = ["idea (session, commit)", "cell", "kept", "tried", "verdict", "raw", "card"]
    rows = []
    for t in rows_spec:
        cells = recs({"files": [t["file"]]}, data_dir)
        for n, cell in enumerate(t["cells"]):
            vals = []
            for side in ("a", "b"):
                sel = [cells[k] for k in cell[side]["index"]] if "index" in cell[side] else where(cells, cell[side].get("where"))
                if not sel:
                    raise ValueError(f"tried: {t['file']}: '{cell['cell']}' selects no cell on side {side}")
                vals.append(joined([c[t.get("metric", "efficiency")] for c in sel], pct))
            first = [t["what"], cell["cell"]] if n == 0 else ["", cell["cell"]]
            rest = [t["verdict"], f"[{t['file']}](data/{t['file']})", t["card"]] if n == 0 else ["", "", ""]
            rows.append((0, first + vals + rest))
    return head, rows


BLOCKS = {
    "cmd_rate": cmd_rate, "nvme_perf_qd": nvme_perf_qd, "nvme_perf_bs": nvme_perf_bs, "doorbell": doorbell,
    "layer_stream_drives": layer_stream_drives, "layer_stream_baselines": layer_stream_baselines,
    "tokens_dense": tokens_dense, "tokens_dense_other": tokens_dense_other, "tokens_moe": tokens_moe,
    "ttft": ttft, "pass_cost": pass_cost, "pass_compute": pass_compute, "spec_accept": spec_accept,
    "recovery_cost": recovery_cost, "fault_gpu": fault_gpu, "fault_cpu": fault_cpu, "host_cpu": host_cpu,
}

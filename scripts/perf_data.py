"""The one reader of the benchmarks' raw output (docs/data/, or a scripts/reproduce.sh output folder).

Used by scripts/perf_render.py (docs/performance.md's tables, the README's numbers), scripts/plot_perf.py
(nvme_perf sweeps) and bench/llm_tokens_plot.py (llm_tokens cells), so that every table and plot reads a
file the same way:

  records(path)          every JSON object of a file: JSON lines or one JSON document; an A/B run's
                         {"cell": {...}, "tree": ..., "round": ...} comes back as the cell, its tags in "tags"
  load(paths, tool)      records() of several files, only those whose "tool" is TOOL (None: all)
  cmd_rate(path)         bench/gpu_cmd_rate's text tables and the calibration probe's lines (the tool has
                         no JSON output), per "== label" section
  layer_stream_lines(p)  layer_stream's one-line summaries ("[pcie4] gpunvme-gpu read 7.29 GB/s, ...")
  fault_rows(path)       the GPU suite's "fault matrix | ..." rows
A line that does not parse is reported on stderr with its file and line number and skipped, never guessed.
"""
import json
import re
import statistics
import sys


def warn(msg):
    print(f"perf_data: {msg}", file=sys.stderr)


def _unwrap(obj):
    cell = obj.get("cell")
    if isinstance(cell, dict):
        out = dict(cell)
        out["tags"] = {k: v for k, v in obj.items() if k != "cell"}
        return out
    return obj


def records(path):
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
        objs = doc if isinstance(doc, list) else [doc]
    except json.JSONDecodeError:
        objs = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            try:
                objs.append(json.loads(line))
            except json.JSONDecodeError as e:
                warn(f"{path}:{n}: not JSON ({e}); skipped")
    return [_unwrap(o) for o in objs if isinstance(o, dict)]


def load(paths, tool=None):
    out = []
    for p in paths:
        out += [r for r in records(p) if tool is None or r.get("tool") == tool]
    return out


def sections(path):
    """[(label, [lines])] split at lines '== label'; lines before the first one go under label ''."""
    out = [("", [])]
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("== "):
                out.append((line[3:].strip(), []))
            else:
                out[-1][1].append(line)
    return [s for s in out if s[0] or any(l.strip() for l in s[1])]


_RATE_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+(\S+)\s*$")
_PROBE = re.compile(r"queues\s+(\d+)\s+ctrl-threads\s+(\d+):\s+([\d.]+) M cmds/s")


def cmd_rate(path):
    """{"runs": [{"label", "rows": {queues: {"ctrl", "gpu", "cpu"}}}], "probe": {queues: best M cmds/s}}.
    gpu_cmd_rate prints 0.0 for a path it skipped (--skip-cpu): such values come back as None."""
    runs, probe = [], {}
    for label, lines in sections(path):
        rows = {}
        for line in lines:
            m = _RATE_ROW.match(line)
            if m:
                q, ctrl, gpu, cpu = int(m[1]), int(m[2]), float(m[3]), float(m[4])
                rows[q] = {"ctrl": ctrl, "gpu": gpu or None, "cpu": cpu or None}
                continue
            m = _PROBE.search(line)
            if m:
                probe[int(m[1])] = max(probe.get(int(m[1]), 0.0), float(m[3]))
        if rows:
            runs.append({"label": label, "rows": rows})
    return {"runs": runs, "probe": probe}


_LS_LINE = re.compile(r"\[(\w+)\]\s+(\S+)\s+read\s+([\d.]+) GB/s, into the GPU\s+([\d.]+) GB/s")


def layer_stream_lines(path):
    """[{"label", "drive", "mode", "read_gbps", "io_gbps"}] from layer_stream's summary lines."""
    out = []
    for label, lines in sections(path):
        for line in lines:
            m = _LS_LINE.search(line)
            if m:
                out.append({"label": label, "drive": m[1], "mode": m[2], "read_gbps": float(m[3]), "io_gbps": float(m[4])})
    return out


def fault_rows(path):
    """[{"fault", "workload", "doorbell", "outcome", "units", "seconds", "cost"}] from the GPU suite's
    'fault matrix | ...' rows as WARN prints them. A row cut short in the raw file comes back with what it
    still names (fault, workload) and outcome None (the tables say so), never guessed."""
    out = []
    with open(path) as f:
        for line in f:
            if not line.startswith("fault matrix |"):
                continue
            parts = [p.strip() for p in line.split("|")[1:]]
            if len(parts) < 7 or not parts[5].endswith(" s"):
                if len(parts) >= 3:
                    out.append({"fault": parts[0], "workload": parts[1], "doorbell": parts[2].replace(" ", ""),
                                "outcome": None, "units": None, "seconds": None, "cost": None})
                continue
            out.append({"fault": parts[0], "workload": parts[1], "doorbell": parts[2].replace(" ", ""),
                        "outcome": parts[3], "units": parts[4], "seconds": float(parts[5][:-2]), "cost": parts[6]})
    return out


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


_CARD = re.compile(r"(H100|H200)[ A-Za-z0-9]*")


def card_named(record):
    """The GPU a record says it ran on ('H100 80GB HBM3'), from the fields the tools write, else None."""
    for key in ("consumer", "machine", "gpu", "card"):
        v = record.get(key)
        if isinstance(v, str):
            m = _CARD.search(v)
            if m:
                return m[0].strip()
    return None

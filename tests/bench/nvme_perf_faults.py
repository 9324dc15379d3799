#!/usr/bin/env python3
"""nvme_perf with injected faults (issue 32): a retried write during --fill counts in the run's recovery
numbers (the text line and the JSON), as a fault in the measured run does; a fault that can never fire
(a queue the controller does not have, a trailing ':') is refused naming it, before any I/O.
  nvme_perf_faults.py --nvme-perf BUILD/bench/nvme_perf
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tool_run import exit_status, run, tool_paths  # noqa: E402


def main():
    a = tool_paths(["nvme-perf"])
    fails = []
    # --rw read: the measured run writes nothing, so every write retry is the fill's.
    base = [a.nvme_perf, "--device", "emu:ram,size=32M,fault=error:op=write:nth=3:times=2", "--fill", "--time", "0.1"]
    rc, out = run(base + ["--json"])
    try:
        rec = json.loads(out[out.index("{"):])["recovery"]
    except (ValueError, KeyError) as e:
        rec = {"error": str(e)}
    if rc != 0 or rec.get("retries") != 2:
        fails.append(f"--fill with two write errors: exit {rc}, JSON recovery {rec} (want 2 retries)\n{out}")
    rc, out = run(base)
    if rc != 0 or "recovery: 2 retries" not in out:
        fails.append(f"--fill with two write errors: exit {rc}, no 'recovery: 2 retries' line\n{out}")
    for dev, words in (("emu:ram,size=32M,queues=2,fault=drop:q=9", ["fault=drop:q=9", "q=9 never fires", "queues=2"]),
                       ("emu:ram,size=32M,fault=drop:nth=2:", ["fault=drop:nth=2:", "trailing ':'"])):
        rc, out = run([a.nvme_perf, "--device", dev, "--time", "0.1"])
        if rc != 1 or not all(w in out for w in words):
            fails.append(f"{dev}: exit {rc}, want 1 and {words}\n{out}")
    return exit_status(fails, f"{4 - len(fails)} passed, {len(fails)} failed")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Every tool's help fits a terminal and --help-all is complete (issue #34): for gpunvme, each of its
commands (read from `gpunvme --help`, so a new one is covered) and each tool given on the command line,
`--help` exits 0 within 25 lines (cli::kBriefHelpLines), and `--help-all` exits 0, starts with what
--help printed before its pointer to --help-all and says more. A tool that parses with cli::Args checks
on --help-all that its text names every option it accepts and exits 70 naming the missing ones.
  test_tool_help.py --gpunvme BUILD/gpunvme TOOL...
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tool_run import exit_status, run  # noqa: E402

MAX_LINES = 25


def commands(gpunvme):
    rc, out = run([gpunvme, "--help"], timeout=30)
    section = out.split("commands:\n", 1)[1].split("\n\n", 1)[0] if "commands:\n" in out else ""
    return [m.group(1) for m in re.finditer(r"^  (\w+)\s", section, re.M)]


def check(cmd):
    """Failure messages for one tool (cmd: the argv before --help)."""
    name = " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))
    fails = []
    rc, brief = run(cmd + ["--help"], timeout=30)
    lines = brief.count("\n")
    if rc != 0:
        fails.append(f"{name} --help: exit {rc}\n{brief}")
    if lines > MAX_LINES:
        fails.append(f"{name} --help: {lines} lines, more than {MAX_LINES}")
    rc, full = run(cmd + ["--help-all"], timeout=30)
    if rc != 0:
        fails.append(f"{name} --help-all: exit {rc}\n{full[-600:]}")
    head = brief.split("\n\n(")[0] if "--help-all" in brief.splitlines()[-1] else brief
    if not full.startswith(head):
        fails.append(f"{name} --help-all does not start with --help's text")
    if "--help-all" in brief and len(full) <= len(head):
        fails.append(f"{name}: --help points to --help-all, which says nothing more")
    print(f"{'FAIL' if fails else 'ok  '} {name}: --help {lines} lines, --help-all {full.count(chr(10))}")
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpunvme", required=True)
    ap.add_argument("tools", nargs="*")
    a = ap.parse_args()
    cmds = commands(a.gpunvme)
    fails = [] if len(cmds) >= 7 else [f"gpunvme --help lists {cmds}: expected its 7 or more commands"]
    targets = [[a.gpunvme]] + [[a.gpunvme, c] for c in cmds] + [[t] for t in a.tools]
    for t in targets:
        fails += check(t)
    return exit_status(fails, f"{len(targets)} tools, {len(fails)} failures")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench/llm_tokens on bad flags, as a careless user would give them: each is refused before any model is
opened or GPU touched (so this runs on machines without one), with exit status 2 and a message naming
the flag and what it accepts; never a run with no cell and nothing said.
  llm_tokens_usage.py --llm-tokens BUILD/bench/llm_tokens
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tool_run import run  # noqa: E402

# (arguments after --image, words the message must hold)
CASES = [
    (["--modes", "mmap-evic"], ["--modes", "'mmap-evic'", "gpunvme, mmap or mmap-evict"]),
    (["--modes", ","], ["--modes is empty", "default gpunvme,mmap,mmap-evict"]),
    (["--verify", "on,of"], ["--verify", "'of'", "on or off"]),
    (["--verify", ""], ["--verify is empty"]),
    (["--drives", ""], ["--drives is empty"]),
    (["--drives", "pcie4,warp9"], ["unknown drive 'warp9'", "pcie5"]),
    (["--expert-prefetch", ","], ["--expert-prefetch is empty"]),
    (["--expert-prefetch", "auto+first:"], ["+first:M", "auto or pregate:N"]),
    (["--budgets", "1X:0"], ["--budgets VRAM", "'1X'", "unknown unit"]),
    (["--budgets", "1G"], ["'1G' is not VRAM:RAM"]),
    (["--drive-per-gpu"], ["--drive-per-gpu needs --gpus 2 or more"]),
    (["--budgets", "1G:-5"], ["--budgets RAM", "negative"]),
    (["--tokens", "0"], ["--tokens must be at least 1"]),
    (["--queues", "17"], ["--queues must be 1 to 16"]),
    (["--emu-opts", "drive=sn530"], ["drive= and threads= are the cell's own"]),
    (["--frobnicate", "1"], ["frobnicate"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm-tokens", required=True)
    a = ap.parse_args()
    failures = 0
    rc, out = run([a.llm_tokens], timeout=30)
    checks = [([], rc, out, ["give --image PATH"])]
    for extra, words in CASES:
        rc, out = run([a.llm_tokens, "--image", "/nonexistent/model.img"] + extra, timeout=30)
        checks.append((extra, rc, out, words))
    for extra, rc, out, words in checks:
        missing = [w for w in words if w not in out]
        if rc != 2 or missing:
            failures += 1
            print(f"FAIL {extra}: exit {rc}, missing {missing}\n{out}")
        else:
            print(f"ok   {extra}: {out.splitlines()[0]}")
    print(f"{len(checks) - failures}/{len(checks)} refused as they should be")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""llm_seqs's sequence slots (issue 37) on any machine: --max-seqs auto and a count the VRAM budget cannot
hold refused before a GPU is opened, with the GPU executor's one message naming the fixes; auto refused
with --kv-host and on the CPU executor; a row of more sequences than the slots an error row.
  llm_seqs_kv_check.py --llm-seqs BUILD/bench/llm_seqs
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

DEV = "emu:gen,shape=tiny-qwen3moe,type=q4_k"
FIXES = ("fewer sequences (--max-seqs)", "a shorter context (--ctx)", "the cache in pinned host memory (--kv-host)",
         "a larger --vram-budget")
# One slot: fewer sequences cannot help, and --kv-host names the tools that have it (`llm` does not).
FIXES_ONE = ("a shorter context (--ctx)", "a larger --vram-budget",
             "the cache in pinned host memory (--kv-host of llm_seqs and gpunvme.serve)")
failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    failed += not ok


def run(tool, *args):
    p = subprocess.run([tool, "--device", DEV, "--prompt-tokens", "5", "--tokens", "3", *args], capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm-seqs", required=True)
    tool = ap.parse_args().llm_seqs

    # A slot of tiny-qwen3moe: 2 layers x 2 (K, V) x 9 positions x kv_dim 256 x 2 bytes = 18 KiB.
    rc, _, err = run(tool, "--path", "gpu", "--vram-budget", "1K", "--seqs", "1,2", "--max-seqs", "auto")
    check("auto: a budget below one slot refused", rc == 1 and "llm_seqs: error: the KV cache (1 sequence(s) of 9 positions, "
          "18.00 KiB) does not fit in GPU memory: the VRAM budget is 1.00 KiB (--max-seqs auto sizes the cache from it)" in err
          and all(f in err for f in FIXES_ONE) and "fewer sequences" not in err, f"rc {rc}: {err}")
    rc, _, err = run(tool, "--path", "gpu", "--vram-budget", "20K", "--seqs", "1,2")
    check("2 slots over a budget of one refused, the same message", rc == 1 and "llm_seqs: error: the KV cache (2 sequence(s) "
          "of 9 positions, 36.00 KiB) does not fit in GPU memory: the VRAM budget is 20.00 KiB;" in err
          and all(f in err for f in FIXES), f"rc {rc}: {err}")
    rc, _, err = run(tool, "--path", "gpu", "--vram-budget", "1K", "--max-seqs", "auto", "--kv-host")
    check("auto with --kv-host refused", rc == 1 and "--max-seqs auto sizes the KV cache from the VRAM budget: with the cache "
          "in pinned host memory (--kv-host) give a count" in err, f"rc {rc}: {err}")
    rc, _, err = run(tool, "--path", "cpu", "--max-seqs", "auto")
    check("auto on the CPU executor refused", rc == 2 and "the CPU executor needs a count" in err, f"rc {rc}: {err}")
    rc, _, err = run(tool, "--path", "cpu", "--max-seqs", "65")
    check("--max-seqs past 64 refused", rc == 2 and "--max-seqs must be 1..64 or auto" in err, f"rc {rc}: {err}")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        rc, text, err = run(tool, "--path", "cpu", "--seqs", "1,2,3", "--max-seqs", "2", "--json-out", out)
        rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
    check("2 slots: rows of 1 and 2 sequences run", rc == 1 and len(rows) == 3 and rows[0]["error"] is None and
          rows[1]["error"] is None and rows[1]["tokens_match_alone"], f"rc {rc}: {text} {err} {rows}")
    check("2 slots: the row of 3 an error row", len(rows) == 3 and rows[2]["sequences"] == 3 and
          rows[2]["error"] == "3 sequences: the executor holds 2 (--max-seqs)" and
          "   3  ERROR: 3 sequences: the executor holds 2 (--max-seqs)" in text, f"{text} {rows}")
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Bad input to the tools gets a clear error naming what is wrong, and nothing runs:
strict numbers (no octal, sign or hex), an option or emu: key given twice, emu:/dev/null,
nvme_perf --verify on emu:null, examples asked for more memory than there is, fetch_experts --tokens 0;
values that used to be cut down or ignored in silence (demo --bytes, --queue-depth; nvme_perf --mix, --count,
--span, --verify with writes only).

Usage: test_tool_errors.py --gpunvme EXE --stream-layers EXE --fetch-experts EXE [--nvme-perf EXE]
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)


def run(cmd):
    return tool_run.run(cmd, timeout=120)


def main():
    ap = argparse.ArgumentParser()  # the same tool paths for every script (tests/text/meson.build)
    ap.add_argument("--gpunvme", required=True)
    ap.add_argument("--stream-layers", required=True)
    ap.add_argument("--fetch-experts", required=True)
    ap.add_argument("--nvme-perf")
    ap.add_argument("--gguf-dump")
    a = ap.parse_args()
    g, sl, fe = a.gpunvme, a.stream_layers, a.fetch_experts
    cases = [
        # (command, exit status, text the output must hold)
        ([g, "deploy", "x.gguf", "--device", "emu:ram", "--start-lba", "0100"], 2, "--start-lba: '0100' has a leading zero"),
        ([g, "deploy", "x.gguf", "--device", "emu:ram", "--start-lba", "-1"], 2, "--start-lba: '-1' is not a number"),
        ([g, "demo", "--device", "emu:ram,size=16M", "--bytes", "0x100000"], 2, "--bytes: '0x100000' is not a size"),
        ([g, "demo", "--device", "emu:ram,size=16M", "--bytes", "1M", "--bytes", "2M"], 2, "option --bytes is given twice"),
        # Values that were cut down or ignored in silence (issue 32): refused, naming the limit.
        ([g, "demo", "--device", "emu:ram,size=1M", "--bytes", "2M"], 2, "--bytes 2M is more than namespace 1 holds (1.00 MiB)"),
        ([g, "demo", "--device", "emu:ram,size=1M", "--bytes", "1000"], 2, "--bytes must be a positive multiple of the 512-byte block"),
        ([g, "demo", "--device", "emu:ram,size=1M", "--queue-depth", "0"], 2, "--queue-depth must be 1..255"),
        ([g, "identify", "--device", "emu:ram,size=16M,lba=512,size=32M"], 1, 'key "size" is given twice'),
        ([g, "identify", "--device", "emu:ram,queues=010"], 1, "queues: '010' has a leading zero"),
        ([g, "identify", "--device", "emu:/dev/null,size=1G"], 1, "/dev/null is a character device"),
        ([fe, "--tokens", "0", "--path", "cpu"], 2, "--tokens must be at least 1"),
        ([sl, "--layers", "1000", "--mb-per-layer", "1000000", "--path", "cpu"], 1,
         "cannot allocate 870.07 TiB (956650000811360 bytes) of host memory for the generated model"),
        ([fe, "--experts", "1000000", "--layers", "100000", "--path", "cpu"], 1, "of host memory for the generated model"),
        ([sl, "--layers", "4000000000", "--path", "cpu"], 2, "--layers must be 1..100000"),
    ]
    if a.nvme_perf:
        cases += [
            ([a.nvme_perf, "--device", "emu:null", "--verify", "--count", "10"], 2,
             "--verify needs a device that stores data; emu:null keeps none"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--qd", "-1"], 2, "--qd: '-1' is not a number"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--bs", "4K", "--bs", "8K"], 2, "option --bs is given twice"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--time", "1e3"], 2, "--time: '1e3' is not a decimal number"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--mix", "50"], 2, "--mix applies to --rw rw or randrw"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--count", "0"], 2, "--count must be at least 1"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--count", "8", "--time", "1"], 2, "--count and --time both"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--span", "32M"], 2, "--span 32M is more than the namespace holds (16M)"),
            ([a.nvme_perf, "--device", "emu:ram,size=16M", "--verify", "--rw", "write"], 2, "--verify checks what reads return"),
        ]
    failures = []
    for cmd, rc_want, text in cases:
        rc, out = run(cmd)
        shown = " ".join(cmd[1:])
        print(f"{shown}: exit {rc}: {out.strip().splitlines()[0] if out.strip() else ''}")
        if rc != rc_want:
            failures.append(f"{shown}: exit {rc}, expected {rc_want}")
        if text not in out:
            failures.append(f"{shown}: output lacks {text!r}:\n{out}")
        for bad in ("bad_alloc", ": Success", "MISMATCH", "FAIL\n"):
            if bad in out:
                failures.append(f"{shown}: output holds {bad!r}:\n{out}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(cases)} bad inputs:", "FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

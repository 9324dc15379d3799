#!/usr/bin/env python3
"""Names from a GGUF (and a --label) can neither forge lines nor break JSON.

A GGUF whose model name and tensor names hold newlines, terminal escapes, a forged verdict line and
bytes that are not UTF-8 is deployed onto an emulated namespace; deploy, ls (text and --json,
--tensors, --experts), verify, gguf_dump, stream_layers and nvme_perf --label then print it. Text output must
hold no control byte (other than the newline ending each line), no invalid UTF-8 and no forged
line; every JSON output must parse with Python's json module and give the exact names back
(non-UTF-8 bytes as surrogateescape).

Usage: test_hostile_names.py --gpunvme EXE --gguf-dump EXE [--nvme-perf EXE]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

FORGED = b"OK: 99/99 chunks match"
MODEL_NAME = b"evil\n" + FORGED + b"\n\x1b[2J\x1b]0;pwned\x07\r\xff\xfe\xc2\x9b31m"
GLOBAL_NAME = b"token_embd.weight\n" + FORGED + b"\xff"
LAYER_NAME = b"blk.0.attn_q.weight"
ARCH = b"llama"


def gguf(tensors, kvs):
    """GGUF v3: string metadata, F32 tensors of n floats each, alignment 32."""
    def s(b):
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, v in kvs:
        out += s(k) + struct.pack("<I", 8) + s(v)
    off = 0
    for name, n in tensors:
        out += s(name) + struct.pack("<I", 1) + struct.pack("<Q", n) + struct.pack("<I", 0) + struct.pack("<Q", off)
        off = (off + 4 * n + 31) // 32 * 32
    out += b"\0" * ((-len(out)) % 32)
    return out + bytes((i * 7 + 3) & 0xFF for i in range(off))


def run(cmd):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    except subprocess.TimeoutExpired as e:
        return -1, (e.output or b"") + b"\n(timed out)"
    return p.returncode, p.stdout


def check_text(what, out, failures):
    for i, line in enumerate(out.split(b"\n")):
        if line.startswith(FORGED) or line.strip() == FORGED:
            failures.append(f"{what}: line {i} is forged: {line!r}")
        bad = [c for c in line if c < 0x20 or c == 0x7F]
        if bad:
            failures.append(f"{what}: line {i} holds control bytes {bad}: {line!r}")
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            failures.append(f"{what}: line {i} is not UTF-8 ({e}): {line!r}")
        if b"\xc2\x9b" in line:
            failures.append(f"{what}: line {i} holds a raw C1 CSI: {line!r}")


def check_json(what, out, failures):
    try:
        return json.loads(out.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        failures.append(f"{what}: not valid JSON ({e}): {out[:400]!r}")
        return None


def raw(s):
    return s.encode("utf-8", "surrogateescape")


def main():
    ap = argparse.ArgumentParser()  # the same tool paths for every script (tests/text/meson.build)
    ap.add_argument("--gpunvme", required=True)
    ap.add_argument("--gguf-dump", required=True)
    ap.add_argument("--nvme-perf")
    ap.add_argument("--stream-layers")
    ap.add_argument("--fetch-experts")
    a = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="gpunvme-names-") as work:
        model = os.path.join(work, "hostile.gguf")
        with open(model, "wb") as f:
            f.write(gguf([(GLOBAL_NAME, 256), (LAYER_NAME, 512), (b"output.weight", 64)],
                         [(b"general.architecture", ARCH), (b"general.name", MODEL_NAME)]))
        dev = "emu:" + os.path.join(work, "disk.img") + ",size=8M"
        dev_again = "emu:" + os.path.join(work, "disk.img")
        texts = {
            "deploy": [a.gpunvme, "deploy", model, "--device", dev],
            "ls": [a.gpunvme, "ls", "--device", dev_again, "--tensors", "--experts"],
            "verify": [a.gpunvme, "verify", "--device", dev_again],
            "verify --against": [a.gpunvme, "verify", "--device", dev_again, "--against", model],
            "gguf_dump": [a.gguf_dump, model],
        }
        if a.stream_layers:  # the examples print the model line too (written onto a RAM namespace of their own)
            texts["stream_layers"] = [a.stream_layers, "--gguf", model, "--device", "emu:ram,size=16M", "--path", "cpu"]
        for what, cmd in texts.items():
            rc, out = run(cmd)
            print(f"--- {what} (exit {rc})\n{out.decode('utf-8', 'replace')}")
            if rc != 0:
                failures.append(f"{what}: exit {rc}")
            check_text(what, out, failures)

        rc, out = run([a.gpunvme, "ls", "--device", dev_again, "--json", "--tensors", "--experts"])
        j = check_json("ls --json", out, failures)
        if j is not None:
            if raw(j["model"]) != MODEL_NAME:
                failures.append(f"ls --json: model name {j['model']!r} is not the file's")
            names = [raw(t["name"]) for t in j["tensors"]]
            if names != [GLOBAL_NAME, LAYER_NAME, b"output.weight"]:
                failures.append(f"ls --json: tensor names {names!r}")

        rc, out = run([a.gguf_dump, "--json", model])
        j = check_json("gguf_dump --json", out, failures)
        if j is not None:
            kv = {m["key"]: m["value"] for m in j["metadata"]}
            if raw(kv["general.name"]) != MODEL_NAME:
                failures.append(f"gguf_dump --json: general.name {kv['general.name']!r}")

        if a.nvme_perf:
            label = MODEL_NAME.decode("utf-8", "surrogateescape")
            env_label = MODEL_NAME  # passed as raw bytes on the command line
            rc, out = run([a.nvme_perf, "--device", "emu:ram,size=16M", "--count", "64", "--bs", "4K", "--json",
                           "--label", env_label])
            j = check_json("nvme_perf --json --label", out, failures)
            if j is not None and j.get("label") != label:
                failures.append(f"nvme_perf --json: label {j.get('label')!r}")
            rc, out = run([a.nvme_perf, "--device", "emu:ram,size=16M", "--count", "64", "--bs", "4K", "--label",
                           env_label])
            check_text("nvme_perf --label", out, failures)
    for f in failures:
        print("FAIL:", f)
    print("hostile names:", "FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

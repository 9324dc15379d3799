#!/usr/bin/env python3
"""Every tool that writes refuses an emu: device backed by a block device (a loop device here)
unless --allow-write, and a block device holding a filesystem unless --force too; the device's
bytes are compared before and after every refused run. Reads need no flag.

Usage: test_write_guard.py --gpunvme EXE [--nvme-perf EXE] [--layer-stream EXE]
                           [--stream-layers EXE] [--fetch-experts EXE]
Needs root and a working losetup; exits 77 (skipped) without them.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)
import tempfile

SKIP = 77


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make_image(path, size):
    # Patterned bytes everywhere (any write shows) and an ext4 superblock magic (0xEF53 at byte 1080).
    block = bytes((i * 131 + 7) & 0xFF for i in range(1 << 16))
    with open(path, "wb") as f:
        for _ in range(size // len(block)):
            f.write(block)
        f.seek(1080)
        f.write(b"\x53\xef")


def run(cmd):
    return tool_run.run(cmd, timeout=240)


def main():
    ap = argparse.ArgumentParser()
    for tool in ("gpunvme", "nvme-perf", "layer-stream", "stream-layers", "fetch-experts"):
        ap.add_argument("--" + tool)
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("losetup"):
        print("SKIP: needs root and losetup (a loop device stands in for a real disk)")
        return SKIP
    work = tempfile.mkdtemp(prefix="gpunvme-guard-")
    image = os.path.join(work, "disk.img")
    make_image(image, 64 << 20)
    p = subprocess.run(["losetup", "-f", "--show", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        print(f"SKIP: losetup failed: {p.stderr.decode().strip()}")
        shutil.rmtree(work)
        return SKIP
    loop = p.stdout.decode().strip()
    dev = "emu:" + loop
    failures = []
    try:
        writers = []
        if a.gpunvme:
            writers.append(("gpunvme demo", [a.gpunvme, "demo", "--device", dev, "--bytes", "1M"]))
            model = os.path.join(work, "tiny.gguf")
            with open(model, "wb") as f:  # a valid GGUF v3 with no metadata and no tensors
                f.write(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") * 2)
            writers.append(("gpunvme deploy", [a.gpunvme, "deploy", model, "--device", dev]))
            writers.append(("gpunvme deploy --print-dd", [a.gpunvme, "deploy", model, "--device", dev, "--print-dd"]))
        if a.nvme_perf:
            writers.append(("nvme_perf randwrite", [a.nvme_perf, "--device", dev, "--rw", "randwrite", "--bs", "4K",
                                                    "--count", "64"]))
            writers.append(("nvme_perf --fill", [a.nvme_perf, "--device", dev, "--fill", "--bs", "4K", "--count", "64",
                                                 "--span", "1M"]))
        if a.layer_stream:
            writers.append(("layer_stream", [a.layer_stream, "--device", dev, "--layers", "1", "--layer-bytes", "1M",
                                             "--modes", "gpunvme-cpu", "--drive", "none"]))
        if a.stream_layers:
            writers.append(("stream_layers", [a.stream_layers, "--device", dev, "--layers", "2", "--mb-per-layer", "1",
                                              "--path", "cpu"]))
        if a.fetch_experts:
            writers.append(("fetch_experts", [a.fetch_experts, "--device", dev, "--tokens", "2", "--path", "cpu"]))

        before = sha(image)
        for name, cmd in writers:
            for flags, expect in (([], ["is a block device", "--allow-write"]),
                                  (["--allow-write"], ["ext2/3/4 filesystem", "--force"])):
                rc, out = run(cmd + flags)
                now = sha(image)
                print(f"{name} {' '.join(flags)}: exit {rc}: {out.strip().splitlines()[-1] if out.strip() else ''}")
                if rc == 0:
                    failures.append(f"{name} {flags}: wrote to {loop} (exit 0)")
                for e in expect:
                    if e not in out:
                        failures.append(f"{name} {flags}: output lacks {e!r}:\n{out}")
                if now != before:
                    failures.append(f"{name} {flags}: the bytes of {loop} changed")
                    before = now

        if a.nvme_perf:  # reads need no flag
            rc, out = run([a.nvme_perf, "--device", dev, "--rw", "randread", "--bs", "4K", "--count", "64"])
            if rc != 0:
                failures.append(f"nvme_perf randread on {loop} failed:\n{out}")
            if sha(image) != before:
                failures.append("nvme_perf randread changed the device")

        if a.gpunvme:  # a size= larger than the block device is named as such (it said "...: Success")
            rc, out = run([a.gpunvme, "identify", "--device", dev + ",size=1G"])
            if rc == 0 or "is a block device of 67108864 bytes, smaller than size=1073741824" not in out:
                failures.append(f"identify with size=1G on {loop}: exit {rc}:\n{out}")

        # Both flags: the guard lets the write through (the flags are the only gate).
        if a.gpunvme:
            rc, out = run([a.gpunvme, "demo", "--device", dev, "--bytes", "1M", "--allow-write", "--force"])
            if rc != 0 or sha(image) == before:
                failures.append(f"gpunvme demo --allow-write --force did not write (exit {rc}):\n{out}")
    finally:
        subprocess.run(["losetup", "-d", loop])
        shutil.rmtree(work)
    for f in failures:
        print("FAIL:", f)
    print(f"{len(writers)} writing commands checked against {loop}: {'FAIL' if failures else 'OK'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

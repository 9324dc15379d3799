#!/usr/bin/env python3
"""Every tool that writes refuses an emu: device backed by a block device (a loop device here)
unless --allow-write, and a block device holding a filesystem unless --force too; the device's
bytes are compared before and after every refused run. Reads need no flag.

Usage: test_write_guard.py --gpunvme EXE [--nvme-perf EXE] [--layer-stream EXE]
                           [--stream-layers EXE] [--fetch-experts EXE]
Needs root and a working losetup; exits 77 (skipped) without them.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)
from writers import sha, writing_commands  # noqa: E402  (tests/guard/writers.py)
import tempfile

SKIP = 77


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
    a = tool_run.tool_paths(optional=("gpunvme", "nvme-perf", "layer-stream", "stream-layers", "fetch-experts"))
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
        model = os.path.join(work, "tiny.gguf")
        with open(model, "wb") as f:  # a valid GGUF v3 with no metadata and no tensors
            f.write(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") * 2)
        writers = writing_commands(a, dev, model)

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
    return tool_run.exit_status(failures, f"{len(writers)} writing commands checked against {loop}: {'FAIL' if failures else 'OK'}")


if __name__ == "__main__":
    sys.exit(main())

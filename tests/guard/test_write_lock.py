#!/usr/bin/env python3
"""Every tool that writes a device takes the lock a deploy takes (host/locked_open.h), and every
reader the shared one: while another process holds the image's lock each writer is refused at once,
naming that process's pid, and the image's bytes stay as they were; readers are refused only while
a writer holds it. Held three ways: by this script (flock(2) on the image, what DeviceLock takes),
exclusive and shared, and by a real `gpunvme deploy` whose controller takes 4 s to come up.

Usage: test_write_lock.py --gpunvme EXE [--nvme-perf EXE] [--layer-stream EXE] [--stream-layers EXE]
                          [--fetch-experts EXE] [--make-model EXE]
"""
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)
from writers import sha, writing_commands  # noqa: E402  (tests/guard/writers.py)

TOOLS = ("gpunvme", "nvme-perf", "layer-stream", "stream-layers", "fetch-experts", "make-model")


def run(cmd):
    return tool_run.run(cmd, timeout=240)


def last_line(out):
    return out.strip().splitlines()[-1] if out.strip() else ""


def tiny_gguf():
    """A valid GGUF v3: no metadata, one F32 tensor of 8 values (data aligned to 32 bytes)."""
    le = lambda v, n: v.to_bytes(n, "little")  # noqa: E731
    name = b"t.weight"
    head = b"GGUF" + le(3, 4) + le(1, 8) + le(0, 8) + le(len(name), 8) + name + le(1, 4) + le(8, 8) + le(0, 4) + le(0, 8)
    head += bytes(-len(head) % 32)
    return head + b"".join(le(i * 0x01010101, 4) for i in range(8))


def holds_lock(pid):
    """Whether process `pid` holds a flock (/proc/locks), without taking one."""
    with open("/proc/locks") as f:
        return any(" FLOCK " in line and f" {pid} " in line and "->" not in line for line in f)


def main():
    a = tool_run.tool_paths(optional=TOOLS)
    work = tempfile.mkdtemp(prefix="gpunvme-lock-")
    image = os.path.join(work, "disk.img")
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    dev = "emu:" + image
    model = os.path.join(work, "tiny.gguf")
    with open(model, "wb") as f:
        f.write(tiny_gguf())
    failures = []

    writers = writing_commands(a, dev, model)
    readers = []
    if a.gpunvme:
        readers.append(("gpunvme read", [a.gpunvme, "read", "--device", dev, "--bytes", "4K", "--out", "/dev/null"]))
        readers.append(("gpunvme ls", [a.gpunvme, "ls", "--device", dev]))
    if a.nvme_perf:
        readers.append(("nvme_perf randread", [a.nvme_perf, "--device", dev, "--rw", "randread", "--bs", "4K",
                                               "--count", "64"]))

    def expect_refused(name, cmd, holder, how, bytes_still=True):
        before = sha(image)
        rc, out = run(cmd)
        print(f"{name} while pid {holder} holds the lock ({how}): exit {rc}: {last_line(out)}")
        if rc == 0:
            failures.append(f"{name}: ran while pid {holder} held the lock ({how})")
        if f"is in use: pid {holder}" not in out:
            failures.append(f"{name}: the refusal does not name pid {holder}:\n{out}")
        if bytes_still and sha(image) != before:
            failures.append(f"{name}: the image changed while pid {holder} held its lock ({how})")

    me = os.getpid()
    try:
        fd = os.open(image, os.O_RDONLY)
        try:
            # Exclusive (a deploy, or any writer): writers and readers are refused.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for name, cmd in writers + readers:
                expect_refused(name, cmd, me, "exclusive")
            # Shared (ls, verify, the engine reading): writers are refused, readers run.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            for name, cmd in writers:
                expect_refused(name, cmd, me, "shared")
            for name, cmd in readers:
                if name == "gpunvme ls":
                    continue  # nothing deployed: ls answers "no model" (exit 1), which says nothing about locks
                rc, out = run(cmd)
                print(f"{name} beside a reader: exit {rc}")
                if rc != 0:
                    failures.append(f"{name} was refused beside a reader (readers share):\n{out}")
        finally:
            os.close(fd)  # releases the flock

        if a.gpunvme:
            # A real deploy, its controller 4 s from ready (CAP.TO raised to 10 s), holds the lock from before
            # it opens the device: demo and nvme_perf --fill are refused naming its pid; its model then verifies.
            deploy = subprocess.Popen([a.gpunvme, "deploy", model, "--device", dev + ",ready_ms=4000,to=20"],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            end = time.monotonic() + 60
            while not holds_lock(deploy.pid) and deploy.poll() is None and time.monotonic() < end:
                time.sleep(0.005)
            if not holds_lock(deploy.pid):
                failures.append("the background deploy never held the image's lock")
            else:
                # The deploy writes meanwhile: its model verifying afterwards is what shows nobody else wrote.
                expect_refused("gpunvme demo", [a.gpunvme, "demo", "--device", dev, "--bytes", "1M"], deploy.pid,
                               "a running deploy", bytes_still=False)
                if a.nvme_perf:
                    expect_refused("nvme_perf --fill", [a.nvme_perf, "--device", dev, "--fill", "--bs", "4K", "--count",
                                                        "64", "--span", "1M"], deploy.pid, "a running deploy",
                                   bytes_still=False)
                if deploy.poll() is not None:
                    failures.append("the background deploy ended before the refusals were checked: they prove nothing")
            out = deploy.communicate(timeout=120)[0].decode("utf-8", "replace")
            if deploy.returncode != 0:
                failures.append(f"the background deploy failed (exit {deploy.returncode}):\n{out}")
            rc, out = run([a.gpunvme, "verify", "--device", dev])
            if rc != 0:
                failures.append(f"verify after the deploy the others were refused beside: exit {rc}:\n{out}")

        # Nobody holds it: the writers run again (demo and nvme_perf --fill stand for them).
        if a.gpunvme:
            rc, out = run([a.gpunvme, "demo", "--device", dev, "--bytes", "1M"])
            if rc != 0:
                failures.append(f"gpunvme demo with the lock free: exit {rc}:\n{out}")
        if a.nvme_perf:
            rc, out = run([a.nvme_perf, "--device", dev, "--fill", "--bs", "4K", "--count", "64", "--span", "1M"])
            if rc != 0:
                failures.append(f"nvme_perf --fill with the lock free: exit {rc}:\n{out}")
    finally:
        shutil.rmtree(work)
    for f in failures:
        print("FAIL:", f)
    print(f"{len(writers)} writers and {len(readers)} readers checked against a held lock: "
          f"{'FAIL' if failures else 'OK'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

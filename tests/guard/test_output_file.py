#!/usr/bin/env python3
"""scripts/output_file.py, the Python tools' twin of runtime/guard/output_file.h: a block device refused
(a loop device's node, or one made with mknod, with root; skipped otherwise), a file in place only when
the `with` block completes (an exception leaves the old file and no temporary file), the mode and a
symlink kept, /dev/full and a missing directory an error, /dev/null and a descriptor written straight.
"""
import os
import stat
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import output_file  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def raises(exc, fn):
    try:
        fn()
    except exc as e:
        return str(e)
    return None


def write(path, data, mode="w"):
    with output_file.open_output(path, mode) as f:
        f.write(data)


def read(path):
    with open(path) as f:
        return f.read()


def block_device(work):
    """A block device node: an existing one in /dev, else one made with mknod (root), else None."""
    for name in sorted(os.listdir("/dev")):
        p = os.path.join("/dev", name)
        try:
            if stat.S_ISBLK(os.stat(p).st_mode):
                return p
        except OSError:
            pass
    p = os.path.join(work, "blk")
    try:
        os.mknod(p, stat.S_IFBLK | 0o600, os.makedev(7, 200))
        return p
    except OSError:
        return None


def main():
    with tempfile.TemporaryDirectory(prefix="gpunvme-output-py-") as d:
        out = os.path.join(d, "out.json")
        write(out, "first\n")
        check(read(out) == "first\n" and os.listdir(d) == ["out.json"], "a new file is written, nothing else left")

        os.chmod(out, 0o640)

        def fail_midway():
            with output_file.open_output(out) as f:
                f.write("half")
                raise RuntimeError("the run failed")
        check(raises(RuntimeError, fail_midway) is not None, "the block's exception propagates")
        check(read(out) == "first\n", "a failed run leaves the old file")
        check(os.listdir(d) == ["out.json"], "and no temporary file")

        write(out, "second\n")
        check(read(out) == "second\n" and stat.S_IMODE(os.stat(out).st_mode) == 0o640, "replaced, mode kept")

        os.symlink("out.json", os.path.join(d, "link.json"))
        write(os.path.join(d, "link.json"), "third\n")
        check(os.path.islink(os.path.join(d, "link.json")) and read(out) == "third\n", "a symlink's file replaced, the link kept")

        msg = raises(FileNotFoundError, lambda: write(os.path.join(d, "missing", "x.png"), b"", "wb"))
        check(msg is not None and "missing does not exist" in msg, f"a missing directory is named: {msg}")
        check(raises(IsADirectoryError, lambda: write(d, "")) is not None, "a directory is an error")
        msg = raises(OSError, lambda: write("/dev/full", "a line\n"))
        check(msg is not None and "/dev/full: writing failed: No space left" in msg, f"/dev/full is an error: {msg}")
        msg = raises(OSError, lambda: write("/dev/full", "x" * 100000))
        check(msg is not None and "No space left" in msg, f"a write larger than the buffer fails in the block: {msg}")
        check(raises(OSError, lambda: write("/dev/null", "x")) is None, "/dev/null is written straight")
        r, w = os.pipe()
        write(f"/dev/fd/{w}", "through the pipe")
        os.close(w)
        check(os.read(r, 100) == b"through the pipe", "/dev/fd/N writes the inherited descriptor")
        os.close(r)

        blk = block_device(d)
        if blk is None:
            print("skip: no block device node here and no mknod (not root): the block-device refusal is untested")
        else:
            msg = raises(output_file.OutputRefused, lambda: write(blk, b"x", "wb"))
            check(msg is not None and blk in msg and "block device" in msg, f"a block device is refused: {msg}")
            link = os.path.join(d, "to-blk")
            os.symlink(blk, link)
            check(raises(output_file.OutputRefused, lambda: write(link, b"x", "wb")) is not None,
                  "a symlink to a block device is refused")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""The rule for every file a Python tool writes (plots, tables, a server's logs), mirroring the C++ tools'
rule, runtime/guard/output_file.h, in all but one part: these tools are given no --device, so they cannot
compare a path with the devices of a run; they refuse every block device all the same.
  - A block device (or a symlink to one) is refused: an output is a file, never a disk or a partition.
  - A regular file, existing or new, is written to a temporary file in its directory and renamed over it
    only when the `with` block ends without an exception and the flush, fsync and close succeeded: a
    failed or interrupted run (KeyboardInterrupt included) leaves the old file, or none. A symlink keeps
    pointing at the file it names, which is replaced; the old file's mode is kept. (The C++ rule uses an
    unnamed O_TMPFILE where it can, so that even SIGKILL leaves nothing; here a SIGKILL can leave a
    hidden `.NAME.tmp-*` file beside the target.)
  - A character device or a pipe (/dev/null, /dev/full, a FIFO) and /dev/stdout, /dev/stderr, /dev/fd/N,
    /proc/self/fd/N (the descriptor the tool inherited) are written straight: /dev/full raises.
  - A directory that does not exist raises FileNotFoundError naming it; every failure is an OSError.

    with output_file.open_output(path, "wb") as f:
        fig.savefig(f, format="png")
"""
import contextlib
import os
import stat
import tempfile


class OutputRefused(OSError):
    """The output path is a block device."""


def _inherited_descriptor(path):
    """/dev/stdout and its kin name a descriptor the tool inherited: its number, else None."""
    named = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
    if path in named:
        return named[path]
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        rest = path[len(prefix):]
        if path.startswith(prefix) and rest.isdigit():
            return int(rest)
    return None


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def open_output(path, mode="w", **kwargs):
    """A file object for `path` under the rule above (mode "w" or "wb", kwargs as for open())."""
    path = os.fspath(path)
    fd = _inherited_descriptor(path)
    st = os.fstat(fd) if fd is not None else None
    if fd is None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
    if st is not None and stat.S_ISBLK(st.st_mode):
        raise OutputRefused(f"refusing to write {path}: it is a block device; an output is a file, never a disk or "
                            "a partition: choose the path of a file")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{path}: is a directory; give the path of a file")
    if fd is not None or (st is not None and not stat.S_ISREG(st.st_mode)):
        # Nothing to rename over: written straight; what the buffer still holds is written at close.
        f = os.fdopen(os.dup(fd), mode, **kwargs) if fd is not None else open(path, mode, **kwargs)
        try:
            yield f
        except BaseException:
            with contextlib.suppress(OSError):
                f.close()
            raise
        _checked(path, "writing", f.close)
        return
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{path}: the directory {directory} does not exist; create it or choose another path")
    tmp_fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(target) + ".tmp-")
    try:
        with os.fdopen(tmp_fd, mode, **kwargs) as f:
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
            yield f
            _checked(path, "writing", f.flush)
            _checked(path, "fsync", lambda: os.fsync(f.fileno()))
        _checked(path, "renaming the temporary file over it", lambda: os.replace(tmp, target))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _checked(path, step, fn):
    """fn(), its OSError re-raised naming the output and the step."""
    try:
        fn()
    except OSError as e:
        raise OSError(e.errno, f"{path}: {step} failed: {e.strerror}") from e

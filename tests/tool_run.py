"""Running the built tools from the Python end-to-end tests: their paths from the command line, one bounded
run, stdout and stderr together."""
import argparse
import subprocess


def tool_paths(required=(), optional=()):
    """The tools' paths given as --NAME EXE (meson passes them), as attributes: --make-model -> a.make_model;
    an optional tool not given is None."""
    ap = argparse.ArgumentParser()
    for name in required:
        ap.add_argument("--" + name, required=True)
    for name in optional:
        ap.add_argument("--" + name)
    return ap.parse_args()


def run(cmd, timeout=240):
    """(exit status, output); a run past `timeout` seconds is killed and reported as status -1."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return -1, ((e.output or b"") + b"\n(timed out)").decode("utf-8", "replace")
    return p.returncode, p.stdout.decode("utf-8", "replace")


def exit_status(failures, summary):
    """The end of a check script: each failure on a FAIL line, then `summary`; 0 when none failed, else 1."""
    for f in failures:
        print("FAIL", f)
    print(summary)
    return 1 if failures else 0

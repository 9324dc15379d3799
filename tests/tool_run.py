"""Running the built tools from the Python end-to-end tests: one bounded run, stdout and stderr together."""
import subprocess


def run(cmd, timeout=240):
    """(exit status, output); a run past `timeout` seconds is killed and reported as status -1."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return -1, ((e.output or b"") + b"\n(timed out)").decode("utf-8", "replace")
    return p.returncode, p.stdout.decode("utf-8", "replace")

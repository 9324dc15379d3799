"""What the Python tests share: named checks that print one line each and record what failed, and the
summary line and exit code at the end."""
failures = []


def check(name, got, want):
    if got == want:
        print(f"ok: {name}")
    else:
        failures.append(name)
        print(f"FAIL: {name}\n  got:  {got!r}\n  want: {want!r}")


def check_raises(name, kind, call, *fragments):
    """call() must raise `kind` (an exception class) whose message holds every fragment."""
    try:
        got = call()
    except kind as e:
        missing = [f for f in fragments if f not in str(e)]
        if missing:
            failures.append(name)
            print(f"FAIL: {name}: the error lacks {missing}: {e}")
        else:
            print(f"ok: {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        return
    except Exception as e:  # noqa: BLE001  (another kind is the failure reported)
        failures.append(name)
        print(f"FAIL: {name}: {type(e).__name__} instead of {kind.__name__}: {e}")
        return
    failures.append(name)
    print(f"FAIL: {name}: no error; got {got!r}")


def summary(what):
    """Prints the closing line; the exit code (1 when any check failed)."""
    if failures:
        print(f"{len(failures)} failed: {', '.join(failures)}")
        return 1
    print(f"all {what} checks passed")
    return 0

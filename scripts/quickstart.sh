#!/usr/bin/env bash
# The first run on a fresh machine: install what is missing, build the `gpunvme` tool alone (about 70
# files: the driver, the emulated controller, the CLI; not the tests, benchmarks or the LLM engine),
# and run the demo on the built-in emulated NVMe controller (a file-backed namespace in /tmp; no
# hardware, no root needed to run). Arguments go to `gpunvme demo` (e.g. --bytes 256M).
# The rest of the tree builds with scripts/build.sh, or with scripts/test.sh, which also runs every suite.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/install_deps.sh
scripts/build.sh gpunvme
"$BUILD_DIR/gpunvme" demo "$@"
cat <<MSG

Next: \`bash scripts/test.sh\` builds the rest (tests, benchmarks, examples, the LLM engine) and runs every
suite; \`$BUILD_DIR/gpunvme --help\` lists the commands (deploy a GGUF model, ls, verify, doctor, ...).
MSG

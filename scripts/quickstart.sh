#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and run the demo on the built-in
# emulated NVMe controller (a file-backed namespace in /tmp; no hardware, no root needed to run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec "${BUILD_DIR:-build}/gpunvme" demo "$@"

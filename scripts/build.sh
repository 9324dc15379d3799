#!/usr/bin/env bash
# Configures (once) and builds gpunvme into ./build. Extra arguments go to `meson setup`,
# e.g. `scripts/build.sh -Dcuda=disabled` or `-Db_sanitize=address,undefined`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  meson setup "$BUILD_DIR" "$@"
elif [ $# -gt 0 ]; then
  meson configure "$BUILD_DIR" "$@"
fi
ninja -C "$BUILD_DIR" -j "${JOBS:-$(nproc)}"

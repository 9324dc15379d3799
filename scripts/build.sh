#!/usr/bin/env bash
# Configures (once) and builds gpunvme into ./build. Arguments starting with '-' go to `meson setup`
# (or `meson configure` once the build directory exists), e.g. `scripts/build.sh -Dcuda=disabled` or
# `-Db_sanitize=address,undefined`; the others name ninja targets to build instead of the whole tree,
# e.g. `scripts/build.sh gpunvme` (what scripts/quickstart.sh builds first).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
options=() targets=()
for a in "$@"; do
  if [[ $a == -* ]]; then options+=("$a"); else targets+=("$a"); fi
done
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  meson setup "$BUILD_DIR" "${options[@]}"
elif [ ${#options[@]} -gt 0 ]; then
  meson configure "$BUILD_DIR" "${options[@]}"
fi
ninja -C "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${targets[@]}"

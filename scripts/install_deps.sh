#!/usr/bin/env bash
# Installs what gpunvme needs to build and test on Debian 12 / Ubuntu 24.04, skipping what is present:
# a C++20 compiler, ninja, pkg-config, libnuma, libblkid (deploy's signature scan), Catch2 v3
# (bookworm-backports on Debian 12) and Meson >= 1.1 (from PyPI when the distribution's is older).
# CUDA (nvcc) is optional and not installed here.
set -euo pipefail

need_apt=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in g++ ninja-build pkg-config libnuma-dev libblkid-dev python3-pip python3-venv; do have_pkg "$p" || need_apt+=("$p"); done
catch2_ok() { pkg-config --exists 'catch2-with-main >= 3.0' 2>/dev/null; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "install_deps: need root to run: $*" >&2; exit 1; fi
}

if [ ${#need_apt[@]} -gt 0 ] || ! catch2_ok; then
  . /etc/os-release
  as_root apt-get update -q
  [ ${#need_apt[@]} -gt 0 ] && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
  if ! catch2_ok; then
    if [ "${ID:-}" = debian ] && [ "${VERSION_CODENAME:-}" = bookworm ]; then
      # Debian 12 ships Catch2 v2; v3 comes from bookworm-backports.
      if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo 'deb http://deb.debian.org/debian bookworm-backports main' | as_root tee /etc/apt/sources.list.d/gpunvme-backports.list >/dev/null
        as_root apt-get update -q
      fi
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm-backports catch2
    else
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q catch2
    fi
  fi
fi

meson_ok() { command -v meson >/dev/null && python3 - "$(meson --version)" <<'PY'
import sys
v = tuple(int(x) for x in sys.argv[1].split('.')[:2])
sys.exit(0 if v >= (1, 1) else 1)
PY
}
if ! meson_ok; then
  python3 -m pip install -q --break-system-packages 'meson>=1.1' 2>/dev/null || python3 -m pip install -q 'meson>=1.1'
fi
meson_ok || { echo "install_deps: meson >= 1.1 is still missing; install it with 'pip install meson'" >&2; exit 1; }
echo "install_deps: toolchain ready (meson $(meson --version), $(g++ --version | head -1))"

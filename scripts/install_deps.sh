#!/usr/bin/env bash
# Installs what gpunvme needs to build and test on Debian 12 / Ubuntu 24.04, skipping what is present:
# a C++20 compiler, ninja, pkg-config, libnuma, libblkid (deploy's signature scan), Catch2 v3 and
# Meson >= 1.1 (both from bookworm-backports on Debian 12, whose own are Catch2 v2 and Meson 1.0), and
# python3-venv / pip (the test inputs' virtual environment) and python3-dev (the headers gpunvme._engine builds
# against). Without recommended packages: on a fresh Debian 12 they doubled the download (image libraries,
# build-essential, gnupg) for nothing we use.
# CUDA (nvcc) is optional and not installed here.
set -euo pipefail

have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
catch2_ok() { pkg-config --exists 'catch2-with-main >= 3.0' 2>/dev/null; }
meson_ok() { command -v meson >/dev/null && python3 - "$(meson --version)" <<'PY'
import sys
v = tuple(int(x) for x in sys.argv[1].split('.')[:2])
sys.exit(0 if v >= (1, 1) else 1)
PY
}
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "install_deps: need root to run: $*" >&2; exit 1; fi
}
apt_install() { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"; }

need_apt=() need_new=()  # need_new: packages whose release version is too old on Debian 12
for p in g++ ninja-build pkg-config libnuma-dev libblkid-dev python3 python3-pip python3-venv python3-dev; do
  have_pkg "$p" || need_apt+=("$p")
done
catch2_ok || need_new+=(catch2)
meson_ok || need_new+=(meson)

if [ ${#need_apt[@]} -gt 0 ] || [ ${#need_new[@]} -gt 0 ]; then
  . /etc/os-release
  as_root apt-get update -q
  if [ ${#need_new[@]} -gt 0 ] && [ "${ID:-}" = debian ] && [ "${VERSION_CODENAME:-}" = bookworm ]; then
    if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo 'deb http://deb.debian.org/debian bookworm-backports main' | as_root tee /etc/apt/sources.list.d/gpunvme-backports.list >/dev/null
      as_root apt-get update -q
    fi
    [ ${#need_apt[@]} -gt 0 ] && apt_install "${need_apt[@]}"
    apt_install -t bookworm-backports "${need_new[@]}"
  else
    apt_install "${need_apt[@]}" "${need_new[@]}"
  fi
fi

# A distribution whose apt Meson is older than 1.1 (neither Debian 12 nor Ubuntu 24.04): Meson from PyPI.
if ! meson_ok; then
  python3 -m pip install -q --break-system-packages 'meson>=1.1' || python3 -m pip install -q 'meson>=1.1' || true
fi
meson_ok || { echo "install_deps: meson >= 1.1 is still missing: install it (pip install meson, or your distribution's backports) and run this again" >&2; exit 1; }
catch2_ok || { echo "install_deps: Catch2 v3 is still missing (pkg-config catch2-with-main >= 3.0): install your distribution's catch2 >= 3, or build it from https://github.com/catchorg/Catch2" >&2; exit 1; }
echo "install_deps: toolchain ready (meson $(meson --version), $(g++ --version | head -1))"

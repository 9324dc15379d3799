#!/usr/bin/env bash
# Prepares .device-carry/ (ignored by git) with what the GPU machine lacks for a build: libblkid's
# header and a pkg-config file that links the runtime library it does have (libblkid.so.1; it has no
# libblkid-dev and no package registry). Run here, then name .device-carry in the device call's carry;
# scripts/gpu_session.sh points pkg-config at it when the machine has no blkid.pc of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
hdr=/usr/include/blkid/blkid.h
[ -f "$hdr" ] || { echo "device_carry: $hdr missing: run scripts/install_deps.sh (libblkid-dev) first" >&2; exit 1; }
d=.device-carry/blkid
mkdir -p "$d/include/blkid" "$d/pkgconfig"
cp "$hdr" "$d/include/blkid/"
cat > "$d/pkgconfig/blkid.pc" <<PC
prefix=/replaced-by-blkid_from_carry
Name: blkid
Description: Block device id library (header carried; links the machine's runtime libblkid.so.1)
Version: $(pkg-config --modversion blkid 2>/dev/null || echo 2.38.1)
Cflags: -I\${prefix}/include -I\${prefix}/include/blkid
Libs: -l:libblkid.so.1
PC
echo "device_carry: $d ready ($(du -sh "$d" | cut -f1)); carry .device-carry in the device call"

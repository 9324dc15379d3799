#!/usr/bin/env bash
# Prepares .device-carry/ (ignored by git) with what the GPU machine lacks: libblkid's header and a
# pkg-config file that links the runtime library it does have (libblkid.so.1; it has no libblkid-dev and
# no package registry), the calibration probe's source (the shared/ beside this checkout does not travel)
# and the tree before recovery (scripts/reproduce.sh measures recovery's no-fault cost against it, where
# the machine's copy has no git history). Run here, then name .device-carry in the device call's carry;
# scripts/device_env.sh points the device-side scripts at it.
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
probe=${PROBE_SRC:-../shared/calibration/warp_queue_probe.cu}
if [ -f "$probe" ]; then install -m 0644 "$probe" .device-carry/warp_queue_probe.cu
else echo "device_carry: no calibration probe at $probe (set PROBE_SRC): gpu_cmd_rate's probe ratio will be missing" >&2; fi
# gguf-py (pure Python) and what it imports, from the tests' .venv: with it the GPU machine writes the
# reference models itself (make_models.py, a few seconds) instead of carrying their 114 MB.
site=$(ls -d .venv/lib/python3*/site-packages 2>/dev/null | head -1)
if [ -n "$site" ] && [ -d "$site/gguf" ]; then
  rm -rf .device-carry/pylib && mkdir -p .device-carry/pylib
  for p in gguf yaml tqdm requests idna certifi charset_normalizer urllib3; do
    [ -d "$site/$p" ] && cp -r "$site/$p" .device-carry/pylib/
  done
  # the compiled accelerators are for this machine's Python; both packages fall back to pure Python
  find .device-carry/pylib \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
else
  echo "device_carry: no gguf-py in .venv (scripts/install_test_inputs.sh makes it): the reference models must be carried" >&2
fi
. scripts/device_env.sh  # RECOVERY_BASE
git archive --format=tar -o ".device-carry/base-$RECOVERY_BASE.tar" "$RECOVERY_BASE"
echo "device_carry: .device-carry ready ($(du -sh .device-carry | cut -f1)); carry .device-carry in the device call"

# Sourced by the scripts that run on the GPU machine (scripts/gpu_session.sh, scripts/reproduce.sh): what
# that machine lacks, taken from .device-carry/ (scripts/device_carry.sh prepares it here).
export PATH="/usr/local/cuda/bin:$PATH"

# gguf-py, carried (scripts/device_carry.sh): the reference check writes its models on the machine.
[ -d "$PWD/.device-carry/pylib" ] && export PYTHONPATH="$PWD/.device-carry/pylib${PYTHONPATH:+:$PYTHONPATH}"

# The last tree before recovery (issue #15): the baseline of recovery's no-fault cost.
RECOVERY_BASE=0c33f5e

# The GPU machine has libblkid.so.1 but no header or blkid.pc: point pkg-config at the carried ones.
blkid_from_carry() {
  local d=$PWD/.device-carry/blkid
  pkg-config --exists blkid 2>/dev/null && return 0
  [ -f "$d/pkgconfig/blkid.pc" ] || { echo "no libblkid header here: run scripts/device_carry.sh and carry .device-carry" >&2; return 1; }
  sed -i "s#^prefix=.*#prefix=$d#" "$d/pkgconfig/blkid.pc"
  export PKG_CONFIG_PATH="$d/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
}

# The calibration probe's source: shared/ where the checkout has one, else the carried copy.
probe_source() {
  local src
  for src in shared/calibration/warp_queue_probe.cu "${PROBE_SRC:-}" .device-carry/warp_queue_probe.cu; do
    [ -n "$src" ] && [ -f "$src" ] && { echo "$src"; return 0; }
  done
  echo "no calibration probe source (shared/calibration/warp_queue_probe.cu): run scripts/device_carry.sh and carry .device-carry" >&2
  return 1
}

#!/usr/bin/env bash
# 4 KiB random-read efficiency on modeled drives (docs/drives.md): bench/nvme_perf on 1, 2 and 4
# emulated drives of each profile, CPU and GPU path, 2 s a point; appends one JSON line per point to
# OUT (default drive_eff.jsonl), then prints docs/performance.md's table of it: achieved IOPS against
# the modeled limit (n x the profile's IOPS cap, which binds before its bandwidth at 4 KiB) and the
# host CPU of each path. About 80 s on a 16-core machine.
#   usage: scripts/drive_efficiency.sh [OUT.jsonl]
#   environment: NVME_PERF=path/to/nvme_perf  PATHS="cpu gpu"  PROFILES="sn530 pcie4 pcie5"  DRIVES="1 2 4"
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
B=${NVME_PERF:-$here/build/bench/nvme_perf}
out=${1:-drive_eff.jsonl}
paths=${PATHS:-cpu gpu}
[ -x "$B" ] || { echo "drive_efficiency: $B not found; build it (ninja -C build bench/nvme_perf) or set NVME_PERF" >&2; exit 2; }
if [ -z "${PATHS:-}" ] && ! "$B" --gpu-check >/dev/null 2>&1; then paths=cpu; echo "drive_efficiency: no usable GPU path here; CPU path only"; fi
fails=0
for p in ${PROFILES:-sn530 pcie4 pcie5}; do
  for n in ${DRIVES:-1 2 4}; do
    devs=()
    for i in $(seq "$n"); do devs+=(--device "emu:ram,size=2G,drive=$p,threads=4,queues=8"); done
    for path in $paths; do
      q=4; [ "$path" = cpu ] && [ "$n" -eq 4 ] && q=2  # 4 drives x 4 emulator threads already fill 16 cores
      if ! timeout 60 "$B" "${devs[@]}" --path "$path" --bs 4K --qd 64 --queues $q --rw randread --time 2 --span 1G \
           --fill --json --label "eff $p x$n $path" >> "$out"; then
        echo "drive_efficiency: $p x$n $path failed" >&2; fails=$((fails + 1))
      fi
    done
  done
done
# The table docs/performance.md shows (scripts/perf_tables.py: the caps from host/emulator/drive_profiles.cpp).
python3 - "$out" "$here" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(sys.argv[2], "scripts"))
import perf_tables
out = os.path.abspath(sys.argv[1])
print("\n".join(perf_tables.markdown(*perf_tables.drive_eff([{"files": [os.path.basename(out)]}], os.path.dirname(out), sys.argv[2]))))
PY
exit $((fails > 0))

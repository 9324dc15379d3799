#!/usr/bin/env bash
# 4 KiB random-read efficiency on modeled drives (docs/drives.md): bench/nvme_perf on 1, 2 and 4
# emulated drives of each profile, CPU and GPU path, 2 s a point; prints achieved IOPS against the
# modeled limit (n x the profile's IOPS cap, which binds before its bandwidth at 4 KiB) and appends
# one JSON line per point to OUT (default drive_eff.jsonl). About 80 s on a 16-core machine.
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
python3 - "$out" <<'PY'
import json, sys
lim = {"sn530": 370e3, "pcie4": 1.2e6, "pcie5": 1.85e6}  # host/emulator/drive_profiles.cpp
for line in open(sys.argv[1]):
    d = json.loads(line)
    parts = d.get("label", "").split()
    if len(parts) != 4 or parts[0] != "eff":
        continue
    _, p, x, path = parts
    n = int(x[1:])
    print(f"{p:6} x{n} {path}: {d['iops']/1e3:8.1f} k IOPS  limit {n*lim[p]/1e3:7.0f} k  eff {100*d['iops']/(n*lim[p]):5.1f}%"
          f"  p50 {d['lat_us']['p50']:.1f} us  p99 {d['lat_us']['p99']:.1f} us  host cpu {d['host_cpu_seconds']:.2f} s")
PY
exit $((fails > 0))

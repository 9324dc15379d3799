#!/usr/bin/env bash
# Sweeps bench/nvme_perf and appends one JSON line per point to a file, for scripts/plot_perf.py:
#   1. IOPS vs queue depth: 4K randread at QD 1..256
#   2. bandwidth vs block size: sequential read, 4K..2M at QD $BS_QD
# for the CPU path and, where a GPU is present (nvme_perf --gpu-check), the GPU path.
# Before the sweep, each path runs a self-check (CHECK=1, default): mixed random reads and writes
# with --verify (every read's block stamps compared), a --count run and, with one device, the same
# workload on two devices at once; they are labelled "check" and reported PASS/FAIL.
# The first line appended is a "sweep" record (machine, device, settings); plot_perf.py plots the
# points after the last such record. A point that fails is reported on stderr and skipped.
#
# usage: scripts/perf_sweep.sh [OUT.jsonl]          (default: perf_sweep.jsonl)
# Settings (environment):
#   NVME_PERF  the binary (default: build/bench/nvme_perf, else build-perf/bench/nvme_perf)
#   DEVICE     device string (default emu:ram,size=4G,threads=8,poll=spin). On emu: without mdts= or
#              drive=, ",mdts=9" is added so that one command can carry 2M.
#   TIME       seconds per point (default 1); 19 points x 2 paths x (TIME + ~1 s set-up and fill):
#              about 80 s at TIME=1 on a 16-core machine
#   QDS        queue depths (default "1 2 4 8 16 32 64 128 256")
#   BSS        block sizes (default "4K 8K 16K 32K 64K 128K 256K 512K 1M 2M")
#   BS_QD      queue depth of the block-size sweep (default 32)
#   QUEUES     I/O queues per device (default 1)
#   SPAN       bytes addressed (default 1G; empty: the whole namespace)
#   FILL       1: --fill before every point (default: 1 on emu:, 0 elsewhere: reads of never-written
#              emulator RAM would all hit the shared zero page)
#   PATHS      "cpu gpu" / "cpu" / "gpu" (default: cpu, plus gpu when nvme_perf --gpu-check passes)
#   MACHINE    free text for the plots' titles (default: core count, CPU model, GPU name)
#   EXTRA      more nvme_perf options, e.g. "--allow-write" (not needed for reads)
#   CHECK      1: self-checks first (default 1 on emu:, 0 elsewhere: they write)
set -uo pipefail

OUT=${1:-perf_sweep.jsonl}
here=$(cd "$(dirname "$0")/.." && pwd)
NVME_PERF=${NVME_PERF:-}
if [ -z "$NVME_PERF" ]; then
  for c in "$here/build/bench/nvme_perf" "$here/build-perf/bench/nvme_perf"; do
    [ -x "$c" ] && { NVME_PERF=$c; break; }
  done
fi
if [ -z "$NVME_PERF" ] || [ ! -x "$NVME_PERF" ]; then
  echo "perf_sweep: nvme_perf not found; build it (ninja -C build bench/nvme_perf) or set NVME_PERF" >&2
  exit 2
fi
DEVICE=${DEVICE:-emu:ram,size=4G,threads=8,poll=spin}
TIME=${TIME:-1}
QDS=${QDS:-1 2 4 8 16 32 64 128 256}
BSS=${BSS:-4K 8K 16K 32K 64K 128K 256K 512K 1M 2M}
BS_QD=${BS_QD:-32}
QUEUES=${QUEUES:-1}
SPAN=${SPAN-1G}
EXTRA=${EXTRA:-}
case "$DEVICE" in
  emu:*)
    FILL=${FILL:-1}
    CHECK=${CHECK:-1}
    case ",$DEVICE," in *,mdts=*|*,drive=*) ;; *) DEVICE="$DEVICE,mdts=9" ;; esac ;;
  *) FILL=${FILL:-0}; CHECK=${CHECK:-0} ;;
esac
if [ -z "${PATHS:-}" ]; then
  PATHS=cpu
  if gpu_msg=$("$NVME_PERF" --gpu-check 2>&1); then PATHS="cpu gpu"; fi
  echo "perf_sweep: ${gpu_msg:-}" >&2
fi
if [ -z "${MACHINE:-}" ]; then
  cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  MACHINE="$(nproc) cores, ${cpu_model:-unknown CPU}, ${gpu_name:-no GPU}"
fi
json_escape() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
rev=${GIT_REV:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}  # GIT_REV: when the tree is a snapshot
common=(--device "$DEVICE" --json)
[ -n "$SPAN" ] && common+=(--span "$SPAN")
[ "$FILL" = 1 ] && common+=(--fill)
# shellcheck disable=SC2206
[ -n "$EXTRA" ] && common+=($EXTRA)

printf '{"sweep":"nvme_perf","date":"%s","host":"%s","machine":"%s","git":"%s","device":"%s","time_s":%s,"queues":%s,"span":"%s","fill":%s,"bs_qd":%s,"paths":"%s","command":"%s"}\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(json_escape "$(hostname)")" "$(json_escape "$MACHINE")" "$rev" \
  "$(json_escape "$DEVICE")" "$TIME" "$QUEUES" "$SPAN" "$([ "$FILL" = 1 ] && echo true || echo false)" "$BS_QD" \
  "$PATHS" "$(json_escape "$NVME_PERF ${common[*]} --time $TIME")" >> "$OUT"

limit=$(awk -v t="$TIME" 'BEGIN { printf "%d", t + 120 }')
failures=0
point() {  # label, then nvme_perf options
  local label=$1; shift
  local line err rc
  err=$(mktemp)
  local queues=(--queues "$QUEUES")  # unless the point sets its own (nvme_perf refuses an option given twice)
  case " $* " in *" --queues "*) queues=() ;; esac
  local timing=(--time "$TIME")  # unless the point stops by count (nvme_perf refuses both)
  case " $* " in *" --count "*) timing=() ;; esac
  line=$(timeout "$limit" "$NVME_PERF" "${common[@]}" "${queues[@]}" "${timing[@]}" "$@" --label "$label" 2>"$err")
  rc=$?
  if [ -n "$line" ] && [ "${line:0:1}" = "{" ]; then
    echo "$line" >> "$OUT"
    local iops gbps p99
    iops=$(grep -o '"iops":[0-9.]*' <<<"$line" | head -1 | cut -d: -f2)
    gbps=$(grep -o '"gbps":[0-9.]*' <<<"$line" | head -1 | cut -d: -f2)
    p99=$(grep -o '"p99":[0-9.]*' <<<"$line" | head -1 | cut -d: -f2)
    printf 'perf_sweep: %-22s %12s IOPS %9s GB/s  p99 %s us%s\n' "$label" "$iops" "$gbps" "$p99" \
      "$([ $rc -ne 0 ] && echo "  (exit $rc: errors, see JSON)")" >&2
  else
    echo "perf_sweep: $label FAILED (exit $rc): $(tail -3 "$err" | tr '\n' ' ')" >&2
  fi
  [ $rc -ne 0 ] && failures=$((failures + 1))
  rm -f "$err"
}

start=$(date +%s)
if [ "$CHECK" = 1 ]; then
  for path in $PATHS; do
    before=$failures
    point "check $path randrw verify" --path "$path" --rw randrw --mix 70 --bs 16K --qd 32 --queues 2 --verify
    point "check $path count" --path "$path" --rw randread --bs 4K --qd 64 --count 200000
    point "check $path 2 devices" --path "$path" --rw randread --bs 4K --qd 32 --device "$DEVICE"
    if [ $failures -eq $before ]; then echo "perf_sweep: self-check $path: PASS" >&2
    else echo "perf_sweep: self-check $path: FAIL ($((failures - before)) of 3; see above and the JSON)" >&2; fi
  done
fi
for path in $PATHS; do
  for qd in $QDS; do point "qd-sweep $path randread 4K qd $qd" --path "$path" --rw randread --bs 4K --qd "$qd"; done
  for bs in $BSS; do point "bs-sweep $path read $bs qd $BS_QD" --path "$path" --rw read --bs "$bs" --qd "$BS_QD"; done
done
echo "perf_sweep: done in $(( $(date +%s) - start )) s, $failures failed point(s); appended to $OUT" >&2
echo "perf_sweep: plot with: python3 scripts/plot_perf.py $OUT" >&2
[ $failures -eq 0 ]

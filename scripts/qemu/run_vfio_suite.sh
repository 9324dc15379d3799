#!/usr/bin/env bash
# The VFIO stage of CI: boots a small Linux guest under QEMU (TCG, q35, virtual Intel IOMMU) once
# per NVMe configuration, binds QEMU's NVMe controller to vfio-pci inside it, and runs our
# integration suite (tests/vfio/guest_suite.cpp) through VFIO. Results come back on the serial console.
#
#   scripts/qemu/run_vfio_suite.sh [--only NAME[,NAME]] [--jobs N] [--timeout S] [--binaries DIR] [--list]
#     --only      run these configurations (see --list); --jobs: guests at once (default 2 on >= 2 cores)
#     --timeout   seconds one guest may run before QEMU is killed (default 150)
#     --binaries  use prebuilt static gpunvme_vfio_probe / gpunvme_vfio_suite from DIR
#
# Idempotent: the guest kernel is cached under build-qemu-vfio/ (or $GPUNVME_QEMU_DIR).
# Ends with "N passed, N failed" (N = configurations); exit 0 only if every guest ran its whole suite
# and every test passed.  Serial logs: build-qemu-vfio/logs/<config>.log.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${GPUNVME_QEMU_DIR:-$repo/build-qemu-vfio}
only=""
jobs=$(( $(nproc) >= 2 ? 2 : 1 ))
boot_timeout=150
binaries=()
list=0

# name | nvme device properties | extra kernel command line | suite arguments (commas for spaces)
# Each configuration gets disk images nsN.img (64 MiB, sparse) created fresh.
configs=(
  "default||gpunvme.setup_test=1|--expect-mdts,7"
  "mdts3|mdts=3||--expect-mdts,3"
  "ioqpairs4|max_ioqpairs=4||--expect-queues,4"
  "lba4096|@lba4096||--expect-lba,4096"
  "two-namespaces|@twons||--expect-namespaces,2"
  "cmb16|cmb_size_mb=16||--expect-cmb,16"
  "mdts0|mdts=0||--expect-mdts,0"
)

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --timeout) boot_timeout=$2; shift 2 ;;
    --binaries) binaries=(--binaries "$2"); shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_vfio_suite.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
if [[ $list -eq 1 ]]; then for c in "${configs[@]}"; do echo "${c%%|*}"; done; exit 0; fi

t_start=$(date +%s.%N)
if ! paths=$("$repo/scripts/qemu/build_guest.sh" --out "$out" "${binaries[@]}"); then
  echo "run_vfio_suite.sh: building the guest failed (see above); no configuration ran"
  echo "0 passed, ${#configs[@]} failed"
  exit 1
fi
kernel=$(sed -n 's/^KERNEL=//p' <<<"$paths")
initrd=$(sed -n 's/^INITRD=//p' <<<"$paths")
t_built=$(date +%s.%N)
mkdir -p "$out/logs" "$out/disks"

run_config() {
  local name=$1 props=$2 extra=$3 args=$4
  local dir=$out/disks/$name log=$out/logs/$name.log
  rm -rf "$dir" && mkdir -p "$dir"
  local nvme="nvme,serial=gpunvme-$name,id=nvme0"
  local -a q=(-drive "file=$dir/ns1.img,if=none,id=ns1,format=raw")
  truncate -s 64M "$dir/ns1.img"
  case $props in
    @lba4096)
      q+=(-device "$nvme" -device "nvme-ns,drive=ns1,bus=nvme0,nsid=1,logical_block_size=4096,physical_block_size=4096")
      ;;
    @twons)
      truncate -s 64M "$dir/ns2.img"
      q+=(-drive "file=$dir/ns2.img,if=none,id=ns2,format=raw"
          -device "$nvme" -device "nvme-ns,drive=ns1,bus=nvme0,nsid=1" -device "nvme-ns,drive=ns2,bus=nvme0,nsid=2")
      ;;
    *)
      q+=(-device "$nvme,drive=ns1${props:+,$props}")
      ;;
  esac
  local t0 rc=0
  t0=$EPOCHREALTIME
  # The serial console, with host-side timestamps of the guest's milestones (guest uptime is not
  # trustworthy under TCG on a loaded machine: its clock calibration drifts).
  set +e
  timeout --kill-after=5 "$boot_timeout" qemu-system-x86_64 \
    -machine q35,kernel-irqchip=split -accel tcg -cpu max -smp 1 -m 768M \
    -nographic -no-reboot -nodefaults -serial stdio -monitor none \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 intel_iommu=on iommu=nopt quiet loglevel=4 panic=-1 gpunvme.config=$name gpunvme.args=$args $extra" \
    -device intel-iommu,intremap=on,caching-mode=on \
    "${q[@]}" </dev/null 2>&1 |
    while IFS= read -r line; do
      line=${line//$'\r'/}
      printf '%s\n' "$line"
      case $line in
        *"GPUNVME-GUEST uptime-init"*) echo "GPUNVME-HOST init_s=$(elapsed "$t0")" ;;
        *"GPUNVME-GUEST uptime-bound"*) echo "GPUNVME-HOST bound_s=$(elapsed "$t0")" ;;
      esac
    done >"$log"
  rc=${PIPESTATUS[0]}
  set -e
  echo "GPUNVME-HOST qemu_rc=$rc wall_s=$(elapsed "$t0")" >> "$log"
}
elapsed() { local now=$EPOCHREALTIME; awk -v a="$1" -v b="$now" 'BEGIN {printf "%.1f", b - a}'; }

selected=()
for c in "${configs[@]}"; do
  name=${c%%|*}
  if [[ -z $only || ",$only," == *",$name,"* ]]; then selected+=("$c"); fi
done
[[ ${#selected[@]} -gt 0 ]] || { echo "run_vfio_suite.sh: no configuration matches --only '$only' (see --list)" >&2; exit 2; }

echo "== VFIO suite under QEMU: ${#selected[@]} configurations, kernel $(basename "$kernel"), jobs $jobs"
pids=()
for c in "${selected[@]}"; do
  IFS='|' read -r name props extra args <<<"$c"
  run_config "$name" "$props" "$extra" "$args" &
  pids+=($!)
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
done
wait || true

pass=0; fail=0
printf '\n%-16s %-6s %-6s %-8s %-6s %-7s %-7s %-7s %-8s %-8s %s\n' config result probe setup passed failed skipped boot_s bound_s total_s note
for c in "${selected[@]}"; do
  name=${c%%|*}
  log=$out/logs/$name.log
  res=$(grep -a '^GPUNVME-RESULT' "$log" | tail -n1 || true)
  field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<" $res"; }
  boot=$(sed -n 's/^GPUNVME-HOST init_s=//p' "$log" | tail -n1)
  ready=$(sed -n 's/^GPUNVME-HOST bound_s=//p' "$log" | tail -n1)
  wall=$(sed -n 's/.*wall_s=\([0-9.]*\).*/\1/p' "$log" | tail -n1)
  qrc=$(sed -n 's/.*qemu_rc=\([0-9]*\).*/\1/p' "$log" | tail -n1)
  note=""
  if [[ -z $res ]]; then
    note="no result line (qemu rc $qrc$([[ $qrc == 124 || $qrc == 137 ]] && echo ', timed out'))"
    verdict=FAIL
  elif [[ $(field setup) == fail ]]; then
    verdict=FAIL
    note="scripts/setup_vfio.sh checks failed (GPUNVME-GUEST setup lines)"
  elif [[ $(field suite_rc) == 0 && $(field probe) == ok && $(field cases_failed) == 0 ]]; then
    verdict=PASS
  else
    verdict=FAIL
    note="suite rc $(field suite_rc)"
  fi
  printf '%-16s %-6s %-6s %-8s %-6s %-7s %-7s %-7s %-8s %-8s %s\n' "$name" "$verdict" "$(field probe)" "$(field setup)" \
    "$(field cases_passed)" "$(field cases_failed)" "$(field cases_skipped)" "${boot:--}" "${ready:--}" "${wall:--}" "$note"
  if [[ $verdict == PASS ]]; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    echo "---- $name: last 40 lines of $log"
    tail -n 40 "$log" | sed 's/^/    /'
  fi
done
t_end=$(date +%s.%N)
echo
echo "Seconds since QEMU started: boot_s when /init ran, bound_s when the NVMe function sat on vfio-pci"
echo "(default runs the setup_vfio.sh checks before binding), total_s at power-off."
awk -v a="$t_start" -v b="$t_built" -v c="$t_end" 'BEGIN {printf "build %.1f s, boots+suites %.1f s\n", b - a, c - b}'
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]

#!/usr/bin/env bash
# Hands NVMe drives to gpunvme (vfio-pci) and back to the kernel, and reserves hugepages.
set -euo pipefail

SYS=${GPUNVME_SYSFS:-/sys}
NVME_CLASS=0x010802
prog=$(basename "$0")

usage() {
  cat <<EOF
Usage: $prog COMMAND [ARGS]

gpunvme drives an NVMe controller from user space through VFIO: the kernel's nvme driver must let go
of the device and vfio-pci must hold it. While it does, the drive's namespaces (/dev/nvmeXnY) are
gone from the system, so never bind the drive your system boots from or anything mounted.

Commands:
  status            List NVMe controllers: PCI address (BDF), driver, IOMMU group, model, and what
                    is mounted from each namespace or partition; hugepages per size and NUMA node;
                    whether the IOMMU and vfio-pci are ready.
  bind BDF [--force] [--user USER]
                    Give the controller at BDF (e.g. 0000:0b:00.0) to vfio-pci, through the
                    device's driver_override. Refuses if a filesystem on it is mounted, it holds
                    swap or a device-mapper/md volume, or it holds the root filesystem, unless
                    --force. --user chowns /dev/vfio/GROUP so USER can run gpunvme without root
                    (that user still needs a large enough 'ulimit -l' to pin DMA memory).
  unbind BDF        Give the controller back to the kernel's nvme driver (/dev/nvmeX returns).
  hugepages N [--size 2M|1G] [--node NODE]
                    Reserve N hugepages (default 2 MiB, all nodes evenly, or one NUMA node).
                    Needed for no-IOMMU mode; speeds up DMA buffers in any mode.
  -h, --help        This text.

Every command is idempotent: binding a bound device or reserving what is reserved does nothing.
bind, unbind and hugepages need root.

Requirements: an IOMMU (Intel VT-d / AMD-Vi enabled in the firmware; on Intel boot with
intel_iommu=on), and the vfio-pci module (this script loads it). Check with: $prog status,
and everything gpunvme needs (memlock, IOMMU group, GPU) with: build/gpunvme doctor --device vfio:BDF
Step by step from a fresh machine: docs/hardware.md

Examples:
  sudo $prog status
  sudo $prog bind 0000:0b:00.0
  build/gpunvme doctor --device vfio:0000:0b:00.0
  build/gpunvme identify --device vfio:0000:0b:00.0
  sudo $prog unbind 0000:0b:00.0
EOF
}

die() { echo "$prog: error: $*" >&2; exit 1; }
note() { echo "$prog: $*"; }
need_root() { [[ $(id -u) -eq 0 ]] || die "'$1' changes kernel state: run it as root (sudo $prog $*)"; }

dev_dir() { echo "$SYS/bus/pci/devices/$1"; }
driver_of() { local l; l=$(readlink "$(dev_dir "$1")/driver" 2>/dev/null) && basename "$l" || echo "-"; }
group_of() { local l; l=$(readlink "$(dev_dir "$1")/iommu_group" 2>/dev/null) && basename "$l" || echo "-"; }

normalize_bdf() {
  local b=${1,,}
  [[ $b =~ ^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]] && b="0000:$b"
  [[ $b =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]] || die "'$1' is not a PCI address like 0000:0b:00.0 (see: $prog status)"
  [[ -d $(dev_dir "$b") ]] || die "no PCI device $b (see: $prog status)"
  echo "$b"
}

nvme_bdfs() {
  local d
  for d in "$SYS"/bus/pci/devices/*; do
    [[ -f $d/class && $(cat "$d/class") == "$NVME_CLASS" ]] && basename "$d"
  done
  return 0
}

model_of() {
  local b=$1 m
  for m in "$(dev_dir "$b")"/nvme/nvme*/model; do
    [[ -f $m ]] && { sed 's/ *$//' "$m"; return; }
  done
  echo "$(cat "$(dev_dir "$b")/vendor"):$(cat "$(dev_dir "$b")/device") (model unknown while not on nvme)"
}

# Block devices (namespaces and partitions) of a controller bound to the nvme driver.
block_devs_of() {
  local b=$1 c n p
  for c in "$(dev_dir "$b")"/nvme/nvme*; do
    [[ -d $c ]] || continue
    for n in "$c"/nvme*n*; do
      [[ -d $n/queue ]] || continue   # namespaces have a queue dir; skip stray entries
      echo "$(basename "$n")"
      for p in "$n"/"$(basename "$n")"p*; do [[ -d $p ]] && basename "$p"; done
    done
  done
  # Native multipath puts the namespaces under /sys/block/nvmeXcYnZ -> nvmeXnZ; cover those by name.
  return 0
}

# What uses a block device: mount points, swap, holders (dm, md). One line each.
uses_of() {
  local dev=$1 mp
  while read -r src mp _; do
    [[ $src == "/dev/$dev" ]] && echo "mounted on $(printf '%b' "$mp")"
  done < /proc/mounts
  if [[ -r /proc/swaps ]] && grep -q "^/dev/$dev " /proc/swaps; then echo "swap"; fi
  local h
  for h in "$SYS"/class/block/"$dev"/holders/*; do [[ -e $h ]] && echo "held by $(basename "$h")"; done
  return 0
}

root_dev() {
  # The block device holding /, by major:minor, through sysfs (works for partitions; dm/md show as holders).
  local mm
  mm=$(awk '$5 == "/" {print $3}' /proc/self/mountinfo 2>/dev/null | tail -n1)
  [[ -n $mm && -e $SYS/dev/block/$mm ]] && basename "$(readlink -f "$SYS/dev/block/$mm")"
  return 0
}

cmd_status() {
  echo "NVMe controllers (PCI class $NVME_CLASS):"
  local any=0 b rdev
  rdev=$(root_dev)
  printf '  %-13s %-9s %-6s %s\n' BDF DRIVER GROUP MODEL
  for b in $(nvme_bdfs); do
    any=1
    printf '  %-13s %-9s %-6s %s\n' "$b" "$(driver_of "$b")" "$(group_of "$b")" "$(model_of "$b")"
    local dev u
    for dev in $(block_devs_of "$b"); do
      u=$(uses_of "$dev" | paste -sd, - | sed 's/,/, /g')
      [[ -n $rdev && ($dev == "$rdev" || $rdev == "$dev"p*) ]] && u="${u:+$u, }ROOT FILESYSTEM"
      printf '      /dev/%-14s %s\n' "$dev" "${u:-not in use}"
    done
    if [[ $(driver_of "$b") == vfio-pci ]]; then
      local g; g=$(group_of "$b")
      printf '      /dev/vfio/%s %s -> gpunvme device string vfio:%s\n' "$g" \
        "$([[ -e /dev/vfio/$g ]] && stat -c '(owner %U)' "/dev/vfio/$g" || echo '(missing)')" "$b"
    fi
  done
  [[ $any -eq 1 ]] || echo "  none found"
  echo
  echo "IOMMU / VFIO:"
  if [[ -n $(ls -A "$SYS/kernel/iommu_groups" 2>/dev/null) ]]; then
    echo "  IOMMU on ($(ls "$SYS/kernel/iommu_groups" | wc -l) groups)"
  elif [[ -e /dev/vfio/vfio ]] && grep -qs Y "$SYS/module/vfio/parameters/enable_unsafe_noiommu_mode"; then
    echo "  IOMMU off, VFIO no-IOMMU mode enabled (unsafe: DMA by physical address, hugepages required)"
  else
    echo "  IOMMU off: enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD)"
  fi
  if [[ -d $SYS/module/vfio_pci ]]; then echo "  vfio-pci loaded"; else echo "  vfio-pci not loaded (bind loads it)"; fi
  echo "  locked-memory limit (ulimit -l) of this shell: $(ulimit -l)"
  echo
  echo "Hugepages:"
  local h size
  for h in "$SYS"/kernel/mm/hugepages/hugepages-*; do
    [[ -d $h ]] || continue
    size=${h##*hugepages-}
    printf '  %-10s total %-6s free %-6s' "$size" "$(cat "$h/nr_hugepages")" "$(cat "$h/free_hugepages")"
    local n per=""
    for n in "$SYS"/devices/system/node/node*; do
      [[ -f $n/hugepages/hugepages-$size/nr_hugepages ]] &&
        per+=" $(basename "$n")=$(cat "$n/hugepages/hugepages-$size/nr_hugepages")"
    done
    echo "${per:+  per node:$per}"
  done
}

cmd_bind() {
  local b="" force=0 user=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --force) force=1; shift ;;
      --user) user=${2:?--user needs a name}; shift 2 ;;
      -*) die "bind: unknown option '$1'" ;;
      *) [[ -z $b ]] || die "bind takes one BDF"; b=$1; shift ;;
    esac
  done
  [[ -n $b ]] || die "bind needs a PCI address: $prog bind 0000:0b:00.0 (see: $prog status)"
  b=$(normalize_bdf "$b")
  need_root bind "$b"
  local d cls drv
  d=$(dev_dir "$b")
  cls=$(cat "$d/class")
  [[ $cls == "$NVME_CLASS" || $force -eq 1 ]] || die "$b is PCI class $cls, not an NVMe controller ($NVME_CLASS); --force binds it anyway"
  drv=$(driver_of "$b")
  if [[ $drv == vfio-pci ]]; then
    note "$b is already bound to vfio-pci (group $(group_of "$b")): nothing to do"
    [[ -n $user ]] && chown "$user" "/dev/vfio/$(group_of "$b")"
    return 0
  fi
  if [[ $(group_of "$b") == "-" ]] && ! grep -qs Y "$SYS/module/vfio/parameters/enable_unsafe_noiommu_mode"; then
    die "$b has no IOMMU group: the IOMMU is off. Enable VT-d / AMD-Vi in the firmware and boot with intel_iommu=on (Intel), then check 'dmesg | grep -e DMAR -e IOMMU'"
  fi
  # Anything in use on it?
  local dev uses="" rdev
  rdev=$(root_dev)
  for dev in $(block_devs_of "$b"); do
    local u; u=$(uses_of "$dev" | paste -sd, - | sed 's/,/, /g')
    [[ -n $rdev && ($dev == "$rdev" || $rdev == "$dev"p*) ]] && u="${u:+$u, }holds the ROOT FILESYSTEM"
    [[ -n $u ]] && uses+="    /dev/$dev: $u"$'\n'
  done
  if [[ -n $uses ]]; then
    if [[ $force -eq 0 ]]; then
      printf '%s: refusing to bind %s, it is in use:\n%s' "$prog" "$b" "$uses" >&2
      echo "Unmount / swapoff / stop those first. --force binds anyway and the data in use is lost to the system." >&2
      exit 1
    fi
    printf '%s: --force: binding %s although it is in use:\n%s' "$prog" "$b" "$uses" >&2
  fi
  modprobe vfio-pci 2>/dev/null || [[ -d $SYS/bus/pci/drivers/vfio-pci ]] ||
    die "cannot load vfio-pci (modprobe vfio-pci failed): is this kernel built with CONFIG_VFIO_PCI?"
  echo vfio-pci > "$d/driver_override"
  if [[ $drv != "-" ]]; then echo "$b" > "$d/driver/unbind"; fi
  echo "$b" > "$SYS/bus/pci/drivers_probe" 2>/dev/null || true
  drv=$(driver_of "$b")
  [[ $drv == vfio-pci ]] || die "$b did not bind to vfio-pci (driver now: $drv); see dmesg | tail"
  local g; g=$(group_of "$b")
  # Other members of the group must be on vfio-pci or no driver for VFIO to accept the group.
  local m others=""
  for m in "$SYS"/kernel/iommu_groups/"$g"/devices/*; do
    [[ -e $m ]] || continue
    local mb md; mb=$(basename "$m"); md=$(driver_of "$mb")
    # pcieport (a bridge) manages no DMA and keeps the group usable, as gpunvme doctor judges it too
    [[ $mb == "$b" || $md == "-" || $md == vfio-pci || $md == pci-stub || $md == pcieport ]] || others+=" $mb($md)"
  done
  [[ -z $others ]] || note "warning: IOMMU group $g also holds devices on host drivers:$others; VFIO will refuse the group until they are unbound too"
  for _ in $(seq 50); do [[ -e /dev/vfio/$g || -e /dev/vfio/noiommu-$g ]] && break; sleep 0.1; done
  [[ -n $user ]] && chown "$user" "/dev/vfio/$g"
  note "$b bound to vfio-pci, IOMMU group $g (/dev/vfio/$g). Device string: vfio:$b"
}

cmd_unbind() {
  [[ $# -eq 1 ]] || die "unbind needs one PCI address: $prog unbind 0000:0b:00.0"
  local b; b=$(normalize_bdf "$1")
  need_root unbind "$b"
  local d drv
  d=$(dev_dir "$b")
  drv=$(driver_of "$b")
  if [[ $drv == nvme ]]; then
    [[ -z $(cat "$d/driver_override" 2>/dev/null | grep -v '(null)') ]] || echo > "$d/driver_override"
    note "$b is already on the nvme driver: nothing to do"
    return 0
  fi
  [[ $drv == "-" ]] || echo "$b" > "$d/driver/unbind"
  echo > "$d/driver_override"
  modprobe nvme 2>/dev/null || true
  echo "$b" > "$SYS/bus/pci/drivers_probe" 2>/dev/null || true
  drv=$(driver_of "$b")
  [[ $drv == nvme ]] || die "$b is now on driver '$drv', not nvme; see dmesg | tail (is the nvme module available?)"
  note "$b is back on the nvme driver"
}

cmd_hugepages() {
  local n="" size=2048kB node=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --size)
        case ${2:-} in 2M|2m|2048kB) size=2048kB ;; 1G|1g|1048576kB) size=1048576kB ;; *) die "--size is 2M or 1G" ;; esac
        shift 2 ;;
      --node) node=${2:?--node needs a number}; shift 2 ;;
      *) [[ $1 =~ ^[0-9]+$ ]] || die "hugepages needs a count: $prog hugepages 512"; n=$1; shift ;;
    esac
  done
  [[ -n $n ]] || die "hugepages needs a count: $prog hugepages 512"
  need_root hugepages "$n"
  local f
  if [[ -n $node ]]; then f=$SYS/devices/system/node/node$node/hugepages/hugepages-$size/nr_hugepages
  else f=$SYS/kernel/mm/hugepages/hugepages-$size/nr_hugepages; fi
  [[ -e $f ]] || die "no hugepages of size $size${node:+ on node $node} on this system ($f missing)"
  if [[ $(cat "$f") -eq $n ]]; then note "$n hugepages of $size${node:+ on node $node} already reserved"; return 0; fi
  echo "$n" > "$f"
  local got; got=$(cat "$f")
  if [[ $got -lt $n ]]; then
    die "asked for $n hugepages of $size, the kernel found memory for $got (fragmented memory: try at boot with hugepages=$n on the kernel command line)"
  fi
  note "$got hugepages of $size reserved${node:+ on node $node}"
}

[[ $# -ge 1 ]] || { usage; exit 2; }
cmd=$1; shift
case $cmd in
  status) cmd_status "$@" ;;
  bind) cmd_bind "$@" ;;
  unbind) cmd_unbind "$@" ;;
  hugepages) cmd_hugepages "$@" ;;
  -h|--help|help) usage ;;
  *) echo "$prog: unknown command '$cmd'" >&2; usage >&2; exit 2 ;;
esac

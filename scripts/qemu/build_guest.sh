#!/usr/bin/env bash
# Builds everything the QEMU VFIO stage boots: a Debian guest kernel (cached), an initramfs with
# busybox, the vfio modules, our statically linked test programs and an /init that binds QEMU's NVMe
# function to vfio-pci and runs them.  Idempotent: the kernel is fetched once; the binaries and the
# initramfs are rebuilt only when their inputs change (ninja and a checksum decide).
#
#   scripts/qemu/build_guest.sh [--out DIR] [--binaries DIR]
#     --out DIR        work directory (default: build-qemu-vfio, or $GPUNVME_QEMU_DIR)
#     --binaries DIR   use already built static gpunvme_vfio_probe / gpunvme_vfio_suite from DIR
#
# On a clean Debian 12 machine it installs qemu-system-x86, busybox-static and cpio with apt-get
# (as root) and fetches the kernel with `apt-get download` of what linux-image-amd64 depends on.
# Prints the paths of the kernel and initramfs on its last two lines (KERNEL=..., INITRD=...).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${GPUNVME_QEMU_DIR:-$repo/build-qemu-vfio}
binaries=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --binaries) binaries=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_guest.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "[build_guest] $*" >&2; }
die() { echo "[build_guest] error: $*" >&2; exit 1; }

# ---- 1. Host tools -------------------------------------------------------------------------------
need_pkgs=()
command -v qemu-system-x86_64 >/dev/null || need_pkgs+=(qemu-system-x86)
# The guest has no libc: busybox must be the static one (ldd fails on a static binary).
if [[ ! -x /bin/busybox ]] || ldd /bin/busybox >/dev/null 2>&1; then need_pkgs+=(busybox-static); fi
command -v cpio >/dev/null || need_pkgs+=(cpio)
if [[ ${#need_pkgs[@]} -gt 0 ]]; then
  [[ $(id -u) -eq 0 ]] || die "missing ${need_pkgs[*]}: run 'sudo apt-get install ${need_pkgs[*]}' (or run this as root)"
  log "installing ${need_pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2; }
fi

# ---- 2. Guest kernel (cached) ----------------------------------------------------------------------
kcache=$out/kernel
kpkg=${GPUNVME_GUEST_KERNEL_PKG:-}
if [[ -z $kpkg ]]; then
  # Reuse whatever is cached (no apt round trip on a warm cache); else ask apt for the current one.
  kpkg=$(ls -1 "$kcache" 2>/dev/null | grep -E '^linux-image-[0-9].*-amd64$' | sort -V | tail -n1 || true)
  if [[ -z $kpkg || ! -f $kcache/$kpkg/.unpacked ]]; then
    kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [[ -n $kpkg ]] || die "apt-cache cannot resolve linux-image-amd64 (run apt-get update; Debian 12 sources needed)"
  fi
fi
kdir=$kcache/$kpkg
if [[ ! -f $kdir/.unpacked ]]; then
  log "fetching guest kernel $kpkg"
  rm -rf "$kdir" && mkdir -p "$kdir/deb"
  (cd "$kdir/deb" && apt-get download "$kpkg" >&2) || die "apt-get download $kpkg failed (network to Debian's mirror?)"
  dpkg-deb -x "$kdir"/deb/*.deb "$kdir/root"
  rm -rf "$kdir/deb"
  touch "$kdir/.unpacked"
fi
vmlinuz=$(ls -1 "$kdir"/root/boot/vmlinuz-* | head -n1)
kver=${vmlinuz##*/vmlinuz-}
moddir=$kdir/root/lib/modules/$kver/kernel
[[ -f $vmlinuz && -d $moddir ]] || die "kernel package $kpkg has no vmlinuz or modules"

# ---- 3. Static test programs ---------------------------------------------------------------------
if [[ -z $binaries ]]; then
  sbuild=$out/static-build
  if [[ ! -f $sbuild/build.ninja ]]; then
    log "configuring the static build in $sbuild"
    meson setup "$sbuild" "$repo" -Dprefer_static=true -Dcpp_link_args=-static -Dcuda=disabled -Dnuma=disabled \
      -Dbench=false -Dfuzz=disabled -Dbuildtype=debugoptimized >&2
  fi
  log "building the static guest programs"
  ninja -C "$sbuild" tests/vfio/gpunvme_vfio_probe tests/vfio/gpunvme_vfio_suite >&2
  binaries=$sbuild/tests/vfio
fi
for b in gpunvme_vfio_probe gpunvme_vfio_suite; do
  [[ -x $binaries/$b ]] || die "$binaries/$b is missing"
  if ldd "$binaries/$b" >/dev/null 2>&1; then die "$binaries/$b is dynamically linked; the guest has no libc"; fi
done

# ---- 4. initramfs --------------------------------------------------------------------------------
stage=$out/initramfs.d
rm -rf "$stage"
mkdir -p "$stage"/{bin,sbin,proc,sys,dev,tmp,run,modules}
cp /bin/busybox "$stage/bin/busybox"
ln -s busybox "$stage/bin/sh"
# Kernel modules with their dependencies first (read from each module's .modinfo "depends=";
# no depmod needed). Two load lists: vfio (always) and the kernel's nvme driver plus a small
# filesystem (for the setup_vfio.sh test, loaded only when the guest is asked to run it).
declare -A modpath=()
while IFS= read -r f; do
  n=$(basename "$f"); n=${n%%.ko*}; modpath[${n//-/_}]=$f
done < <(find "$moddir" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
mod_bytes() {  # print the plain .ko
  case $1 in *.xz) xz -dc "$1" ;; *.zst) zstd -qdc "$1" ;; *) cat "$1" ;; esac
}
declare -A loaded=()
add_module() {  # add_module NAME LISTFILE: dependencies first, each once
  local n=${1//-/_} f deps d
  [[ -n ${loaded[$n]:-} ]] && return 0
  f=${modpath[$n]:-}
  if [[ -z $f ]]; then log "note: module $1 not in $kpkg (built in?)"; loaded[$n]=1; return 0; fi
  deps=$(mod_bytes "$f" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -n1 | tr ',' ' ')
  for d in $deps; do add_module "$d" "$2"; done
  loaded[$n]=1
  mod_bytes "$f" > "$stage/modules/$n.ko"
  echo "$n.ko" >> "$2"
}
: > "$stage/modules/order"
for m in vfio vfio_iommu_type1 vfio_virqfd irqbypass vfio_pci_core vfio_pci; do add_module "$m" "$stage/modules/order"; done
: > "$stage/modules/order-nvme"
for m in nvme nls_cp437 msdos; do add_module "$m" "$stage/modules/order-nvme"; done
# bash and its libraries, for scripts/setup_vfio.sh (a bash script) inside the guest.
if command -v bash >/dev/null; then
  bash_bin=$(command -v bash)
  mkdir -p "$stage/usr/bin"
  cp "$bash_bin" "$stage/usr/bin/bash"
  for lib in $(ldd "$bash_bin" | grep -o '/[^ ]*'); do
    mkdir -p "$stage$(dirname "$lib")"
    cp -L "$lib" "$stage$lib"
  done
  cp "$repo/scripts/setup_vfio.sh" "$stage/bin/setup_vfio.sh"
fi
# Without debug info: half the initramfs otherwise, and unpacking it is part of every boot.
for b in gpunvme_vfio_probe gpunvme_vfio_suite; do
  strip --strip-debug -o "$stage/bin/$b" "$binaries/$b" 2>/dev/null || cp "$binaries/$b" "$stage/bin/$b"
done
cp "$repo/scripts/qemu/guest_init.sh" "$stage/init"
chmod +x "$stage/init"
echo "$kpkg" > "$stage/kernel-package"

initrd=$out/initrd.gz
(cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet --reproducible 2>/dev/null ||
   find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -1 > "$initrd.tmp"
mv "$initrd.tmp" "$initrd"
log "initramfs $(du -h "$initrd" | cut -f1), kernel $kver"
echo "KERNEL=$vmlinuz"
echo "INITRD=$initrd"

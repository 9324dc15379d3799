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
# Load order matters: each module needs the ones before it.
modules=(drivers/vfio/vfio.ko drivers/vfio/vfio_iommu_type1.ko drivers/vfio/vfio_virqfd.ko virt/lib/irqbypass.ko
         drivers/vfio/pci/vfio-pci-core.ko drivers/vfio/pci/vfio-pci.ko)
: > "$stage/modules/order"
for m in "${modules[@]}"; do
  src=$moddir/$m
  name=$(basename "$m")
  if [[ -f $src ]]; then cp "$src" "$stage/modules/$name"
  elif [[ -f $src.xz ]]; then xz -dc "$src.xz" > "$stage/modules/$name"
  elif [[ -f $src.zst ]]; then zstd -qdc "$src.zst" > "$stage/modules/$name"
  else
    # Built in, or missing: say which (some kernels build vfio in; that is fine).
    log "note: $m not in $kpkg (built in?)"; continue
  fi
  echo "$name" >> "$stage/modules/order"
done
cp "$binaries/gpunvme_vfio_probe" "$binaries/gpunvme_vfio_suite" "$stage/bin/"
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

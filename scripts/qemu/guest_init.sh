#!/bin/sh
# /init of the QEMU VFIO guest (busybox sh). Loads vfio, binds every NVMe function (PCI class 0x010802)
# to vfio-pci, runs the probe and the integration suite on the first one, prints lines the host
# parses, and powers off.  Kernel command line:
#   gpunvme.config=NAME        label echoed in the result line
#   gpunvme.args=A,B,C         extra suite arguments, commas for spaces (e.g. --expect-mdts,3)
#   gpunvme.filter=SPEC        Catch2 test spec (commas kept), default: every test
#   gpunvme.setup_test=1       first hand the function to the kernel's nvme driver and check
#                              scripts/setup_vfio.sh status / bind (refused while mounted) / unbind
# Result line:  GPUNVME-RESULT config=NAME probe=ok|fail suite_rc=N cases_passed=N cases_failed=N
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp

up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "GPUNVME-GUEST $*"; }
finish() {
  say "uptime-end $(up)"
  echo "GPUNVME-RESULT $*"
  sync
  poweroff -f
  sleep 5
}

say "uptime-init $(up)"
config=unnamed
setup_test=0
setup=skipped
args=""
filter=""
for w in $(cat /proc/cmdline); do
  case $w in
    gpunvme.config=*) config=${w#gpunvme.config=} ;;
    gpunvme.args=*) args=$(echo "${w#gpunvme.args=}" | tr ',' ' ') ;;
    gpunvme.filter=*) filter=${w#gpunvme.filter=} ;;
    gpunvme.setup_test=1) setup_test=1 ;;
  esac
done

for m in $(cat /modules/order); do
  insmod /modules/$m || say "insmod $m failed"
done

nvme_bdfs() {
  for d in /sys/bus/pci/devices/*; do [ "$(cat $d/class)" = "0x010802" ] && echo ${d##*/}; done
}
bdf=$(nvme_bdfs | head -n1)
if [ -z "$bdf" ]; then
  finish "config=$config probe=fail suite_rc=99 cases_passed=0 cases_failed=0 reason=no-nvme-function"
fi

# scripts/setup_vfio.sh against the kernel's nvme driver: status, refusal while mounted, bind, unbind.
setup_check() {  # setup_check NAME EXPECTED_RC GREP_PATTERN COMMAND...
  name=$1 want=$2 pat=$3; shift 3
  out=$("$@" 2>&1); got=$?
  echo "$out" | sed "s/^/GPUNVME-SETUP   /"
  if [ "$got" = "$want" ] && echo "$out" | grep -q -- "$pat"; then
    say "setup $name ok"
  else
    say "setup $name FAILED (rc $got, wanted $want and '$pat')"; setup=fail
  fi
}
drv_of() { l=$(readlink /sys/bus/pci/devices/$1/driver); echo ${l##*/}; }
if [ "$setup_test" = 1 ] && [ -x /usr/bin/bash ]; then
  setup=ok
  for m in $(cat /modules/order-nvme); do insmod /modules/$m || say "insmod $m failed"; done
  i=0; while [ ! -b /dev/nvme0n1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  S="/usr/bin/bash /bin/setup_vfio.sh"
  mkdosfs /dev/nvme0n1 >/dev/null 2>&1; mkdir -p /mnt; mount -t msdos /dev/nvme0n1 /mnt || say "mount failed"
  setup_check status 0 "/dev/nvme0n1 *mounted on /mnt" $S status
  setup_check bind-refused-while-mounted 1 "refusing to bind" $S bind $bdf
  [ "$(drv_of $bdf)" = nvme ] || { say "setup: device left nvme after a refused bind"; setup=fail; }
  umount /mnt
  setup_check bind 0 "bound to vfio-pci" $S bind $bdf
  setup_check bind-again 0 "already bound" $S bind ${bdf#0000:}
  setup_check status-vfio 0 "vfio:$bdf" $S status
  setup_check unbind 0 "back on the nvme driver" $S unbind $bdf
  i=0; while [ ! -b /dev/nvme0n1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  [ -b /dev/nvme0n1 ] || { say "setup: /dev/nvme0n1 did not come back"; setup=fail; }
  setup_check unbind-again 0 "nothing to do" $S unbind $bdf
  setup_check bad-bdf 1 "not a PCI address" $S bind 0000:zz:00.0
  setup_check bind-final 0 "bound to vfio-pci" $S bind $bdf
fi
for b in $(nvme_bdfs); do
  d=/sys/bus/pci/devices/$b
  if [ "$(drv_of $b)" != vfio-pci ]; then
    echo vfio-pci > $d/driver_override
    echo $b > /sys/bus/pci/drivers_probe
  fi
  grp=$(readlink $d/iommu_group)
  say "nvme $b driver=$(drv_of $b) group=${grp##*/}"
done
i=0
while [ ! -e /dev/vfio/vfio ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
ls /dev/vfio | sed 's/^/GPUNVME-GUEST dev-vfio /'
say "uptime-bound $(up)"

probe=fail
if /bin/gpunvme_vfio_probe vfio:$bdf; then probe=ok; fi
say "uptime-probe $(up)"

# shellcheck disable=SC2086
/bin/gpunvme_vfio_suite --device vfio:$bdf --expect-fault-log $args --durations yes $filter > /tmp/suite.log 2>&1
rc=$?
cat /tmp/suite.log
# Catch2's summary: "All tests passed (A assertions in N test cases)" or
# "test cases: N | P passed | F failed" (and "| S skipped").
passed=0; failed=0; skipped=0
if grep -q "^All tests passed" /tmp/suite.log; then
  passed=$(grep "^All tests passed" /tmp/suite.log | sed -n 's/.* in \([0-9]*\) test case.*/\1/p')
  skipped=$(grep "^All tests passed" /tmp/suite.log | sed -n 's/.*(\([0-9]*\) skipped.*/\1/p')
else
  line=$(grep "^test cases:" /tmp/suite.log | tail -n1)
  passed=$(echo "$line" | sed -n 's/.* \([0-9]*\) passed.*/\1/p')
  failed=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
  skipped=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
fi
dmesg | grep -E "DMAR|vfio" | tail -n 8 | sed 's/^/GPUNVME-GUEST dmesg /'
finish "config=$config probe=$probe setup=$setup suite_rc=$rc cases_passed=${passed:-0} cases_failed=${failed:-0} cases_skipped=${skipped:-0}"

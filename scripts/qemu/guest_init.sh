#!/bin/sh
# /init of the QEMU VFIO guest (busybox sh). Loads vfio, binds every NVMe function (PCI class 0x010802)
# to vfio-pci, runs the probe and the integration suite on the first one, prints lines the host
# parses, and powers off.  Kernel command line:
#   gpunvme.config=NAME        label echoed in the result line
#   gpunvme.args=A,B,C         extra suite arguments, commas for spaces (e.g. --expect-mdts,3)
#   gpunvme.filter=SPEC        Catch2 test spec (commas kept), default: every test
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
args=""
filter=""
for w in $(cat /proc/cmdline); do
  case $w in
    gpunvme.config=*) config=${w#gpunvme.config=} ;;
    gpunvme.args=*) args=$(echo "${w#gpunvme.args=}" | tr ',' ' ') ;;
    gpunvme.filter=*) filter=${w#gpunvme.filter=} ;;
  esac
done

for m in $(cat /modules/order); do
  insmod /modules/$m || say "insmod $m failed"
done

bdf=""
for d in /sys/bus/pci/devices/*; do
  [ "$(cat $d/class)" = "0x010802" ] || continue
  b=${d##*/}
  echo vfio-pci > $d/driver_override
  echo $b > /sys/bus/pci/drivers_probe
  drv=$(readlink $d/driver); grp=$(readlink $d/iommu_group)
  say "nvme $b driver=${drv##*/} group=${grp##*/}"
  [ -z "$bdf" ] && bdf=$b
done
if [ -z "$bdf" ]; then
  finish "config=$config probe=fail suite_rc=99 cases_passed=0 cases_failed=0 reason=no-nvme-function"
fi
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
finish "config=$config probe=$probe suite_rc=$rc cases_passed=${passed:-0} cases_failed=${failed:-0} cases_skipped=${skipped:-0}"

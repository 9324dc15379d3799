#!/usr/bin/env bash
# Numbers that cannot lie: with every kernel launch failing (or silently not running, through
# launch_shim.cpp), nvme_perf --path gpu, gpu_cmd_rate and layer_stream must end with an error
# (non-zero exit) and print no throughput figure. Exit 77 (skipped) where no GPU can run.
# usage: no_figures_without_kernels.sh SHIM NVME_PERF GPU_CMD_RATE LAYER_STREAM WORKDIR
set -u
shim=$1 perf=$2 rate=$3 stream=$4 work=$5
if ! "$perf" --gpu-check >/dev/null 2>&1; then
  echo "SKIP: $("$perf" --gpu-check 2>&1)"
  exit 77
fi
mkdir -p "$work"
failures=0

# check NAME MODE FORBIDDEN-REGEX COMMAND...: non-zero exit, and no output line matching the regex.
check() {
  local name=$1 mode=$2 forbidden=$3
  shift 3
  local out rc
  out=$(GPUNVME_SHIM_LAUNCH=$mode LD_PRELOAD=$shim timeout 300 "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "FAIL [$name, launch=$mode]: exit status 0 although no kernel ran"; failures=$((failures + 1))
  elif [ "$rc" -eq 124 ]; then
    echo "FAIL [$name, launch=$mode]: still running after 300 s"; failures=$((failures + 1))
  elif grep -Eq "$forbidden" <<<"$out"; then
    echo "FAIL [$name, launch=$mode]: printed a figure:"; grep -E "$forbidden" <<<"$out"; failures=$((failures + 1))
  else
    echo "ok   [$name, launch=$mode]: exit $rc, no figure; said: $(grep -Eim1 'error|fail|-' <<<"$out")"
  fi
}

for mode in fail skip; do
  check "nvme_perf --path gpu" $mode '"iops"|IOPS|GB/s' \
    "$perf" --path gpu --device emu:ram,size=64M --bs 4K --qd 8 --count 4096 --timeout-ms 2000
  check "nvme_perf --path gpu --json" $mode '"iops"|"gbps"' \
    "$perf" --path gpu --device emu:ram,size=64M --bs 4K --qd 8 --count 4096 --timeout-ms 2000 --json
  check "nvme_perf --path gpu --doorbell cpu" $mode '"iops"|IOPS|GB/s' \
    "$perf" --path gpu --doorbell cpu --device emu:ram,size=64M --bs 4K --qd 1 --count 512 --timeout-ms 2000
  # gpu_cmd_rate's rows: the GPU column must read "-", never a number.
  check "gpu_cmd_rate" $mode '^ +1 +1 +[0-9]' "$rate" --queues 1 --threads 1 --skip-cpu --skip-ram --entries 256
done
# layer_stream: a failed launch ends the mode with FAILED, no GB/s for it.
check "layer_stream gpunvme-gpu" fail 'gpunvme-gpu +[0-9]|gpunvme-gpu read +[0-9]' \
  "$stream" --modes gpunvme-gpu --layers 2 --layer-bytes 8M --drive none --gpu-queues 2 --image "$work/ls"
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"

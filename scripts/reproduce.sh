#!/usr/bin/env bash
# Regenerates on the GPU machine the raw data behind every headline table of README.md and
# docs/performance.md, in two device calls of at most 10 minutes each. Each part starts from a bare
# machine: it builds what it needs, writes the models into /dev/shm one at a time, runs the benchmarks
# with their JSON output into $OUT, and writes $OUT/sources.json (which table each file backs, with the
# card, commit, date and exact command). Then, here:  python3 scripts/perf_render.py --import DIR --plots
#
#   bash scripts/device_carry.sh            # here, first: libblkid's header, the probe, the pre-recovery tree
#   the device calls (carry .device-carry; the device tool returns at most 8 files, so pack them into one;
#   the machine's copy of the tree has no history of this commit, so name it):
#     GIT_REV=<commit> OUT=/tmp/p1 bash scripts/reproduce.sh --part 1 --pack $OUT/p1.tgz
#         command rate and recovery's no-fault cost, layer streaming, MoE tokens/s, pass compute,
#         doorbells, nvme_perf's sweep (about 470 s on the H100 machine)
#     GIT_REV=<commit> OUT=/tmp/p2 bash scripts/reproduce.sh --part 2 --pack $OUT/p2.tgz
#         the 70B model: tokens/s with three loaders and the RAM tier, time to first token, the cost of
#         a pass (about 540 s)
#     GIT_REV=<commit> OUT=/tmp/p3 bash scripts/reproduce.sh --part 3 --pack $OUT/p3.tgz
#         MoE models generated on read: Qwen3-235B-A22B (bigger than RAM), gpt-oss-120b (about 420 s)
#   then here: tar -xzf p1.tgz, and perf_render.py --import on the folder it holds
# options:
#   --only STEP[,STEP]  run these steps of the part only (--list names them; a warm machine keeps the build)
#   --list              the steps of each part with the seconds each is expected to take
#   --deadline SECONDS  default 560: a step that is expected to end later is skipped, a running one stopped
#   --pack FILE         at the end, the whole output folder as one .tgz at FILE
# environment: OUT (default ./repro-out), BD (./build-repro), BASE_BD (./build-repro-base), JOBS (nproc),
#   GIT_REV (the commit, where the machine's copy has no git history)
# Exit status: 0 when every step of the part ran and passed; 1 when a step failed or was skipped for
# time (the summary names it); 2 on a usage error.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh  # PATH, blkid_from_carry, probe_source, RECOVERY_BASE

OUT=${OUT:-$PWD/repro-out}
BD=${BD:-$PWD/build-repro}
BASE_BD=${BASE_BD:-$PWD/build-repro-base}
JOBS=${JOBS:-$(nproc)}
SHM=/dev/shm/gpunvme-repro  # model images: one at a time (a 54 GB model fills most of /dev/shm)

# Steps in the order they run (the README's numbers first), with the seconds each is expected to take on
# the 16-core H100 machine, from what the steps took there on 2026-11-28 (part 1 298 s without the two
# nvme_perf steps, which took 13 and 90 s; part 2: tokens-70b 257 s, passes-70b 193 s) and earlier: a targeted release build 30-120 s (26 s
# for two benches), layer_stream's default run 40 s, perf_sweep.sh 84 s, a 70B cell 3 tokens of 2-6 s
# after loading 22 GB, a batched 512-token prompt 17.5 s. The deadline check uses them; each step prints
# what it took, so the next run can correct them.
PART1="build:90 cmd-rate:30 layer-stream:110 moe:150 pass-compute:10 doorbell:15 nvme-perf:95"
PART2="build:60 gen-70b:35 tokens-70b:260 passes-70b:195"
PART3="build:60 moe-235b:240 moe-gpt-oss:120"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }

# ---- recording what backs which table -----------------------------------------------------------------

shown() {  # a command as it ran, with the build and output folders named as the docs name them
  local a s=
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then s+=" $a"; else s+=" $(printf '%q' "$a")"; fi
  done
  s=${s# }
  s=${s//"$BD"/\$BD}
  s=${s//"$BASE_BD"/\$BASE_BD}
  printf '%s' "${s//"$OUT/"/}"
}
record() {  # BLOCK FILE[,FILE] COMMAND NOTE [EXTRA_JSON]: this step's file backs BLOCK
  local extra=${5:-}
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${extra:-"{}"}" >> "$OUT/.sources.tsv"
}
run() {  # log a command (on stderr: stdout may be the data) and run it; its exit status
  echo "\$ $(shown "$@")" >&2
  "$@"
}

# ---- the steps ----------------------------------------------------------------------------------------

targets_1="bench/gpu_cmd_rate bench/layer_stream bench/llm_tokens bench/llm_pass_compute bench/nvme_perf examples/llm_make_model"
targets_2="bench/llm_tokens examples/llm_make_model examples/llm/llm"
targets_3="bench/llm_tokens"

step_build() {
  local t
  eval "t=\$targets_$PART"
  blkid_from_carry || return 1
  { [ -f "$BD/build.ninja" ] || run meson setup "$BD" -Dbuildtype=release -Dcuda=enabled -Dtests=false; } || return 1
  # shellcheck disable=SC2086
  run ninja -C "$BD" -j "$JOBS" $t || return 1
  [ "$PART" = 1 ] || return 0
  # The tree before recovery, for recovery's no-fault cost: from git where the copy has history, else carried.
  local src=$BASE_BD-src
  if [ ! -f "$BASE_BD/build.ninja" ]; then
    rm -rf "$src" && mkdir -p "$src" || return 1
    if git cat-file -e "$RECOVERY_BASE^{commit}" 2>/dev/null; then git archive "$RECOVERY_BASE" | tar -x -C "$src"
    elif [ -f ".device-carry/base-$RECOVERY_BASE.tar" ]; then tar -xf ".device-carry/base-$RECOVERY_BASE.tar" -C "$src"
    else echo "no tree $RECOVERY_BASE: run scripts/device_carry.sh and carry .device-carry" >&2; return 1; fi || return 1
    run meson setup "$BASE_BD" "$src" -Dbuildtype=release -Dcuda=enabled -Dtests=false || return 1
  fi
  run ninja -C "$BASE_BD" -j "$JOBS" bench/gpu_cmd_rate
}

step_cmd_rate() {  # the probe, then this tree and the pre-recovery tree alternated: one file, two tables
  local f=$OUT/${TAG}_cmd_rate.txt src rounds=5 r side bd new_fails=0 base_fails=0
  local args=(--skip-ram --skip-cpu --count 16777216)
  src=$(probe_source) || return 1
  run nvcc -O2 -arch=sm_90 -o "$BD/warp_queue_probe" "$src" || return 1
  { echo "# $CARD, $COMMIT, $DATE: the probe, then gpu_cmd_rate ${args[*]} alternated with $RECOVERY_BASE's"
    echo "== probe"; "$BD/warp_queue_probe"; } > "$f" || return 1
  for r in $(seq $rounds); do
    for side in base new; do
      echo "== cmd $side $r" >> "$f"
      if [ $side = new ]; then run "$BD/bench/gpu_cmd_rate" "${args[@]}" >> "$f" || new_fails=$((new_fails + 1))
      else run "$BASE_BD/bench/gpu_cmd_rate" "${args[@]}" >> "$f" || base_fails=$((base_fails + 1)); fi
    done
  done
  cat "$f"
  [ $new_fails -eq 0 ] || return 1
  record cmd_rate "${f##*/}" "$(shown "$BD/bench/gpu_cmd_rate" "${args[@]}"); the probe: nvcc -O2 -arch=sm_90 warp_queue_probe.cu" \
    "$rounds runs; the probe in the same call" '{"runs": "cmd new"}'
  [ $base_fails -eq 0 ] || { echo "the pre-recovery build's runs failed: no recovery_cost table from this call" >&2; return 1; }
  record recovery_cost "${f##*/}" "$(shown "$BD/bench/gpu_cmd_rate" "${args[@]}"), $rounds rounds alternated with the same tool built from $RECOVERY_BASE (before recovery) in the same call" \
    "" '{"base": "cmd base", "new": "cmd new"}'
}

step_layer_stream() {
  local ls=$BD/bench/layer_stream f1=$OUT/${TAG}_layer_stream_1drive.json n f
  # The first layer_stream run of a fresh machine reads pcie5 low in every build alike: a short one first.
  run "$ls" --drive pcie5 --modes gpunvme-gpu --layers 4 > /dev/null || return 1
  local one=("$ls" --drive none,sn530,pcie4,pcie5 --pace-baselines --json-out "$f1")
  run "${one[@]}" || return 1
  record layer_stream_drives "${f1##*/}" "$(shown "${one[@]}")" "" '{"slot": "1 drive"}'
  record layer_stream_baselines "${f1##*/}" "$(shown "${one[@]}")" "baselines paced by the same drive model"
  for n in 2 4; do
    f=$OUT/${TAG}_layer_stream_${n}drives.json
    local many=("$ls" --drives $n --drive pcie4,pcie5 --modes gpunvme-gpu,gpunvme-cpu --json-out "$f")
    run "${many[@]}" || return 1
    record layer_stream_drives "${f##*/}" "$(shown "${many[@]}")" "" "{\"slot\": \"$n drives\"}"
  done
}

make_model() {  # SHAPE TYPE SIZE: the generated model onto $SHM.img (the one model /dev/shm holds)
  rm -f "$SHM.img"
  run "$BD/examples/llm_make_model" --shape "$1" --type "$2" --device "emu:$SHM.img,size=$3" | tail -2
}

step_moe() {
  local fq=$OUT/${TAG}_llm_tokens_qwen3.json fm=$OUT/${TAG}_llm_tokens_mixtral.json
  local common=(--modes gpunvme --drives pcie4,pcie5 --expert-prefetch off,auto)
  make_model qwen3-30b-a3b q4_k 17G || return 1
  local qw=("$BD/bench/llm_tokens" --image "$SHM.img" "${common[@]}" --budgets 8G:0 --tokens 12 --json-out "$fq")
  run "${qw[@]}" || return 1
  make_model mixtral-8x7b q4_k 25G || return 1
  local mx=("$BD/bench/llm_tokens" --image "$SHM.img" "${common[@]}" --budgets 22G:0,8G:0 --tokens 6 --json-out "$fm")
  run "${mx[@]}" || return 1
  rm -f "$SHM.img"
  record tokens_moe "${fq##*/}" "$(shown "$BD/examples/llm_make_model" --shape qwen3-30b-a3b --type q4_k --device "emu:$SHM.img,size=17G") && $(shown "${qw[@]}")" "" '{"slot": "qwen3-30b-a3b"}'
  record tokens_moe "${fm##*/}" "$(shown "$BD/examples/llm_make_model" --shape mixtral-8x7b --type q4_k --device "emu:$SHM.img,size=25G") && $(shown "${mx[@]}")" "the same call" '{"slot": "mixtral-8x7b"}'
}

# Part 3: MoE models on a namespace that computes the generated model on read (emu:gen): nothing is
# written to /dev/shm, so a model may be bigger than the machine's RAM. NVMe striping of fetched experts is not supported yet,
# so there are no 2-drive cells.
step_moe_235b() {
  local f=$OUT/${TAG}_llm_tokens_qwen3_235b.json
  local c=("$BD/bench/llm_tokens" --device emu:gen,shape=qwen3-235b-a22b,type=q4_k --modes gpunvme --budgets 22G:0,22G:32G
           --drives pcie4,pcie5 --expert-prefetch off,auto --tokens 6 --json-out "$f")
  run "${c[@]}" || return 1
  record tokens_moe "${f##*/}" "$(shown "${c[@]}")" "132 GB generated on read: more than the machine's RAM" '{"slot": "qwen3-235b-a22b"}'
}

step_moe_gpt_oss() {
  local f=$OUT/${TAG}_llm_tokens_gpt_oss_120b.json
  local c=("$BD/bench/llm_tokens" --device emu:gen,shape=gpt-oss-120b,type=mxfp4 --modes gpunvme --budgets 22G:0,8G:0
           --drives pcie4,pcie5 --expert-prefetch off,auto --tokens 6 --json-out "$f")
  run "${c[@]}" || return 1
  record tokens_moe "${f##*/}" "$(shown "${c[@]}")" "63 GB generated on read (MXFP4 experts, Q8_0 attention)" '{"slot": "gpt-oss-120b"}'
}

step_pass_compute() {
  local f=$OUT/${TAG}_llm_pass_compute.json
  local c=("$BD/bench/llm_pass_compute" --shape llama3-70b --type q6_k --tokens 1,2,3,5,9,17,32,128,512 --reps 2 --json-out "$f")
  run "${c[@]}" || return 1
  record pass_compute "${f##*/}" "$(shown "${c[@]}")" "one token: the matrix-vector kernel; more: the batched kernel"
}

step_gen_70b() { make_model llama3-70b q6_k 55G; }

step_tokens_70b() {
  local f=$OUT/${TAG}_llm_tokens_70b.json fr=$OUT/${TAG}_llm_tokens_70b_ram.json
  [ -f "$SHM.img" ] || { echo "no 70B model in $SHM.img: the gen-70b step did not run" >&2; return 1; }
  local c=("$BD/bench/llm_tokens" --image "$SHM.img" --budgets 22G:0 --drives pcie4,pcie5 --modes gpunvme,mmap,mmap-evict --tokens 2 --json-out "$f")
  run "${c[@]}" || return 1
  record tokens_dense "${f##*/}" "$(shown "${c[@]}")" ""
  local r=("$BD/bench/llm_tokens" --image "$SHM.img" --budgets 22G:32G --drives pcie4 --modes gpunvme --tokens 3 --json-out "$fr")
  run "${r[@]}" || return 1
  record tokens_dense_other "${fr##*/}" "$(shown "${r[@]}")" "nothing on NVMe: the bound is the host-to-GPU link" '{"slot": "ram"}'
}

step_passes_70b() {
  local f=$OUT/${TAG}_passes_70b.json
  [ -f "$SHM.img" ] || { echo "no 70B model in $SHM.img: the gen-70b step did not run" >&2; return 1; }
  local c=(python3 scripts/llm/bench_passes.py --llm "$BD/examples/llm/llm" --device "emu:$SHM.img,drive=pcie4,threads=8"
           --lengths 16,128,512,2048 --baseline-max 0 --batch 2048 --ks 1,4,16 --repeat 2 --skip spec --json-out "$f"
           -- --path gpu --vram-budget 22G --ram-budget 0)
  run "${c[@]}"
  local rc=$?
  rm -f "$SHM.img"
  [ $rc -eq 0 ] || return 1
  record ttft "${f##*/}" "$(shown "${c[@]}")" "" '{"slot": "prompts"}'
  record pass_cost "${f##*/}" "$(shown "${c[@]}")" ""
}

step_doorbell() {
  local f=$OUT/${TAG}_doorbell.jsonl db fails=0
  local qd1=(--path gpu --device emu:ram,size=1G --rw read --bs 4K --qd 1 --time 3 --json)
  local rate=(--path gpu --device emu:null,size=1T,queues=64,threads=8,poll=spin --queues 16 --qd 256 --rw read --bs 4K --time 3 --json)
  : > "$f"
  for db in gpu cpu; do
    run "$BD/bench/nvme_perf" "${qd1[@]}" --doorbell $db >> "$f" || fails=$((fails + 1))
    run "$BD/bench/nvme_perf" "${rate[@]}" --doorbell $db >> "$f" || fails=$((fails + 1))
  done
  [ $fails -eq 0 ] || return 1
  record doorbell "${f##*/}" "$(shown "$BD/bench/nvme_perf" "${qd1[@]}") --doorbell gpu|cpu; $(shown "$BD/bench/nvme_perf" "${rate[@]}") --doorbell gpu|cpu" ""
}

step_nvme_perf() {
  local f=$OUT/${TAG}_perf_sweep.jsonl
  rm -f "$f"
  NVME_PERF=$BD/bench/nvme_perf GIT_REV=$COMMIT MACHINE="$(nproc) cores, $CARD" run bash scripts/perf_sweep.sh "$f" || return 1
  record nvme_perf_qd "${f##*/}" "NVME_PERF=\$BD/bench/nvme_perf bash scripts/perf_sweep.sh ${f##*/}" "Device emu:ram,size=4G,threads=8,poll=spin,mdts=9, one queue, 1 s a point"
  record nvme_perf_bs "${f##*/}" "NVME_PERF=\$BD/bench/nvme_perf bash scripts/perf_sweep.sh ${f##*/}" "QD 32, one queue"
}

# ---- sources.json from what the steps recorded --------------------------------------------------------

write_sources() {
  python3 - "$OUT" "$CARD" "$COMMIT" "$DATE" "$PART" <<'PY'
import json, os, sys
out, card, commit, date, part = sys.argv[1:]
blocks, steps = {}, []
tsv = os.path.join(out, ".sources.tsv")
for line in (open(tsv).read().splitlines() if os.path.exists(tsv) else []):
    block, files, command, note, extra = line.split("\t")
    src = {"files": files.split(","), "card": card, "commit": commit, "date": date, "command": command}
    if note:
        src["note"] = note
    src.update(json.loads(extra))
    blocks.setdefault(block, []).append(src)
for line in open(os.path.join(out, ".steps.tsv")).read().splitlines():
    name, status, secs = line.split("\t")
    steps.append({"step": name, "status": status, "seconds": int(secs)})
with open(os.path.join(out, "sources.json"), "w") as f:
    json.dump({"tool": "reproduce.sh", "part": int(part), "card": card, "commit": commit, "date": date,
               "steps": steps, "blocks": blocks}, f, indent=1)
    f.write("\n")
PY
}

# ---- main ---------------------------------------------------------------------------------------------

if [ "${1:-}" = --run-step ]; then  # one step in a child, so that a timeout stops it and what it started
  PART=$2 TAG=$3 CARD=$4 COMMIT=$5 DATE=$6
  "step_${7//-/_}"
  exit $?
fi

PART= ONLY= DEADLINE=560 PACK=
while [ $# -gt 0 ]; do
  case $1 in
    --part) PART=${2:-}; shift 2 ;;
    --only) ONLY=${2:-}; shift 2 ;;
    --deadline) DEADLINE=${2:-}; shift 2 ;;
    --pack) PACK=${2:-}; shift 2 ;;
    --list) echo "part 1: $PART1"; echo "part 2: $PART2"; echo "part 3: $PART3"; echo "(step:expected seconds)"; exit 0 ;;
    -h|--help) usage 0 ;;
    *) echo "reproduce: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case $PART in 1|2|3) ;; *) echo "reproduce: --part 1, 2 or 3 is required (try --help)" >&2; exit 2 ;; esac
case $DEADLINE in ''|*[!0-9]*) echo "reproduce: --deadline takes whole seconds, not '$DEADLINE'" >&2; exit 2 ;; esac
eval "plan=\$PART$PART"
for s in ${ONLY//,/ }; do
  case " $plan " in *" $s:"*) ;; *) echo "reproduce: part $PART has no step '$s' (its steps: $plan)" >&2; exit 2 ;; esac
done

CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -n "$CARD" ] || { echo "reproduce: nvidia-smi names no GPU: this runs on the GPU machine" >&2; exit 1; }
COMMIT=${GIT_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -z "${GIT_REV:-}" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then COMMIT="$COMMIT+changes"; fi
DATE=$(date -u +%F)
card_tag=$(echo "$CARD" | grep -o -i -E 'h100|h200|[a-z][0-9]+' | head -1 | tr 'A-Z' 'a-z')
TAG="repro_${DATE//-/}_${COMMIT%%+*}_p${PART}_${card_tag:-gpu}"
mkdir -p "$OUT" || exit 1
: > "$OUT/.sources.tsv"; : > "$OUT/.steps.tsv"
trap 'rm -f "$SHM.img"' EXIT
echo "reproduce: part $PART on $CARD, commit $COMMIT; output $OUT; deadline ${DEADLINE} s"

t0=$SECONDS failed=0
for item in $plan; do
  name=${item%%:*} expect=${item##*:}
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
  left=$((DEADLINE - (SECONDS - t0)))
  if [ "$expect" -gt "$left" ]; then
    echo "== $name: SKIPPED: expected ${expect} s, ${left} s left before the deadline (rerun: --only $name)"
    printf '%s\tskipped\t0\n' "$name" >> "$OUT/.steps.tsv"; failed=$((failed + 1)); continue
  fi
  s0=$SECONDS
  echo "===== step $name" >> "$OUT/session.log"
  timeout -k 10 "$left" bash "$0" --run-step "$PART" "$TAG" "$CARD" "$COMMIT" "$DATE" "$name" > "$OUT/.step.log" 2>&1
  rc=$?
  cat "$OUT/.step.log" >> "$OUT/session.log"
  case $rc in 0) st=OK ;; 124|137) st="FAIL (stopped at the deadline)" ;; *) st="FAIL (exit $rc)" ;; esac
  echo "== $name: $st ($((SECONDS - s0)) s, expected $expect)"
  if [ $rc -ne 0 ]; then tail -30 "$OUT/.step.log"; failed=$((failed + 1)); else tail -4 "$OUT/.step.log"; fi
  printf '%s\t%s\t%s\n' "$name" "$([ $rc -eq 0 ] && echo ok || echo failed)" "$((SECONDS - s0))" >> "$OUT/.steps.tsv"
done
write_sources || failed=$((failed + 1))
rm -f "$OUT/.step.log"
if [ -n "$PACK" ]; then tar -czf "$PACK" -C "$(dirname "$OUT")" "$(basename "$OUT")" || failed=$((failed + 1)); fi
echo "reproduce: part $PART: $failed step(s) failed or skipped, $((SECONDS - t0)) s; then here: python3 scripts/perf_render.py --import <fetched OUT> --plots"
exit $((failed > 0))

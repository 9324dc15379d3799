#!/usr/bin/env bash
# One call on the GPU machine (the lent H100): release build with CUDA, the calibration probe, the GPU
# suite, every meson suite, then the benchmarks whose numbers docs/performance.md quotes. Each step's
# output is appended to $OUT/session.log under a header (JSON goes to $OUT where a tool writes it);
# a summary line per step goes to stdout, so a failed step never hides behind a later one.
#   STEPS="build probe gpu-suite meson cmd-rate layer-stream" bash scripts/gpu_session.sh
# (also: engine, engine-speed, recovery, llm-tokens; see each step_ below)
# BD (build dir, default /tmp/bd), OUT (default ./gpu-out), JOBS (default nproc).
set -uo pipefail
cd "$(dirname "$0")/.."
BD=${BD:-/tmp/bd}
OUT=${OUT:-$PWD/gpu-out}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-build probe gpu-suite meson engine cmd-rate layer-stream}
mkdir -p "$OUT"
. scripts/device_env.sh  # PATH, blkid_from_carry, probe_source

step_build() {
  blkid_from_carry &&
  { [ -f "$BD/build.ninja" ] || meson setup "$BD" -Dbuildtype=release -Dcuda=enabled; } &&
    ninja -C "$BD" -j "$JOBS"
}
step_probe() {
  local src
  src=$(probe_source) &&
    nvcc -O2 -arch=sm_90 -o /tmp/warp_queue_probe "$src" &&
    /tmp/warp_queue_probe > "$OUT/probe.txt"
}
step_gpu_suite() { "$BD/tests/gpu/gpu_tests" --durations yes; }
step_meson() { meson test -C "$BD" --print-errorlogs --num-processes 8; }
step_cmd_rate() { "$BD/bench/gpu_cmd_rate" --probe "$OUT/probe.txt"; }
step_layer_stream() {
  "$BD/bench/layer_stream" --drive sn530,pcie4,pcie5 --json-out "$OUT/layer_stream_1drive.json" &&
    "$BD/bench/layer_stream" --drives 2 --drive pcie4 --modes gpunvme-gpu,gpunvme-cpu \
      --json-out "$OUT/layer_stream_2drives.json"
}

# The engine against llama.cpp's reference on the GPU path, every layer streamed and every layer resident
# (logits equal to the bit). LLM_MODELS: where the generated models are written (make_models.py, through
# the gguf-py that .device-carry/pylib carries: the machine has no PyPI); GPUNVME_GEMMA_GGUF: the real
# Gemma 3 270M file, if present.
step_engine() {
  local m=${LLM_MODELS:-/tmp/llm-models}
  python3 tests/llm/reference_check.py --llm "$BD/examples/llm/llm" --gpunvme "$BD/gpunvme" --path gpu --resident-pair \
    --variants --models "$m" &&
    python3 tests/llm/reference_check.py --llm "$BD/examples/llm/llm" --gpunvme "$BD/gpunvme" --path gpu --tiers --models "$m"
}
# Tokens/s of the real model, every layer streamed and every layer resident, unthrottled and on a modeled
# PCIe 4 drive (JSON per run: $OUT/llm_<drive>_<resident>.json).
step_engine_speed() {
  local g=${GPUNVME_GEMMA_GGUF:?the Gemma GGUF} img=/dev/shm/gemma.img
  rm -f "$img"
  "$BD/gpunvme" deploy "$g" --device "emu:$img,size=512M" > /dev/null || return 1
  for drive in none pcie4; do
    for r in none all; do
      echo "--- drive=$drive --resident $r"
      "$BD/examples/llm/llm" --device "emu:$img,drive=$drive" --prompt "The capital of France is" -n 64 --ignore-eos \
        --resident $r --json-out "$OUT/llm_${drive}_$r.json" | tail -7 || return 1
    done
  done
}

# Recovery (issue #15): the GPU fault matrix, the CPU one, and the no-fault cost against the tree before
# recovery built in $BASE_BD (e.g. from `git archive 0c33f5e`), alternating in the same call.
step_recovery() {
  "$BD/tests/gpu/gpu_tests" "[recovery]" && "$BD/bench/fault_matrix" --json > "$OUT/fault_matrix.json" || return 1
  [ -n "${BASE_BD:-}" ] || return 0
  for r in 1 2; do
    for b in "$BASE_BD" "$BD"; do echo "--- $b"; "$b/bench/gpu_cmd_rate" --skip-ram | tail -4; done
  done
}
# Tokens/s at the I/O bound (issue #13): the 70B-shaped model generated onto /dev/shm, both loaders.
step_llm_tokens() {
  "$BD/examples/llm_make_model" --shape llama3-70b --type q6_k --device emu:/dev/shm/m.img,size=55G | tail -1 &&
    "$BD/bench/llm_tokens" --image /dev/shm/m.img --budgets 22G:0 --drives none,pcie4,pcie5 --tokens 2 \
      --json-out "$OUT/llm_tokens_70b.json"
  local rc=$?
  rm -f /dev/shm/m.img
  return $rc
}

fails=0
for s in $STEPS; do
  fn="step_${s//-/_}"
  t0=$SECONDS
  echo "===== step $s" >> "$OUT/session.log"
  if "$fn" > /tmp/gpu_session_step.log 2>&1; then r=OK; else r=FAIL; fails=$((fails + 1)); fi
  cat /tmp/gpu_session_step.log >> "$OUT/session.log"
  echo "== $s: $r ($((SECONDS - t0)) s)"
  if [ "$r" = FAIL ]; then tail -40 /tmp/gpu_session_step.log; else tail -${TAIL:-6} /tmp/gpu_session_step.log; fi
done
echo "== steps failed: $fails"
exit $((fails > 0))

#!/usr/bin/env bash
# Builds llama.cpp's llama-bench with its CUDA backend for sm_90 (H100/H200) on the GPU machine, from
# the tree scripts/llamacpp_carry.sh packed. About 5.3 min with 12 jobs (../shared/notes/gpu-machine.md).
# Usage: bash scripts/llamacpp_build.sh [BUILD_DIR] [JOBS]; prints the llama-bench path last.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${1:-/tmp/llamacpp}
jobs=${2:-12}
carry=$root/.device-carry/llamacpp-src.tgz
[[ -f $carry ]] || { echo "llamacpp_build: $carry missing: run scripts/llamacpp_carry.sh here first" >&2; exit 1; }
mkdir -p "$bdir" && tar xzf "$carry" -C "$bdir"
cmake=$(command -v cmake || echo /opt/torch/.venv/bin/cmake)
"$cmake" -S "$bdir/llama.cpp" -B "$bdir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_TOOLS=ON >"$bdir/configure.log" 2>&1 || { tail -30 "$bdir/configure.log" >&2; exit 1; }
"$cmake" --build "$bdir/build" --target llama-bench -j "$jobs" >"$bdir/build.log" 2>&1 || { tail -40 "$bdir/build.log" >&2; exit 1; }
echo "$bdir/build/bin/llama-bench"

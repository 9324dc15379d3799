#!/usr/bin/env bash
# Builds the GGUF header libFuzzer target with clang++ (-fsanitize=fuzzer,address,undefined) and
# runs it for a bounded time on the seed corpus in tests/data/gguf/corpus.
#
# CI (bounded, 60 s of fuzzing after a ~30 s build; exits non-zero on any crash/sanitizer report):
#     scripts/gguf_fuzz.sh 60
# Other uses:
#     scripts/gguf_fuzz.sh --build-only --out build/gguf_header_fuzz     (what meson's target runs)
#     scripts/gguf_fuzz.sh 600 -jobs=2                                    (extra args go to libFuzzer)
# Environment: CLANGXX (compiler; default clang++, then clang++-14..19), GGUF_FUZZ_DIR (work dir
# for the binary, the growing corpus and crash files; default /tmp/gguf-fuzz). Reproduce a crash:
#     /tmp/gguf-fuzz/gguf_header_fuzz /tmp/gguf-fuzz/crash-<sha1>
# Regenerate the seeds (needs pip gguf): python3 scripts/gguf_crosscheck.py corpus tests/data/gguf/corpus
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=${GGUF_FUZZ_DIR:-/tmp/gguf-fuzz}
secs=60
out=""
build_only=0
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-only) build_only=1 ;;
    --out) out=$2; shift ;;
    [0-9]*) secs=$1 ;;
    *) extra+=("$1") ;;
  esac
  shift
done
out=${out:-$work/gguf_header_fuzz}

cxx=${CLANGXX:-}
if [[ -z "$cxx" ]]; then
  for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
if [[ -z "$cxx" ]]; then
  echo "gguf_fuzz: no clang++ found (apt-get install clang); libFuzzer needs clang" >&2
  exit 77
fi

# The parser, the LBA map and the record: everything the target reaches, nothing with devices.
srcs=("$root"/runtime/fuzz/gguf_header_fuzz.cpp "$root"/host/text/escape.cpp)
for f in "$root"/runtime/gguf/*.cpp "$root"/runtime/model/*.cpp; do
  [[ "$(basename "$f")" == gguf_dump.cpp ]] || srcs+=("$f")
done
mkdir -p "$(dirname "$out")"
"$cxx" -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" "${srcs[@]}" -o "$out"
[[ $build_only == 1 ]] && exit 0

# New inputs go to the work corpus, not into the repository.
mkdir -p "$work/corpus"
cd "$work"
exec "$out" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -dict="$root/runtime/fuzz/gguf.dict" "${extra[@]}" "$work/corpus" "$root/tests/data/gguf/corpus"

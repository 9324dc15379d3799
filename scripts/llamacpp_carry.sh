#!/usr/bin/env bash
# Packs llama.cpp's source for the GPU machine (no package registry there): the tree that
# llama-cpp-python's source distribution vendors under vendor/llama.cpp, at the version our reference
# data was made with, less what llama-bench does not need (models, docs, tests, examples, web UI, the
# other tools), into .device-carry/llamacpp-src.tgz (about 6 MB; the device tool carries 64 MiB).
# scripts/llamacpp_build.sh builds llama-bench from it there. Usage:
#   bash scripts/llamacpp_carry.sh [SDIST.tar.gz]   (default: downloads it from PyPI)
set -euo pipefail
VERSION=0.3.36  # llama-cpp-python, as tests/data/llm/reference.json was made with
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.device-carry/llamacpp-src.tgz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sdist=${1:-}
if [[ -z $sdist ]]; then
  python3 -m pip download --quiet "llama-cpp-python==$VERSION" --no-binary :all: --no-deps -d "$work"
  sdist=$work/llama_cpp_python-$VERSION.tar.gz
fi
tar xzf "$sdist" -C "$work"
src=$work/llama_cpp_python-$VERSION/vendor/llama.cpp
[[ -f $src/CMakeLists.txt ]] || { echo "llamacpp_carry: $sdist holds no vendor/llama.cpp" >&2; exit 1; }
rm -rf "$src"/{models,docs,media,tests,examples,.github,pocs,app,tools/ui,tools/tts,tools/mtmd}
# The top-level CMakeLists adds app/ and pocs/ (with LLAMA_BUILD_APP / EXAMPLES off they are skipped,
# but keep empty ones so any setting configures); tools/ keeps llama-bench alone.
mkdir -p "$src/app" "$src/pocs"
: > "$src/app/CMakeLists.txt"; : > "$src/pocs/CMakeLists.txt"
printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' > "$src/tools/CMakeLists.txt"
find "$src/tools" -mindepth 1 -maxdepth 1 -type d ! -name llama-bench -exec rm -rf {} +
echo "$VERSION" > "$src/GPUNVME_PINNED_VERSION"
mkdir -p "$(dirname "$out")"
tar czf "$out" -C "$(dirname "$src")" llama.cpp
echo "llamacpp_carry: $out ($(du -h "$out" | cut -f1), llama-cpp-python $VERSION)"

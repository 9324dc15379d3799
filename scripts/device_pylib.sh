#!/usr/bin/env bash
# The Python packages the server (python -m gpunvme.serve) and tests/python/serve_check.py need, for the
# GPU machine's Python 3.12 (/opt/torch/.venv, which has numpy and torch but no package registry): wheels
# downloaded here for CPython 3.12 on manylinux x86_64 and unpacked into DIR, a folder for PYTHONPATH that
# the device tool carries (its carry is 64 MiB in all, so this stays small: no numpy, which the venv has,
# and no tests or docs folders).
#   scripts/device_pylib.sh .device-carry/pylib312
#   (there) PYTHONPATH=.device-carry/pylib312:build/runtime/python /opt/torch/.venv/bin/python3 ...
set -euo pipefail
dir=${1:?usage: scripts/device_pylib.sh DIR (e.g. .device-carry/pylib312)}
# What serve_check.py's use_test_venv lists, less the Gemma package (the GPU run uses a generated model).
packages=(aiohttp openai prometheus_client jinja2 gguf)
# Present in /opt/torch/.venv, or not needed to import the above (gguf's optional tools).
skip='^(numpy|torch|pip|setuptools|wheel)-'
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --implementation cp --abi cp312 --abi abi3 \
  --abi none --dest "$wheels" "${packages[@]}"
rm -rf "$dir"
mkdir -p "$dir"
for w in "$wheels"/*.whl; do
  name=$(basename "$w")
  if [[ $name =~ $skip ]]; then echo "left out: $name"; continue; fi
  python3 -m zipfile -e "$w" "$dir"
done
# Not imported at run time: test suites, docs, caches, type stubs, the C and Cython sources of the
# extensions; and the extensions' symbol tables (strip: 18 MB of .so become about 6).
find "$dir" -depth -type d \( -name tests -o -name test -o -name docs -o -name __pycache__ \) -exec rm -rf {} +
find "$dir" -type f \( -name '*.pyi' -o -name '*.c' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' \) -delete
if command -v strip >/dev/null; then find "$dir" -name '*.so' -exec strip --strip-unneeded {} +; fi
ls "$dir" | sed -n 's/-[0-9][^-]*\.dist-info$//p' | tr '\n' ' '
echo
echo "$dir: $(du -sh "$dir" | cut -f1) ($(du -sb "$dir" | cut -f1) bytes)"

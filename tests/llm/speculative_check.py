#!/usr/bin/env python3
"""Batched prompt passes and speculative decoding change no token and no logit, end to end: every case runs
token by token (--batch 1, the engine before batching) and then with the prompt in one pass, in chunks that
end mid-prompt and cross the sliding window, and with prompt-lookup drafts of up to 4 and 16 tokens verified
per pass; each variant's tokens and all its logits (--logits-out) must be the baseline's to the bit. The
baseline's tokens are held to llama.cpp's as reference_check.py does (tests/data/llm/reference.json). A
seeded sampling run with and without drafts must give the same tokens too (verification consumes the
sampler's random numbers in plain decoding's order). Some drafted tokens must be accepted over the run,
so that verification is seen keeping tokens, not only rejecting them.
  speculative_check.py --llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme [--path cpu|gpu] [--models DIR]
                       [--gemma] [--only NAME...]
--gemma adds the real Gemma 3 270M (one reference case and a repetitive text; minutes on a CPU, seconds on
a GPU).
Prints per model the tokens per decoding pass and the acceptance. Exit 77 without the reference file or
without any model.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_check import EXACT_GPU, REFERENCE, compare_case, deploy, files_equal, model_path  # noqa: E402

# Generated models with every rule the batched pass has: the sliding window (gemma3, window 16), MoE
# routing per token, QKV bias, a k-quant (every weight type: tests/llm/test_batched.cpp, to the bit).
DEFAULT_MODELS = ["gemma3-q8_0", "llama-moe-q4_k", "qwen2-q4_k"]
VARIANTS = [
    ("whole prompt in one pass", ["--batch", "512"]),
    ("prompt in passes of 3", ["--batch", "3"]),
    # --warmup's untimed passes (the first chunk, one token) must leave nothing behind in the KV cache
    ("lookup drafts k=4, prompt passes of 5, after a warm-up", ["--draft", "lookup", "--draft-k", "4", "--batch", "5", "--warmup"]),
    ("lookup drafts k=16", ["--draft", "lookup", "--draft-k", "16"]),
]
GEMMA_VARIANTS = [VARIANTS[0], ("lookup drafts k=8", ["--draft", "lookup"])]  # the real model is slow on a CPU
SAMPLING = ["--temp", "0.9", "--seed", "11"]
REPETITIVE = ("Shopping list: apples, pears, milk, bread, eggs.\nShopping list (copy): apples, pears, milk,"
              " bread, eggs.\nShopping list (copy):")


def run(a, device, prompt, steps, workdir, label, extra):
    trace = os.path.join(workdir, f"trace-{label}.jsonl")
    logits = os.path.join(workdir, f"logits-{label}.bin")
    out = os.path.join(workdir, f"run-{label}.json")
    cmd = [a.llm, "--device", device, "-n", str(steps), "--ignore-eos", "--path", a.path, "--trace", trace,
           "--logits-out", logits, "--json-out", out]
    cmd += ["--prompt", prompt["text"]] if "text" in prompt else ["--prompt-ids", ",".join(map(str, prompt["ids"]))]
    # Bitwise comparisons: on the GPU, every pass on the FP32 kernels (reference_check.EXACT_GPU).
    subprocess.run(cmd + (EXACT_GPU if a.path == "gpu" else []) + extra, check=True, stdout=subprocess.DEVNULL)
    with open(trace) as f:
        steps_seen = [json.loads(line) for line in f]
    with open(out) as f:
        return [s["token"] for s in steps_seen], steps_seen, logits, json.load(f)


def check_prompt(a, device, name, prompt, steps, workdir, variants, ref_case=None):
    """Failures (strings) and the draft runs' JSON."""
    failures, drafted = [], []
    base_tokens, base_trace, base_logits, _ = run(a, device, prompt, steps, workdir, "base", ["--batch", "1"])
    if ref_case is not None:
        status, detail, _ = compare_case(base_trace, ref_case)
        if status == "FAIL":
            failures.append(f"{name} {prompt['label']}: token by token, not llama.cpp's tokens: {detail}")
    for label, extra in variants:
        tokens, _, logits, j = run(a, device, prompt, steps, workdir, "variant", extra)
        if tokens != base_tokens:
            failures.append(f"{name} {prompt['label']}, {label}: tokens {tokens} differ from token by token {base_tokens}")
        elif not files_equal(logits, base_logits):
            failures.append(f"{name} {prompt['label']}, {label}: the same tokens but logits not bitwise equal")
        if "--draft" in extra:
            drafted.append(j)
    s_tokens = run(a, device, prompt, steps, workdir, "sampled", ["--batch", "1"] + SAMPLING)[0]
    d_tokens, _, _, j = run(a, device, prompt, steps, workdir, "sampled-draft", SAMPLING + ["--draft", "lookup"])
    drafted.append(j)
    if s_tokens != d_tokens:
        failures.append(f"{name} {prompt['label']}: seeded sampling with drafts gave {d_tokens}, without {s_tokens}")
    return failures, drafted


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm", required=True)
    ap.add_argument("--gpunvme", required=True)
    ap.add_argument("--path", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--models", help="directory of the generated models (default: a temporary one)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--gemma", action="store_true", help="also the real Gemma 3 270M")
    a = ap.parse_args()
    if not os.path.exists(REFERENCE):
        print(f"SKIP: {REFERENCE} missing (scripts/llm/reference.py makes it)")
        return 77
    ref = json.load(open(REFERENCE))
    tmp = tempfile.TemporaryDirectory()
    models_dir = a.models or tmp.name
    os.makedirs(models_dir, exist_ok=True)
    failures, checked, accepted = [], 0, 0
    for name in a.only or DEFAULT_MODELS + (["gemma3-270m"] if a.gemma else []):
        entry = ref["models"][name]
        path = model_path(name, entry, models_dir)
        if path is None:
            print(f"{name}: not checked (no gguf-py to write it, or the model package is not installed)")
            continue
        checked += 1
        device = deploy(a.gpunvme, path, tmp.name)
        real = name == "gemma3-270m"
        prompts = [({"label": f"case {k}", "ids": c["prompt_ids"]}, c) for k, c in enumerate(entry["cases"])]
        if real:
            prompts = prompts[:1] + [({"label": "repetitive text", "text": REPETITIVE}, None)]
        else:  # a prompt longer than the window (16) and than every chunk, ids spread over the vocabulary
            prompts.append(({"label": "40-token prompt", "ids": [(i * 7919 + 13) % 256 for i in range(40)]}, None))
        drafted = []
        for prompt, case in prompts:
            steps = ref["steps"] if case is not None else 24
            f, d = check_prompt(a, device, name, prompt, steps, tmp.name, GEMMA_VARIANTS if real else VARIANTS, case)
            failures += f
            drafted += d
        os.remove(device[len("emu:"):])
        passes = sum(j["decode_passes"] for j in drafted)
        gen = sum(j["generated_tokens"] - 1 for j in drafted)
        d_tok, acc = sum(j["drafted_tokens"] for j in drafted), sum(j["accepted_tokens"] for j in drafted)
        print(f"{name} ({a.path}): {len(prompts)} prompts x {len(GEMMA_VARIANTS if real else VARIANTS) + 2} variants "
              f"equal to token by token; with drafts {gen / max(1, passes):.2f} tokens per pass, {acc} of {d_tok} "
              f"drafted tokens accepted")
        accepted += acc
    if checked and accepted == 0:
        failures.append("no drafted token was accepted in any run: verification was never seen keeping one")
    for f in failures:
        print("FAIL " + f)
    if failures:
        return 1
    return 0 if checked else 77


if __name__ == "__main__":
    sys.exit(main())

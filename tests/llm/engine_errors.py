#!/usr/bin/env python3
"""The engine on bad input, as a careless or hostile user would give it: every case must end with exit
status 1 or 2 and a message naming the tensor, the type or the limit — never a crash, never text.
  engine_errors.py --llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme
Exit 77 (skipped) without gguf-py.
"""
import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "llm"))
from llm_files import use_test_venv  # noqa: E402
use_test_venv(["gguf", "numpy"])

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "llm"))
try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    import make_models as mm
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)


def write_variant(path, drop=None, retype=None, arch="llama", name="variant", rope=None, nan=None, vocab=None, ctx=512):
    """A small llama-layout model, with one tensor left out or stored as an unsupported type; or with another
    general.name, rope.dimension_count, context length, a NaN in tensor `nan`, or a vocabulary (mm.BpeVocab) of any size."""
    s = mm.Shape(ctx=ctx)
    rng = np.random.default_rng(5)
    w = gguf.GGUFWriter(path, arch)
    mm.common_header(w, arch, s, name, vocab)
    w.add_rope_dimension_count(s.head_dim if rope is None else rope)

    def put(name, arr, qt):
        if name == drop:
            return
        if name == retype:
            w.add_tensor(name, rng.integers(0, 256, (arr.shape[0], arr.shape[1] // 256 * 84), dtype=np.uint8), raw_dtype=T.Q2_K)
            return
        if name == nan:
            arr = arr.copy()
            arr.flat[3] = np.nan
        mm.add(w, name, arr, qt)

    put("token_embd.weight", mm.weight(rng, T.Q8_0, s.vocab, s.hidden), T.Q8_0)
    for i in range(s.layers):
        put(f"blk.{i}.attn_norm.weight", mm.norm(rng, s.hidden), T.F32)
        for n, rows in (("attn_q", s.hidden), ("attn_k", 128), ("attn_v", 128), ("attn_output", s.hidden)):
            put(f"blk.{i}.{n}.weight", mm.weight(rng, T.Q8_0, rows, s.hidden), T.Q8_0)
        put(f"blk.{i}.ffn_norm.weight", mm.norm(rng, s.hidden), T.F32)
        put(f"blk.{i}.ffn_gate.weight", mm.weight(rng, T.Q8_0, s.ffn, s.hidden), T.Q8_0)
        put(f"blk.{i}.ffn_up.weight", mm.weight(rng, T.Q8_0, s.ffn, s.hidden), T.Q8_0)
        put(f"blk.{i}.ffn_down.weight", mm.weight(rng, T.Q8_0, s.hidden, s.ffn), T.Q8_0)
    put("output_norm.weight", mm.norm(rng, s.hidden), T.F32)
    put("output.weight", mm.weight(rng, T.Q8_0, s.vocab, s.hidden), T.Q8_0)
    mm.finish(w)


def qwen3_cases(d, device_with):
    """qwen3 / qwen3moe models (make_models.py's layout) with a key or tensor left out: the error names it."""
    def model(name, arch, omit, shape=None, **kw):
        p = os.path.join(d, name + ".gguf")
        mm.write_llama_like(p, arch, T.Q8_0, shape or (mm.QWEN3 if arch == "qwen3" else mm.QWEN3MOE), 5, omit=omit, **kw)
        return [device_with(p), "--prompt-ids", "1,2"]
    return [
        ("qwen3 without a Q norm", model("q3-qnorm", "qwen3", {"blk.1.attn_q_norm.weight"}),
         ["the model has no tensor blk.1.attn_q_norm.weight"]),
        ("qwen3moe without a K norm", model("q3m-knorm", "qwen3moe", {"blk.0.attn_k_norm.weight"}),
         ["the model has no tensor blk.0.attn_k_norm.weight"]),
        ("qwen3moe without a router", model("q3m-router", "qwen3moe", {"blk.1.ffn_gate_inp.weight"}),
         ["the model has no tensor blk.1.ffn_gate_inp.weight"]),
        # llama.cpp's width without the key is feed_forward_length / expert_used_count = 768 / 2, not the 256 the
        # experts have: refused, naming the key (with 512 / 2 = 256 it would run, as llama.cpp runs it).
        ("qwen3moe without expert_feed_forward_length", model("q3m-width", "qwen3moe", {"qwen3moe.expert_feed_forward_length"}),
         ["blk.0.ffn_gate_exps.weight has shape [256, 256, 8], the model's settings imply [256, 384, 8] (no "
          "qwen3moe.expert_feed_forward_length, so qwen3moe.feed_forward_length / expert_used_count = 768 / 2"]),
        ("qwen3moe without expert_count", model("q3m-count", "qwen3moe", {"qwen3moe.expert_count"}),
         ["model metadata has no qwen3moe.expert_count"]),
        ("qwen3 with one of the three QKV biases", model("q3-bias", "qwen3", {"blk.0.attn_q.bias", "blk.0.attn_v.bias"},
                                                         qkv_bias=True),
         ["layer 0 has some of attn_q.bias, attn_k.bias, attn_v.bias but not all three"]),
    ]


def gpt_oss_cases(d, device_with):
    """gpt-oss models (make_models.py's layout, Q8_0) with a sink, bias or norm tensor left out, or a window
    wider than the context: the error names the tensor or the keys. (An MXFP4 tensor whose rows are not
    whole 32-element blocks is refused by the GGUF parser, naming the tensor: gguf-unit.)"""
    def model(name, omit=(), shape=None):
        p = os.path.join(d, name + ".gguf")
        mm.write_gpt_oss(p, T.Q8_0, T.Q8_0, shape or mm.GPT_OSS, 5, omit=omit)
        return [device_with(p), "--prompt-ids", "1,2"]
    wide = mm.Shape(**{**mm.GPT_OSS.__dict__, "window": 1024})
    return [
        ("gpt-oss without a sink", model("go-sink", {"blk.1.attn_sinks.weight"}),
         ["the model has no tensor blk.1.attn_sinks.weight"]),
        ("gpt-oss without an output bias", model("go-bo", {"blk.0.attn_output.bias"}),
         ["the model has no tensor blk.0.attn_output.bias"]),
        ("gpt-oss without a K bias", model("go-bk", {"blk.3.attn_k.bias"}),
         ["the model has no tensor blk.3.attn_k.bias"]),
        ("gpt-oss without a router bias", model("go-router-b", {"blk.2.ffn_gate_inp.bias"}),
         ["the model has no tensor blk.2.ffn_gate_inp.bias"]),
        ("gpt-oss without an expert bias", model("go-down-b", {"blk.1.ffn_down_exps.bias"}),
         ["the model has no tensor blk.1.ffn_down_exps.bias"]),
        ("gpt-oss without its FFN norm", model("go-norm", {"blk.0.post_attention_norm.weight"}),
         ["the model has no tensor blk.0.post_attention_norm.weight"]),
        ("gpt-oss without a window", model("go-nowin", {"gpt-oss.attention.sliding_window"}),
         ["model metadata has no gpt-oss.attention.sliding_window"]),
        ("gpt-oss with a window wider than the context", model("go-win", shape=wide),
         ["gpt-oss.attention.sliding_window = 1024 is larger than gpt-oss.context_length = 512"]),
    ]


def report(what, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
    return ok


def run_checks(a, d, write_variant, device_with):
    """Cases that get past the model line: weights holding NaN, and a hostile general.name."""
    out = []
    p = os.path.join(d, "nan.gguf"); write_variant(p, nan="blk.1.ffn_norm.weight")
    r = subprocess.run([a.llm, "--device", device_with(p), "--prompt-ids", "1,2", "-n", "4", "--path", "cpu"],
                       capture_output=True, text=True, timeout=120)
    out.append(report("weights holding NaN", r.returncode == 1 and "are not finite" in r.stderr and
                      "blk.1.ffn_norm.weight (element 3 is NaN)" in r.stderr and "tokens:" not in r.stdout,
                      f"exit {r.returncode}: {r.stderr.strip()}"))
    # qwen3moe without expert_feed_forward_length whose feed_forward_length / expert_used_count is the experts'
    # width (512 / 2): it runs, as llama.cpp runs it, and computes what the same model with the key computes.
    wide = mm.Shape(**{**mm.QWEN3MOE.__dict__, "ffn": 512})
    logits = []
    for name, omit in (("q3m-key", ()), ("q3m-nokey", {"qwen3moe.expert_feed_forward_length"})):
        p = os.path.join(d, name + ".gguf"); mm.write_llama_like(p, "qwen3moe", T.Q8_0, wide, 5, omit=omit)
        dump = os.path.join(d, name + ".logits")
        r = subprocess.run([a.llm, "--device", device_with(p), "--prompt-ids", "1,2,3", "-n", "4", "--ignore-eos",
                            "--path", "cpu", "--logits-out", dump], capture_output=True, text=True, timeout=120)
        logits.append(open(dump, "rb").read() if r.returncode == 0 else None)
    out.append(report("qwen3moe without expert_feed_forward_length, llama.cpp's fallback width",
                      logits[0] is not None and logits[0] == logits[1], "logits equal to the model with the key"))
    # GPU-path options on the CPU executor: run, with a note naming them (not silently ignored).
    p = os.path.join(d, "plain.gguf"); write_variant(p)
    r = subprocess.run([a.llm, "--device", device_with(p), "--prompt-ids", "1", "-n", "2", "--path", "cpu", "--slots", "3",
                        "--vram-budget", "1G", "--gpus", "2"], capture_output=True, text=True, timeout=120)
    out.append(report("GPU-path options on the CPU executor", r.returncode == 0 and
                      "ignores --vram-budget, --slots, --gpus: they are the GPU path's" in r.stderr, f"exit {r.returncode}: {r.stderr.strip()}"))
    r = subprocess.run([a.llm, "--device", device_with(p), "--prompt-ids", "1", "-n", "2", "--gpus", "0"],
                       capture_output=True, text=True, timeout=120)
    out.append(report("--gpus 0", r.returncode == 2 and "--gpus 0: give a count of 1 or more, or device ids (device=0 for GPU 0 alone"
                      in r.stderr, f"exit {r.returncode}: {r.stderr.strip()}"))
    # --gpus as CUDA device ids (engine/gpu_ids.h): a bad list is a usage error before any device is read.
    for gpus, want in (("0,2,0", "--gpus 0,2,0: GPU 0 is listed twice: give each GPU once"),
                       ("1,x", "--gpus takes a count, 2, or CUDA device ids: 0,2, or device=1 for one GPU"),
                       ("device=", "--gpus takes a count, 2, or CUDA device ids: 0,2, or device=1 for one GPU"),
                       ("0,5000", "--gpus: 5000 is not in 0..1023")):
        r = subprocess.run([a.llm, "--device", device_with(p, deploy=False), "--prompt-ids", "1", "-n", "2", "--gpus", gpus],
                           capture_output=True, text=True, timeout=120)
        out.append(report(f"--gpus {gpus}", r.returncode == 2 and want in r.stderr and "model:" not in r.stdout,
                          f"exit {r.returncode}: {r.stderr.strip()}"))
    # A GPU CUDA does not see: named, with the count and CUDA_VISIBLE_DEVICES, exit 1, no tokens. Without a GPU
    # the GPU path itself is refused first (--path gpu: why).
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
    sees = "CUDA sees 1 GPU here (id 0), CUDA_VISIBLE_DEVICES=0 chooses and renumbers them"
    for gpus, named in (("0,99", f"--gpus 0,99: no GPU 99: {sees}: give ids below 1"),
                        ("device=99", f"--gpus device=99: no GPU 99: {sees}: give ids below 1"),
                        ("2", f"--gpus 2: no GPU 1: {sees}: use --gpus 1 or fewer")):
        r = subprocess.run([a.llm, "--device", device_with(p, deploy=False), "--prompt-ids", "1", "-n", "2", "--path", "gpu",
                            "--gpus", gpus], capture_output=True, text=True, timeout=120, env=env)
        out.append(report(f"--gpus {gpus}, a GPU not there", r.returncode == 1 and "tokens:" not in r.stdout and
                          (named in r.stderr or "--path gpu: " in r.stderr), f"exit {r.returncode}: {r.stderr.strip()}"))
    # Where 2 GPUs are (else refused as above, naming GPU 1 or --path gpu): a budget leaving GPU 0 no layer is
    # refused naming it; GPU 1 failing at the fourth pass (the test hook GPUNVME_TEST_GPU_FAIL=ID:PASS,
    # multi_gpu_executor.cpp) ends the run with exit 1 naming GPU 1, no tokens: line, no JSON, bounded; the
    # tokens printed before it end their line.
    two = ("no GPU 1: CUDA sees", "--path gpu: ")
    js = os.path.join(d, "failed-run.json")
    for what, extra, env, want in (
            ("a budget leaving a GPU no layer", ["--vram-budget", "1,1G"], dict(os.environ),
             ["--vram-budget gives GPU 0 ", "it would hold no layer"]),
            ("a GPU failing mid-run", ["--resident", "2", "--json-out", js], dict(os.environ, GPUNVME_TEST_GPU_FAIL="1:3"),
             ["llm: GPU 1 (pass): a failure injected by GPUNVME_TEST_GPU_FAIL=1:3"])):
        r = subprocess.run([a.llm, "--device", device_with(p, deploy=False), "--prompt-ids", "1,2", "-n", "8", "--ignore-eos",
                            "--path", "gpu", "--gpus", "2"] + extra, capture_output=True, text=True, timeout=120, env=env)
        out.append(report(f"--gpus 2, {what}", r.returncode == 1 and "tokens:" not in r.stdout and not os.path.exists(js) and
                          (r.stdout == "" or r.stdout.endswith("\n")) and
                          (all(w in r.stderr for w in want) or any(w in r.stderr for w in two)), f"exit {r.returncode}: {r.stderr.strip()}"))
    # A name with a terminal escape and a newline: every tool prints it escaped (\e, \n), never raw.
    p = os.path.join(d, "evil.gguf"); write_variant(p, name="evil\x1b[2Jname\nforged line")
    dev = device_with(p)
    img = dev[len("emu:"):]
    for argv in ([a.gpunvme, "deploy", p, "--device", f"emu:{img}"], [a.gpunvme, "ls", "--device", dev],
                 [a.gpunvme, "verify", "--device", dev], [a.llm, "--device", dev, "--prompt-ids", "1", "-n", "1", "--path", "cpu"]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        both = r.stdout + r.stderr
        ok = r.returncode == 0 and "\x1b" not in both and "evil\\e[2Jname\\nforged line" in both
        out.append(report(f"hostile name, {os.path.basename(argv[0])} {argv[1]}", ok, f"exit {r.returncode}"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm", required=True)
    ap.add_argument("--gpunvme", required=True)
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        def device_with(model, deploy=True):
            img = os.path.join(d, os.path.basename(model) + ".img")
            if deploy:
                subprocess.run([a.gpunvme, "deploy", model, "--device", f"emu:{img},size=64M"], check=True, stdout=subprocess.DEVNULL)
            return f"emu:{img}"

        good = os.path.join(d, "good.gguf")
        write_variant(good)
        cases = []
        p = os.path.join(d, "missing.gguf"); write_variant(p, drop="blk.1.ffn_up.weight")
        cases.append(("missing tensor", [device_with(p)], ["blk.1.ffn_up.weight"]))
        p = os.path.join(d, "q2k.gguf"); write_variant(p, retype="blk.0.attn_q.weight")
        cases.append(("unsupported type", [device_with(p)], ["blk.0.attn_q.weight", "Q2_K"]))
        p = os.path.join(d, "phi.gguf"); write_variant(p, arch="phi3")
        cases.append(("unsupported architecture", [device_with(p)], ["phi3", "llama", "qwen2", "gemma3"]))
        p = os.path.join(d, "evilarch.gguf"); write_variant(p, arch="x\x1b[31mred\nline")
        cases.append(("hostile architecture name, escaped", [device_with(p)], ["architecture 'x\\e[31mred\\nline'"]))
        dev = device_with(good)
        cases.append(("prompt past the context", [dev, "--prompt-ids", ",".join(["1"] * 500), "-n", "100"], ["512"]))
        cases.append(("token id outside the vocabulary", [dev, "--prompt-ids", "1,99999"], ["99999", "vocabulary"]))
        cases.append(("bad token id text", [dev, "--prompt-ids", "1,-2"], ["-2"]))
        cases.append(("text prompt, no vocabulary", [dev, "--prompt", "hello"], ["--prompt-ids"]))
        cases.append(("bad --resident", [dev, "--prompt-ids", "1", "--resident", "some"], ["--resident"]))
        cases.append(("bad --vram-budget", [dev, "--prompt-ids", "1", "--vram-budget", "12X"], ["--vram-budget", "12X"]))
        cases.append(("--vram-budget list of another length than --gpus", [dev, "--prompt-ids", "1", "--gpus", "2", "--vram-budget", "1G,2G,3G"],
                      ["--vram-budget has 3 values for --gpus 2", "one per GPU"]))
        cases.append(("--resident with budgets", [dev, "--prompt-ids", "1", "--resident", "1", "--ram-budget", "1G"],
                      ["--resident", "--ram-budget", "one or the other"]))
        cases.append(("--batch 0", [dev, "--prompt-ids", "1", "--batch", "0"], ["--batch must be at least 1"]))
        cases.append(("bad --batch", [dev, "--prompt-ids", "1", "--batch", "many"], ["--batch"]))
        cases.append(("unknown --draft", [dev, "--prompt-ids", "1", "--draft", "model"], ["--draft must be none or lookup"]))
        cases.append(("--draft-k 0", [dev, "--prompt-ids", "1", "--draft", "lookup", "--draft-k", "0"], ["--draft-k must be 1..31"]))
        cases.append(("--draft-k too large", [dev, "--prompt-ids", "1", "--draft", "lookup", "--draft-k", "32"], ["--draft-k: 32 is too large"]))
        cases.append(("--expert-read too small", [dev, "--prompt-ids", "1", "--expert-read", "1K"], ["--expert-read must be 4K to 1G"]))
        cases.append(("--expert-read too large", [dev, "--prompt-ids", "1", "--expert-read", "2G"], ["--expert-read must be 4K to 1G"]))
        cases.append(("bad --expert-read", [dev, "--prompt-ids", "1", "--expert-read", "lots"], ["--expert-read"]))
        cases.append(("bad --expert-window", [dev, "--prompt-ids", "1", "--expert-window", "8Q"], ["--expert-window", "8Q"]))
        cases.append(("bad --expert-pregate", [dev, "--prompt-ids", "1", "--expert-pregate", "two"], ["--expert-pregate must be a number of experts", "two"]))
        cases.append(("bad --expert-pregate-first", [dev, "--prompt-ids", "1", "--expert-pregate-first", "-1"], ["--expert-pregate-first must be a number of experts", "-1"]))
        cases.append(("--draft-k without --draft", [dev, "--prompt-ids", "1", "--draft-k", "4"], ["--draft-k needs --draft lookup"]))
        cases.append(("--prompt and --prompt-ids", [dev, "--prompt", "hi", "--prompt-ids", "1"], ["--prompt and --prompt-ids"]))
        cases.append(("--ctx past the model's", [dev, "--prompt-ids", "1", "--ctx", "100000"],
                      ["--ctx 100000 is more than the model's context length (llama.context_length = 512)"]))
        cases.append(("--top-k with greedy decoding", [dev, "--prompt-ids", "1", "--top-k", "0"], ["--top-k applies to sampling"]))
        cases.append(("--seed with greedy decoding", [dev, "--prompt-ids", "1", "--seed", "3"], ["--seed applies to sampling"]))
        cases.append(("--resident past the layers", [dev, "--prompt-ids", "1", "--resident", "3"], ["--resident 3: the model has 2 layers"]))
        cases.append(("bad --path", [dev, "--prompt-ids", "1", "--path", "tpu"], ["--path must be auto, gpu or cpu, not 'tpu'"]))
        cases.append(("-n too large, named as typed", [dev, "--prompt-ids", "1", "-n", "99999999999"], ["-n: 99999999999 is too large"]))
        cases.append(("tokenize with -n", ["tokenize", "--device", dev, "--prompt-ids", "1", "-n", "3"], ["unknown option --n"]))
        p = os.path.join(d, "rope63.gguf"); write_variant(p, rope=63)
        cases.append(("odd rope.dimension_count", [device_with(p), "--prompt-ids", "1"], ["llama.rope.dimension_count = 63 is odd"]))
        p = os.path.join(d, "rope32.gguf"); write_variant(p, rope=32)
        cases.append(("llama with partial rotary", [device_with(p), "--prompt-ids", "1"],
                      ["llama.rope.dimension_count = 32 differs from the head size 64"]))
        p = os.path.join(d, "rope66.gguf"); write_variant(p, rope=66, arch="qwen2")
        cases.append(("rope.dimension_count past the head", [device_with(p), "--prompt-ids", "1"],
                      ["qwen2.rope.dimension_count = 66 is more than the head size 64"]))
        cases += qwen3_cases(d, device_with)
        cases += gpt_oss_cases(d, device_with)
        p = os.path.join(d, "longctx.gguf"); write_variant(p, ctx=2_000_000_000)
        cases.append(("--ctx past host memory", [device_with(p), "--prompt-ids", "1", "--ctx", "2000000000"],
                      ["the KV cache for a context of 2000000000 tokens", "a smaller --ctx"]))
        big = mm.llama3_vocab()
        p = os.path.join(d, "bigvocab.gguf"); write_variant(p, vocab=big)
        cases.append(("tokenizer larger than the embedding table", [device_with(p), "--prompt", "hi"],
                      [f"vocabulary has {len(big.tokens)} tokens (tokenizer.ggml.tokens) but its embedding table "
                       "token_embd.weight has 512 rows"]))
        empty = os.path.join(d, "empty.img")
        with open(empty, "wb") as f:
            f.truncate(16 << 20)
        cases.append(("device without a model", [f"emu:{empty}", "--prompt-ids", "1"], ["model"]))
        # A GGUF dd'ed at 1 MiB onto a namespace that ends before its last tensor (a truncated copy).
        trunc = os.path.join(d, "trunc.img")
        data = open(good, "rb").read()
        with open(trunc, "wb") as f:
            f.seek(1 << 20)
            f.write(data[: len(data) // 2])
            f.truncate(((1 << 20) + len(data) // 2 + 4095) // 4096 * 4096)
        cases.append(("truncated model", [f"emu:{trunc}", "--prompt-ids", "1"], ["truncated", "past the end"]))
        # A device a writer holds (gpunvme deploy takes an exclusive flock on the image): refused, naming it.
        held_model = os.path.join(d, "held.gguf")
        shutil.copyfile(good, held_model)
        held_img = device_with(held_model)[len("emu:"):]
        held = open(held_img, "rb")
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        cases.append(("device held by a writer", [f"emu:{held_img}", "--prompt-ids", "1"], ["in use"]))
        for what, args, words in cases:
            cpu = [] if "--path" in args else ["--path", "cpu"]
            argv = [a.llm, "--device"] + args + cpu if args and args[0].startswith("emu:") else [a.llm] + args
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            msg = r.stderr.strip().splitlines()[0] if r.stderr.strip() else ""
            ok = r.returncode in (1, 2) and any(wd in r.stderr for wd in words) and not r.stdout.strip().startswith("model:")
            print(f"{'ok  ' if ok else 'FAIL'} {what}: exit {r.returncode}: {msg}")
            failed += not ok
        held.close()
        checks = run_checks(a, d, write_variant, device_with)
        failed += sum(not ok for ok in checks)
        total = len(cases) + len(checks)
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

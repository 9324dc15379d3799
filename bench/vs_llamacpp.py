#!/usr/bin/env python3
"""The engine beside llama.cpp on the same GPU and the same GGUF files (issue 36), every weight in GPU
memory: prompt tokens/s (pp), decode tokens/s (tg), their ratios, and the decode's weight read rate
against a device-to-device copy measured in the same run. Runs on the GPU machine:

  bench/vs_llamacpp.py --llama-bench B --llm build/examples/llm/llm --model 70b-q6_k=/dev/shm/70b.gguf ...

llama.cpp: `llama-bench -ngl 99 -p PP -n TG -r REPS -o json` (its own warm-up and repetitions). The engine:
`llm --path gpu` on the same file through the emulated controller (`emu:FILE`, the file unchanged), a
prompt of the largest pp's tokens (random ids, seeded) and one more token for each pp (its prompt time gives pp), and a one-token prompt then TG + 1
tokens with --ignore-eos for tg (its decode passes, from an empty context as llama-bench's tg); each with
--warmup (one untimed pass of the prompt's shape and one of a single token first, as llama-bench warms
up). Every engine run must have generated the tokens asked
for, else this prints an error, not a number. Host CPU: each process's user + system time
(getrusage of the children), model loading included, and the engine's decode-thread CPU."""
import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time


def cpu_of(before, after):
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(cmd):
    """Runs cmd to its end: (returncode, stdout, stderr, wall s, CPU s of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p.returncode, p.stdout, p.stderr, wall, cpu_of(before, after)


def fail(msg):
    print(f"vs_llamacpp: {msg}", file=sys.stderr)
    sys.exit(1)


COPY_PROBE = """
import json, torch
n, reps = {n}, {reps}
a = torch.empty(n, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a); b.copy_(a); torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(reps): b.copy_(a)
e.record(); torch.cuda.synchronize()
print(json.dumps([2 * n * reps / (s.elapsed_time(e) / 1e3), torch.cuda.get_device_name(0)]))
"""
TORCH_PYTHONS = [sys.executable, "/opt/torch/.venv/bin/python"]  # the GPU machine's PyTorch lives in the second


def copy_bandwidth(gib=8, reps=10):
    """Device-to-device copy on this GPU (PyTorch, in a process of its own that frees the GPU memory it
    took): bytes moved (read + write) per second, and the card."""
    code = COPY_PROBE.format(n=gib << 30, reps=reps)
    for py in TORCH_PYTHONS:
        if os.path.exists(py):
            p = subprocess.run([py, "-c", code], capture_output=True, text=True)
            if p.returncode == 0:
                bps, card = json.loads(p.stdout.strip().splitlines()[-1])
                return bps, card
    fail("no Python with PyTorch and a GPU measured the device-to-device copy (tried " + ", ".join(TORCH_PYTHONS) + ")")


def gguf_facts(path):
    """One read of the GGUF's header: its architecture, tensor count, vocabulary size (the embedding's
    rows), and the bytes of the weights one decoded token reads: every tensor but the token embedding
    (one row of it is read), unless the embedding is also the output head (no output.weight); of a
    routed-expert tensor (*_exps) only the share of the experts a token uses (ARCH.expert_used_count of
    ARCH.expert_count), as a router picks that many per layer."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    sizes = {t.name: int(t.n_bytes) for t in r.tensors}
    embd = next((t for t in r.tensors if t.name == "token_embd.weight"), None)
    vocab = int(embd.shape[-1]) if embd is not None and len(embd.shape) > 1 else 32000
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")

    def key(name):
        f = r.fields.get(f"{arch}.{name}")
        return int(f.parts[-1][0]) if f is not None else 0
    n_expert, n_used = key("expert_count"), key("expert_used_count")
    share = n_used / n_expert if n_expert and n_used else 1.0
    total = sum(b * share if "_exps." in name else b for name, b in sizes.items())
    if "output.weight" in sizes:
        total -= sizes.get("token_embd.weight", 0)
    return {"weight_bytes": int(total), "arch": arch, "tensors": len(sizes), "vocab": vocab,
            "experts_used_share": share}


def llama_bench(binary, path, pps, tg, reps):
    cmd = [binary, "-m", path, "-ngl", "99", "-p", ",".join(map(str, pps)) or "0", "-n", str(tg), "-r", str(reps), "-o", "json"]
    rc, out, err, wall, cpu = run(cmd)
    if rc != 0:
        fail(f"llama-bench failed on {path} ({rc}):\n{err[-3000:]}")
    rows = json.loads(out)
    res = {"cmd": " ".join(cmd), "wall_seconds": wall, "cpu_seconds": cpu, "rows": rows}
    for r in rows:
        key = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        res[key] = {"tokens_per_second": r["avg_ts"], "stddev": r["stddev_ts"]}
    return res


def engine(binary, path, n_prompt, n_gen, vocab_hint, seed=1):
    rnd = random.Random(seed)
    ids = ",".join(str(rnd.randrange(1, vocab_hint)) for _ in range(n_prompt))
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        jpath = f.name
    cmd = [binary, "--device", f"emu:{path}", "--path", "gpu", "--prompt-ids", ids, "-n", str(n_gen), "--ignore-eos",
           "--batch", str(n_prompt), "--ctx", str(n_prompt + n_gen + 1), "--warmup", "--json-out", jpath]
    rc, out, err, wall, cpu = run(cmd)
    if rc != 0:
        fail(f"the engine failed on {path} ({rc}):\n{err[-3000:]}")
    with open(jpath) as f:
        j = json.load(f)
    os.unlink(jpath)
    if j.get("prompt_tokens") != n_prompt or j.get("generated_tokens") != n_gen or "GPU" not in j.get("executor", ""):
        fail(f"the engine's run on {path} did not do what was asked (prompt {j.get('prompt_tokens')} of {n_prompt}, "
             f"generated {j.get('generated_tokens')} of {n_gen}, executor {j.get('executor')!r})")
    j["cmd_shape"] = f"llm --device emu:{path} --path gpu --prompt-ids <{n_prompt} random ids> -n {n_gen} --ignore-eos --batch {n_prompt} --warmup"
    j["process_wall_seconds"], j["process_cpu_seconds"] = wall, cpu
    j.pop("tokens", None)
    return j


def measure_model(args, label, path):
    facts = gguf_facts(path)
    wbytes, arch, n_tensors, vocab = facts["weight_bytes"], facts["arch"], facts["tensors"], min(facts["vocab"], 32000)
    pps = sorted(args.pp)
    print(f"{label}: {arch}, {n_tensors} tensors, {wbytes / 1e9:.2f} GB of weights per token", flush=True)
    ref = llama_bench(args.llama_bench, path, pps, args.tg, args.reps)
    ours = {}
    # tg as llama-bench measures it: from (almost) an empty context, a one-token prompt then tg passes.
    j = engine(args.llm, path, 1, args.tg + 1, vocab)
    ours[f"tg{args.tg}"] = {"tokens_per_second": j["tokens_per_second"], "context_from": 1, "run": j}
    for pp in pps:
        j = engine(args.llm, path, pp, 1, vocab)
        ours[f"pp{pp}"] = {"tokens_per_second": pp / j["prompt_seconds"], "run": j}
    return {"label": label, "path": path, "arch": arch, "weight_bytes_per_token": wbytes,
            "llama_cpp": ref, "engine": ours}


def table(results, copy_bps, card, tg):
    keys = sorted({k for r in results for k in r["engine"] if k.startswith("pp")}, key=lambda k: int(k[2:])) + [f"tg{tg}"]
    head = "| model | " + " | ".join(f"{k} ours | {k} llama.cpp | ratio" for k in keys) + " | decode GB/s | % of copy | engine CPU s (decode) |"
    lines = [f"card: {card}; device-to-device copy {copy_bps / 1e12:.2f} TB/s (read + write)", head,
             "|" + "---|" * (1 + 3 * len(keys) + 3)]
    for r in results:
        cells = []
        for k in keys:
            a = r["engine"][k]["tokens_per_second"]
            b = r["llama_cpp"].get(k, {}).get("tokens_per_second")
            cells += [f"{a:.1f}", f"{b:.1f}" if b else "-", f"{a / b:.2f}" if b else "-"]
        tgk = r["engine"][f"tg{tg}"]
        gbs = tgk["tokens_per_second"] * r["weight_bytes_per_token"]
        cells += [f"{gbs / 1e9:.0f}", f"{100 * gbs / copy_bps:.0f} %", f"{tgk['run']['engine_cpu_seconds']:.2f}"]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", required=True, help="llama.cpp's llama-bench (scripts/llamacpp_build.sh)")
    ap.add_argument("--llm", required=True, help="the engine's binary (build/examples/llm/llm)")
    ap.add_argument("--model", action="append", required=True, metavar="LABEL=GGUF", help="repeat for each model")
    ap.add_argument("--pp", default="512,2048", help="prompt lengths (default 512,2048; none: decode only)")
    ap.add_argument("--tg", type=int, default=128, help="decoded tokens (default 128)")
    ap.add_argument("--reps", type=int, default=3, help="llama-bench repetitions (default 3)")
    ap.add_argument("--json-out", help="every number, raw")
    args = ap.parse_args()
    try:
        args.pp = [] if args.pp == "none" else [int(x) for x in args.pp.split(",")]
    except ValueError:
        fail(f"--pp takes comma-separated token counts or none, not {args.pp!r}")
    if any(p < 1 for p in args.pp) or args.tg < 1 or args.reps < 1:
        fail("--pp, --tg and --reps must be positive")
    models = []
    for m in args.model:
        label, sep, path = m.partition("=")
        if not sep or not os.path.isfile(path):
            fail(f"--model takes LABEL=GGUF of an existing file, not {m!r}")
        models.append((label, path))
    copy_bps, card = copy_bandwidth()
    results = []
    for label, path in models:  # each model's numbers are written as soon as it is done (a run may be cut short)
        results.append(measure_model(args, label, path))
        print(table(results[-1:], copy_bps, card, args.tg), flush=True)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump({"tool": "vs_llamacpp", "card": card, "copy_bytes_per_second": copy_bps, "pp": args.pp,
                           "tg": args.tg, "models": results}, f, indent=1)
    print(table(results, copy_bps, card, args.tg))


if __name__ == "__main__":
    main()

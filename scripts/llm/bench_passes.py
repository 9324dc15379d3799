#!/usr/bin/env python3
"""What batched passes and speculative verification buy, measured with the engine itself (issue #17):

 1. time to first token for prompts of 16, 128, 512 and 2048 tokens, the prompt in passes of --batch
    (default 512) against token by token (--batch 1), in the same run of this script;
 2. the cost of a pass against the tokens it carries: passes of k + 1 tokens for k = 0, 1, 2, 4, 8, 16
    (a speculative pass verifying k drafts), each timed over several passes, and the extra time per pass
    over a one-token pass;
 3. speculative decoding on real text (a fixed set of prompts: summaries, code, lists, prose): tokens per
    pass, acceptance and tokens/s with prompt-lookup drafts (--draft-k values) against plain decoding;
    the tokens must equal plain decoding's, else the prompt is reported as an error and no number.

Every figure comes from the engine's --json-out (prompt_seconds, prompt_passes, decode_passes, ...), with
the engine thread's CPU time beside the decode rates. Prints the tables and writes them as JSON.
  bench_passes.py --llm BUILD/examples/llm/llm (--device DEV | --model FILE.gguf --gpunvme BUILD/gpunvme)
                  [--json-out FILE] [--lengths 16,128,512,2048] [--ks 1,2,4,8,16] [--draft-ks 4,8,16]
                  [--new 128] [--baseline-max 512] [--skip ttft,cost,spec] [-- ENGINE ARGS...]
ENGINE ARGS go to every run (e.g. --path gpu --vram-budget 22G --ram-budget 0). --model deploys the file
onto an emulated namespace in a temporary image first. Prompts of token ids are spread over the first 256
ids of the vocabulary (any model); the text prompts need the model's own tokenizer (real models).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROMPTS = {  # category -> prompt (fixed: acceptance is measured on exactly these)
    "summary": "Summarize the following paragraph in two sentences.\n\nThe Rhine is a river that rises in the Swiss "
               "Alps, flows through Liechtenstein, Austria, Germany and France, and empties into the North Sea in the "
               "Netherlands. It is one of the major rivers of Europe, about 1,230 kilometres long. The Rhine has been "
               "a vital navigable waterway since Roman times, carrying trade and goods deep inland, and its valley is "
               "known for vineyards, castles and old towns.\n\nSummary: The Rhine",
    "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
            "    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\ndef factorial(n):\n    \"\"\"Return n factorial.\"\"\"\n",
    "list": "The planets of the solar system, in order from the Sun:\n1. Mercury\n2. Venus\n3. Earth\n4. Mars\n"
            "5. Jupiter\n6. Saturn\n7. Uranus\n8. Neptune\n\nThe same list in reverse order:\n1. Neptune\n",
    "prose": "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker. "
             "Every morning he opened his shop, wound every clock on the wall, and waited for",
}


def engine(a, extra, out):
    cmd = [a.llm, "--device", a.device, "--json-out", out, "--ignore-eos"] + extra + a.engine_args
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    with open(out) as f:
        return json.load(f)


def ids(n):
    return ",".join(str((i * 7919 + 13) % 256) for i in range(n))


def ttft(a, tmp):
    rows, per_pass = [], None
    for n in a.lengths:
        bat = engine(a, ["--prompt-ids", ids(n), "-n", "1", "--batch", str(a.batch)], os.path.join(tmp, "t.json"))
        row = {"prompt_tokens": n, "batched_seconds": bat["prompt_seconds"], "batched_passes": bat["prompt_passes"],
               # the pass's read time, the compute's wait on it, the engine thread's CPU (docs/performance.md)
               "io_seconds": bat.get("io_seconds"), "stall_seconds": bat.get("stall_seconds"),
               "engine_cpu_seconds": bat.get("engine_cpu_seconds")}
        if n <= a.baseline_max:
            one = engine(a, ["--prompt-ids", ids(n), "-n", "1", "--batch", "1"], os.path.join(tmp, "t.json"))
            row.update(token_by_token_seconds=one["prompt_seconds"], token_by_token_estimated=False)
            per_pass = one["prompt_seconds"] / one["prompt_passes"]
        elif per_pass is not None:  # stated as an estimate: n times the last measured token-by-token pass
            row.update(token_by_token_seconds=n * per_pass, token_by_token_estimated=True)
        else:
            row.update(token_by_token_seconds=None, token_by_token_estimated=None)
        tbt = row["token_by_token_seconds"]
        row["speedup"] = tbt / bat["prompt_seconds"] if tbt and bat["prompt_seconds"] > 0 else None
        # The yardstick: the batched prompt against as many one-token passes as it took passes.
        row["one_token_pass_seconds"] = per_pass
        row["vs_one_token_passes"] = bat["prompt_seconds"] / (bat["prompt_passes"] * per_pass) if per_pass else None
        rows.append(row)
    print(f"\nTime to first token (the prompt's passes; the first token is picked from the last pass's logits), "
          f"--batch {a.batch} against --batch 1:")
    print(f"{'prompt':>7} | {'token by token':>20} | {'batched':>20} | speedup | x one-token passes")
    for r in rows:
        tbt = "not measured" if r["token_by_token_seconds"] is None else f"{r['token_by_token_seconds']:.3f} s" + \
            (" (est.)" if r["token_by_token_estimated"] else "")
        sp = f"{r['speedup']:.1f}x" if r["speedup"] else "-"
        vs = f"{r['vs_one_token_passes']:.2f}" if r["vs_one_token_passes"] else "-"
        print(f"{r['prompt_tokens']:>7} | {tbt:>20} | {r['batched_seconds']:>9.3f} s {r['batched_passes']:>3} passes | {sp:>7} | {vs:>6}")
    if any(r["token_by_token_estimated"] for r in rows):
        print(f"(est.: prompts over --baseline-max {a.baseline_max} tokens: n x the last measured token-by-token pass)")
    return rows


def pass_cost(a, tmp):
    rows, base = [], None
    for k in [0] + a.ks:
        n = k + 1
        j = engine(a, ["--prompt-ids", ids(n * a.repeat), "-n", "1", "--batch", str(n)], os.path.join(tmp, "c.json"))
        per = j["prompt_seconds"] / j["prompt_passes"]
        base = per if k == 0 else base
        rows.append({"k": k, "tokens_per_pass": n, "passes": j["prompt_passes"], "seconds_per_pass": per,
                     "extra_seconds_per_pass": per - base, "extra_fraction": per / base - 1})
    print(f"\nCost of a pass of k + 1 tokens (a speculative pass verifying k drafts), mean of {a.repeat} passes:")
    print(f"{'k':>3} | {'per pass':>10} | {'extra over k=0':>14} | extra")
    for r in rows:
        print(f"{r['k']:>3} | {1e3 * r['seconds_per_pass']:>7.2f} ms | {1e3 * r['extra_seconds_per_pass']:>11.2f} ms | "
              f"{100 * r['extra_fraction']:>5.1f} %")
    return rows


def speculative(a, tmp):
    rows, errors = [], []
    for cat, text in PROMPTS.items():
        base = engine(a, ["--prompt", text, "-n", str(a.new)], os.path.join(tmp, "s.json"))
        for k in a.draft_ks:
            j = engine(a, ["--prompt", text, "-n", str(a.new), "--draft", "lookup", "--draft-k", str(k)], os.path.join(tmp, "s.json"))
            if j["tokens"] != base["tokens"]:
                errors.append(f"{cat}, k={k}: the tokens differ from plain decoding's: no figure")
                continue
            tps = lambda r: (r["generated_tokens"] - 1) / r["decode_seconds"] if r["decode_seconds"] > 0 else 0
            rows.append({"prompt": cat, "draft_k": k, "generated_tokens": j["generated_tokens"],
                         "plain_passes": base["decode_passes"], "passes": j["decode_passes"],
                         "tokens_per_pass": j["tokens_per_pass"], "drafted": j["drafted_tokens"],
                         "accepted": j["accepted_tokens"], "acceptance": j["acceptance_rate"],
                         "plain_tokens_per_second": tps(base), "tokens_per_second": tps(j),
                         "plain_engine_cpu_seconds": base["engine_cpu_seconds"], "engine_cpu_seconds": j["engine_cpu_seconds"]})
    print(f"\nSpeculative decoding, prompt-lookup drafts, {a.new} tokens per prompt (tokens equal to plain decoding's):")
    print(f"{'prompt':>8} {'k':>3} | {'passes':>13} | tok/pass | accepted | {'tokens/s (CPU s)':>30}")
    for r in rows:
        print(f"{r['prompt']:>8} {r['draft_k']:>3} | {r['plain_passes']:>5} -> {r['passes']:>4} | {r['tokens_per_pass']:>8.2f} | "
              f"{100 * r['acceptance']:>6.1f} % | {r['plain_tokens_per_second']:>7.2f} ({r['plain_engine_cpu_seconds']:.2f}) -> "
              f"{r['tokens_per_second']:>7.2f} ({r['engine_cpu_seconds']:.2f})")
    for k in a.draft_ks:
        sel = [r for r in rows if r["draft_k"] == k]
        if sel:
            gen, passes = sum(r["generated_tokens"] - 1 for r in sel), sum(r["passes"] for r in sel)
            print(f"{'all':>8} {k:>3} | tokens per pass over the set: {gen / passes:.2f}")
    for e in errors:
        print("ERROR " + e)
    return rows, errors


def main():
    argv = sys.argv[1:]
    engine_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", required=True)
    ap.add_argument("--device")
    ap.add_argument("--model")
    ap.add_argument("--gpunvme")
    ap.add_argument("--json-out")
    ap.add_argument("--lengths", default="16,128,512,2048")
    ap.add_argument("--ks", default="1,2,4,8,16")
    ap.add_argument("--draft-ks", default="4,8,16")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--baseline-max", type=int, default=512,
                    help="longest prompt also run token by token (default 512); longer ones are estimated from it")
    ap.add_argument("--repeat", type=int, default=8, help="passes timed per k (default 8)")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--skip", default="")
    a = ap.parse_args(argv)
    a.engine_args = engine_args
    a.lengths = [int(x) for x in a.lengths.split(",")]
    a.ks = [int(x) for x in a.ks.split(",")]
    a.draft_ks = [int(x) for x in a.draft_ks.split(",")]
    if a.batch < 1 or a.repeat < 1 or a.new < 2 or any(k < 1 or k > 31 for k in a.ks + a.draft_ks):
        ap.error("--batch, --repeat >= 1, --new >= 2, k in 1..31")
    with tempfile.TemporaryDirectory() as tmp:
        if a.model:
            if not a.gpunvme:
                ap.error("--model needs --gpunvme (to deploy it)")
            image = os.path.join(tmp, "model.img")
            size = (os.path.getsize(a.model) + (64 << 20)) >> 20
            subprocess.run([a.gpunvme, "deploy", a.model, "--device", f"emu:{image},size={size}M"], check=True,
                           stdout=subprocess.DEVNULL)
            a.device = f"emu:{image}"
        if not a.device:
            ap.error("give --device DEV or --model FILE")
        skip = set(a.skip.split(","))
        out = {"tool": "bench_passes", "version": 1, "device": a.device, "engine_args": a.engine_args}
        if "ttft" not in skip:
            out["time_to_first_token"] = ttft(a, tmp)
        if "cost" not in skip:
            out["pass_cost"] = pass_cost(a, tmp)
        errors = []
        if "spec" not in skip:
            out["speculative"], errors = speculative(a, tmp)
            out["errors"] = errors
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

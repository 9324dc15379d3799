#!/usr/bin/env python3
"""llm_make_model (examples/llm/tools) end to end, on its tiny shapes:
  - the GGUF it writes reads in llama.cpp's gguf-py with the declared metadata, tensor names, shapes and
    types (mxfp4: MXFP4 experts, Q8_0 elsewhere; rows not whole 256-blocks: llama.cpp's fallback, Q5_0 for
    q4_k); every quantized tensor dequantizes (gguf-py's own code) to finite values, centred, with a spread
    of about 1/sqrt(input size) (embeddings: about 1; gemma3's, tied to the output, as the real model's);
  - written straight onto an emulated namespace (deploy record included), the bytes equal the file's
    (`gpunvme verify --against`): generation is deterministic per byte range;
  - the engine (CPU executor) finds the model there and generates tokens that are not one repeated id, and
    the same tokens from the emulator's emu:gen namespace of that model (computed on read);
  - llama.cpp (llama-cpp-python 0.3.36, run by $LLAMA_CPP_PYTHON: llamacpp_gaps.py; skipped, saying so,
    without it) loads each file and, fed the engine's tokens, picks each of them or one within a near tie
    (NEAR_TIE, the reference check's least tolerance); the first token the same;
  - gemma3-270m has the real Gemma 3 270M GGUF's gemma3.* keys and values, tensor names and shapes
    (llm_files.gemma_path; skipped without it), and gemma3.vocab_size, which llama.cpp needs without a vocabulary;
  - bad options are refused with a message naming them.
  make_model_check.py --make-model BUILD/examples/llm_make_model --llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme
Exit 77 (skipped) without gguf-py.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "llm"))
from llm_files import gemma_path, use_test_venv  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)
use_test_venv(["gguf", "numpy"])
try:
    import numpy as np
    import gguf
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

# The declared shapes (model_shapes.cpp), written out independently of the tool.
SHAPES = {
    "tiny": dict(arch="llama", layers=2, hidden=256, heads=4, kv_heads=2, head=64, ffn=512, vocab=512, experts=0, used=0),
    "tiny-moe": dict(arch="llama", layers=2, hidden=256, heads=4, kv_heads=2, head=64, ffn=512, vocab=512, experts=8,
                     used=2),
    # llama.cpp's qwen3moe: heads of key_length (wider than hidden / heads here), per-head Q/K norms, no dense FFN.
    "tiny-qwen3moe": dict(arch="qwen3moe", layers=2, hidden=256, heads=4, kv_heads=2, head=128, ffn=256, vocab=512,
                          experts=8, used=2, dense_ffn=1024),
    # llama.cpp's gpt-oss: Q/K/V/output biases, a sink per head, post_attention_norm in place of ffn_norm, the
    # router and each expert stack with a bias; rows of 320 (not whole 256-element blocks, as gpt-oss's 2880).
    "tiny-gpt-oss": dict(arch="gpt-oss", layers=2, hidden=320, heads=8, kv_heads=2, head=64, ffn=320, vocab=512,
                         experts=8, used=4, dense_ffn=320, window=8),
    # llama.cpp's gemma3: per-head Q/K norms, post-norms after attention and FFN, output tied to token_embd;
    # rows of 320 not whole 256-element blocks (as the real 640), 6 layers so that one is global.
    "tiny-gemma3": dict(arch="gemma3", layers=6, hidden=320, heads=4, kv_heads=1, head=64, ffn=512, vocab=512,
                        experts=0, used=0, window=8),
}
Q = gguf.GGMLQuantizationType
TYPES = {"q4_k": (Q.Q4_K, Q.Q4_K), "q6_k": (Q.Q6_K, Q.Q6_K), "q8_0": (Q.Q8_0, Q.Q8_0),
         "mxfp4": (Q.Q8_0, Q.MXFP4)}  # (matrices, experts)
F32 = Q.F32
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}  # llama.cpp's quantizer, for rows not whole 256-element blocks
NEAR_TIE = 0.12  # logits: reference_check.py's least tolerance of a near tie


def expected_tensors(s, types):
    qt, et = types
    q, kv = s["heads"] * s["head"], s["kv_heads"] * s["head"]
    h, f, e = s["hidden"], s["ffn"], s["experts"]
    gpt_oss, gemma3 = s["arch"] == "gpt-oss", s["arch"] == "gemma3"
    out = {"output_norm.weight": ([h], F32)}

    def matrix(name, ne, ty):  # gpt-oss: each matrix with an F32 bias over its outputs (and experts)
        out[name + ".weight"] = (ne, FALLBACK.get(ty, ty) if ne[0] % 256 else ty)
        if gpt_oss:
            out[name + ".bias"] = (ne[1:], F32)
    embd = ([h, s["vocab"]], FALLBACK.get(qt, qt) if h % 256 else qt)
    out.update({"token_embd.weight": embd} if gemma3 else {"token_embd.weight": embd, "output.weight": embd})
    for i in range(s["layers"]):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = ([h], F32)
        if not gpt_oss:
            out[p + "ffn_norm.weight"] = ([h], F32)
        for norm in ["post_attention_norm"] * (gpt_oss or gemma3) + ["post_ffw_norm"] * gemma3:
            out[p + norm + ".weight"] = ([h], F32)
        for name, ne in (("attn_q", [h, q]), ("attn_k", [h, kv]), ("attn_v", [h, kv]), ("attn_output", [q, h])):
            matrix(p + name, ne, qt)
        if s["arch"] in ("qwen3moe", "gemma3"):
            out.update({p + "attn_q_norm.weight": ([s["head"]], F32), p + "attn_k_norm.weight": ([s["head"]], F32)})
        if gpt_oss:
            out[p + "attn_sinks.weight"] = ([s["heads"]], F32)
        if e:
            matrix(p + "ffn_gate_inp", [h, e], F32)
            matrix(p + "ffn_gate_exps", [h, f, e], et)
            matrix(p + "ffn_up_exps", [h, f, e], et)
            matrix(p + "ffn_down_exps", [f, h, e], et)
        else:
            for name, ne in (("ffn_gate", [h, f]), ("ffn_up", [h, f]), ("ffn_down", [f, h])):
                matrix(p + name, ne, qt)
    return out


def field(r, key):
    f = r.fields[key]
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0]


def check_file(path, shape, types):
    """Problems found in the file, as text (empty: none)."""
    s, bad = SHAPES[shape], []
    r = gguf.GGUFReader(path)
    a = s["arch"] + "."
    meta = {"general.architecture": s["arch"], a + "block_count": s["layers"], a + "embedding_length": s["hidden"],
            a + "attention.head_count": s["heads"], a + "attention.head_count_kv": s["kv_heads"],
            a + "feed_forward_length": s.get("dense_ffn", s["ffn"]), "tokenizer.ggml.model": "none",
            a + "vocab_size": s["vocab"]}  # llama.cpp's count of placeholder tokens without a vocabulary
    if s["experts"]:
        meta.update({a + "expert_count": s["experts"], a + "expert_used_count": s["used"]})
    if s["arch"] != "llama":
        meta.update({a + "attention.key_length": s["head"], a + "attention.value_length": s["head"]})
    if s["arch"] in ("qwen3moe", "gpt-oss"):
        meta[a + "expert_feed_forward_length"] = s["ffn"]
    if "window" in s:
        meta[a + "attention.sliding_window"] = s["window"]
    if s["arch"] == "gpt-oss":  # gpt-oss's YaRN (32x from 4096), as its GGUFs carry it
        meta.update({a + "rope.scaling.type": "yarn",
                     a + "rope.scaling.factor": 32.0, a + "rope.scaling.original_context_length": 4096,
                     a + "rope.freq_base": 150000.0})
    for k, v in meta.items():
        if k not in r.fields or field(r, k) != v:
            bad.append(f"metadata {k}: {field(r, k) if k in r.fields else 'missing'}, declared {v}")
    want = expected_tensors(s, types)
    got = {t.name: t for t in r.tensors}
    if set(got) != set(want):
        bad.append(f"tensors {sorted(set(got) ^ set(want))} differ from the declared set")
    for name, (ne, ty) in want.items():
        t = got.get(name)
        if t is None:
            continue
        if [int(x) for x in t.shape] != ne or t.tensor_type != ty:
            bad.append(f"{name}: shape {list(t.shape)} type {t.tensor_type.name}, declared {ne} {ty.name}")
            continue
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        if not np.isfinite(w).all():
            bad.append(f"{name}: values that are not finite")
            continue
        if ty == F32:
            if name.endswith(".bias") or name.endswith("sinks.weight"):  # small (about 0.1), centred (4 sigma)
                if abs(w).max() > 0.2 or abs(w.mean()) > 0.4 / np.sqrt(w.size):
                    bad.append(f"{name}: values up to {abs(w).max():.3g}, mean {w.mean():.3g}: not small and centred")
            continue
        want_std = 1.0 if name == "token_embd.weight" and s["arch"] != "gemma3" else 1 / np.sqrt(ne[0])
        if not 0.5 * want_std < w.std() < 2 * want_std or abs(w.mean()) > 0.1 * w.std():
            bad.append(f"{name}: mean {w.mean():.4g} spread {w.std():.4g}, wanted centred with spread about {want_std:.4g}")
    return bad


def llamacpp_gaps(path, prompt, tokens):
    """llamacpp_gaps.py's answer for `path` fed `prompt` then the engine's `tokens` (None: no $LLAMA_CPP_PYTHON)."""
    python = os.environ.get("LLAMA_CPP_PYTHON")
    if not python:
        return None
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_gaps.py")
    p = subprocess.run([python, script, path, ",".join(map(str, prompt)), ",".join(map(str, tokens))],
                       capture_output=True, text=True, timeout=120)
    return json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr.strip().splitlines()[-1:]}


def differences_from_real_gemma(ours, real):
    """What gemma3-270m's file lacks of the published Gemma 3 270M's gemma3.* keys, tensor names and shapes,
    as text (empty: none). Its own additions: gemma3.vocab_size only (no vocabulary: tokenizer.ggml.model none)."""
    r, o, bad = gguf.GGUFReader(real), gguf.GGUFReader(ours), []
    keys = [k for k in r.fields if k.startswith("gemma3.") or k == "general.architecture"]
    for k in keys:
        if k not in o.fields or field(o, k) != field(r, k):
            bad.append(f"{k}: {field(o, k) if k in o.fields else 'missing'}, the real file's {field(r, k)}")
    extra = sorted(k for k in o.fields if k.startswith("gemma3.") and k not in r.fields)
    if extra != ["gemma3.vocab_size"]:
        bad.append(f"gemma3.* keys the real file has not: {extra}")
    shapes = lambda g: {t.name: [int(x) for x in t.shape] for t in g.tensors}  # noqa: E731
    if shapes(o) != shapes(r):
        bad.append(f"tensors: {sorted(set(shapes(o).items()) ^ set(shapes(r).items()))[:6]} differ")
    return bad


def main():
    a = tool_run.tool_paths(required=("make-model", "llm", "gpunvme"))
    a.make_model, a.llm, a.gpunvme = (os.path.abspath(p) for p in (a.make_model, a.llm, a.gpunvme))
    failed = 0

    def report(ok, what):
        nonlocal failed
        print(("ok   " if ok else "FAIL ") + what)
        failed += not ok

    with tempfile.TemporaryDirectory() as d:
        for shape, ty in (("tiny", "q4_k"), ("tiny-moe", "q6_k"), ("tiny-qwen3moe", "q4_k"), ("tiny-gpt-oss", "mxfp4"),
                          ("tiny", "q8_0"), ("tiny-gemma3", "q4_k")):
            f = os.path.join(d, f"{shape}-{ty}.gguf")
            subprocess.run([a.make_model, "--shape", shape, "--type", ty, "--out", f], check=True, stdout=subprocess.DEVNULL)
            bad = check_file(f, shape, TYPES[ty])
            report(not bad, f"{shape} {ty}: gguf-py reads the declared metadata, tensors, shapes and types; values "
                            f"finite and centred" + "".join("\n     " + b for b in bad))
            dev = f"emu:{os.path.join(d, f'{shape}-{ty}.img')},size=32M"
            subprocess.run([a.make_model, "--shape", shape, "--type", ty, "--device", dev], check=True, stdout=subprocess.DEVNULL)
            v = subprocess.run([a.gpunvme, "verify", "--device", dev, "--against", f], capture_output=True, text=True)
            report(v.returncode == 0, f"{shape}: written onto the namespace, the bytes equal the file's (verify --against)"
                                      + ("" if v.returncode == 0 else "\n     " + v.stdout + v.stderr))
            j = os.path.join(d, "run.json")
            subprocess.run([a.llm, "--device", dev, "--prompt-ids", "1,2,3", "-n", "12", "--ignore-eos", "--path", "cpu",
                            "--json-out", j], check=True, stdout=subprocess.DEVNULL)
            toks = json.load(open(j))["tokens"]
            report(len(toks) == 12 and len(set(toks)) >= 4, f"{shape}: the engine generates 12 tokens on it, "
                                                             f"{len(set(toks))} distinct: {toks}")
            lc = llamacpp_gaps(f, [1, 2, 3], toks)
            if lc is None and shape == "tiny":
                print("skip llama.cpp's checks: set LLAMA_CPP_PYTHON to a Python with llama-cpp-python 0.3.36")
            elif lc is not None:
                gaps = lc.get("gaps", [])
                ok = lc.get("n_vocab") == SHAPES[shape]["vocab"] and len(gaps) == 12 and gaps[0] == 0 and max(gaps) < NEAR_TIE
                report(ok, f"{shape} {ty}: llama.cpp loads it ({lc.get('n_vocab')} tokens) and, fed the engine's tokens, "
                           f"picks each or one within {NEAR_TIE} of it: gaps {[round(g, 3) for g in gaps]} {lc.get('error', '')}")
            # The same model computed on read by the emulator (emu:gen): the same tokens, load checks on.
            gen = f"emu:gen,shape={shape},type={ty}"
            subprocess.run([a.llm, "--device", gen, "--prompt-ids", "1,2,3", "-n", "12", "--ignore-eos", "--path", "cpu",
                            "--json-out", j], check=True, stdout=subprocess.DEVNULL)
            gen_toks = json.load(open(j))["tokens"]
            report(gen_toks == toks, f"{shape}: the engine on {gen} generates the same tokens: {gen_toks}")
            other = os.path.join(d, "other.gguf")
            subprocess.run([a.make_model, "--shape", shape, "--type", ty, "--out", other, "--seed", "2"], check=True,
                           stdout=subprocess.DEVNULL)
            report(open(other, "rb").read() != open(f, "rb").read(), f"{shape}: another --seed gives other weights")
        for args, names in ((["--shape", "huge", "--type", "q4_k", "--out", "x"], ["huge", "llama3-70b"]),
                            (["--shape", "tiny", "--type", "q5_k", "--out", "x"], ["--type", "q5_k", "q8_0"]),
                            (["--shape", "gemma3-270m", "--type", "mxfp4", "--out", "x"], ["--type mxfp4", "no experts"]),
                            (["--shape", "gpt-oss-120b", "--type", "q4_k", "--out", "x"], ["--type q4_k", "mxfp4", "2880"]),
                            (["--shape", "tiny", "--type", "mxfp4", "--out", "x"], ["--type mxfp4", "no experts"]),
                            (["--shape", "tiny", "--type", "q4_k"], ["--device", "--out"]),
                            (["--shape", "tiny", "--type", "q4_k", "--device", "emu:null", "--out", "x"], ["--device", "--out"]),
                            (["--shape", "tiny", "--type", "q4_k", "--device", "emu:null"], ["emu:null"]),
                            (["--shape", "tiny", "--type", "q4_k", "--device", "emu:gen,shape=tiny,type=q4_k"],
                             ["read-only", "image file"]),
                            (["--shape", "tiny", "--type", "q4_k", "--rate", "--out", "x"], ["--rate", "--out"]),
                            (["--shape", "tiny", "--type", "q4_k", "--device", f"emu:{d}/small.img,size=64K"],
                             ["namespace", "use a larger device"])):
            p = subprocess.run([a.make_model] + args, capture_output=True, text=True, cwd=d)
            # No advice about options the tool does not have (deploy's check said "a smaller --start-lba").
            ok = p.returncode in (1, 2) and all(n in p.stderr for n in names) and "--start-lba" not in p.stderr
            report(ok, f"refused: {' '.join(args)}: exit {p.returncode}: {p.stderr.splitlines()[0] if p.stderr else ''}")
        real = gemma_path()
        if real is None or not os.path.exists(real):
            print("skip gemma3-270m against the real Gemma 3 270M GGUF: not installed (llm_files.gemma_path)")
        else:
            f = os.path.join(d, "gemma3-270m.gguf")
            subprocess.run([a.make_model, "--shape", "gemma3-270m", "--type", "q4_k", "--out", f], check=True,
                           stdout=subprocess.DEVNULL)
            bad = differences_from_real_gemma(f, real)
            report(not bad, "gemma3-270m: the real Gemma 3 270M's gemma3.* keys and values, tensor names and shapes"
                   + "".join("\n     " + b for b in bad))
    print(f"{'FAILED' if failed else 'passed'}: {failed} failure(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

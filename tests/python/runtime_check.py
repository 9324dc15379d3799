#!/usr/bin/env python3
"""gpunvme.runtime (runtime/python/gpunvme/runtime.py over the nanobind module gpunvme._runtime, over the C
API) on generated GGUF models (llm_make_model: tiny-qwen3moe and the dense tiny) on the emulated device
('emu:FILE'), imported from the build folder, every byte held to the GGUF's own as the `gguf` package
(gguf.GGUFReader) reads them from the same file:
- the layer streamer: every tensor of every layer, expert tensors left to the fetcher or streamed too,
  by layers() (read ahead into 2 and 3 slots) and by hand (begin / acquire / release); the views are
  read-only and no copies (a tensor's view lies inside the slot's);
- the expert fetcher: each requested expert's gate, up and down bytes equal its slice of the stacked
  tensor, duplicates collapsed, with a cache (the second fetch hits, the same bytes), down_only;
- bad input: unknown layers and slots, expert ids out of range, too many or no experts, timeouts of 0, -1,
  NaN and infinity, a closed streamer / fetcher / device / model used again, a released slot, a fetch
  replaced by a later one or used before its wait, missing tensors, a dense model's fetcher, bad device
  strings: the Python exception with a message naming the range or the fix, never a crash;
- timeouts that expire (a modeled drive with 300 ms reads): TimeoutError, then a longer wait gets the bytes;
- the GPU path (GpuStreamer, GpuFetcher): refused with the reason without a GPU; with one, every tensor and
  expert part read back through its GPU address after kernels read them, state words, device results;
- threads: one waits while another begins and waits for another slot;
- a queue per model: a model opens while another's streamer runs; all queues held: a clear error;
- lifetimes: a view outlives its slot, streamer, model and device (the memory stays until the view goes);
  objects dropped with reads in flight are freed;
- the stubs (runtime.pyi) name what the module has, and help() shows the docstrings;
- docs/runtime.md's Python section: its shell and Python blocks run as written.
Exit 77 (skipped) without the gguf package (scripts/install_test_inputs.sh puts it in .venv/).
  runtime_check.py --package BUILD/runtime/python --make-model BUILD/examples/llm_make_model --build BUILD
"""
import argparse
import ast
import gc
import math
import os
import pydoc
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "llm"))
from llm_files import use_test_venv  # noqa: E402
sys.path.insert(0, HERE)
from checks import check, check_raises, summary  # noqa: E402
use_test_venv(["gguf"])


def gguf_bytes(path):
    """{tensor name: its bytes} as gguf.GGUFReader reads them."""
    import gguf
    return {t.name: t.data.tobytes() for t in gguf.GGUFReader(path).tensors}


def expert_slice(want, layer, proj, expert, n_experts):
    stacked = want[f"blk.{layer}.ffn_{proj}_exps.weight"]
    size = len(stacked) // n_experts
    return stacked[expert * size:(expert + 1) * size]


def address(view):
    import numpy as np
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


def cudart():
    """The libcudart the module loaded."""
    import ctypes
    return ctypes.CDLL(next(line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line))


def cuda_bytes(ptr, n):
    """(cudaMemcpy's status, the n bytes at GPU address ptr) copied device to host."""
    import ctypes
    buf = ctypes.create_string_buffer(n)
    rc = cudart().cudaMemcpy(buf, ctypes.c_void_p(ptr), ctypes.c_size_t(n), 2)
    return rc, buf.raw


def cuda_upload(data):
    """A GPU allocation holding `data` (bytes); its address."""
    import ctypes
    p = ctypes.c_void_p()
    if cudart().cudaMalloc(ctypes.byref(p), ctypes.c_size_t(len(data))) or \
            cudart().cudaMemcpy(p, data, ctypes.c_size_t(len(data)), 1):
        raise RuntimeError("cudaMalloc / cudaMemcpy failed")
    return p.value


def streamer_checks(rt, path, want):
    with rt.Device("emu:" + path) as dev, dev.open_model() as model:
        check("model: layers and experts as generated", (model.n_layers, model.n_experts), (2, 8))
        for slots in (2, 3):
            bad = []
            with model.streamer(slots=slots) as s:
                for slot in s.layers(timeout=10.0):
                    names = [n for n in want if n.startswith(f"blk.{slot.layer}.") and "_exps." not in n]
                    bad += [n for n in names if slot.tensor(n) != want[n]]
                    check(f"{slots} slots: layer {slot.layer}'s {len(names)} tensors read",
                          len(names) >= 9 and slot.nbytes >= sum(len(want[n]) for n in names), True)
            check(f"streamer ({slots} slots): every non-expert tensor = GGUFReader's bytes", bad, [])
        with model.streamer(slots=2, skip_experts=False) as s:
            bad = []
            for layer in (1, 0):  # by hand, out of order
                with s.load(layer, slot=layer) as slot:
                    names = [n for n in want if n.startswith(f"blk.{layer}.")]
                    bad += [n for n in names if slot.tensor(n) != want[n]]
                    exps = [n for n in names if "_exps." in n]
            check("streamer with expert tensors: every tensor of both layers = GGUFReader's bytes", (bad, len(exps)), ([], 3))
            slot = s.load(0, slot=1)
            data, q = slot.data, slot.tensor("blk.0.attn_q.weight")
            check("views are read-only memoryviews of bytes", (type(q), q.readonly, data.readonly, q.format), (memoryview, True, True, "B"))
            off, n = model.tensor("blk.0.attn_q.weight")
            check("model.tensor: the GGUF's file offset and size", n, len(want["blk.0.attn_q.weight"]))
            check("no copy: the tensor's view lies inside the slot's, the same memory each time",
                  (address(data) <= address(q) and address(q) + len(q) <= address(data) + len(data),
                   address(slot.data), address(slot.tensor("blk.0.attn_q.weight"))), (True, address(data), address(q)))
            pieces = slot.pieces()
            check("pieces cover the layer inside the slot", all(o + b <= slot.nbytes for o, b in pieces) and len(pieces) >= 1, True)
            check("stats count the layers read", s.stats()["layers"] >= 3, True)
            slot.release()
            slot.release()  # twice: harmless
            check("released slot", slot.released, True)


def fetcher_checks(rt, path, want):
    with rt.Device("emu:" + path) as dev, dev.open_model() as model:
        n = model.n_experts
        with model.fetcher(max_experts=4) as f:
            for layer, ids in ((0, [7, 0, 3, 0, 7]), (1, [5]), (1, [1, 2, 6, 4])):
                fetch = f.fetch(layer, ids).wait(timeout=10.0)
                distinct = list(dict.fromkeys(ids))
                check(f"fetch layer {layer} {ids}: distinct experts in request order", (fetch.experts, len(fetch)), (distinct, len(distinct)))
                bad = [(e.expert, p) for e in fetch for p in ("gate", "up", "down")
                       if e.parts[p] != expert_slice(want, layer, p, e.expert, n)]
                check(f"fetch layer {layer} {ids}: every expert's gate/up/down = its slice of GGUFReader's tensor", bad, [])
                check(f"fetch layer {layer}: expert(id) and fetch[-1]", (fetch.expert(distinct[-1]).expert, fetch[-1].expert),
                      (distinct[-1], distinct[-1]))
            check("metrics count the fetches", f.metrics()["fetches"], 3)
        with model.fetcher(max_experts=2, cache_bytes=4 << 20) as f:
            first = [(e.expert, e.hit) for e in f.fetch(1, [3, 4]).wait(timeout=10.0)]
            again = f.fetch(1, [4, 3]).wait(timeout=10.0)
            check("cache: the second fetch of the same experts hits", (first, [(e.expert, e.hit) for e in again]),
                  ([(3, False), (4, False)], [(4, True), (3, True)]))
            check("cache: hits give the same bytes", [e.parts["down"] == expert_slice(want, 1, "down", e.expert, n)
                                                      and e.parts["up"] == expert_slice(want, 1, "up", e.expert, n) for e in again], [True, True])
        with model.fetcher(down_only=True) as f:
            e = f.fetch(0, [2]).wait(timeout=10.0)[0]
            check("down_only: only the down projection, its bytes", (list(e.parts), e.parts["down"] == expert_slice(want, 0, "down", 2, n)),
                  (["down"], True))


def bad_input_checks(rt, moe, dense):
    check_raises("a malformed device string", ValueError, lambda: rt.Device("nonsense:x"))
    check_raises("a missing file", FileNotFoundError, lambda: rt.Device("emu:/nonexistent/model.gguf"))
    with rt.Device("emu:ram,size=1M") as dev:
        check_raises("no model on the namespace", RuntimeError, dev.open_model)
    with rt.Device("emu:" + dense) as dev, dev.open_model() as model:
        check_raises("a dense model's fetcher", ValueError, model.fetcher, "no experts")
    dev = rt.Device("emu:" + moe)
    model = dev.open_model()
    s = model.streamer(slots=2)
    check_raises("unknown layer (begin)", ValueError, lambda: s.begin(2, 0), "layer 2 does not exist", "2 layers (0..1)")
    check_raises("unknown layer (load)", ValueError, lambda: s.load(99), "layer 99 does not exist")
    check_raises("negative layer", ValueError, lambda: s.begin(-1, 0), "layer -1 does not exist")
    check_raises("unknown slot", ValueError, lambda: s.begin(0, 2), "slot 2 does not exist", "slots=N")
    check_raises("acquire of a slot never begun", ValueError, lambda: s.acquire(0, timeout=1.0), "begin it first")
    check_raises("layers() past the plan", ValueError, lambda: list(s.layers(first=1, count=5)), "not all in the plan")
    s.begin(0, 0)
    check_raises("begin into a loading slot", ValueError, lambda: s.begin(1, 0))
    for t in (0, -1.0, math.nan, math.inf):
        check_raises(f"acquire with timeout {t}", ValueError, lambda: s.acquire(0, timeout=t), "timeout", "above 0")
    slot = s.acquire(0, timeout=10.0)
    check_raises("a tensor of another layer", KeyError, lambda: slot.tensor("blk.1.attn_q.weight"), "not part of layer 0")
    check_raises("an expert tensor in a slot without experts", KeyError, lambda: slot.tensor("blk.0.ffn_up_exps.weight"), "Model.fetcher()")
    check_raises("no such tensor", KeyError, lambda: slot.tensor("blk.0.nothing"), "no tensor named")
    view = slot.data
    slot.release()
    check_raises("a released slot used again", ValueError, lambda: slot.tensor("blk.0.attn_q.weight"), "was released", "acquire the layer again")
    s.close()
    check_raises("a closed streamer used again (begin)", ValueError, lambda: s.begin(0, 0), "Streamer is closed", "Model.streamer()")
    check_raises("a closed streamer used again (acquire)", ValueError, lambda: s.acquire(0, 1.0), "closed")
    check_raises("a closed streamer used again (stats)", ValueError, s.stats, "closed")

    f = model.fetcher(max_experts=2)
    check_raises("expert id out of range", ValueError, lambda: f.fetch(0, [1, 8]), "expert 8 does not exist", "8 experts (0..7)")
    check_raises("negative expert id", ValueError, lambda: f.fetch(0, [-1]), "expert -1 does not exist")
    check_raises("fetch of an unknown layer", ValueError, lambda: f.fetch(2, [1]), "layer 2 does not exist")
    check_raises("more distinct experts than max_experts", ValueError, lambda: f.fetch(0, [1, 2, 3, 1]), "3 distinct", "max_experts=N")
    check_raises("no expert ids", ValueError, lambda: f.fetch(0, []), "no expert ids")
    fetch = f.fetch(0, [1, 1, 2])
    check_raises("a fetch used before its wait", ValueError, lambda: fetch[0], "Fetch.wait(timeout=...)")
    check_raises("fetch wait with timeout 0", ValueError, lambda: fetch.wait(timeout=0), "timeout")
    fetch.wait(timeout=10.0)
    check_raises("index past the distinct experts", IndexError, lambda: fetch[2], "2 distinct experts")
    check_raises("an id the fetch did not ask for", KeyError, lambda: fetch.expert(5), "not part of this fetch")
    f.fetch(1, [3])
    check_raises("a fetch replaced by a later one", ValueError, lambda: fetch[0], "replaced this fetch")
    f.close()
    check_raises("a closed fetcher used again", ValueError, lambda: f.fetch(0, [1]), "Fetcher is closed", "Model.fetcher()")
    check_raises("a closed fetcher's fetch used again", ValueError, lambda: fetch.wait(1.0), "closed")
    model.close()
    check_raises("a closed model used again", ValueError, lambda: model.streamer(), "Model is closed")
    dev.close()
    check_raises("a closed device used again", ValueError, dev.open_model, "Device is closed")
    check("a view outlives its slot, streamer, model and device (same bytes)", bytes(view[:64]) != b"" and len(view) > 0, True)


def lifetime_checks(rt, path, want):
    def tensor_view():
        dev = rt.Device("emu:" + path)
        s = dev.open_model().streamer()
        return s.load(1).tensor("blk.1.attn_k.weight")  # every object but the view is dropped here
    view = tensor_view()
    gc.collect()
    check("garbage collection: a view outlives every object it came from, its bytes intact", view == want["blk.1.attn_k.weight"], True)
    del view
    gc.collect()
    with rt.Device("emu:" + path) as dev, dev.open_model() as m, m.streamer() as s, s.load(0) as slot:
        check("after collection a new device streams again", slot.tensor("blk.0.attn_v.weight") == want["blk.0.attn_v.weight"], True)
        q = want["blk.0.attn_v.weight"]
        if rt.gpu_available():  # the slots and the scratchpad are mapped into the GPU: the same bytes there
            cai = slot.__cuda_array_interface__
            check("GPU: __cuda_array_interface__ of the slot", (cai["shape"], cai["typestr"], cai["data"]),
                  ((slot.nbytes,), "|u1", (slot.device_ptr, True)))
            at = slot.device_ptr + (address(slot.tensor("blk.0.attn_v.weight")) - address(slot.data))
            check("GPU: a tensor's bytes read through the slot's device pointer = GGUFReader's", cuda_bytes(at, len(q)), (0, q))
            with m.fetcher() as f:
                e = f.fetch(1, [4]).wait(timeout=10.0)[0]
                ptr, n = e.device_parts["up"]
                check("GPU: an expert's bytes read through its device pointer = GGUFReader's", cuda_bytes(ptr, n),
                      (0, expert_slice(want, 1, "up", 4, m.n_experts)))
        else:
            check("no GPU: no __cuda_array_interface__, device pointers 0", (hasattr(slot, "__cuda_array_interface__"), slot.device_ptr), (False, 0))
            with m.fetcher() as f:
                e = f.fetch(1, [4]).wait(timeout=10.0)[0]
                check("no GPU: experts without GPU views", (hasattr(e, "__cuda_array_interface__"), e.device_ptr, e.device_parts), (False, 0, {}))


def queue_checks(rt, path, want):
    """A queue per model: a model opens while another's streamer drives its queue; when the controller's
    queues are all held, the next open says so, and closing a model frees its queue."""
    with rt.Device(f"emu:{path},queues=2") as dev:
        first = dev.open_model()
        with first.streamer() as s, s.load(1) as slot:
            second = dev.open_model()
            with second.streamer() as s2, s2.load(1) as slot2:
                check("two models' streamers on one device, each the GGUF's bytes",
                      (slot.tensor("blk.1.attn_q.weight") == want["blk.1.attn_q.weight"],
                       slot2.tensor("blk.1.ffn_norm.weight") == want["blk.1.ffn_norm.weight"]), (True, True))
            check_raises("every I/O queue held by an open model", RuntimeError, dev.open_model, "no 1 free I/O queue(s) of the 2", "close some")
        second.close()
        del s, s2, slot, slot2
        gc.collect()
        check("a closed model's queue serves the next model", dev.open_model().n_layers, 2)


def slow_device_checks(rt, path, want):
    """A modeled drive with 300 ms reads: a short wait times out, a longer one then gets the bytes; objects
    dropped with reads in flight are freed once those reads end."""
    with rt.Device(f"emu:{path},lat=300ms,lat99=300ms") as dev, dev.open_model() as model:
        with model.streamer() as s:
            s.begin(1, 0)
            check_raises("a layer slower than the timeout", TimeoutError, lambda: s.acquire(0, timeout=0.02),
                         "slot 0's layer did not arrive within 0.02 s", "longer timeout")
            with s.acquire(0, timeout=10.0) as slot:
                check("waiting again after a timeout: the layer's bytes", slot.tensor("blk.1.attn_q.weight") == want["blk.1.attn_q.weight"], True)
        with model.fetcher() as f:
            fetch = f.fetch(0, [6])
            check_raises("an expert slower than the timeout", TimeoutError, lambda: fetch.wait(timeout=0.02),
                         "expert 6 of layer 0 did not arrive within 0.02 s")
            check("waiting again after a timeout: the expert's bytes",
                  fetch.wait(timeout=10.0)[0].parts["gate"] == expert_slice(want, 0, "gate", 6, model.n_experts), True)
        with model.streamer() as s:  # a thread waits for slot 0 while this one begins and waits for slot 1
            s.begin(0, 0)
            got = {}
            waiter = threading.Thread(target=lambda: got.setdefault(0, s.acquire(0, timeout=10.0)))
            waiter.start()
            time.sleep(0.05)
            s.begin(1, 1)
            with s.acquire(1, timeout=10.0) as other:
                second = other.tensor("blk.1.attn_v.weight") == want["blk.1.attn_v.weight"]
            waiter.join(timeout=20.0)
            check("threads: a call while another thread waits runs (not refused), both layers' bytes",
                  (second, 0 in got and got[0].tensor("blk.0.attn_v.weight") == want["blk.0.attn_v.weight"]), (True, True))
        s = model.streamer()
        s.begin(0, 0)
        f = model.fetcher()
        f.fetch(1, [1, 2])
    del s, f, dev, model
    gc.collect()  # frees them, their reads drained first (a crash or a hang here fails the test)


def gpu_path_checks(rt, path, want):
    """The GPU path (GpuQueues, GpuStreamer): without a GPU, refused with the reason; with one, kernels on
    the default stream read both layers into two slots and, the slot released, layer 1 again into slot 0:
    every non-expert tensor read back through its GPU address = GGUFReader's, the state words 1; the GPU
    fetcher with ids in GPU memory: each expert's parts in host and GPU views, the device result, a bad id."""
    with rt.Device("emu:" + path) as dev, dev.open_model() as model:
        if not rt.gpu_available():
            check_raises("GPU path without a GPU: the reason", NotImplementedError, dev.gpu_queues, "GPU path is unavailable")
            return
        with dev.gpu_queues(count=1) as gq, model.gpu_streamer(gq, slots=2) as s:
            s.begin_on(0, 0)
            s.begin_on(1, 1, stream=0)
            check_raises("GPU: begin_on into a loading slot", ValueError, lambda: s.begin_on(1, 0))
            check_raises("GPU: begin_on of an unknown layer", ValueError, lambda: s.begin_on(2, 0), "layer 2 does not exist")
            check_raises("GPU: a stream of the wrong type", TypeError, lambda: s.wait_on(0, stream="x"), "CUDA stream")
            slots = [s.wait_on(0), s.wait_on(1)]
            s.sync()
            bad = [n for sl in slots for n in want if n.startswith(f"blk.{sl.layer}.") and "_exps." not in n
                   and cuda_bytes(*sl.tensor(n)) != (0, want[n])]
            check("GPU: every non-expert tensor of both layers through its GPU address = GGUFReader's", bad, [])
            check("GPU: the reads' state words say every read succeeded", [cuda_bytes(sl.status_ptr, 4) for sl in slots],
                  [(0, (1).to_bytes(4, "little"))] * 2)
            slots[0].release_on(0)
            check_raises("GPU: a released slot", ValueError, lambda: slots[0].tensor("blk.0.attn_q.weight"), "released")
            s.begin_on(1, 0)
            again = s.wait_on(0)
            s.sync()
            check("GPU: a released slot refilled with layer 1", cuda_bytes(*again.tensor("blk.1.attn_q.weight")),
                  (0, want["blk.1.attn_q.weight"]))
            again.release_on(0)
            slots[1].release_on(0)
            s.sync()
        with dev.gpu_queues(count=1) as gq, model.gpu_fetcher(gq, max_experts=4) as f:
            ids = cuda_upload(struct.pack("<3I", 3, 1, 3))  # as a router kernel would have written them
            f.fetch_on(1, (ids, 3))
            fetch = f.wait()
            check("GPU fetcher: the distinct experts", fetch.experts, [3, 1])
            bad = [(e.expert, p) for e in fetch for p in ("gate", "up", "down")
                   if e.parts[p] != expert_slice(want, 1, p, e.expert, model.n_experts)
                   or cuda_bytes(*e.device_parts[p]) != (0, expert_slice(want, 1, p, e.expert, model.n_experts))]
            check("GPU fetcher: every part, in host and GPU views, = its slice of GGUFReader's tensor", bad, [])
            rc, raw = cuda_bytes(f.device_result()[0], 24)
            check("GPU fetcher: the device result (count, error, layer)", (rc,) + struct.unpack("<6I", raw)[1:3] + struct.unpack("<6I", raw)[5:],
                  (0, 2, 0, 1))
            f.fetch_on(0, (cuda_upload(struct.pack("<I", 9)), 1))
            check_raises("GPU fetcher: an expert id out of range", ValueError, f.wait)
            check_raises("GPU fetcher: the fetch of a bad layer", ValueError, lambda: f.fetch_on(5, (ids, 3)), "layer 5 does not exist")


def stub_names(module_file):
    """{class: the names its stub declares} of a .pyi of the package."""
    tree = ast.parse(open(os.path.join(ROOT, "runtime", "python", "gpunvme", module_file)).read())
    def names(c):
        return {n.name if isinstance(n, ast.FunctionDef) else n.target.id
                for n in c.body if isinstance(n, (ast.FunctionDef, ast.AnnAssign))}
    return {c.name: names(c) for c in tree.body if isinstance(c, ast.ClassDef)}


def public(cls, module):
    """The public names that `cls` and its bases of `module` define."""
    return {n for k in cls.__mro__ if k.__module__ == module for n in vars(k) if not n.startswith("_")}


def stub_checks(rt):
    from gpunvme import _runtime
    instance = {"Model": {"device"}}  # set in __init__
    for module, pyi, stub in ((rt, "runtime.pyi", stub_names("runtime.pyi")), (_runtime, "_runtime.pyi", stub_names("_runtime.pyi"))):
        missing = [f"{c}.{n}" for c, ns in stub.items() for n in ns
                   if not hasattr(getattr(module, c), n) and n not in instance.get(c, ())]
        check(f"{pyi}: every name it declares exists", missing, [])
        classes = [getattr(module, c) for c in dir(module) if isinstance(getattr(module, c), type)
                   and getattr(module, c).__module__ == module.__name__ and not c.startswith("_")]
        unstubbed = [f"{k.__name__}.{n}" for k in classes for n in public(k, module.__name__)
                     if not any(n in stub.get(b.__name__, ()) for b in k.__mro__)]
        check(f"{pyi} declares every public class and member", ([k.__name__ for k in classes if k.__name__ not in stub], unstubbed), ([], []))
    text = pydoc.render_doc(rt, renderer=pydoc.plaintext)
    check("help(gpunvme.runtime) shows the docstrings", [w for w in ("every wait takes a timeout", "Waits up to `timeout` seconds",
                                                                    "__cuda_array_interface__", "duplicates collapse") if w not in text], [])


def docs_checks(a, tmp):
    """docs/runtime.md's Python section: the shell block then the Python block, paths made this build's."""
    text = open(os.path.join(ROOT, "docs", "runtime.md")).read()
    section = text.split("## Python: gpunvme.runtime", 1)[1].split("\n## ", 1)[0]
    sh = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    py = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    model = os.path.join(tmp, "doc-moe.gguf")
    script = (sh.replace("build/", a.build + "/") + f"{sys.executable} - <<'PYEOF'\n{py}PYEOF\n").replace("/tmp/tiny-moe.gguf", model)
    r = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, timeout=120)
    check("docs/runtime.md's Python section runs as written", (r.returncode, r.stderr[-2000:]), (0, ""))
    check("docs: its model was made", os.path.exists(model), True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--package", required=True, help="the folder holding the built package gpunvme")
    p.add_argument("--make-model", required=True, help="build/examples/llm_make_model")
    p.add_argument("--build", required=True, help="the build folder (the docs' build/)")
    a = p.parse_args()
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("skipped: the gguf package is not installed (scripts/install_test_inputs.sh)")
        return 77
    sys.path.insert(0, a.package)
    from gpunvme import runtime as rt
    with tempfile.TemporaryDirectory() as tmp:
        moe, dense = os.path.join(tmp, "moe.gguf"), os.path.join(tmp, "dense.gguf")
        for shape, out in (("tiny-qwen3moe", moe), ("tiny", dense)):
            subprocess.run([a.make_model, "--shape", shape, "--type", "q4_k", "--out", out], check=True, capture_output=True)
        want = gguf_bytes(moe)
        streamer_checks(rt, moe, want)
        fetcher_checks(rt, moe, want)
        bad_input_checks(rt, moe, dense)
        lifetime_checks(rt, moe, want)
        slow_device_checks(rt, moe, want)
        queue_checks(rt, moe, want)
        gpu_path_checks(rt, moe, want)
        stub_checks(rt)
        docs_checks(a, tmp)
    return summary("runtime")


if __name__ == "__main__":
    sys.exit(main())

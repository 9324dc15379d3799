"""The commands of every tool that writes a device, for the guard's end-to-end tests (test_write_guard.py:
the --allow-write / --force rule; test_write_lock.py: the device's lock): one list, so that a tool
added here is checked by both."""
import hashlib


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def writing_commands(a, dev, model):
    """(name, command) of each tool in `a` (tool_run.tool_paths: None where not given) writing `dev`;
    `model` is a GGUF file for deploy."""
    w = []
    if a.gpunvme:
        w.append(("gpunvme demo", [a.gpunvme, "demo", "--device", dev, "--bytes", "1M"]))
        w.append(("gpunvme deploy", [a.gpunvme, "deploy", model, "--device", dev]))
        w.append(("gpunvme deploy --print-dd", [a.gpunvme, "deploy", model, "--device", dev, "--print-dd"]))
    if a.nvme_perf:
        w.append(("nvme_perf randwrite", [a.nvme_perf, "--device", dev, "--rw", "randwrite", "--bs", "4K", "--count", "64"]))
        w.append(("nvme_perf --fill", [a.nvme_perf, "--device", dev, "--fill", "--bs", "4K", "--count", "64", "--span", "1M"]))
    if a.layer_stream:
        w.append(("layer_stream", [a.layer_stream, "--device", dev, "--layers", "1", "--layer-bytes", "1M", "--modes",
                                   "gpunvme-cpu", "--drive", "none"]))
    if a.stream_layers:
        w.append(("stream_layers", [a.stream_layers, "--device", dev, "--layers", "2", "--mb-per-layer", "1", "--path", "cpu"]))
    if a.fetch_experts:
        w.append(("fetch_experts", [a.fetch_experts, "--device", dev, "--tokens", "2", "--path", "cpu"]))
    if getattr(a, "make_model", None):
        w.append(("llm_make_model", [a.make_model, "--shape", "tiny", "--type", "q4_k", "--device", dev]))
    return w

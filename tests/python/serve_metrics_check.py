#!/usr/bin/env python3
"""The server's /metrics beside tokens/s (issue 37): bytes read per token and per pass, the expert cache's
hits, the stalls, from the engine's own counters (gpunvme.Scheduler.io_counters, the executor's ExecStats):
- the collector (serve/metrics.py) over given counters: every family's exact value, ratios included, and
  the families of what an engine does not count left out;
- the engine on a generated model (emu:gen tiny-qwen3moe, no vocabulary), through the server's backend
  (engine_backend.SchedulerBackend.counters) and the collector: on the CPU executor the passes read
  nothing (the model is read once at start) and no experts are fetched; on the GPU executor (where one is
  present) with every layer streamed (VRAM budget 0), the dense bytes read are the streamed layers' bytes
  once per pass (plus at most one pass read ahead), expert reads and hits are counted, and /metrics shows
  the very numbers the engine counted;
- lookup drafting (Model.scheduler(draft="lookup"), the server's --draft lookup) on repetitive prompts:
  each request's tokens those it gets without drafts, drafts accepted, and /metrics' drafted and
  accepted tokens the scheduler's.
Exit 77 (skipped) without prometheus_client; the engine part is skipped without the engine module.
  serve_metrics_check.py --package BUILD/runtime/python
"""
import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "llm"))
from llm_files import use_test_venv  # noqa: E402
sys.path.insert(0, HERE)
from checks import check, check_raises, summary  # noqa: E402
use_test_venv(["prometheus_client"])

DEVICE = "emu:gen,shape=tiny-qwen3moe,type=q4_k"


class FakeWorker:
    """What the collector reads of serve.worker.Worker: its snapshot and admission counters."""

    def __init__(self, snapshot, rejected=0, cancelled=0, waiting=0):
        self.snapshot, self.rejected, self.cancelled, self.waiting = snapshot, rejected, cancelled, waiting


def scrape(worker):
    """The /metrics text of `worker`, parsed: {sample name: value}."""
    from prometheus_client.parser import text_string_to_metric_families
    from gpunvme.serve.metrics import Metrics
    text = Metrics(worker).text().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def collector_checks():
    from gpunvme.serve.backend import Counters
    from gpunvme.serve.worker import Snapshot
    c = Counters(passes=8, generated_tokens=20, prompt_tokens=12, bytes_read=4_000_000, pass_tokens=32,
                 layer_stall_seconds=1.5, expert_hits=30, experts_routed=120, expert_stall_seconds=0.25)
    m = scrape(FakeWorker(Snapshot(active=3, queued=2, counters=c, tokens_per_s=7.5), waiting=1))
    want = {"gpunvme_requests_active": 3, "gpunvme_requests_queued": 3, "gpunvme_tokens_per_second": 7.5,
            "gpunvme_bytes_read_total": 4_000_000, "gpunvme_bytes_read_per_token": 200_000,
            "gpunvme_bytes_read_per_pass": 500_000, "gpunvme_layer_stall_seconds_total": 1.5,
            "gpunvme_expert_cache_hits_total": 30, "gpunvme_experts_routed_total": 120,
            "gpunvme_expert_cache_hit_ratio": 0.25, "gpunvme_expert_stall_seconds_total": 0.25}
    check("collector: bytes per token and per pass, expert hits and ratio, stalls", {k: m.get(k) for k in want}, want)
    # An engine that fetches no experts (the CPU executor, a dense model): no expert families, not zeros.
    c = Counters(passes=0, generated_tokens=0, bytes_read=0, layer_stall_seconds=0.0)
    m = scrape(FakeWorker(Snapshot(counters=c)))
    check("collector: without experts, no expert families; no tokens yet, ratios 0",
          ([k for k in m if "expert" in k], m.get("gpunvme_bytes_read_per_token"), m.get("gpunvme_bytes_read_per_pass")),
          ([], 0.0, 0.0))
    m = scrape(FakeWorker(Snapshot(counters=Counters())))
    check("collector: an engine that counts no reads shows none", [k for k in m if "bytes_read" in k or "stall" in k], [])
    check("collector: an engine that counts no drafts shows none", [k for k in m if "draft" in k or "accepted" in k], [])
    m = scrape(FakeWorker(Snapshot(counters=Counters(drafted_tokens=40, accepted_tokens=10))))
    want = {"gpunvme_drafted_tokens_total": 40, "gpunvme_accepted_tokens_total": 10,
            "gpunvme_draft_acceptance_ratio": 0.25}
    check("collector: drafted and accepted tokens, the acceptance", {k: m.get(k) for k in want}, want)


def run_requests(sched, prompts, max_tokens):
    for p in prompts:
        sched.submit(p, max_tokens)
    for _ in range(10_000):
        if not (sched.active() or sched.queued()):
            return
        sched.step()
    raise RuntimeError("the requests did not finish in 10000 steps")


def backend_of(model, sched):
    """The server's SchedulerBackend over `sched` (built without __init__, whose ModelInfo needs a
    vocabulary the generated model does not have; counters() needs only the scheduler)."""
    from gpunvme.serve.engine_backend import SchedulerBackend
    b = SchedulerBackend.__new__(SchedulerBackend)
    b.model, b.sched = model, sched
    return b


def engine_checks(gpunvme_model, executor):
    from gpunvme.serve.worker import Snapshot
    kw = {"vram_budget": 0, "kv_host": True} if executor == "gpu" else {}  # every layer streamed (a VRAM KV cache would need budget)
    try:
        model = gpunvme_model.Model(DEVICE, executor=executor, ctx=64, max_seqs=2, **kw)
    except RuntimeError as e:  # a GPU executor without sequence slots yet: one sequence per pass
        print(f"note: max_seqs 2 refused ({str(e).splitlines()[0][:120]}); max_seqs 1")
        model = gpunvme_model.Model(DEVICE, executor=executor, ctx=64, max_seqs=1, **kw)
    sched = model.scheduler(4)
    run_requests(sched, [[1, 2, 3, 4], [5, 6, 7]], 6)
    c, io = sched.counters(), sched.io_counters()
    counters = backend_of(model, sched).counters()
    m = scrape(FakeWorker(Snapshot(counters=counters)))
    check(f"{executor}: /metrics shows the engine's counts", {k: m.get(k) for k in (
        "gpunvme_passes_total", "gpunvme_generated_tokens_total", "gpunvme_bytes_read_total",
        "gpunvme_layer_stall_seconds_total", "gpunvme_experts_routed_total", "gpunvme_expert_cache_hits_total")},
        {"gpunvme_passes_total": c["passes"], "gpunvme_generated_tokens_total": c["generated_tokens"],
         "gpunvme_bytes_read_total": io["bytes_read"], "gpunvme_layer_stall_seconds_total": io["layer_stall_seconds"],
         "gpunvme_experts_routed_total": io["experts_routed"], "gpunvme_expert_cache_hits_total": io["expert_hits"]})
    check(f"{executor}: bytes read per token and per pass", (m["gpunvme_bytes_read_per_token"], m["gpunvme_bytes_read_per_pass"]),
          (io["bytes_read"] / c["generated_tokens"], io["bytes_read"] / c["passes"]))
    if executor == "cpu":
        check("cpu: the passes read nothing (the model is read once at start), fetch no experts, never stall",
              io, {"bytes_read": 0, "layer_bytes_per_pass": 0, "ram_bytes_copied": 0, "layer_stall_seconds": 0.0,
                   "expert_bytes_read": None, "expert_hits": None, "experts_routed": None, "expert_stall_seconds": None})
        return
    # Every layer streamed: each pass reads every layer's dense part once (the streamer may have read the
    # next pass's first layers ahead), and the routed experts that missed the cache.
    dense = io["bytes_read"] - io["expert_bytes_read"]
    per_pass = io["layer_bytes_per_pass"]
    check("gpu: every layer streamed at VRAM budget 0", per_pass > 0, True)
    check("gpu: dense bytes read = passes x the streamed layers' bytes (+ at most one pass ahead)",
          c["passes"] * per_pass <= dense <= (c["passes"] + 1) * per_pass, True)
    check("gpu: experts routed and read, hits <= routed", io["experts_routed"] > 0 and io["expert_bytes_read"] > 0
          and 0 <= io["expert_hits"] <= io["experts_routed"], True)
    print(f"gpu: {io}")


def tokens_by_request(sched, prompts, max_tokens):
    """Each request's tokens, in submission order, through steps until idle."""
    ids = [sched.submit(p, max_tokens) for p in prompts]
    got = {i: [] for i in ids}
    for _ in range(10_000):
        if not (sched.active() or sched.queued()):
            return [got[i] for i in ids]
        for e in sched.step():
            got[e.id].append(e.token)
    raise RuntimeError("the requests did not finish in 10000 steps")


def draft_checks(gpunvme_model, executor):
    from gpunvme.serve.worker import Snapshot
    kw = {"vram_budget": 0, "kv_host": True} if executor == "gpu" else {}  # every layer streamed (a VRAM KV cache would need budget)
    prompts = [[1, 2, 3, 4] * 4, [5, 6, 7] * 5, [9, 8, 9, 8, 9, 8]]  # text that repeats itself

    def run(**draft):
        model = gpunvme_model.Model(DEVICE, executor=executor, ctx=64, max_seqs=2, **kw)
        sched = model.scheduler(4, **draft)
        return tokens_by_request(sched, prompts, 16), model, sched
    plain, _, plain_sched = run()
    drafted, model, sched = run(draft="lookup", draft_k=6)
    c = sched.counters()
    check(f"{executor}: with lookup drafts, each request's tokens as without (3 requests, 2 slots)", drafted, plain)
    check(f"{executor}: drafts verified, some accepted, fewer passes than without",
          (c["drafted_tokens"] > 0, 0 < c["accepted_tokens"] <= c["drafted_tokens"],
           c["generated_tokens"] == 3 * 16, c["passes"] < plain_sched.counters()["passes"]), (True, True, True, True))
    m = scrape(FakeWorker(Snapshot(counters=backend_of(model, sched).counters())))
    check(f"{executor}: /metrics shows the drafted and accepted tokens",
          (m.get("gpunvme_drafted_tokens_total"), m.get("gpunvme_accepted_tokens_total")),
          (c["drafted_tokens"], c["accepted_tokens"]))
    print(f"{executor}: {c}")
    if executor == "cpu":
        check_raises("draft_k above 31 is refused", ValueError,
                     lambda: gpunvme_model.Model(DEVICE, executor="cpu", ctx=16).scheduler(4, draft="lookup", draft_k=32),
                     "draft_k")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--package", required=True, help="the folder holding the built package gpunvme")
    a = p.parse_args()
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        print("skipped: prometheus_client is not installed (the server's /metrics needs it)")
        return 77
    sys.path.insert(0, a.package)
    collector_checks()
    if not glob.glob(os.path.join(a.package, "gpunvme", "_engine*.so")):
        print("note: the engine module is not built: the engine's counters not checked")
        return summary("metrics")
    from gpunvme import model as gpunvme_model
    engine_checks(gpunvme_model, "cpu")
    draft_checks(gpunvme_model, "cpu")
    probe = gpunvme_model.Model(DEVICE, executor="auto", ctx=16)
    if "CPU" in probe.executor:
        print("note: no GPU: the GPU executor's counters not checked (run this on the GPU machine)")
    else:
        del probe
        engine_checks(gpunvme_model, "gpu")
        draft_checks(gpunvme_model, "gpu")
    return summary("metrics")


if __name__ == "__main__":
    sys.exit(main())

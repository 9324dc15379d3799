"""GET /metrics in Prometheus' text format (prometheus_client), read at scrape time from the engine
thread's latest snapshot and the admission counters; a registry of its own, so two servers in one process
do not share numbers."""
import collections
import re

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

RATE_WINDOW_S = 10.0  # tokens/s is measured over the last this many seconds


class Rate:
    """Generated tokens per second over the last RATE_WINDOW_S, from (time, total) samples the engine
    thread adds after every pass and every idle wait (so an idle server decays to 0)."""

    def __init__(self):
        self._samples = collections.deque()

    def update(self, now, total):
        self._samples.append((now, total))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_S:
            self._samples.popleft()

    def per_second(self):
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


class _Collector:
    def __init__(self, worker):
        self.worker = worker

    def collect(self):
        w, snap = self.worker, self.worker.snapshot
        c = snap.counters
        yield _gauge("gpunvme_requests_active", "sequences holding an engine slot", snap.active)
        yield _gauge("gpunvme_requests_queued", "requests waiting: for a slot in the engine, or for admission",
                     snap.queued + w.waiting)
        yield _gauge("gpunvme_tokens_per_second", f"tokens generated per second over the last {RATE_WINDOW_S:g} s",
                     snap.tokens_per_s)
        yield _counter("gpunvme_generated_tokens", "tokens generated", c.generated_tokens)
        yield _counter("gpunvme_prompt_tokens", "prompt tokens computed", c.prompt_tokens)
        yield _counter("gpunvme_passes", "passes over the model's layers", c.passes)
        if c.pass_tokens is not None:  # above 1 token per pass: passes carried several sequences (batching)
            yield _counter("gpunvme_pass_tokens", "tokens the passes carried (prompt and generated)", c.pass_tokens)
            yield _gauge("gpunvme_tokens_per_pass", "tokens per pass, since start",
                         c.pass_tokens / c.passes if c.passes else 0.0)
        yield _counter("gpunvme_requests_rejected", "requests answered 429 (server full)", w.rejected)
        yield _counter("gpunvme_sequences_cancelled", "sequences ended early (client gone, stop string)", w.cancelled)
        if c.bytes_read is not None:
            yield _counter("gpunvme_bytes_read", "model bytes read from the device by passes (streamed layers, "
                           "fetched experts; 0 where the model is read once at start)", c.bytes_read)
            yield _gauge("gpunvme_bytes_read_per_token", "bytes read per generated token, since start",
                         _ratio(c.bytes_read, c.generated_tokens))
            yield _gauge("gpunvme_bytes_read_per_pass", "bytes read per pass, since start: what passes of "
                         "several sequences share", _ratio(c.bytes_read, c.passes))
        if c.layer_stall_seconds is not None:
            yield _counter("gpunvme_layer_stall_seconds", "time the compute waited for streamed layers",
                           c.layer_stall_seconds)
        if c.experts_routed is not None:
            yield _counter("gpunvme_experts_routed", "experts the passes routed to (distinct per pass and layer)",
                           c.experts_routed)
            yield _counter("gpunvme_expert_cache_hits", "routed experts found in the expert cache (not read)",
                           c.expert_hits)
            yield _gauge("gpunvme_expert_cache_hit_ratio", "expert cache hits / experts routed, since start",
                         _ratio(c.expert_hits, c.experts_routed))
            yield _counter("gpunvme_expert_stall_seconds", "time the compute waited for expert reads",
                           c.expert_stall_seconds)
        if c.drafted_tokens is not None:  # --draft lookup: verification's yield (0 drafted when off)
            yield _counter("gpunvme_drafted_tokens", "tokens drafted by prompt lookup and verified in passes",
                           c.drafted_tokens)
            yield _counter("gpunvme_accepted_tokens", "drafted tokens that became generated tokens",
                           c.accepted_tokens)
            yield _gauge("gpunvme_draft_acceptance_ratio", "accepted / drafted tokens, since start",
                         _ratio(c.accepted_tokens, c.drafted_tokens))
        for name, value in sorted(c.extra.items()):
            yield _counter("gpunvme_engine_" + re.sub(r"[^a-zA-Z0-9_]", "_", name), f"the engine's {name}", value)


def _ratio(a, b):
    return a / b if b else 0.0


def _gauge(name, doc, value):
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name, doc, value):
    return CounterMetricFamily(name, doc, value=value)


class Metrics:
    def __init__(self, worker):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(worker))

    def text(self):
        return generate_latest(self.registry)

"""The Backend (backend.py) over gpunvme's engine: gpunvme.Model for the model and its tokenizer, and the
engine's continuous-batching Scheduler for the sequences (every running sequence's next token in one pass;
--max-seqs 1: one at a time). Used from the worker's one thread only."""
from .backend import Counters, Event, ModelInfo
from .openai_api import ApiError


def open_backend(a):
    """The engine for the command line's options (cli.py)."""
    try:
        from .. import model as gpunvme_model
    except ImportError as e:
        raise ImportError(f"the engine module gpunvme._engine is not built ({e}): build the target "
                          "python-package (meson) or `pip install .`") from None
    m = gpunvme_model.Model(a.device, executor=a.executor, ctx=a.ctx, max_seqs=a.max_seqs or "auto", verify=not a.no_verify,
                            vram_budget=a.vram_budget, ram_budget=a.ram_budget, kv_host=a.kv_host)
    return SchedulerBackend(m, ", ".join(a.device), m.max_seqs, a.max_queued, a.draft, a.draft_k)  # auto: the engine's count


def _info(model, device, max_seqs):
    return ModelInfo(name=model.name, architecture=model.architecture, size_bytes=model.size, device=device,
                     n_ctx=model.n_ctx, max_seqs=max_seqs, executor=model.executor, vocab_size=model.n_vocab,
                     adds_bos=bool(model.tokenize("", True, False)), bos_text=model.bos_token,
                     eos_text=model.eos_token, chat_template=model.chat_template)


class SchedulerBackend:
    """The engine's Scheduler (gpunvme.Scheduler): each step() is one pass over the layers carrying the next
    token of every running sequence and prompt chunks of new ones; a sequence's tokens are those it gets
    alone (so the llm tool's). draft "lookup": each decoding sequence's pass also verifies up to draft_k
    tokens drafted by prompt lookup (the same tokens, in fewer passes)."""

    def __init__(self, model, device, max_seqs, max_queued, draft="none", draft_k=8):
        self.model = model
        self.info = _info(model, device, max_seqs)
        # The worker admits at most max_seqs + max_queued; the slack covers sequences it has let go of
        # whose cancel() is still on its way.
        self.sched = model.scheduler(max_queued + max_seqs, draft=draft, draft_k=draft_k)

    def submit(self, prompt, max_tokens, sampling):
        try:
            return self.sched.submit(prompt, max_tokens, sampling.temperature, sampling.top_k, sampling.top_p,
                                     sampling.seed)
        except self.sched.QueueFull:
            raise ApiError(429, "the engine's queue is full; retry later", type_="rate_limit_error",
                           code="server_full") from None

    def tokenize(self, text, special):
        return self.model.tokenize(text, add_special=True, parse_special=special)

    def cancel(self, seq):
        self.sched.cancel(seq)

    def step(self):
        return [Event(e.id, e.token, b"" if e.finish == "stop" else self.model.piece(e.token), e.finish)
                for e in self.sched.step()]

    def active(self):
        return self.sched.active()

    def queued(self):
        return self.sched.queued()

    def counters(self):
        c, io = self.sched.counters(), self.sched.io_counters()
        return Counters(c["passes"], c["generated_tokens"], c["prompt_tokens"], bytes_read=io["bytes_read"],
                        pass_tokens=c["pass_tokens"], layer_stall_seconds=io["layer_stall_seconds"],
                        expert_hits=io["expert_hits"], experts_routed=io["experts_routed"],
                        expert_stall_seconds=io["expert_stall_seconds"], drafted_tokens=c["drafted_tokens"],
                        accepted_tokens=c["accepted_tokens"],
                        extra={"finished": c["finished"], "cancelled": c["cancelled"]})

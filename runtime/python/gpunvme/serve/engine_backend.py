"""The Backend (backend.py) over gpunvme's engine: gpunvme.Model for the model and its tokenizer, and for
the sequences either the engine's continuous-batching Scheduler (SchedulerBackend: --max-seqs > 1, every
running sequence's next token in one pass) or its own generation loop, one sequence at a time
(SequentialBackend: --max-seqs 1). Used from the worker's one thread only."""
import collections
import logging
import queue
import threading

from .backend import Counters, Event, ModelInfo
from .openai_api import ApiError

log = logging.getLogger("gpunvme.serve")


def open_backend(a):
    """The engine for the command line's options (cli.py)."""
    try:
        from .. import model as gpunvme_model
    except ImportError as e:
        raise ImportError(f"the engine module gpunvme._engine is not built ({e}): build the target "
                          "python-package (meson) or `pip install .`") from None
    m = gpunvme_model.Model(a.device, executor=a.executor, ctx=a.ctx, max_seqs=a.max_seqs, verify=not a.no_verify,
                            vram_budget=a.vram_budget, ram_budget=a.ram_budget)
    device = ", ".join(a.device)
    if a.max_seqs > 1:
        return SchedulerBackend(m, device, a.max_seqs, a.max_queued)
    return SequentialBackend(m, device)


def _info(model, device, max_seqs):
    return ModelInfo(name=model.name, architecture=model.architecture, size_bytes=model.size, device=device,
                     n_ctx=model.n_ctx, max_seqs=max_seqs, executor=model.executor, vocab_size=model.n_vocab,
                     adds_bos=bool(model.tokenize("", True, False)), bos_text=model.bos_token,
                     eos_text=model.eos_token, chat_template=model.chat_template)


class _ModelBackend:
    """What both backends take from gpunvme.Model alone: the tokenizer."""

    def tokenize(self, text, special):
        return self.model.tokenize(text, add_special=True, parse_special=special)


class _Generation:
    """One sequence in the engine's generation loop, on a thread of its own (the loop releases the GIL);
    its tokens come through a queue, one per step(); halt() ends it at its next token."""

    def __init__(self, engine, seq, prompt, max_tokens, sampling):
        self.seq, self.max_tokens, self.generated = seq, max_tokens, 0
        self._tokens, self._halt = queue.SimpleQueue(), threading.Event()
        args = (prompt, max_tokens, sampling.temperature, sampling.top_k, sampling.seed, [], False, self._on_token,
                sampling.top_p)
        self._thread = threading.Thread(target=self._run, args=(engine, args), name="gpunvme-generate", daemon=True)
        self._thread.start()

    def _run(self, engine, args):
        try:
            engine.generate(*args)
            self._tokens.put(None)
        except Exception as e:  # raised by next() on the worker's thread
            self._tokens.put(e)

    def _on_token(self, token):
        self._tokens.put(token)
        return self._halt.is_set()

    def next(self):
        """The next token, or None when the loop ended without one."""
        item = self._tokens.get()
        if isinstance(item, Exception):
            raise item
        return item

    def halt(self):
        self._halt.set()
        self._thread.join()


class SequentialBackend(_ModelBackend):
    """One sequence at a time, the others waiting in order: the engine's own generation loop (the llm tool's),
    so the same texts, but no shared passes. For engine modules without the Scheduler."""

    def __init__(self, model, device):
        self.model, self.eog = model, set(model.eog_ids)
        self.info = _info(model, device, 1)
        self._waiting, self._run, self._next = collections.deque(), None, 1
        self._counters = Counters()

    def submit(self, prompt, max_tokens, sampling):
        seq, self._next = self._next, self._next + 1
        self._waiting.append((seq, prompt, max_tokens, sampling))
        self._counters.prompt_tokens += len(prompt)
        return seq

    def cancel(self, seq):
        if self._run is not None and self._run.seq == seq:
            self._run.halt()
            self._run = None
        else:
            self._waiting = collections.deque(w for w in self._waiting if w[0] != seq)

    def step(self):
        if self._run is None:
            if not self._waiting:
                return []
            self._run = _Generation(self.model._engine, *self._waiting.popleft())
        run = self._run
        token = run.next()
        if token is None:  # ended without a further token (cannot happen before max_tokens or an EOG)
            self._run = None
            return []
        run.generated += 1
        self._counters.passes += 1
        self._counters.generated_tokens += 1
        finish = "stop" if token in self.eog else "length" if run.generated >= run.max_tokens else None
        if finish:
            run.halt()
            self._run = None
        return [Event(run.seq, token, b"" if token in self.eog else self.model.piece(token), finish)]

    def active(self):
        return int(self._run is not None)

    def queued(self):
        return len(self._waiting)

    def counters(self):
        c = self._counters
        return Counters(c.passes, c.generated_tokens, c.prompt_tokens)


class SchedulerBackend(_ModelBackend):
    """The engine's Scheduler (gpunvme.Scheduler): each step() is one pass over the layers carrying the next
    token of every running sequence and prompt chunks of new ones; a sequence's tokens are those it gets
    alone (so the llm tool's)."""

    def __init__(self, model, device, max_seqs, max_queued):
        self.model = model
        self.info = _info(model, device, max_seqs)
        # The worker admits at most max_seqs + max_queued; the slack covers sequences it has let go of
        # whose cancel() is still on its way.
        self.sched = model.scheduler(max_queued + max_seqs)

    def submit(self, prompt, max_tokens, sampling):
        try:
            return self.sched.submit(prompt, max_tokens, sampling.temperature, sampling.top_k, sampling.top_p,
                                     sampling.seed)
        except self.sched.QueueFull:
            raise ApiError(429, "the engine's queue is full; retry later", type_="rate_limit_error",
                           code="server_full") from None

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
        c = self.sched.counters()
        return Counters(c["passes"], c["generated_tokens"], c["prompt_tokens"], pass_tokens=c["pass_tokens"],
                        extra={"finished": c["finished"], "cancelled": c["cancelled"]})

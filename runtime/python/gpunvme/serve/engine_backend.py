"""The Backend (backend.py) over gpunvme's engine: gpunvme.Model for the model and its tokenizer, and the
engine's continuous-batching Scheduler (examples/llm/engine/scheduler.h) for the sequences. Used from the
worker's one thread only."""
from .backend import Counters, Event, ModelInfo

FINISH = {"stop": "stop", "eog": "stop", "length": "length"}  # the scheduler's finish reasons, as OpenAI's


def open_backend(a):
    """The engine for the command line's options (cli.py)."""
    try:
        from .. import model as gpunvme_model
    except ImportError as e:
        raise ImportError(f"the engine module gpunvme._engine is not built ({e}): build the target "
                          "python-package (meson) or `pip install .`") from None
    m = gpunvme_model.Model(a.device, executor=a.executor, ctx=a.ctx, max_seqs=a.max_seqs, verify=not a.no_verify,
                            vram_budget=a.vram_budget, ram_budget=a.ram_budget)
    return EngineBackend(m, ", ".join(a.device), a.max_seqs)


class EngineBackend:
    def __init__(self, model, device, max_seqs):
        self.model, self.sched = model, model.scheduler()
        self.eog = set(model.eog_ids)
        self.info = ModelInfo(name=model.name, architecture=model.architecture, size_bytes=model.size, device=device,
                              n_ctx=model.n_ctx, max_seqs=max_seqs, executor=model.executor,
                              vocab_size=model.n_vocab, adds_bos=bool(model.tokenize("", True, False)),
                              bos_text=model.bos_token, eos_text=model.eos_token, chat_template=model.chat_template)
        self._prompt_tokens = 0

    def tokenize(self, text, special):
        return self.model.tokenize(text, add_special=True, parse_special=special)

    def submit(self, prompt, max_tokens, sampling):
        self._prompt_tokens += len(prompt)
        return self.sched.submit(prompt, max_tokens, temperature=sampling.temperature, top_k=sampling.top_k,
                                 top_p=sampling.top_p, seed=sampling.seed, stop_tokens=sorted(self.eog))

    def cancel(self, seq):
        self.sched.cancel(seq)

    def step(self):
        return [Event(e.id, e.token, b"" if e.token in self.eog else self.model.piece(e.token),
                      FINISH.get(e.finish) if e.finish else None) for e in self.sched.step()]

    def active(self):
        return self.sched.active()

    def queued(self):
        return self.sched.queued()

    def counters(self):
        c = self.sched.counters()
        return Counters(passes=c.passes, generated_tokens=c.generated, prompt_tokens=self._prompt_tokens,
                        bytes_read=getattr(c, "bytes_read", None))

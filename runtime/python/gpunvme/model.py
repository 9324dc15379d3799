"""gpunvme.Model: a model found on a device (a `gpunvme deploy` record or a dd'ed GGUF; emu:gen too), run
by the engine as `build/examples/llm/llm` runs it: the same tokenizer, executors, sampler and generation
loop (the C++ module gpunvme._engine), so the same prompt and settings give the same text.

    import gpunvme
    m = gpunvme.Model("emu:/tmp/models.img", executor="cpu")
    print(m.generate_text("The capital of France is", max_tokens=16))
    for piece in m.generate("Once upon a time", max_tokens=64, temperature=0.8, seed=1):
        print(piece, end="", flush=True)

Arguments are checked here, before the engine sees them: a wrong type is a TypeError, a wrong value a
ValueError, and what the engine refuses (no model on the device, a bad device string) a ValueError or
RuntimeError carrying its message.
"""
import atexit
import math
import queue
import threading
import weakref
from typing import Any, Iterable, List, Optional, Sequence, Union

from . import _engine
from .text_cutter import TextCutter

EXECUTORS = ("auto", "cpu", "gpu")
Prompt = Union[str, Sequence[int]]  # text (tokenized with the BOS the model asks for) or token ids


def _int(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"at least {low}" if high is None else f"{low}..{high}"
        raise ValueError(f"{name} must be {bound}, not {value}")
    return value


def _float(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < low or (high is not None and value > high):
        bound = f"at least {low}" if high is None else f"{low}..{high}"
        raise ValueError(f"{name} must be a finite number {bound}, not {value}")
    return float(value)


def _devices(device):
    devices = [device] if isinstance(device, str) else device
    if not isinstance(devices, (list, tuple)) or not devices or not all(isinstance(d, str) for d in devices):
        raise TypeError("device must be a device string (emu:/path/disk.img, emu:gen,shape=...,type=..., "
                        "vfio:0000:0b:00.0) or a list of them (a striped set, in order)")
    return list(devices)


def _stops(stop):
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) and s for s in stops):
        raise TypeError("stop must be None, a non-empty string or a list of non-empty strings")
    return list(stops)


class Model:
    """A model on a device, opened for generation.

    device: a device string (as `llm --device`), or a list of them for a model striped over several.
    executor: "auto" (the GPU where one is present, as `llm --path auto`), "cpu" or "gpu".
    ctx: positions of context to allocate per sequence (default: 4096, or the model's context length if
        shorter); a prompt plus max_tokens must fit in it.
    max_seqs: sequences the executor holds at once (the scheduler's; 1 for generate()); "auto": as many as the
        GPU executor's VRAM budget gives (docs/engine.md; the cache's share is what the model leaves of the
        budget, or a quarter of it), the count then in Model.max_seqs.
    verify: check the bytes read against the deploy record's CRC-32Cs (False: `llm --no-verify`).
    vram_budget, ram_budget: the GPU executor's residency budgets in bytes (`llm --vram-budget/--ram-budget`).
    kv_host: the GPU executor's KV cache in pinned host memory, read over the host link by attention
        (more sequences than GPU memory holds caches for).
    """

    def __init__(self, device: Union[str, Sequence[str]], executor: str = "auto", ctx: Optional[int] = None,
                 max_seqs: Union[int, str] = 1, verify: bool = True, vram_budget: Optional[int] = None, ram_budget: int = 0,
                 kv_host: bool = False) -> None:
        devices = _devices(device)
        if not isinstance(executor, str):
            raise TypeError(f"executor must be a string, not {type(executor).__name__}")
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}")
        ctx = 0 if ctx is None else _int("ctx", ctx, 1, 2**32 - 1)
        if max_seqs == "auto":
            max_seqs = 0  # the engine's auto
        else:
            _int("max_seqs", max_seqs, 1, 2**32 - 1)
        for name, flag in (("verify", verify), ("kv_host", kv_host)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
        if vram_budget is not None:
            _int("vram_budget", vram_budget, 0, 2**64 - 1)
        _int("ram_budget", ram_budget, 0, 2**64 - 1)
        self._engine = _engine.Engine(devices, executor, ctx, max_seqs, verify, vram_budget, ram_budget, kv_host)
        self._busy = threading.Lock()

    # What the device holds.
    @property
    def name(self) -> str:
        """The model's general.name."""
        return self._engine.name

    @property
    def architecture(self) -> str:
        """general.architecture: llama, qwen2, gemma3, qwen3, qwen3moe, gpt-oss."""
        return self._engine.architecture

    @property
    def size(self) -> int:
        """The model's bytes on the device (the GGUF file's length)."""
        return self._engine.size

    @property
    def n_ctx(self) -> int:
        """Positions of context allocated per sequence."""
        return self._engine.n_ctx

    @property
    def n_ctx_train(self) -> int:
        """The model's own context length (<arch>.context_length)."""
        return self._engine.n_ctx_train

    @property
    def n_vocab(self) -> int:
        return self._engine.n_vocab

    @property
    def max_seqs(self) -> int:
        """Sequences the executor holds at once (with max_seqs="auto": what the VRAM budget gave)."""
        return self._engine.max_seqs

    @property
    def executor(self) -> str:
        """Which executor runs the model, as the llm tool describes it."""
        return self._engine.executor

    @property
    def bos_id(self) -> Optional[int]:
        return self._engine.bos_id

    @property
    def eos_id(self) -> Optional[int]:
        return self._engine.eos_id

    @property
    def eog_ids(self) -> List[int]:
        """The tokens that end generation (the EOS and those llama.cpp also stops at, e.g. <end_of_turn>)."""
        return self._engine.eog_ids

    @property
    def bos_token(self) -> Optional[str]:
        """The BOS token's text, or None."""
        return None if self.bos_id is None else self._engine.token_text(self.bos_id)

    @property
    def eos_token(self) -> Optional[str]:
        """The EOS token's text, or None."""
        return None if self.eos_id is None else self._engine.token_text(self.eos_id)

    @property
    def chat_template(self) -> Optional[str]:
        """The GGUF's tokenizer.chat_template (Jinja2 source), or None when it has none."""
        return self._engine.chat_template

    # Text and tokens.
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        """Token ids of `text` as llama_tokenize gives them: with add_special, the BOS (and EOS) the model
        asks for; with parse_special, control-token texts (<start_of_turn>, ...) become those tokens."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        return self._engine.tokenize(text, bool(add_special), bool(parse_special))

    def _ids(self, ids):
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise TypeError("ids must be a list of token ids (ints)")
        ids = list(ids)
        for i in ids:
            _int("token id", i, 0, self.n_vocab - 1)
        return ids

    def piece(self, token_id: int) -> bytes:
        """The bytes token_id prints as (bytes: a byte-fallback token may hold part of a UTF-8 character)."""
        return self._engine.piece(_int("token id", token_id, 0, self.n_vocab - 1))

    def pieces(self, ids: Iterable[int]) -> List[bytes]:
        """piece() of every id."""
        return [self._engine.piece(i) for i in self._ids(ids)]

    def detokenize(self, ids: Iterable[int]) -> str:
        """The text of the ids (control tokens print nothing; invalid UTF-8 replaced by U+FFFD)."""
        return b"".join(self.pieces(ids)).decode("utf-8", errors="replace")

    # Generation.
    def generate(self, prompt: Prompt, max_tokens: int = 32, temperature: float = 0.0, top_k: int = 40,
                 top_p: float = 1.0, seed: int = 0, stop: Union[None, str, Sequence[str]] = None,
                 ignore_eos: bool = False) -> "TextStream":
        """Generates up to max_tokens after `prompt` (a str, tokenized with the BOS the model asks for, or
        a list of token ids) and returns a TextStream, an iterator of the text as it is generated.

        temperature 0 is greedy decoding (llama.cpp's tokens); > 0 samples among the top_k most likely
        (0: all), then the fewest of those whose probabilities sum to top_p (1: off), with the given seed
        (the same seed, the same text). Stops at the model's
        end-of-generation tokens (unless ignore_eos) and before the first of the `stop` strings, which
        the text does not include. One generation at a time per Model.
        """
        if not self._engine.has_tokenizer:
            raise ValueError("the model has no vocabulary (tokenizer.ggml.model = none): generate_ids() takes "
                             "and gives token ids")
        return self._stream(prompt, max_tokens, temperature, top_k, top_p, seed, ignore_eos, _stops(stop), True)

    def generate_text(self, prompt: Prompt, max_tokens: int = 32, **options: Any) -> str:
        """The whole text generate() yields, as one string."""
        return "".join(self.generate(prompt, max_tokens, **options))

    def generate_ids(self, prompt: Prompt, max_tokens: int = 32, temperature: float = 0.0, top_k: int = 40,
                     top_p: float = 1.0, seed: int = 0, ignore_eos: bool = False) -> List[int]:
        """The token ids generate() would produce (any model, one without a vocabulary too), as a list."""
        stream = self._stream(prompt, max_tokens, temperature, top_k, top_p, seed, ignore_eos, [], False)
        for _ in stream:
            pass
        return stream.tokens

    def scheduler(self, max_queued: int = 64, draft: str = "none", draft_k: int = 8) -> "Scheduler":
        """The engine's continuous batching over this model (Model(max_seqs=N): N sequences per pass).
        draft="lookup" (as `llm --draft lookup`): each decoding sequence drafts up to draft_k (1..31)
        tokens by prompt lookup, verified in the same pass; its tokens stay those it gets without.
        The Model then belongs to it: generate() is refused from here on (both would use the same
        sequence slots)."""
        _int("max_queued", max_queued, 0, 2**32 - 1)
        if draft not in ("none", "lookup"):
            raise ValueError(f"draft must be 'none' or 'lookup', not {draft!r}")
        _int("draft_k", draft_k, 1, 31)
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("this Model is generating: finish or close() its stream before making a scheduler")
        return Scheduler(self, _engine.Batch(self._engine, max_queued, draft_k if draft == "lookup" else 0))

    def _sampling(self, temperature, top_k, top_p, seed):
        return (_float("temperature", temperature, 0.0), _int("top_k", top_k, 0, 2**32 - 1),
                _float("top_p", top_p, 0.0, 1.0), _int("seed", seed, 0, 2**64 - 1))

    def _prompt_ids(self, prompt, max_tokens):
        ids = self.tokenize(prompt) if isinstance(prompt, str) else self._ids(prompt)
        if not ids:
            raise ValueError("the prompt has no tokens")
        _int("max_tokens", max_tokens, 0, 2**32 - 1)
        if len(ids) + max_tokens > self.n_ctx:
            raise ValueError(f"the prompt ({len(ids)} tokens) plus max_tokens {max_tokens} is more than the context "
                             f"({self.n_ctx} positions): a shorter prompt, fewer tokens or Model(ctx=...)")
        return ids

    def _stream(self, prompt, max_tokens, temperature, top_k, top_p, seed, ignore_eos, stops, text):
        ids = self._prompt_ids(prompt, max_tokens)
        temperature, top_k, top_p, seed = self._sampling(temperature, top_k, top_p, seed)
        if not isinstance(ignore_eos, bool):
            raise TypeError(f"ignore_eos must be a bool, not {type(ignore_eos).__name__}")
        return TextStream(self, (ids, max_tokens, temperature, top_k, seed, [], ignore_eos), top_p, stops, text)


class TextStream:
    """The text of one generation, piece by piece, as the engine produces its tokens. Each piece is
    whole UTF-8 (a character split over tokens comes once complete). After the end: `tokens` (the ids
    generated), `finish_reason` ("stop": an end-of-generation token or a stop string; "length":
    max_tokens). close() (or leaving a for loop early and dropping the stream) ends the generation.

    The engine runs in a thread of its own with the GIL released; the stream hands over its tokens."""

    def __init__(self, model, args, top_p, stops, text=True):
        self._model, self._args, self._top_p, self._stops, self._text = model, args, top_p, stops, text
        self.tokens = []
        self.finish_reason = None
        self._queue = queue.SimpleQueue()
        self._halt = threading.Event()
        self._thread = None
        self._cutter = TextCutter(stops)  # whole UTF-8, cut at the first stop string
        self._done = False

    def __iter__(self) -> "TextStream":
        return self

    @staticmethod
    def _run(engine, args, top_p, out, halt, busy):
        """The engine's thread. It holds no reference to the stream, so that dropping an unfinished
        stream (a `break` out of its loop) closes it."""
        def on_token(token_id):
            out.put(token_id)
            return halt.is_set()
        try:
            engine.generate(*args, on_token, top_p=top_p)
            out.put(None)
        except BaseException as e:  # handed to the consumer's thread
            out.put(e)
        finally:
            busy.release()

    def _start(self):
        if not self._model._busy.acquire(blocking=False):
            raise RuntimeError("this Model is generating already, or a scheduler owns it: finish or close() the "
                               "other stream first (one generation at a time per Model)")
        _live.add(self)
        self._thread = threading.Thread(target=TextStream._run, name="gpunvme-generate", daemon=True,
                                        args=(self._model._engine, self._args, self._top_p, self._queue, self._halt,
                                              self._model._busy))
        self._thread.start()

    def __next__(self) -> str:
        try:
            while not self._done:
                if self._thread is None:
                    self._start()
                item = self._queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item is None:
                    self.finish_reason = self.finish_reason or (
                        "length" if len(self.tokens) >= self._args[1] else "stop")
                    text = self._cutter.finish()
                    self.close()
                    if text:
                        return text
                    break
                self.tokens.append(item)
                if self._text:
                    text = self._cutter.add(self._model._engine.piece(item))
                    if self._cutter.stopped:
                        self.finish_reason = "stop"
                        self.close()
                    if text:
                        return text
        except BaseException:
            self.close()
            raise
        raise StopIteration

    def close(self) -> None:
        """Ends the generation (at the engine's next token) and waits for it to stop."""
        self._done = True
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        _live.discard(self)

    def __del__(self):
        self.close()


class Scheduler:
    """Continuous batching (Model.scheduler()): requests join the running passes as slots free and leave
    at a stop token, at max_tokens or on cancel(); each step() is one pass over the layers carrying the
    next token of every running sequence and prompt chunks of new ones. A sequence's tokens are those it
    gets alone. Calls from several threads are serialized (step() holds the engine for one pass, with
    the GIL released)."""

    QueueFull = _engine.QueueFull  # submit() when max_queued requests already wait

    def __init__(self, model, batch):
        self._model, self._batch, self._lock = model, batch, threading.Lock()

    def submit(self, prompt: Prompt, max_tokens: int = 32, temperature: float = 0.0, top_k: int = 40,
               top_p: float = 1.0, seed: int = 0, stop_tokens: Optional[Iterable[int]] = None) -> int:
        """Queues a request; returns its id. stop_tokens: the ids that end it (default: the model's
        end-of-generation tokens). Raises Scheduler.QueueFull when max_queued requests wait."""
        ids = self._model._prompt_ids(prompt, max_tokens)
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1 for a scheduled request")
        sampling = self._model._sampling(temperature, top_k, top_p, seed)
        stops = self._model.eog_ids if stop_tokens is None else self._model._ids(stop_tokens)
        with self._lock:
            return self._batch.submit(ids, max_tokens, *sampling, set(stops))

    def cancel(self, request_id: int) -> bool:
        """Frees the request's slot at once (or drops it from the queue); False for an unknown or finished id."""
        with self._lock:
            return self._batch.cancel(_int("request id", request_id, 0, 2**64 - 1))

    def step(self) -> list:
        """One pass; a SeqEvent (id, token, finish: None, "stop" or "length", prompt_tokens, generated)
        per sequence that produced a token. Empty when idle."""
        with self._lock:
            return self._batch.step()

    def active(self) -> int:
        """Sequences holding a slot."""
        return self._batch.active()

    def queued(self) -> int:
        """Requests waiting for a slot."""
        return self._batch.queued()

    def counters(self) -> dict:
        """passes, pass_tokens, prompt_tokens, generated_tokens, finished, cancelled, drafted_tokens and
        accepted_tokens (drafts that became tokens; draft="lookup") since it was made."""
        return self._batch.counters()

    def io_counters(self) -> dict:
        """What the executor counted since the model was opened: bytes_read (from the device by passes:
        streamed layers and fetched experts; 0 on the CPU executor, which reads the model once at start),
        layer_bytes_per_pass (the streamed layers' bytes, read once per pass), ram_bytes_copied (the RAM
        tier's copies to the GPU), layer_stall_seconds (compute waiting for streamed layers), and, where
        experts are fetched (else None), expert_bytes_read, expert_hits, experts_routed (distinct experts
        a pass routed to, summed over passes) and expert_stall_seconds. Waits for a running step()."""
        with self._lock:
            return self._batch.io_counters()


# Streams whose engine thread may still run: stopped before the interpreter exits, since a thread
# inside the engine cannot take the GIL back once finalization has begun.
_live = weakref.WeakSet()
atexit.register(lambda: [s.close() for s in list(_live)])

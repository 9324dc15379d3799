"""Continuous batching: the engine's step() loop on one thread of its own (the engine is single-threaded),
and the bridge to the HTTP handlers on the asyncio loop. Each request gets an asyncio.Queue of its events;
submissions and cancellations reach the engine thread as commands it runs between passes, so a sequence
joins the running set at the next pass and a cancelled one leaves it before the next. Admission is
bounded: at most max_seqs running plus max_queued waiting for a slot; beyond that a request waits at most
queue_timeout seconds for room, then is answered 429, and never holds up the others."""
import asyncio
import contextlib
import logging
import queue
import threading
import time

from .backend import Counters
from .metrics import Rate
from .openai_api import ApiError

log = logging.getLogger("gpunvme.serve")
IDLE_POLL_S = 0.5  # how long the idle engine thread sleeps on its command queue before checking for shutdown


class Sequence:
    """One request's sequence as the handler sees it: its id, prompt length and events (Event, or an
    Exception when the engine failed)."""

    def __init__(self, seq, prompt_tokens, events):
        self.seq, self.prompt_tokens, self.events = seq, prompt_tokens, events
        self.done = False  # its last event arrived (or it was cancelled): nothing to free
        self.generated = 0  # tokens received so far


class Snapshot:
    """What /metrics reads, replaced whole by the engine thread after every pass (one reference store)."""

    def __init__(self, active=0, queued=0, counters=None, tokens_per_s=0.0):
        self.active, self.queued, self.tokens_per_s = active, queued, tokens_per_s
        self.counters = counters or Counters()


class Worker:
    def __init__(self, backend, max_queued, queue_timeout):
        self.backend, self.info = backend, backend.info
        self.limit = self.info.max_seqs + max_queued
        self.queue_timeout = queue_timeout
        self.snapshot = Snapshot()
        self.admitted = 0       # requests holding a place (running, or queued in the engine)
        self.waiting = 0        # requests waiting for a place
        self.rejected = 0       # answered 429
        self.cancelled = 0      # sequences ended by a vanished client or a stop string
        self._commands = queue.SimpleQueue()
        self._streams = {}      # seq -> (loop, asyncio.Queue); touched by the engine thread only
        self._room = None       # asyncio.Condition, made on the loop
        self._stop = False
        self._rate = Rate()
        self._thread = threading.Thread(target=self._run, name="gpunvme-engine", daemon=True)

    def start(self):
        self._room = asyncio.Condition()
        self._thread.start()

    def stop(self, timeout=10):
        self._stop = True
        self._commands.put(lambda: None)
        self._thread.join(timeout)

    @contextlib.asynccontextmanager
    async def place(self):
        """A place among the admitted requests for the body of the `async with`, or ApiError 429."""
        async with self._room:
            if self.admitted >= self.limit:
                self.waiting += 1
                try:
                    await asyncio.wait_for(self._room.wait_for(lambda: self.admitted < self.limit),
                                           self.queue_timeout)
                except asyncio.TimeoutError:
                    self.rejected += 1
                    raise ApiError(429, f"the server is full: {self.info.max_seqs} sequences running and "
                                        f"{self.limit - self.info.max_seqs} queued (--max-seqs, --max-queued); "
                                        "retry later", type_="rate_limit_error", code="server_full") from None
                finally:
                    self.waiting -= 1
            self.admitted += 1
        try:
            yield
        finally:
            async with self._room:
                self.admitted -= 1
                self._room.notify()

    async def submit(self, prompt, special, max_tokens, sampling):
        """Tokenizes `prompt` (text, or a list of ids), checks it against the context and starts its
        sequence; returns a Sequence. ApiError for a prompt the context cannot hold."""
        loop = asyncio.get_running_loop()
        answer, events = loop.create_future(), asyncio.Queue()

        def command():
            try:
                ids = prompt if isinstance(prompt, list) else self.backend.tokenize(prompt, special)
                n = self._checked_max_tokens(ids, max_tokens)
                seq = self.backend.submit(ids, n, sampling)
                self._streams[seq] = (loop, events)
                result = Sequence(seq, len(ids), events)
            except Exception as e:  # handed to the handler, which answers it
                result = e
            loop.call_soon_threadsafe(self._settle, answer, result)
        self._commands.put(command)
        result = await answer
        if isinstance(result, Exception):
            raise result
        return result

    def cancel(self, sequence):
        """Ends `sequence` at the next pass boundary (a client gone, or a stop string reached)."""
        if not sequence.done:
            sequence.done = True
            self.cancelled += 1
            self._commands.put(lambda: self._cancel(sequence.seq))

    def _cancel(self, seq):
        if self._streams.pop(seq, None) is not None:
            self.backend.cancel(seq)

    def _settle(self, answer, result):
        if not answer.cancelled():
            answer.set_result(result)
        elif isinstance(result, Sequence):  # the client left while its prompt was read: free the slot
            self.cancel(result)

    def _checked_max_tokens(self, ids, max_tokens):
        ctx, vocab = self.info.n_ctx, self.info.vocab_size
        bad = next((t for t in ids if t >= vocab), None)
        if bad is not None:
            raise ApiError(400, f"token id {bad} in 'prompt' is outside the model's {vocab} tokens", param="prompt",
                           code="invalid_value")
        if not ids:
            raise ApiError(400, "the prompt has no tokens (this model adds no BOS): give some text", param="prompt",
                           code="invalid_value")
        room = ctx - len(ids)
        if room < 1 or (max_tokens or 0) > room:
            asked = f"{len(ids)} in the prompt" + (f" and {max_tokens} to generate" if max_tokens else "")
            raise ApiError(400, f"this server's context holds {ctx} tokens per sequence (--ctx), but {asked} were "
                                "asked for; shorten the prompt or lower max_tokens",
                           param="max_tokens" if room >= 1 else "prompt", code="context_length_exceeded")
        return max_tokens or room

    def _run(self):
        while not self._stop:
            busy = self.backend.active() or self.backend.queued()
            try:  # idle: sleep until a command comes; busy: take what came during the pass
                command = self._commands.get_nowait() if busy else self._commands.get(timeout=IDLE_POLL_S)
            except queue.Empty:
                command = None
            while command is not None:
                command()
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    command = None
            if self.backend.active() or self.backend.queued():
                self._step()
            counters = self.backend.counters()
            self._rate.update(time.monotonic(), counters.generated_tokens)
            self.snapshot = Snapshot(self.backend.active(), self.backend.queued(), counters, self._rate.per_second())

    def _step(self):
        try:
            events = self.backend.step()
        except Exception as e:  # the engine failed: every running request hears it, the engine restarts none
            log.exception("the engine's pass failed")
            for seq, (loop, q) in list(self._streams.items()):
                self.backend.cancel(seq)
                loop.call_soon_threadsafe(q.put_nowait, e)
            self._streams.clear()
            return
        by_loop = {}
        for ev in events:
            target = self._streams.get(ev.seq)
            if target is None:
                continue  # cancelled while this pass ran
            if ev.finish:
                del self._streams[ev.seq]
            by_loop.setdefault(target[0], []).append((target[1], ev))
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(_deliver, items)


def _deliver(items):
    for q, ev in items:
        q.put_nowait(ev)

"""What the server needs from an engine, and nothing more: the one interface the batching worker drives
(worker.py), shaped after the engine's Scheduler (submit, cancel, step -> events). engine_backend.py
implements it over gpunvme.Model; a test may put a double in its place. Every method is called from the worker's one thread only: the
engine is single-threaded, so tokenizing and detokenizing wait for the current pass like any other call."""
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Sampling:
    """temperature 0 is greedy (then the others do not matter); top_k 0 and top_p 1 keep every token."""
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class ModelInfo:
    name: str          # general.name, the id /v1/models lists and requests must name (or leave out)
    architecture: str  # general.architecture: gemma3, llama, qwen3moe, ...
    size_bytes: int    # the model's bytes on the device
    device: str        # where it was found, as given on the command line
    n_ctx: int         # positions each sequence may hold (prompt + generated)
    max_seqs: int      # sequences computed in one pass at most
    executor: str      # cpu or gpu
    vocab_size: int
    adds_bos: bool = True          # tokenize() puts BOS first
    bos_text: str | None = None    # the BOS and EOS tokens' texts, for a chat template's bos_token/eos_token
    eos_text: str | None = None
    chat_template: str | None = None  # the GGUF's tokenizer.chat_template, None when it has none


@dataclass(frozen=True)
class Event:
    """One step's news about one sequence: a generated token (its text as bytes, possibly part of a UTF-8
    character; b"" for an end-of-generation token) and, on its last event, why it ended: "stop" (the model's
    end-of-generation token) or "length" (max_tokens reached)."""
    seq: int
    token: int
    piece: bytes
    finish: str | None = None


@dataclass
class Counters:
    """The engine's running totals, read by /metrics; None: this engine does not count it (or, for the
    expert fields, fetches no experts). extra: any other number the engine counts, exported under its own name."""
    passes: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    bytes_read: int | None = None  # from the device by passes (streamed layers, fetched experts)
    pass_tokens: int | None = None  # tokens the passes carried (prompt and generated); None: not counted
    layer_stall_seconds: float | None = None  # compute waited for streamed layers
    expert_hits: int | None = None  # fetched experts found in the expert cache
    experts_routed: int | None = None  # experts the passes routed to (distinct per pass and layer)
    expert_stall_seconds: float | None = None  # compute waited for expert reads
    drafted_tokens: int | None = None  # lookup-drafted tokens the passes verified (--draft lookup)
    accepted_tokens: int | None = None  # of those, the ones that became generated tokens
    extra: dict = field(default_factory=dict)


class Backend(Protocol):
    info: ModelInfo

    def tokenize(self, text: str, special: bool) -> list[int]:
        """Ids of `text` with the model's BOS when it asks for one; special: control-token texts
        (<start_of_turn>, <|im_end|>) are those tokens, as in a rendered chat template."""

    def submit(self, prompt: list[int], max_tokens: int, sampling: Sampling) -> int:
        """Starts (or queues, when max_seqs run already) a sequence; returns its id."""

    def cancel(self, seq: int) -> None:
        """Ends a sequence now, running or queued, freeing its slot; no more events come for it."""

    def step(self) -> list[Event]:
        """One pass over the model for every running sequence; [] when none runs."""

    def active(self) -> int:
        """Sequences running (holding a slot)."""

    def queued(self) -> int:
        """Sequences submitted and waiting for a slot."""

    def counters(self) -> Counters: ...

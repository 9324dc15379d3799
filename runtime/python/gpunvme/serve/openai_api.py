"""OpenAI's request and response shapes (the /v1/completions and /v1/chat/completions subset the server
serves) and its error object {"error": {"message", "type", "param", "code"}}. Validation reads the JSON
body into a GenRequest or raises ApiError naming the field, as OpenAI's API answers a bad request; fields
this server does not know are ignored (clients send many), known fields of the wrong type are refused."""
import dataclasses
import secrets
import time
import uuid
from dataclasses import dataclass

from .backend import Sampling

MAX_STOPS = 4  # OpenAI's limit on `stop`


class ApiError(Exception):
    """An answer other than 200: HTTP status and OpenAI's error fields."""

    def __init__(self, status, message, type_="invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self):
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class GenRequest:
    chat: bool
    model: str
    prompt: str | None          # text to tokenize (a completion's prompt, or the rendered conversation)
    prompt_ids: list | None     # a completion's prompt given as token ids
    max_tokens: int | None      # None: what the context leaves
    sampling: Sampling
    stops: list
    stream: bool
    include_usage: bool


def _type_name(v):
    return {bool: "a boolean", str: "a string", list: "an array", dict: "an object", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


def _field(body, name, kinds, what, default=None):
    """body[name] when of one of `kinds` (null and absent give default); bool is not a number here."""
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
        raise ApiError(400, f"'{name}' must be {what}, not {_type_name(v)}", param=name, code="invalid_type")
    return v


def _number(body, name, low, high, default, integer=False):
    kinds = (int,) if integer else (int, float)
    v = _field(body, name, kinds, "an integer" if integer else "a number", default)
    if v is not None and not low <= v <= high:
        raise ApiError(400, f"'{name}' is {v}; it must be between {low} and {high}", param=name,
                       code="invalid_value")
    return v


def _stops(body):
    stop = _field(body, "stop", (str, list), "a string or an array of strings")
    stops = [stop] if isinstance(stop, str) else (stop or [])
    if len(stops) > MAX_STOPS or not all(isinstance(s, str) for s in stops):
        raise ApiError(400, f"'stop' must be a string or an array of at most {MAX_STOPS} strings", param="stop",
                       code="invalid_value")
    return stops


def _refuse_unsupported(body):
    n = _number(body, "n", 1, 1 << 31, 1, integer=True)
    if n != 1:
        raise ApiError(400, f"'n' is {n}; this server returns one choice per request (n = 1)", param="n",
                       code="unsupported_value")
    for name in ("logprobs", "top_logprobs", "echo", "suffix", "tools", "response_format"):
        if body.get(name) not in (None, False, 0, []):
            raise ApiError(400, f"'{name}' is not supported by this server; leave it out", param=name,
                           code="unsupported_parameter")


def parse(body, chat, max_tokens_limit):
    """The request in `body` (already JSON-decoded). max_tokens_limit: the context's positions, above which
    max_tokens can never be met."""
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {_type_name(body)}")
    _refuse_unsupported(body)
    model = _field(body, "model", (str,), "a string", "")
    name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _number(body, name, 1, max_tokens_limit, None, integer=True)
    sampling = Sampling(temperature=float(_number(body, "temperature", 0, 2, 1.0)),
                        top_k=_number(body, "top_k", 0, 1 << 31, 0, integer=True),
                        top_p=float(_number(body, "top_p", 0, 1, 1.0)),
                        seed=_number(body, "seed", -(1 << 63), (1 << 64) - 1, None, integer=True))
    # No seed: a fresh one per request, as OpenAI samples differently each time; a seed repeats the text.
    sampling = dataclasses.replace(sampling, seed=secrets.randbits(64) if sampling.seed is None
                                   else sampling.seed % (1 << 64))
    if sampling.top_p == 0:
        raise ApiError(400, "'top_p' must be above 0 (1 keeps every token)", param="top_p", code="invalid_value")
    stream = _field(body, "stream", (bool,), "a boolean", False)
    options = _field(body, "stream_options", (dict,), "an object", {})
    include_usage = _field(options, "include_usage", (bool,), "a boolean", False)
    prompt, prompt_ids = None, None
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty array of {\"role\", \"content\"} objects",
                           param="messages", code="invalid_type" if "messages" in body else "missing_required_parameter")
    else:
        prompt, prompt_ids = _prompt(body)
    return GenRequest(chat, model, prompt, prompt_ids, max_tokens, sampling, _stops(body), stream, include_usage)


def _prompt(body):
    """A completion's prompt: a string, an array of one string, or an array of token ids."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if isinstance(p, str):
        return p, None
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in p):
        return None, p
    raise ApiError(400, "'prompt' must be a string (or an array of one string, or of token ids); "
                        "one prompt per request", param="prompt",
                   code="missing_required_parameter" if p is None else "invalid_type")


class Reply:
    """The bodies of one request's answer: the whole completion, or its stream of chunks."""

    def __init__(self, chat, model):
        self.chat, self.model = chat, model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _head(self, chunk=False):
        return {"id": self.id, "object": self.object + (".chunk" if chunk and self.chat else ""),
                "created": self.created, "model": self.model}

    @staticmethod
    def usage(prompt_tokens, completion_tokens):
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def whole(self, text, finish, usage):
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return {**self._head(), "choices": [choice], "usage": usage}

    def chunk(self, text=None, finish=None, first=False):
        if self.chat:
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        return {**self._head(chunk=True), "choices": [choice]}

    def usage_chunk(self, usage):
        return {**self._head(chunk=True), "choices": [], "usage": usage}


def template_kwargs(body, reserved):
    """chat_template_kwargs (vLLM's and llama-server's extension: enable_thinking, reasoning_effort, ...)."""
    extra = _field(body, "chat_template_kwargs", (dict,), "an object", {})
    clash = sorted(reserved & extra.keys())
    if clash:
        raise ApiError(400, f"'chat_template_kwargs' may not set {', '.join(clash)} (the server sets them)",
                       param="chat_template_kwargs", code="invalid_value")
    return extra

"""The HTTP side (aiohttp): routes, the API key, the body's size and time limits, and every failure as
OpenAI's error object. Generation goes through the Worker; nothing here touches the engine."""
import asyncio
import hmac
import json
import logging
import time

from aiohttp import web

from ..chat_template import ChatTemplateError
from ..text_cutter import TextCutter
from . import openai_api
from .openai_api import ApiError
from .sse import EventStream

log = logging.getLogger("gpunvme.serve")
RESERVED_TEMPLATE_VARS = {"messages", "tools", "documents", "add_generation_prompt"}


class Limits:
    def __init__(self, max_body, body_timeout):
        self.max_body = max_body          # bytes of a request body at most (413 above)
        self.body_timeout = body_timeout  # seconds to receive a whole body (408 after)


class Server:
    def __init__(self, worker, metrics, template, limits, api_key=None):
        self.worker, self.info, self.metrics = worker, worker.info, metrics
        self.template, self.limits, self.api_key = template, limits, api_key
        self.started = int(time.time())

    def app(self):
        app = web.Application(client_max_size=self.limits.max_body,
                              middlewares=[self._errors, self._auth])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_text)
        return app

    @web.middleware
    async def _errors(self, request, handler):
        try:
            return await handler(request)
        except ApiError as e:
            return _error_response(e)
        except web.HTTPException as e:  # aiohttp's own: 404 no such route, 405, 413 body too large
            if e.status < 400:
                raise
            return _error_response(ApiError(e.status, f"{request.method} {request.path}: {e.reason}",
                                            type_="invalid_request_error", code=e.reason.lower().replace(" ", "_")))
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as e:
            log.exception("%s %s failed", request.method, request.path)
            return _error_response(ApiError(500, f"internal error: {type(e).__name__}: {e}", type_="server_error"))

    @web.middleware
    async def _auth(self, request, handler):
        if self.api_key is not None and request.path != "/health":
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
                raise ApiError(401, "a valid API key is needed: send 'Authorization: Bearer KEY' (the server's "
                                    "--api-key)", code="invalid_api_key")
        return await handler(request)

    async def health(self, request):
        snap = self.worker.snapshot
        return web.json_response({"status": "ok", "model": self.info.name, "active": snap.active,
                                  "queued": snap.queued + self.worker.waiting})

    async def metrics_text(self, request):
        return web.Response(body=self.metrics.text(), content_type="text/plain",
                            headers={"X-Content-Type-Options": "nosniff"})

    def _model_object(self):
        i = self.info
        return {"id": i.name, "object": "model", "created": self.started, "owned_by": "gpunvme",
                "architecture": i.architecture, "size_bytes": i.size_bytes, "device": i.device,
                "context_length": i.n_ctx, "max_seqs": i.max_seqs, "executor": i.executor}

    async def models(self, request):
        return web.json_response({"object": "list", "data": [self._model_object()]})

    async def model(self, request):
        self._check_model(request.match_info["model"], "model")
        return web.json_response(self._model_object())

    def _check_model(self, name, param):
        if name and name != self.info.name:
            raise ApiError(404, f"the model '{name}' does not exist; this server serves '{self.info.name}' "
                                "(GET /v1/models)", param=param, code="model_not_found")

    async def completions(self, request):
        return await self._generate(request, chat=False)

    async def chat_completions(self, request):
        return await self._generate(request, chat=True)

    async def _read_json(self, request):
        if request.content_length is not None and request.content_length > self.limits.max_body:
            raise ApiError(413, f"the request body is {request.content_length} bytes; this server takes at most "
                                f"{self.limits.max_body}", code="request_too_large")
        try:
            raw = await asyncio.wait_for(request.read(), self.limits.body_timeout)
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {self.limits.body_timeout:g} s",
                           code="request_timeout") from None
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(413, f"the request body is larger than this server takes ({self.limits.max_body} "
                                "bytes)", code="request_too_large") from None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None

    def _prompt(self, req, body):
        """(text or ids, whether control-token texts are tokens) for the engine."""
        if not req.chat:
            return (req.prompt_ids if req.prompt is None else req.prompt), False
        if self.template is None:
            raise ApiError(400, f"{self.info.name} has no chat template (tokenizer.chat_template): start the server "
                                "with --chat-template-file FILE, or use /v1/completions", param="messages",
                           code="no_chat_template")
        extra = openai_api.template_kwargs(body, RESERVED_TEMPLATE_VARS)
        try:
            text = self.template.render(body["messages"], True, **extra)
        except ChatTemplateError as e:
            raise ApiError(400, str(e), param="messages", code="invalid_messages") from None
        bos = self.info.bos_text
        if self.info.adds_bos and bos and text.startswith(bos):
            text = text[len(bos):]  # the tokenizer adds BOS itself: not twice (llama.cpp does the same)
        return text, True

    async def _generate(self, request, chat):
        body = await self._read_json(request)
        req = openai_api.parse(body, chat, self.info.n_ctx)
        self._check_model(req.model, "model")
        prompt, special = self._prompt(req, body)
        reply = openai_api.Reply(chat, self.info.name)
        async with self.worker.place():
            seq = await self.worker.submit(prompt, special, req.max_tokens, req.sampling)
            try:
                pieces = _texts(seq, TextCutter(req.stops))
                if req.stream:
                    return await self._stream(request, req, reply, seq, pieces)
                text, finish = "", None
                async for piece, finish in pieces:
                    text += piece
                return web.json_response(reply.whole(text, finish, reply.usage(seq.prompt_tokens, seq.generated)))
            finally:
                self.worker.cancel(seq)  # a client gone, a stop string: free the slot now (no-op when done)

    async def _stream(self, request, req, reply, seq, pieces):
        out = EventStream()
        await out.open(request)
        if reply.chat:
            await out.send(reply.chunk(first=True))
        try:
            async for piece, finish in pieces:
                if piece or finish:
                    await out.send(reply.chunk(piece, finish))
        except ApiError as e:  # the engine failed mid-stream: the status is sent already, so say it in the stream
            await out.send(e.body())
        if req.include_usage:
            await out.send(reply.usage_chunk(reply.usage(seq.prompt_tokens, seq.generated)))
        return await out.close()


async def _texts(seq, cutter):
    """(text, finish reason or None) as the sequence's events come, cut at a stop string."""
    while True:
        ev = await seq.events.get()
        if isinstance(ev, Exception):
            seq.done = True
            raise ApiError(500, f"the engine failed: {ev}", type_="server_error", code="engine_error")
        seq.generated += 1
        piece = cutter.add(ev.piece)
        if cutter.stopped:
            yield piece, "stop"
            return
        if ev.finish:
            seq.done = True
            yield piece + cutter.finish(), ev.finish
            return
        yield piece, None


def _error_response(e):
    response = web.json_response(e.body(), status=e.status)
    if e.status in (408, 413):
        response.force_close()  # the body was not read: the connection cannot carry another request
    return response

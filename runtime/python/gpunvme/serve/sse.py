"""Server-sent events as OpenAI streams them: `data: {json}` events, then `data: [DONE]`."""
import json

from aiohttp import web


class EventStream:
    def __init__(self):
        self._response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                     "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def open(self, request):
        await self._response.prepare(request)

    async def send(self, obj):
        # A vanished client makes this raise (ConnectionResetError), which ends the handler and its sequence.
        await self._response.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")

    async def close(self):
        await self._response.write(b"data: [DONE]\n\n")
        await self._response.write_eof()
        return self._response

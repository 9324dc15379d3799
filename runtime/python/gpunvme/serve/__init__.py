"""The OpenAI-compatible HTTP server (issue 37): python -m gpunvme.serve --device DEV. Modules: cli (the
command line), app (aiohttp routes, limits, errors), openai_api (requests and replies), sse (streams),
worker (the engine's thread and continuous batching), backend (what the worker needs
from an engine), engine_backend (that, over gpunvme's engine), metrics (/metrics)."""

"""python -m gpunvme.serve --device DEV: the command line, and the server's start and stop."""
import argparse
import asyncio
import logging
import re
import signal
import sys


DESCRIPTION = """An OpenAI-compatible HTTP server for the model found on the device: POST /v1/chat/completions
and /v1/completions (streamed as server-sent events with "stream": true), GET /v1/models, /health and /metrics
(Prometheus). Up to --max-seqs requests share each pass over the layers (the engine's continuous-batching
Scheduler), the others queued."""


def size_arg(text):
    """A size as the project's tools write it: decimal, with K, M, G, T = 1024, 1024^2, ... (B, iB allowed)."""
    m = re.fullmatch(r"(0|[1-9][0-9]*)([KMGT]?)(i?B)?", text)
    if not m or (m.group(3) and not m.group(2) and m.group(3) != "B"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4M, 512K, 1048576)")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2) or " "))


def _port(text):
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0 to 65535)")
    return int(text)


def _max_seqs(text):
    """--max-seqs: a count, or "auto" (0 to the engine: the GPU executor sizes it from its VRAM budget)."""
    return 0 if text == "auto" else _positive(text)


def _positive(text):
    try:
        v = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return v


def _seconds(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= v <= 86400:
        raise argparse.ArgumentTypeError(f"{text} must be between 0 and 86400 seconds")
    return v


def parser():
    p = argparse.ArgumentParser(prog="python -m gpunvme.serve", description=DESCRIPTION)
    p.add_argument("--device", action="append", required=True, metavar="DEV",
                   help="the namespace holding the model, as `llm --device` (repeat for a striped set, in order)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8080, help="TCP port (default 8080; 0: any free port, printed)")
    p.add_argument("--api-key", metavar="KEY", help="refuse requests without 'Authorization: Bearer KEY' (401); "
                                                    "/health stays open")
    p.add_argument("--executor", choices=("auto", "cpu", "gpu"), default="auto",
                   help="the engine's executor (default auto: the GPU where one is present)")
    p.add_argument("--ctx", type=_positive, default=None,
                   help="positions per sequence, prompt and reply together (default: 4096, or the model's own if less)")
    # The default stays 4, not auto: it must mean the same on the CPU executor (no VRAM budget) and with
    # --kv-host, and auto gives a streamed model's slots up to a quarter of the budget, layers that a lone
    # client's tokens would then read from the drive instead: a choice the user makes (docs/engine.md).
    p.add_argument("--max-seqs", type=_max_seqs, default=4, metavar="N|auto",
                   help="sequences computed together in one pass (default 4; 1: one at a time; auto: what the VRAM budget holds)")
    p.add_argument("--max-queued", type=int, default=16,
                   help="requests waiting for a free sequence beyond --max-seqs (default 16); more are refused (429)")
    p.add_argument("--queue-timeout", type=_seconds, default=0.0,
                   help="seconds a request may wait for room when the queue is full before its 429 (default 0)")
    p.add_argument("--chat-template-file", metavar="FILE",
                   help="a Jinja chat template to use instead of the GGUF's tokenizer.chat_template")
    p.add_argument("--max-body", type=size_arg, default=size_arg("4M"),
                   help="largest request body (default 4M; 413 above)")
    p.add_argument("--body-timeout", type=_seconds, default=30.0,
                   help="seconds to receive a request body (default 30; 408 after)")
    p.add_argument("--idle-timeout", type=_seconds, default=30.0,
                   help="seconds a connection may stay without a complete request: idle keep-alive, or headers "
                        "still arriving (slow clients; default 30)")
    p.add_argument("--no-verify", action="store_true", help="check only the model's header at open (as `llm --no-verify`)")
    p.add_argument("--vram-budget", type=size_arg, help="GPU executor: GPU memory for layer weights (as `llm`)")
    p.add_argument("--ram-budget", type=size_arg, default=0, help="GPU executor: pinned host memory for layers (as `llm`)")
    p.add_argument("--kv-host", action="store_true",
                   help="GPU executor: the KV cache in pinned host memory (more --max-seqs than GPU memory holds)")
    return p


def main(argv=None, open_backend=None):
    """open_backend(args) -> Backend; by default the engine (engine_backend.py)."""
    a = parser().parse_args(argv)
    if a.max_queued < 0:
        parser().error("--max-queued must be 0 or more")
    logging.basicConfig(level=logging.INFO, format="gpunvme.serve: %(message)s")
    try:
        from ..chat_template import ChatTemplateError
        from .app import Limits, Server
        from .metrics import Metrics
        from .worker import Worker
    except ImportError as e:
        print(f"gpunvme.serve: error: {e}: the server needs aiohttp, prometheus_client and jinja2 "
              "(pip install 'gpunvme[serve]', or pip install aiohttp prometheus_client jinja2)", file=sys.stderr)
        return 1
    try:
        if open_backend is None:
            from .engine_backend import open_backend
        backend = open_backend(a)
        template = _chat_template(a, backend.info)
    except (RuntimeError, ValueError, OSError, ImportError, ChatTemplateError) as e:  # named by the engine
        print(f"gpunvme.serve: error: {e}", file=sys.stderr)
        return 1
    worker = Worker(backend, a.max_queued, a.queue_timeout)
    server = Server(worker, Metrics(worker), template, Limits(a.max_body, a.body_timeout), a.api_key)
    try:
        asyncio.run(_serve(server, worker, a))
    except OSError as e:  # the port is taken, the address is not ours
        print(f"gpunvme.serve: error: cannot listen on {a.host}:{a.port}: {e}", file=sys.stderr)
        return 1
    return 0


def _chat_template(a, info):
    """--chat-template-file's template, else the GGUF's, else None (chat requests then say what to do)."""
    from ..chat_template import ChatTemplate, read_template_file
    if a.chat_template_file:
        source, origin = read_template_file(a.chat_template_file), f"the chat template {a.chat_template_file}"
    elif info.chat_template is not None:
        source, origin = info.chat_template, f"the chat template of {info.name} (tokenizer.chat_template)"
    else:
        return None
    return ChatTemplate(source, origin, info.bos_text, info.eos_text)


async def _serve(server, worker, a):
    import aiohttp
    from aiohttp import web
    worker.start()
    # lingering_time: after an answer that left the body unread (413, 408), how long aiohttp still reads it
    # before closing (its default, 10 s, would hold a 100 MB upload's connection that long).
    options = {"keepalive_timeout": a.idle_timeout, "lingering_time": 1.0}
    if tuple(int(x) for x in aiohttp.__version__.split(".")[:2]) >= (3, 9):
        options["handler_cancellation"] = True  # a client that leaves cancels its handler, so its sequence
    runner = web.AppRunner(server.app(), access_log=None, **options)
    await runner.setup()
    site = web.TCPSite(runner, a.host, a.port, backlog=1024)
    try:
        await site.start()
        port = runner.addresses[0][1]
        i = server.info
        print(f"gpunvme.serve: {i.name} ({i.architecture}, {i.size_bytes} bytes; {i.executor}; "
              f"sequences of {i.n_ctx} positions, {i.max_seqs} at once) on http://{a.host}:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
        worker.stop()

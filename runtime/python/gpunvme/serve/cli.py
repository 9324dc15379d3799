"""python -m gpunvme.serve --device DEV: the command line, and the server's start and stop."""
import argparse
import asyncio
import logging
import re
import signal
import sys


DESCRIPTION = """An OpenAI-compatible HTTP server for the model on the device: /v1/chat/completions, /v1/completions
(streamed with "stream": true), /v1/models, /health, /metrics. Up to --max-seqs requests share each pass."""
# What --help shows; --help-all shows every option.
COMMON = ("--device", "--host", "--port", "--api-key", "--executor", "--ctx", "--max-seqs", "--max-queued",
          "--chat-template-file", "--draft", "--draft-k")
DRAFT_K_MAX = 31  # as the llm tool's --draft-k: a sequence's segment stays on the small passes' kernels


class _HelpAll(argparse.Action):
    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, p, namespace, values, option_string=None):
        parser(full=True).print_help()
        p.exit()


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


def _draft_k(text):
    v = _positive(text)
    if v > DRAFT_K_MAX:
        raise argparse.ArgumentTypeError(f"{text} must be 1..{DRAFT_K_MAX}")
    return v


def _seconds(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= v <= 86400:
        raise argparse.ArgumentTypeError(f"{text} must be between 0 and 86400 seconds")
    return v


def parser(full=False):
    """The command line; --help lists the COMMON options (one screen), full=True (--help-all) every one."""
    p = argparse.ArgumentParser(prog="python -m gpunvme.serve", description=DESCRIPTION,
                                formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=28,
                                                                                    width=110))

    def add(*names, **kw):
        if not full and names[0] not in COMMON:
            kw["help"] = argparse.SUPPRESS
        p.add_argument(*names, **kw)
    if not full:
        p.add_argument("--help-all", action=_HelpAll, help="every option (limits, timeouts, GPU memory) and exit")
    add("--device", action="append", required=True, metavar="DEV",
        help="the namespace holding the model, as `llm --device` (repeat it for a striped set)")
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    add("--port", type=_port, default=8080, help="TCP port (default 8080; 0: any free port, printed)")
    add("--api-key", metavar="KEY", help="refuse requests without 'Authorization: Bearer KEY' (401); /health stays open")
    add("--executor", choices=("auto", "cpu", "gpu"), default="auto", metavar="auto|cpu|gpu",
        help="the engine's executor (default auto: the GPU where one is present)")
    add("--ctx", type=_positive, default=None, metavar="N",
        help="positions per sequence, prompt and reply (default 4096, or the model's own if less)")
    # The default stays 4, not auto: it must mean the same on the CPU executor (no VRAM budget) and with
    # --kv-host, and auto gives a streamed model's slots up to a quarter of the budget, layers that a lone
    # client's tokens would then read from the drive instead: a choice the user makes (docs/engine.md).
    add("--max-seqs", type=_max_seqs, default=4, metavar="N|auto",
        help="sequences computed together in one pass (default 4; 1: one at a time; auto: what the VRAM budget holds)")
    add("--max-queued", type=int, default=16, metavar="N",
        help="requests waiting for a sequence beyond --max-seqs (default 16); more get 429")
    add("--queue-timeout", type=_seconds, default=0.0, metavar="S",
        help="seconds a request may wait for room when the queue is full before its 429 (default 0)")
    add("--chat-template-file", metavar="F",
        help="a Jinja chat template to use instead of the GGUF's tokenizer.chat_template")
    add("--draft", choices=("none", "lookup"), default="none", metavar="none|lookup",
        help="as `llm --draft`: lookup drafts each sequence's next tokens by prompt lookup, verified in the "
             "same pass (its tokens as without, in fewer passes; default none)")
    add("--draft-k", type=_draft_k, default=None, metavar="K",
        help=f"with --draft lookup: tokens drafted per sequence and pass, at most (1..{DRAFT_K_MAX}; 8)")
    add("--max-body", type=size_arg, default=size_arg("4M"), metavar="SIZE",
        help="largest request body (default 4M; 413 above)")
    add("--body-timeout", type=_seconds, default=30.0, metavar="S",
        help="seconds to receive a request body (default 30; 408 after)")
    add("--idle-timeout", type=_seconds, default=30.0, metavar="S",
        help="seconds a connection may stay without a complete request: idle keep-alive, or headers still arriving "
             "(slow clients; default 30)")
    add("--no-verify", action="store_true", help="check only the model's header at open (as `llm --no-verify`)")
    add("--vram-budget", type=size_arg, metavar="SIZE",
        help="GPU executor: GPU memory for layer weights (as `llm`)")
    add("--ram-budget", type=size_arg, default=0, metavar="SIZE",
        help="GPU executor: pinned host memory for layers (as `llm`)")
    add("--kv-host", action="store_true",
        help="GPU executor: the KV cache in pinned host memory (more --max-seqs than GPU memory holds)")
    return p


def main(argv=None, open_backend=None):
    """open_backend(args) -> Backend; by default the engine (engine_backend.py)."""
    a = parser().parse_args(argv)
    if a.max_queued < 0:
        parser().error("--max-queued must be 0 or more")
    if a.draft_k is not None and a.draft != "lookup":
        parser().error("--draft-k needs --draft lookup")
    a.draft_k = a.draft_k or 8
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

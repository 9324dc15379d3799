"""A GGUF's own chat template (tokenizer.chat_template) rendered as Hugging Face transformers'
apply_chat_template renders it, so the server sends a model the prompt format it was trained on.

What transformers does (utils/chat_template_utils.py: _compile_jinja_template and the render call), kept here:
- jinja2's ImmutableSandboxedEnvironment: a template cannot reach Python internals (__class__, __globals__),
  cannot modify the messages it is given (messages.append is refused), and range() is bounded;
- trim_blocks and lstrip_blocks on: templates are written for them (a newline after a block tag vanishes);
- the loopcontrols extension ({% break %}, {% continue %}) and a {% generation %} tag whose body renders
  unchanged (transformers uses it to mark the assistant's tokens for training masks);
- tojson replaced by json.dumps without HTML escaping and with non-ASCII kept (jinja's own escapes < > & '
  and sorts keys: the prompt would differ), indent/separators/sort_keys passed through;
- raise_exception(message), which fails the rendering; strftime_now(format), the local time formatted;
- the variables messages, tools and documents (None unless given), add_generation_prompt, the special
  tokens as strings (bos_token, eos_token; absent when the GGUF names none, as in transformers), and any
  extra keyword (enable_thinking, reasoning_effort...) as transformers passes its **kwargs.
From llama.cpp (common/chat.cpp): the rendering may begin with the BOS text (Gemma, Llama 3); a tokenizer
that also adds BOS doubles it, so llama.cpp drops a leading bos_token when it adds BOS itself. Whoever
tokenizes this text must do one or the other. llama.cpp falls back to ChatML or a built-in template when a
GGUF has none; here that is an error that says so (those guesses are out of scope).

  python3 -m gpunvme.chat_template GGUF --messages JSON_FILE [--no-generation-prompt]
"""
import argparse
import datetime
import json
import os
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:  # reported by ChatTemplate, so the CLI and the server say what to install
    jinja2 = None

TEMPLATE_KEY = "tokenizer.chat_template"


class ChatTemplateError(Exception):
    """Reading or rendering a chat template failed; the message names the template and the cause."""


def _require_jinja2():
    if jinja2 is None:
        raise ChatTemplateError("chat templates need jinja2 (the library Hugging Face renders them with): "
                                "pip install jinja2")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' tojson: json.dumps as is, so '<' and 'é' reach the model unescaped.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def _raise_exception(message):
    raise _Refused(message)


def _environment():
    class Generation(jinja2.ext.Extension):
        """{% generation %}...{% endgeneration %}: its body, in a scope of its own as transformers' is."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


if jinja2 is not None:
    class _Refused(jinja2.TemplateError):
        """raise_exception() called by the template: the template refuses this conversation."""


def _json_type(value):
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def check_messages(messages):
    """Refuses a conversation that is not a non-empty list of {"role": str, "content": ...} objects,
    naming the first bad message; content is a string, a list of {"type": ...} parts, or null/absent only
    in an assistant message with tool_calls (OpenAI's shapes)."""
    if not isinstance(messages, list) or not messages:
        raise ChatTemplateError('messages must be a non-empty array of {"role": ..., "content": ...} objects, '
                                f"not {_json_type(messages) if messages != [] else 'an empty array'}")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ChatTemplateError(f'{where} must be an object with "role" and "content", not {_json_type(m)}')
        if not isinstance(m.get("role"), str) or not m["role"]:
            raise ChatTemplateError(f'{where}: "role" must be a non-empty string, not '
                                    f'{_json_type(m["role"]) if "role" in m else "missing"}')
        content = m.get("content")
        if content is None and not m.get("tool_calls"):
            raise ChatTemplateError(f'{where}: "content" is missing or null (only an assistant message with '
                                    '"tool_calls" may leave it out)')
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise ChatTemplateError(f'{where}: content[{j}] must be an object with a string "type" '
                                            '(e.g. {"type": "text", "text": ...})')
        elif content is not None and not isinstance(content, str):
            raise ChatTemplateError(f'{where}: "content" must be a string or an array of parts, '
                                    f"not {_json_type(content)}")


class ChatTemplate:
    """One compiled template. `origin` names it in every error ("the chat template of Gemma 3 (file)")."""

    def __init__(self, source, origin, bos_token=None, eos_token=None):
        _require_jinja2()
        self.source = source
        self.origin = origin
        self.special_tokens = {k: v for k, v in (("bos_token", bos_token), ("eos_token", eos_token)) if v is not None}
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"{origin} does not parse: line {e.lineno}: {e.message}") from None

    def render(self, messages, add_generation_prompt=True, tools=None, documents=None, **extra):
        """The prompt text for `messages` (JSON-shaped data: a round trip through json keeps Python objects,
        and their methods, away from the template). add_generation_prompt opens the assistant's turn."""
        try:
            messages, tools, documents, extra = json.loads(json.dumps([messages, tools, documents, extra]))
        except (TypeError, ValueError) as e:
            raise ChatTemplateError(f"messages, tools and documents must be JSON data: {e}") from None
        check_messages(messages)
        variables = {**self.special_tokens, **extra, "messages": messages, "tools": tools, "documents": documents,
                     "add_generation_prompt": bool(add_generation_prompt)}
        try:
            return self._template.render(**variables)
        except jinja2.sandbox.SecurityError as e:
            raise ChatTemplateError(f"{self.origin} was stopped by the sandbox: {e} (a chat template may not reach "
                                    "Python internals or modify its inputs)") from None
        except _Refused as e:
            raise ChatTemplateError(f"{self.origin} refuses this conversation: {e}") from None
        except (jinja2.TemplateError, TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as e:
            raise ChatTemplateError(f"{self.origin} failed on these messages: {type(e).__name__}: {e}") from None


def _read_gguf(path):
    try:
        import gguf
    except ImportError:
        raise ChatTemplateError("reading a GGUF needs llama.cpp's gguf package: pip install gguf") from None
    try:
        return gguf, gguf.GGUFReader(path, "r").fields
    except (OSError, ValueError, IndexError) as e:  # gguf-py raises ValueError on a bad magic or version
        raise ChatTemplateError(f"{path}: not a readable GGUF file: {e}") from None


def _string(gguf, fields, key, path):
    field = fields.get(key)
    if field is None:
        return None
    if field.types != [gguf.GGUFValueType.STRING]:
        raise ChatTemplateError(f"{path}: {key} is not a string")
    return field.contents()


def _token_text(gguf, fields, key, path):
    """The text of the token whose id `key` holds (None when the GGUF names no such token)."""
    field, tokens = fields.get(key), fields.get("tokenizer.ggml.tokens")
    if field is None:
        return None
    if tokens is None or tokens.types != [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING]:
        raise ChatTemplateError(f"{path}: {key} is set but tokenizer.ggml.tokens is missing or not strings")
    token_id = int(field.contents())
    if not 0 <= token_id < len(tokens.data):
        raise ChatTemplateError(f"{path}: {key} = {token_id} is outside the {len(tokens.data)} tokens")
    return tokens.contents(token_id)


def from_gguf(path, template_source=None, template_name=None):
    """The GGUF's template with its BOS/EOS token strings. template_source replaces the GGUF's template
    (llama-server's --chat-template-file); template_name names it in errors."""
    gguf, fields = _read_gguf(path)
    model = _string(gguf, fields, "general.name", path) or os.path.basename(path)
    if template_source is None:
        template_source = _string(gguf, fields, TEMPLATE_KEY, path)
        if template_source is None:
            raise ChatTemplateError(
                f"{path} ({model}) has no {TEMPLATE_KEY}: the file does not say how to format a conversation. "
                "llama.cpp would fall back to ChatML or a built-in template guessed from the model; those guesses "
                "are out of scope here. Give the model's template yourself (its Hugging Face repository's "
                "chat_template.jinja, or tokenizer_config.json's chat_template) with --chat-template-file FILE.")
        origin = f"the chat template of {model} ({path}, {TEMPLATE_KEY})"
    else:
        origin = f"the chat template {template_name or 'given'} for {model} ({path})"
    return ChatTemplate(template_source, origin, _token_text(gguf, fields, "tokenizer.ggml.bos_token_id", path),
                        _token_text(gguf, fields, "tokenizer.ggml.eos_token_id", path))


def read_template_file(path):
    """The text of a template file (--chat-template-file here and in the server), or ChatTemplateError."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, ValueError) as e:
        raise ChatTemplateError(f"--chat-template-file: {e}") from None


def _load_json(path):
    try:
        with (sys.stdin if path == "-" else open(path, encoding="utf-8")) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ChatTemplateError(f"--messages {path}: {e}") from None


def _variable(text):
    name, sep, value = text.partition("=")
    try:
        if not sep or not name.isidentifier():
            raise ValueError("expected NAME=JSON")
        if name in ("messages", "tools", "documents", "add_generation_prompt"):
            raise ValueError("set by the renderer itself")
        return name, json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e} (e.g. enable_thinking=false)")


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m gpunvme.chat_template",
        usage="%(prog)s GGUF --messages JSON_FILE\n"
              "       [--no-generation-prompt] [--chat-template-file FILE] [--var NAME=JSON]...",
        description="Prints the prompt the server sends for a conversation: the GGUF's tokenizer.chat_template "
                    "rendered as Hugging Face transformers does (sandboxed Jinja2), as is (no newline added).")
    p.add_argument("gguf", metavar="GGUF", help="the model file")
    p.add_argument("--messages", metavar="JSON_FILE", required=True,
                   help='a JSON array of {"role", "content"} messages, or an OpenAI chat request body; - is stdin')
    p.add_argument("--no-generation-prompt", action="store_true",
                   help="end after the last message (default: open the assistant's turn, as the server does)")
    p.add_argument("--chat-template-file", metavar="FILE",
                   help="a Jinja template to use instead of the GGUF's (as llama-server's option)")
    p.add_argument("--var", metavar="NAME=JSON", type=_variable, action="append", default=[],
                   help="an extra template variable: enable_thinking=false, reasoning_effort='\"high\"'")
    a = p.parse_args(argv)
    try:
        source = read_template_file(a.chat_template_file) if a.chat_template_file else None
        template = from_gguf(a.gguf, source, a.chat_template_file)
        body = _load_json(a.messages)
        messages, tools = (body.get("messages"), body.get("tools")) if isinstance(body, dict) else (body, None)
        sys.stdout.write(template.render(messages, not a.no_generation_prompt, tools=tools, **dict(a.var)))
    except ChatTemplateError as e:
        print(f"chat_template: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""jinja_oracle.py - helper of tests/test_chat_templates.sh (not a test itself).

Generates seeded random conversations for chat templates and renders each with
Python's jinja2 configured the way Hugging Face transformers' apply_chat_template
configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the
loopcontrols extension, a {% generation %} block, transformers' tojson,
raise_exception and strftime_now), with the variables transformers passes
(messages, tools, documents, add_generation_prompt, the special tokens, and the
chat_template_kwargs). Writes one JSON line per conversation for
tests/lib/jinja_oracle_check.c: the context, which variables are request data,
and the text jinja2 rendered or the error it raised.

usage: jinja_oracle.py OUT.jsonl COUNT SEED TEMPLATE.jinja...
       jinja_oracle.py --render TEMPLATE.jinja CONVERSATION.json BOS EOS > TEXT
         (one conversation, as `moontail template` renders it: add_generation_prompt true,
          the file's chat_template_kwargs, tools null unless given)
"""
import json
import random
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1767225600 + 13 * 3600 + 5 * 60  # 2026-01-01 13:05 UTC, for strftime_now


class Generation(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers marks
    the assistant's text with it)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def error_kind(e):
    """How MoonTail's interpreter names the same failure (jinja.h's jinja_err_kind)."""
    if type(e) is jinja2.exceptions.TemplateError:
        return "raised"  # raise_exception()
    if isinstance(e, (jinja2.TemplateSyntaxError, SyntaxError)):
        return "syntax"  # also Python's SyntaxError for {% break %} outside a loop
    if isinstance(e, (RecursionError, MemoryError)):
        return "limit"  # MoonTail's limits come first
    return "runtime"


# ---- text -------------------------------------------------------------------------------------

WORDS = ["hello", "world", "the", "model", "answer", "Kimi", "question", "why", "42", "x",
         "data", "tool", "result", "weather", "Paris", "code", "function", "list", "value"]
UNICODE = ["héllo", "naïve", "日本語", "中文测试", "Привет", "Ελληνικά", "😀", "👩‍💻", "مرحبا",
           "עברית", "ß", "ǅ", "e\u0301", "\u00a0", "\u3000", "ℌ", "∑", "🇫🇷", "ﬁ", "Ⅻ"]
MARKERS = ["{{ x }}", "{% if true %}", "{# c #}", "<|im_end|>", "<|im_start|>", "<｜User｜>",
           "<|open|>", "<|close|>", "<|end_of_msg|>", "</think>", "<think>", "<tool_call>",
           "[INST]", "<|eot_id|>", "<|end|>", "<|channel|>final<|message|>", "\\n", "\\",
           "'", '"', "%}", "}}", "{", "}", "&", "<b>"]
SPACES = [" ", " ", " ", "\n", "\n\n", "\t", "  ", " \n "]


def text(rng, lo=1, hi=12, allow_empty=False):
    if allow_empty and rng.random() < 0.05:
        return ""
    parts = []
    for _ in range(rng.randint(lo, hi)):
        r = rng.random()
        if r < 0.6:
            parts.append(rng.choice(WORDS))
        elif r < 0.8:
            parts.append(rng.choice(UNICODE))
        else:
            parts.append(rng.choice(MARKERS))
        parts.append(rng.choice(SPACES))
    s = "".join(parts)
    if rng.random() < 0.5:
        s = s.strip()
    if rng.random() < 0.1:
        s = "\n" + s + "\n "
    return s


def ident(rng):
    return rng.choice(["get_weather", "search", "run_code", "lookup", "calc", "send_mail",
                       "read_file", "f"]) + rng.choice(["", "_2", "X"])


# ---- tools ------------------------------------------------------------------------------------

def schema(rng, depth=0):
    t = rng.choice(["string", "number", "integer", "boolean", "array", "object"]
                   if depth < 2 else ["string", "number", "boolean"])
    s = {"type": t}
    if rng.random() < 0.7:
        s["description"] = text(rng, 1, 6)
    if t == "string" and rng.random() < 0.3:
        s["enum"] = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    if t == "array":
        s["items"] = schema(rng, depth + 1)
    if t == "object":
        s["properties"] = {ident(rng) + str(i): schema(rng, depth + 1)
                           for i in range(rng.randint(0, 3))}
        if s["properties"] and rng.random() < 0.5:
            s["required"] = list(s["properties"])[:1]
    if rng.random() < 0.15 and t in ("number", "integer"):
        s["default"] = rng.choice([0, 1, 2.5, -3])
    if rng.random() < 0.1 and t == "boolean":
        s["default"] = rng.choice([True, False])
    return s


def tool(rng):
    props = {}
    for i in range(rng.randint(0, 4)):
        props[rng.choice(["city", "query", "n", "unit", "lang", "path", "Zeta", "alpha"]) + str(i)] = \
            schema(rng)
    params = {"type": "object", "properties": props}
    if props and rng.random() < 0.6:
        params["required"] = list(props)[: rng.randint(1, len(props))]
    fn = {"name": ident(rng), "description": text(rng, 2, 10), "parameters": params}
    if rng.random() < 0.1:
        del fn["description"]
        fn["description"] = ""
    return {"type": "function", "function": fn}


def arg_value(rng):
    r = rng.random()
    if r < 0.4:
        return text(rng, 1, 4)
    if r < 0.55:
        return rng.randint(-5, 1000)
    if r < 0.65:
        return rng.choice([0.5, 1.25, -2.0, 3.14159, 1e-07, 1e16, 100.0])
    if r < 0.75:
        return rng.choice([True, False, None])
    if r < 0.88:
        return [arg_value(rng) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "B", "c", "Dd", "é"]) + str(i): arg_value(rng)
            for i in range(rng.randint(0, 3))}


def tool_call(rng, i):
    args = {rng.choice(["city", "query", "n", "unit", "Zeta", "alpha"]) + str(k): arg_value(rng)
            for k in range(rng.randint(0, 3))}
    if rng.random() < 0.35:
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    call_id = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABC0123456789") for _ in range(9))
    if rng.random() < 0.1:
        call_id = "call_" + str(i)
    return {"id": call_id, "type": "function", "function": {"name": ident(rng), "arguments": args}}


# ---- conversations ----------------------------------------------------------------------------

def content(rng, role):
    if role in ("user", "system") and rng.random() < 0.03:
        return [{"type": "text", "text": text(rng)} for _ in range(rng.randint(1, 2))]
    return text(rng, allow_empty=True)


def conversation(rng, kind):
    msgs = []
    if rng.random() < 0.45:
        msgs.append({"role": "system", "content": content(rng, "system")})
        if rng.random() < 0.05:
            msgs.append({"role": "system", "content": text(rng)})
    use_tools = rng.random() < 0.35
    turns = rng.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": content(rng, "user")})
        if rng.random() < 0.1:
            msgs[-1]["name"] = rng.choice(["alice", "bob"])
        if t == turns - 1 and rng.random() < 0.7:
            break  # end on a user turn (the usual case)
        a = {"role": "assistant", "content": text(rng, allow_empty=True)}
        r = rng.random()
        if r < 0.3:
            a["reasoning_content"] = text(rng)
        elif r < 0.4:
            a["content"] = "<think>" + text(rng) + "</think>" + text(rng)
        if kind == "gpt-oss" and rng.random() < 0.3:
            a["thinking"] = text(rng)
        if use_tools and rng.random() < 0.5:
            calls = [tool_call(rng, i) for i in range(rng.randint(1, 3 if kind != "gpt-oss" else 1))]
            a["tool_calls"] = calls
            if rng.random() < 0.3:
                a["content"] = None if rng.random() < 0.5 else ""
            msgs.append(a)
            for c in calls:
                m = {"role": "tool", "tool_call_id": c["id"], "content": text(rng, 1, 8)}
                if rng.random() < 0.5:
                    m["name"] = c["function"]["name"]
                msgs.append(m)
            if rng.random() < 0.5:
                msgs.append({"role": "assistant", "content": text(rng)})
            continue
        msgs.append(a)
    if kind == "gpt-oss" and msgs[0]["role"] == "system" and rng.random() < 0.3:
        msgs[0]["role"] = "developer"
    ctx = {"messages": msgs, "add_generation_prompt": rng.random() < 0.7}
    ctx["tools"] = [tool(rng) for _ in range(rng.randint(1, 3))] if use_tools else None
    kwargs = {}
    for k, choices in (("enable_thinking", [True, False]), ("thinking", [True, False]),
                       ("thinking_effort", ["low", "high", "max", "medium"]),
                       ("reasoning_effort", ["low", "medium", "high"])):
        if rng.random() < 0.35:
            kwargs[k] = rng.choice(choices)
    return ctx, kwargs


SPECIAL = {
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "kimi": ("[BOS]", "[EOS]"),
    "qwen": ("<|endoftext|>", "<|im_end|>"),
    "glm": ("<|begin_of_text|>", "<|endoftext|>"),
    "llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral": ("<s>", "</s>"),
    "gpt-oss": ("<|startoftext|>", "<|return|>"),
}


def family(path):
    p = path.lower()
    for key, fam in (("deepseek", "deepseek"), ("kimi", "kimi"), ("qwen", "qwen"),
                     ("glm", "glm"), ("llama", "llama"), ("mistral", "mistral"),
                     ("gpt-oss", "gpt-oss")):
        if key in p:
            return fam
    return "qwen"


def render_one(path, conv_path, bos, eos):
    conv = json.load(open(conv_path, encoding="utf-8"))
    env = make_env()
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
           "add_generation_prompt": True, "bos_token": bos, "eos_token": eos}
    ctx.update(conv.get("chat_template_kwargs") or {})
    text = env.from_string(open(path, encoding="utf-8").read()).render(**ctx)
    sys.stdout.buffer.write(text.encode("utf-8"))


def main():
    if sys.argv[1] == "--render":
        render_one(*sys.argv[2:6])
        return
    out_path, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = make_env()
    with open(out_path, "w", encoding="utf-8") as out:
        for path in sys.argv[4:]:
            name = path.rsplit("/", 1)[-1]
            fam = family(path)
            src = open(path, encoding="utf-8").read()
            try:
                template = env.from_string(src)
                parse_error = None
            except jinja2.TemplateError as e:
                template, parse_error = None, e
            rng = random.Random(f"{seed}:{name}")
            for i in range(count):
                ctx, kwargs = conversation(rng, fam)
                bos, eos = SPECIAL[fam]
                full = dict(ctx)
                full["bos_token"], full["eos_token"] = bos, eos
                full["documents"] = None
                full.update(kwargs)
                case = {"template": path, "name": f"{name}#{i}", "context": full,
                        "data": ["messages", "tools"] + list(kwargs), "now": NOW}
                try:
                    if parse_error:
                        raise parse_error
                    case["expect"] = template.render(**full)
                except Exception as e:  # any error: ours must fail too, of the same kind
                    case["error"] = f"{type(e).__name__}: {e}"[:300]
                    case["error_kind"] = error_kind(e)
                out.write(json.dumps(case, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""render_templates.py - the expected texts of tests/test_api.c's thinking chat families.

Renders llama.cpp's copies of the real chat templates (models/templates/*.jinja in a
llama.cpp tree, default /tmp/llref) with Python's jinja2 the way Hugging Face
transformers' apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, the loopcontrols extension, raise_exception), with add_generation_prompt
true, bos_token "" (MoonTail's rendering leaves BOS to the tokenizer), and the
conversation's chat_template_kwargs as extra variables. Prints each result as an entry of
the test's table ({family, kwargs JSON, conversation, text}); MoonTail's own code is not
involved.

usage: python3 tools/chat/render_templates.py [LLAMA_CPP_DIR]
"""
import json
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

LLAMA = sys.argv[1] if len(sys.argv) > 1 else "/tmp/llref"

TEMPLATES = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "deepseek-r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "deepseek-v3.1": "deepseek-ai-DeepSeek-V3.1.jinja",
    "kimi-k2-thinking": "Kimi-K2-Thinking.jinja",
    "kimi-k3": "Kimi-K3.jinja",
}


def sys_(t):
    return {"role": "system", "content": t}


def user(t):
    return {"role": "user", "content": t}


def asst(t, r=None):
    m = {"role": "assistant", "content": t}
    if r is not None:
        m["reasoning_content"] = r
    return m


# The conversations of tests/test_api.c (THINK_CONVS), in the same order.
CONVS = [
    ("one turn", [sys_("Be brief."), user("Hi")]),
    ("history with reasoning",
     [sys_("Be brief."), user("Hi"), asst("Hello.", "The user greets."), user("Bye")]),
    ("reasoning after the last user message",
     [user("Q1"), asst("A1", "R1"), user("Q2"), asst("A2", "\nR2\n")]),
    ("think tags in content", [user("Q"), asst("<think>\nold\n</think>\n\nA"), user("Q2")]),
    ("blank reasoning", [user("Q"), asst("A", " \n"), user("Q2")]),
    ("two answers after the question", [user("Q"), asst("A1"), asst("A2", "R")]),
    ("two system messages", [sys_("S1"), user("Q"), sys_("S2")]),
    ("think tags in the last answer", [user("Q"), asst("x<think>\nold\n</think>\n\nA")]),
]

# The variables each family is rendered with: the first set on every conversation, the
# others on conversations 0 and 2. DeepSeek R1's first set is enable_thinking true, what
# MoonTail assumes when a request gives none (llama.cpp passes it the same way; the
# template itself, unlike the official R1 template it derives from, closes the think
# section when the variable is missing).
KWARGS = {
    "qwen3": [{}, {"enable_thinking": False}, {"enable_thinking": True}],
    "deepseek-r1": [{"enable_thinking": True}, {"enable_thinking": False}],
    "deepseek-v3.1": [{}, {"thinking": True}, {"enable_thinking": True},
                      {"thinking": False, "enable_thinking": True}],
    "kimi-k2-thinking": [{}],
    "kimi-k3": [{}, {"thinking": False}, {"thinking_effort": "low"}, {"thinking_effort": None},
                {"thinking": False, "thinking_effort": "high"}],
}

ENUM = {
    "qwen3": "API_CHAT_QWEN3",
    "deepseek-r1": "API_CHAT_DEEPSEEK_R1",
    "deepseek-v3.1": "API_CHAT_DEEPSEEK_V31",
    "kimi-k2-thinking": "API_CHAT_KIMI_K2_THINKING",
    "kimi-k3": "API_CHAT_KIMI_K3",
}


def raise_exception(msg):
    raise ValueError(msg)


def c_escape(s):
    """One C string literal of s (UTF-8 bytes; a hex escape before a hex digit is closed)."""
    out, prev_hex = [], False
    for ch in s.encode("utf-8"):
        c = chr(ch)
        if prev_hex and c in "0123456789abcdefABCDEF":
            out.append('""')
        prev_hex = False
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif 32 <= ch < 127:
            out.append(c)
        else:
            out.append("\\x%02x" % ch)
            prev_hex = True
    return '"' + "".join(out) + '"'


def c_literal(s, indent="     ", width=100):
    """s as adjacent C string literals, one per line, cut after newlines and before
    markers so that clang-format leaves them as they are."""
    pieces, cur = [], ""
    for i, ch in enumerate(s):
        if cur and (ch == "<" and len(c_escape(cur)) > 40 or len(c_escape(cur + ch)) > width - len(indent) - 2):
            pieces.append(cur)
            cur = ""
        cur += ch
        if ch == "\n" and len(c_escape(cur)) > 40:
            pieces.append(cur)
            cur = ""
    if cur or not pieces:
        pieces.append(cur)
    return ("\n" + indent).join(c_escape(p) for p in pieces)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    for fam, file in TEMPLATES.items():
        with open(f"{LLAMA}/models/templates/{file}", encoding="utf-8") as f:
            tmpl = env.from_string(f.read())
        for k, kw in enumerate(KWARGS[fam]):
            for c, (name, msgs) in enumerate(CONVS):
                if k and c not in (0, 2):
                    continue
                text = tmpl.render(messages=msgs, add_generation_prompt=True, bos_token="",
                                   eos_token="", **kw)
                print(f"    /* {fam}, {name} */")
                print(f"    {{{ENUM[fam]}, {c_literal(json.dumps(kw))}, {c},")
                print(f"     {c_literal(text)}}},")


if __name__ == "__main__":
    main()

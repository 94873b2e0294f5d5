#!/usr/bin/env python3
"""jinja_constructs.py - helper of tests/test_chat_templates.sh (not a test itself).

Small templates, one or a few Jinja constructs each, rendered by Python's jinja2
(configured as jinja_oracle.py configures it, i.e. as transformers does) with one
fixed context. Writes each template to DIR/cNNN.jinja and a case line per
template to OUT.jsonl for tests/lib/jinja_oracle_check.c, which renders them
with MoonTail's interpreter and compares byte for byte (or: both fail, with the
same kind of error).

usage: jinja_constructs.py DIR OUT.jsonl
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja2  # noqa: E402
from jinja_oracle import NOW, error_kind, make_env  # noqa: E402

CONTEXT = {
    "s": "Hello, World",
    "u": "héllo wörld 日本 😀",
    "ws": "  \t spaced out \n ",
    "n": 7,
    "neg": -3,
    "f": 2.5,
    "big": 10 ** 15,
    "t": True,
    "no": False,
    "nil": None,
    "empty": "",
    "l": [3, 1, 2],
    "words": ["b", "A", "c", "a"],
    "d": {"b": 1, "a": 2, "C": 3},
    "nested": {"x": {"y": [1, {"z": "deep"}]}},
    "people": [{"name": "bob", "age": 30, "role": "user"},
               {"name": "Alice", "age": 25, "role": "assistant"},
               {"name": "carol", "role": "user"}],
    "msg": {"role": "user", "content": "hi <|im_end|>", "items": "shadowed"},
    "markup": "<b>&'\"</b>",
    "json_like": {"k": [1, 2.0, "x", None, True, {"n": -0.5}], "é": "ü\n\"q\"\\"},
}

T = [
    # ---- text and whitespace control
    "plain text\nsecond line\n",
    "a\r\nb\rc\n",
    "  {% if t %}\n  yes\n  {% endif %}\n  after\n",
    "x {%- if t %} y {% endif -%} z",
    "x {%+ if t %} y {% endif +%}\n z",
    "{% if t %}\nkeep\n{% endif %}\n\nend",
    "a {# comment #} b\n  {# line comment #}\nc",
    "{#- trim -#}   \n  x",
    "{% raw %}{{ not evaluated }} {% if %}{% endraw %}",
    "  {%- raw %} a {% endraw -%}  b",
    "{{ s }}\n{{- s -}}\n{{ s }}",
    "  {{ s }}\n  {% set x = 1 %}\n{{ x }}",
    "line\n    {% for i in l %}\n    - {{ i }}\n    {% endfor %}\ndone",
    "{% for i in l -%}\n  {{ i }}\n{%- endfor %}",
    "{{ '{{' }} {{ '}}' }} {{ \"%}\" }}",
    "{{ {'a': {'b': 1}} }}",
    "text with {single braces} and # hash",
    "\u3000 {%- if t %}x{% endif %}",
    # ---- literals
    "{{ 1 }} {{ -1 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5 }} {{ 1e3 }} {{ 2.5E-3 }}",
    "{{ 'single' }} {{ \"double\" }} {{ 'a' 'b' \"c\" }}",
    "{{ 'esc: \\n \\t \\\\ \\' \\x41 \\u00e9 \\U0001F600 \\101 \\q' }}",
    "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}",
    "{{ [1, 'a', none, true, 1.0, [2], {'k': 'v'}] }}",
    "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ 1, 2 }}",
    "{{ {'a': 1, 'b': [1, 2], 1: 'int key', none: 0} }}",
    "{{ [] }} {{ {} }} {{ [1,] }} {{ {'a': 1,} }}",
    "{{ 'it\\'s' }} {{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'back\\\\slash', 'tab\\t', 'nl\\n'] }}",
    "{{ ['\\x00\\x1f\\x7f\\x80\\xa0\\xad', 'é日😀', '\\u200b\\u2028\\ufeff'] }}",
    # ---- numbers
    "{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 2**0.5 }} {{ 10/2 }} {{ -0.0 }}",
    "{{ 1.5e300 * 1e10 }} {{ 0.1 + 0.2 }} {{ 123456789.123456789 }} {{ 1e22 }} {{ 5e-324 }}",
    "{{ n + 1 }} {{ n - 10 }} {{ n * f }} {{ n / 2 }} {{ n // 2 }} {{ -n // 2 }} {{ n % 3 }} {{ -n % 3 }} {{ n ** 2 }}",
    "{{ f // 1 }} {{ -f % 2 }} {{ 2 ** -1 }} {{ 2 ** 62 }} {{ true + 1 }} {{ true * 3 }}",
    "{{ 7 % -2 }} {{ -7 // 2 }} {{ 7.5 % -2 }} {{ 10 / 4 }} {{ 3 * 'ab' }} {{ [1] * 3 }}",
    "{{ n / 0 }}",
    "{{ n // 0 }}",
    "{{ 'a' + 1 }}",
    "{{ -s }}",
    # ---- strings and concatenation
    "{{ s ~ n ~ nil ~ undefined_var ~ t }}",
    "{{ s + '!' }} {{ s ~ '!' }} {{ 'x' * 3 }}",
    "{{ s[0] }} {{ s[-1] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[::2] }} {{ s[-5:] }} {{ s[:-7] }} {{ s[100] }}",
    "{{ u[1] }} {{ u[-1] }} {{ u[2:9] }} {{ u[::-1] }} {{ u|length }}",
    "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[5] }} {{ l[10:] }} {{ l[-10:2] }} {{ l[::-2] }}",
    "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hELLO wORLD'.capitalize() }} {{ u.upper() }}",
    "{{ ws.strip() }}|{{ ws.lstrip() }}|{{ ws.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ '<<a>>'.lstrip('<') }}",
    "{{ s.split(', ') }} {{ ws.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' a  b '.split(' ') }}",
    "{{ 'a b  c d'.split(None, 1) }} {{ '  a b c  '.rsplit(None, 1) }} {{ 'x'.split('x') }} {{ ''.split() }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ s.startswith('Hell') }} {{ s.endswith(('x', 'ld')) }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ 'abc'.replace('', '-') }}",
    "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('l') }} {{ u.find('日') }} {{ s.index('W') }}",
    "{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format('x', n) }} {{ '{1}{0}{{}}'.format('a', 'b') }} {{ '{k}!'.format(k=s) }}",
    "{{ '42'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }}",
    "{{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
    "{{ '7'.zfill(3) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4) }}|{{ 'ab'.rjust(4, '.') }}",
    "{{ s.nosuchmethod }}|{{ s.nosuchmethod is defined }}",
    "{{ 'x' in s }} {{ 'W' in s }} {{ 'l' not in s }} {{ '' in s }}",
    "{{ 1 in s }}",
    # ---- comparisons and logic
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ (1, 2) == [1, 2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
    "{{ n and s }} {{ nil or 'default' }} {{ empty or nil }} {{ not n }} {{ not empty }} {{ n and nil }}",
    "{{ d == {'a': 2, 'b': 1, 'C': 3} }} {{ l != [3, 1, 2] }} {{ nil == none }} {{ undefined_a == undefined_b }}",
    "{{ 'a' < 1 }}",
    "{{ 2 in l }} {{ 5 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in undefined_var }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if no else 'no' }} [{{ 'only' if no }}] {{ 1 if nil else 2 if t else 3 }}",
    "{% if n > 5 and s %}A{% elif n > 2 %}B{% else %}C{% endif %}{% if nil %}D{% elif empty %}E{% else %}F{% endif %}",
    "{% if l, nil %}tuple is true{% endif %}",
    # ---- undefined
    "[{{ nothing }}] [{{ nothing|default('dflt') }}] [{{ nil|default('x') }}] [{{ nil|default('x', true) }}] [{{ empty|d('e', boolean=true) }}]",
    "{{ nothing is defined }} {{ nothing is undefined }} {{ d.missing is defined }} {{ d['missing'] is none }}",
    "{{ nothing.attr }}",
    "{{ nothing['x'] }}",
    "{{ d.missing.deeper }}",
    "{{ nothing + 1 }}",
    "{{ nothing() }}",
    "{% for x in nothing %}never{% else %}empty loop{% endfor %} {{ nothing|length }} {{ nothing|list }}",
    "{{ nothing ~ 'x' }} {{ nothing|string }}| {{ nothing|trim }}| {{ not nothing }}",
    "{{ nested.x.y[1].z }} {{ nested['x']['y'][0] }} {{ nested.x.y.1.z }} {{ nested.x.nope }}",
    "{{ msg['items'] }} {{ msg.get('role') }} {{ msg.get('nope') }} {{ msg.get('nope', 'fallback') }}",
    "{{ l.append }}|",
    "{{ l.append(4) }}",
    "{% set _ = d.update({'x': 1}) %}",
    "{{ l.pop() }}",
    "{{ l.index(1) }} {{ l.count(3) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}",
    "{{ d._private }} {{ s.__class__ }}|",
    # ---- set, scopes, namespaces
    "{% set x = 1 %}{% set x = x + 1 %}{{ x }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d2) = [3, 4] %}{{ c }}{{ d2 }}",
    "{% set a, b = [1, 2, 3] %}",
    "{% set x = 1 %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}",
    "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in [1, 2] %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}",
    "{% if t %}{% set z = 'set in if' %}{% endif %}{{ z }}",
    "{% set ns = namespace(total=0, items=[]) %}{% for i in l %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }} {{ ns.items }}",
    "{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }} {{ ns.b }}| {{ ns.b is defined }}",
    "{% set ns = namespace(d) %}{{ ns.a }} {{ ns['b'] }}",
    "{% set x = 1 %}{% set x.y = 2 %}",
    "{% set block %}inner {{ s }}{% endset %}[{{ block }}]",
    "{% set block | upper %}shout {{ s }}{% endset %}{{ block }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% set messages = l[1:] %}{{ messages }}",
    # ---- for loops
    "{% for i in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for i in l %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
    "{% for i in l %}{{ loop.cycle('odd', 'even') }}{% endfor %} {% for i in [1, 1, 2] %}{{ loop.changed(i) }}{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %} {% for c in 'héy' %}[{{ c }}]{% endfor %}",
    "{% for i in l if i > 1 %}{{ i }}{{ loop.index }}{{ loop.last }} {% endfor %}",
    "{% for i in [] %}x{% else %}empty{% endfor %} {% for i in l if i > 5 %}x{% else %}none passed{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}",
    "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }}{% endfor %}",
    "{% for p in people %}{{ p.name }}{{ ':' ~ p.age if p.age is defined }} {% endfor %}",
    "{% for i in range(3) %}{{ i }}{% endfor %} {{ range(2, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}",
    "{{ range(100001)|length }}",
    "{% for i in 5 %}{% endfor %}",
    "{% for x in l %}{{ x }}{% endfor %}{{ x }}|",
    "{% set loop_messages = people %}{% for m in loop_messages %}{% if loop.first and m.role == 'user' %}first user{% endif %}{% endfor %}",
    # ---- macros and call blocks
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('bob') }} {{ greet('al', '?') }} {{ greet(punct='.', name='x') }} {{ greet() }}",
    "{% macro m() %}{{ varargs }} {{ kwargs }}{% endmacro %}{{ m(1, 2, a=3) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside {{ s }}{% endcall %}",
    "{% macro list_it(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) list_it(l) %}<{{ x }}>{% endcall %}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}",
    "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{% set x = 2 %}{{ m() }}",
    "{% macro m() %}{{ x }}{% endmacro %}{% for i in [1] %}{% set x = 3 %}{{ m() }}{% endfor %}",
    "{% macro m() %}{% set inner = 1 %}{{ inner }}{% endmacro %}{{ m() }}[{{ inner }}]",
    "{% macro m(v) %}{{ v|tojson }}{% endmacro %}{{ m(l) + '!' }} {{ m(nil) ~ m(s) }}",
    "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",
    "{{ greet }}",
    "{% filter upper %}up {{ s }}{% endfilter %} {% filter replace('o', '0') | title %}foo boo{% endfilter %}",
    "{% generation %}generated {{ s }}{% endgeneration %}",
    # ---- filters
    "{{ l|length }} {{ s|length }} {{ d|length }} {{ s|count }} {{ u|length }}",
    "{{ l|first }} {{ l|last }} {{ s|first }} {{ s|last }} {{ d|first }} {{ []|first }}|",
    "{{ l|join }} {{ l|join(', ') }} {{ people|join(', ', attribute='name') }} {{ words|join('-') }}",
    "{{ l|sort }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ words|sort(reverse=true) }} {{ people|sort(attribute='name')|map(attribute='name')|list }}",
    "{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }}",
    "{{ d|items|list }} {% for k, v in d|items %}{{ k }}{{ v }}{% endfor %} {{ nothing|items|list }}",
    "{{ people|map(attribute='name')|list }} {{ people|map(attribute='age', default=0)|list }} {{ words|map('upper')|list }} {{ l|map('string')|join }}",
    "{{ people|selectattr('role', 'equalto', 'user')|map(attribute='name')|list }} {{ people|rejectattr('age')|list|length }} {{ people|selectattr('age', 'gt', 26)|list|length }}",
    "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ l|select('in', [1, 3])|list }}",
    "{{ people|selectattr('role', '==', 'user')|list|length }} {{ people|selectattr('name')|first }}",
    "{{ l|map(attribute='x')|list }}",
    "{{ l|select('odd')|length }}",
    "{% if l|select('gt', 100) %}generator is true{% endif %}",
    "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ l|reverse|list }} {{ s|reverse }}",
    "{{ l|min }} {{ l|max }} {{ words|min }} {{ words|max(case_sensitive=true) }} {{ people|max(attribute='name') }} {{ l|sum }} {{ people|sum(attribute='age', start=1) }}",
    "{{ s|upper }} {{ s|lower }} {{ 'hello wORLD-x(y'|title }} {{ 'hELLO'|capitalize }} {{ u|upper }}",
    "[{{ ws|trim }}] [{{ 'xxhixx'|trim('x') }}] [{{ n|trim }}]",
    "{{ s|replace('l', 'L') }} {{ s|replace('l', 'L', 2) }} {{ n|string ~ '!' }} {{ l|string }} {{ nil|string }}",
    "{{ '42'|int + 1 }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ ' 12 '|int }} {{ '1_000'|int }} {{ true|int }}",
    "{{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ 'inf'|float }} {{ ' 1e3 '|float }} {{ nil|int }}",
    "{{ -3|abs }} {{ neg|abs }} {{ -2.5|abs }} {{ 2.567|round }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.567|round(1, 'floor') }} {{ 2.561|round(2, 'ceil') }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('>>') }}",
    "{{ markup|escape }} {{ markup|e }} {{ markup|safe }} {{ (markup|safe) + markup }} {{ markup + (markup|safe) }} {{ 'a'|safe ~ markup }}",
    "{{ (markup|escape)|escape }} {{ markup|forceescape|forceescape }} {{ markup|escape is escaped }} {{ markup is escaped }}",
    "{{ people|attr('nope') }}| {{ d|attr('keys') is defined }}",
    "{{ 'hello big world'|wordcount }} {{ l|list }} {{ s|list }} {{ d|list }}",
    "{{ l|batch(2)|list }} {{ l|batch(2, 'x')|list }} {{ s|center(20) }}|{{ 'ab'|center }}|",
    "{{ s|nosuchfilter }}",
    # ---- tests
    "{{ n is number }} {{ f is number }} {{ t is number }} {{ n is integer }} {{ t is integer }} {{ f is float }} {{ t is boolean }} {{ n is boolean }}",
    "{{ s is string }} {{ l is string }} {{ l is sequence }} {{ s is sequence }} {{ d is sequence }} {{ d is mapping }} {{ l is mapping }} {{ nothing is iterable }} {{ n is iterable }}",
    "{{ nil is none }} {{ n is not none }} {{ t is true }} {{ 1 is true }} {{ no is false }} {{ 0 is false }}",
    "{{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ n is divisibleby(2) }} {{ 2 is in l }} {{ 'a' is in 'abc' }}",
    "{{ n is eq 7 }} {{ n is equalto(7) }} {{ n is ne 7 }} {{ n is gt 3 }} {{ n is ge 7 }} {{ n is lt 3 }} {{ n is le 7 }} {{ n is sameas 7 }} {{ nil is sameas none }}",
    "{{ s is lower }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ '123' is upper }} {{ greet is callable }} {{ range is callable }} {{ 'upper' is filter }} {{ 'odd' is test }}",
    "{{ n is not number }} {{ not n is number }} {{ n is number and s is string }}",
    "{{ n is nosuchtest }}",
    # ---- tojson (transformers' version)
    "{{ json_like|tojson }}",
    "{{ json_like|tojson(indent=2) }}",
    "{{ json_like|tojson(indent=0) }}|{{ [[], {}]|tojson(indent=1) }}",
    "{{ json_like|tojson(ensure_ascii=true) }} {{ '😀'|tojson(true) }}",
    "{{ json_like|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }}",
    "{{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }} {{ [1.0, 1e16, 1e-7, -0.0, 100.0]|tojson }}",
    "{{ 'ctl \\x01 \\x1f \\x7f \\u2028 \"q\" \\\\'|tojson }}",
    "{{ (1, 2)|tojson }} {{ nil|tojson }} {{ t|tojson }} {{ s|tojson }}",
    "{{ nothing|tojson }}",
    "{{ l|select('odd')|tojson }}",
    "{{ namespace(a=1)|tojson }}",
    "{{ json_like|tojson(indent='\\t') }}",
    # ---- globals
    "{{ raise_exception('stop here: ' ~ s) }}",
    "{% if n > 5 %}{{ raise_exception('too big') }}{% endif %}after",
    "{{ strftime_now('%Y-%m-%d %H:%M %A %B %j %a %b %d') }}",
    "{{ dict(a=1, b='x') }} {{ dict(d, z=0)|length }} {{ namespace(x=1).x }}",
    # ---- syntax errors (jinja2 refuses them too)
    "{% if t %}unclosed",
    "{% for %}",
    "{% endif %}",
    "{{ 1 + }}",
    "{% unknowntag %}",
    "{% do l.append(1) %}",
    "{{ x is defined if t else 3 }}",
    "{% break %}",
    "{{ 'unterminated }}",
    "{# unclosed comment",
    "{{ (1, 2 }}",
    "{% macro m(a=1, b) %}{% endmacro %}",
    "{% set 1 = 2 %}",
    "{{ f(1, a=2, 3) }}",
    # ---- shapes seen in real chat templates
    "{%- for message in people -%}\n  {%- if message['role'] == 'user' -%}\n    <|u|>{{ message.name }}\n  {%- else -%}\n    <|a|>{{ message['name'] }}\n  {%- endif -%}\n{%- endfor -%}",
    "{{- '<|im_start|>' + msg.role + '\\n' + msg.content + '<|im_end|>' + '\\n' }}",
    "{%- set content = msg.content.split('<|im_end|>')[-1].lstrip(' ') %}{{ content }}|{{ msg.content.split('<', 1)[0].rstrip() }}",
    "{%- if msg.content is string and msg.content.startswith('hi') and not msg.content.endswith('x') %}ok{% endif %}",
    "{{ (people|selectattr('role', 'equalto', 'user')|list)[-1].name }} {{ people[-1] == people[2] }}",
    "{% for p in people[::-1] %}{% set idx = (people|length - 1) - loop.index0 %}{{ idx }}{{ p.name }} {% endfor %}",
    "{{ 'x' ~ (n|string) ~ '' ~ (l|length) }} {{ ('%s' ~ n) }}",
    "{{ ['a', 'b']|join(', ') + '\\n\\n' }} {{ people[0]|tojson }}",
]


def main():
    out_dir, out_path = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    env = make_env()
    with open(out_path, "w", encoding="utf-8") as out:
        for i, src in enumerate(T):
            path = os.path.join(out_dir, f"c{i:03d}.jinja")
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(src)
            case = {"template": path, "name": f"construct {i}: {src[:60]!r}",
                    "context": CONTEXT, "data": ["s", "u", "msg", "people"], "now": NOW}
            try:
                case["expect"] = env.from_string(src).render(**CONTEXT)
            except Exception as e:
                case["error"] = f"{type(e).__name__}: {e}"[:300]
                case["error_kind"] = error_kind(e)
            out.write(json.dumps(case, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

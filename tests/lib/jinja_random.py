#!/usr/bin/env python3
"""jinja_random.py - helper of tests/test_chat_templates.sh (not a test itself).

Seeded random templates built from Jinja's expressions and statements (operators, filters,
tests, methods, slices, loops, macros, conditionals over the values of jinja_constructs.py's
context), each rendered by Python's jinja2 configured as transformers does. Writes the
templates to DIR/rNNNN.jinja and a case line each to OUT.jsonl for
tests/lib/jinja_oracle_check.c. Most of these expressions are nonsense on purpose: an error
in jinja2 must be the same kind of error in MoonTail.

usage: jinja_random.py DIR OUT.jsonl COUNT SEED
"""
import json
import os
import random
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja_constructs import CONTEXT  # noqa: E402
from jinja_oracle import NOW, error_kind, make_env  # noqa: E402

ATOMS = ["s", "u", "ws", "n", "neg", "f", "big", "t", "no", "nil", "empty", "l", "words", "d",
         "nested", "people", "msg", "markup", "json_like", "undefined_x", "1", "0", "-2", "2.5",
         "'ab'", "'A b'", "''", "[1,2]", "['x','Y']", "{'k':1}", "none", "true", "false",
         "(1,'a')", "1e3", "'\\n'", "' x '"]
BINARY = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in",
          "and", "or"]
FILTERS = ["length", "first", "last", "join", "join(', ')", "list", "lower", "upper", "title",
           "capitalize", "trim", "string", "int", "float", "abs", "round", "round(1)", "sort",
           "reverse|list", "unique|list", "tojson", "tojson(indent=2)", "default('D')",
           "default('D',true)", "items|list", "dictsort", "min", "max", "sum", "count",
           "select|list", "reject|list", "map('string')|list", "selectattr('role')|list",
           "map(attribute='name')|list", "replace('a','Z')", "indent(2)", "escape", "safe",
           "wordcount", "center(9)", "batch(2)|list"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
         "iterable", "sequence", "boolean", "true", "false", "odd", "even", "callable", "lower",
         "upper", "eq 1", "in [1,2]", "divisibleby 2"]
METHODS = [".upper()", ".lower()", ".strip()", ".split()", ".split(',')", ".startswith('H')",
           ".endswith('d')", ".replace('l','L')", ".title()", ".find('o')", ".count('l')",
           ".get('role')", ".items()|list", ".keys()|list", ".values()|list", "[0]", "[-1]",
           "[1:]", "[::-1]", "['role']", ".name", ".x", "[0:2]", ".index(1)"]
ITERABLES = ["l", "words", "d", "people", "s", "range(3)", "nil", "undefined_x", "d.items()"]


def expr(rng, d=0):
    r = rng.random()
    if d > 3 or r < 0.3:
        return rng.choice(ATOMS)
    if r < 0.45:
        return f"({expr(rng, d + 1)} {rng.choice(BINARY)} {expr(rng, d + 1)})"
    if r < 0.6:
        return f"({expr(rng, d + 1)})|{rng.choice(FILTERS)}"
    if r < 0.7:
        return f"({expr(rng, d + 1)} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if r < 0.82:
        return f"{rng.choice(ATOMS)}{rng.choice(METHODS)}"
    if r < 0.88:
        return f"({expr(rng, d + 1)} if {expr(rng, d + 1)} else {expr(rng, d + 1)})"
    if r < 0.94:
        return f"[{expr(rng, d + 1)}, {expr(rng, d + 1)}]"
    return f"not {expr(rng, d + 1)}"


def stmt(rng, d=0):
    r = rng.random()
    if d > 2 or r < 0.4:
        return "{{ " + expr(rng) + " }}"
    if r < 0.55:
        return ("{% if " + expr(rng) + " %}" + stmt(rng, d + 1) + "{% else %}" +
                stmt(rng, d + 1) + "{% endif %}")
    if r < 0.7:
        return ("{% for x in " + rng.choice(ITERABLES) + " %}{{ x }}{{ loop.index }}" +
                stmt(rng, d + 1) + "{% endfor %}")
    if r < 0.8:
        return "{% set v = " + expr(rng) + " %}{{ v }}"
    if r < 0.9:
        return ("{% macro mm(a, b=2) %}" + stmt(rng, d + 1) + "{{ a }}{% endmacro %}{{ mm(" +
                expr(rng) + ") }}")
    return " \n  " + stmt(rng, d + 1) + "\n "


def main():
    out_dir, out_path, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(seed)
    env = make_env()
    warnings.simplefilter("ignore")  # jinja2's compiled Python warns about 1[0] and the like
    with open(out_path, "w", encoding="utf-8") as out:
        for i in range(count):
            src = "".join(stmt(rng) for _ in range(rng.randint(1, 3)))
            path = os.path.join(out_dir, f"r{i:04d}.jinja")
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(src)
            case = {"template": path, "name": f"random {i}: {src[:150]!r}", "context": CONTEXT,
                    "data": ["s", "u", "msg", "people"], "now": NOW}
            try:
                case["expect"] = env.from_string(src).render(**CONTEXT)
            except Exception as e:
                case["error"] = f"{type(e).__name__}: {e}"[:300]
                case["error_kind"] = error_kind(e)
            out.write(json.dumps(case, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

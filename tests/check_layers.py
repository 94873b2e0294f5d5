#!/usr/bin/env python3
"""check_layers.py - holds the code to its layers (docs/design.md): core, model,
net, control, api, cli, each using only the ones before it, and no cycle of
files inside a module.

It reads what the compiler built, not what the source seems to say:
  - calls: every object file of src/ (in BUILD/CMakeFiles/*.dir/src/*/) with
    `nm`; a symbol a file uses that another file defines is an edge between
    the two files (functions and data alike);
  - includes: every src/ file's #include lines; a public header
    (include/moontail/X.h) belongs to the layer of the files that define what
    it declares, a module's private header to its module.

It fails (exit 1), naming the files, the symbol or header and the fix, on
  - a call or include going up a layer (model calling net, net including a
    control header, ...);
  - a module's private header included from another module;
  - a cycle of files inside a module (a.c calls b.c, b.c calls a.c, directly
    or round more files): one of them holds two concepts, or a shared piece
    belongs in a file below both.

Usage: check_layers.py BUILD_DIR [SOURCE_DIR]
"""
import collections
import glob
import os
import re
import subprocess
import sys

LAYERS = ["core", "model", "net", "control", "api", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}


def objects(build, src_root):
    """{'src/net/route.c': path of its object file}, for sources that still
    exist (a file moved or deleted leaves its old object behind)"""
    out = {}
    for o in glob.glob(os.path.join(build, "CMakeFiles", "*.dir", "src", "*", "*.c.o")):
        rel = "src/" + o.split(os.sep + "src" + os.sep, 1)[1][: -len(".o")]
        if os.path.isfile(os.path.join(src_root, rel)):
            out.setdefault(rel, o)
    return out


def symbols(objs):
    """({file: set of undefined symbols}, {symbol: defining file})"""
    undefined, defined = {}, {}
    for rel, o in sorted(objs.items()):
        text = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        u = set()
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                u.add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRCVWG":
                defined.setdefault(parts[2], rel)
        undefined[rel] = u
    return undefined, defined


def layer_of(rel):
    return rel.split("/")[1]


def cycles(nodes, edges):
    """strongly connected components with more than one file (Tarjan, iterative)"""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    build = sys.argv[1]
    src_root = sys.argv[2] if len(sys.argv) > 2 else os.getcwd()
    objs = objects(build, src_root)
    if len(objs) < 20:
        print(f"check_layers: found {len(objs)} object files of src/ under {build}/CMakeFiles;"
              " build first (./dev build)", file=sys.stderr)
        return 2
    undefined, defined = symbols(objs)
    problems = []

    # calls
    edges = collections.defaultdict(set)
    why = {}
    for rel, syms in undefined.items():
        for s in sorted(syms):
            d = defined.get(s)
            if not d or d == rel:
                continue
            if RANK[layer_of(d)] > RANK[layer_of(rel)]:
                problems.append(f"{rel} calls {s} of {d}: {layer_of(rel)} may not use"
                                f" {layer_of(d)} (a layer above it); move {s} down or the"
                                " caller up")
            if layer_of(d) == layer_of(rel):
                edges[rel].add(d)
                why.setdefault((rel, d), s)

    # includes
    header_layer = {}
    for h in glob.glob(os.path.join(src_root, "include", "moontail", "*.h")):
        names = set(re.findall(r"\b(mt_\w+)\s*\(", open(h, encoding="utf-8").read()))
        ranks = [RANK[layer_of(defined[n])] for n in names if n in defined]
        if ranks:  # the layer most of its functions live in
            header_layer["moontail/" + os.path.basename(h)] = LAYERS[
                collections.Counter(ranks).most_common(1)[0][0]]
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for path in sorted(glob.glob(os.path.join(src_root, "src", "*", "*.[ch]"))):
        rel = os.path.relpath(path, src_root)
        mine = layer_of(rel)
        for name in inc.findall(open(path, encoding="utf-8").read()):
            if name.startswith("../"):
                other = name.split("/")[1]
                problems.append(f"{rel} includes {name}, a private header of src/{other}: a"
                                " module's internals are its own; use or add a public header"
                                " in include/moontail/")
                continue
            hl = header_layer.get(name)
            if hl and RANK[hl] > RANK[mine]:
                problems.append(f"{rel} includes {name}, whose functions are in {hl}: {mine}"
                                f" may not use {hl} (a layer above it)")

    for comp in cycles(sorted(objs), edges):
        inside = set(comp)
        links = [f"{a} -> {b} ({why[(a, b)]})" for a in comp for b in sorted(edges[a])
                 if b in inside]
        problems.append("cycle of files in src/" + layer_of(comp[0]) + ": " + "; ".join(links) +
                        ": one of them holds two concepts, or a shared piece belongs in a file"
                        " below both")

    for p in problems:
        print("check_layers: " + p, file=sys.stderr)
    n_edges = sum(len(v) for v in edges.values())
    print(f"check_layers: {len(objs)} files, {n_edges} calls between files of one module,"
          f" {len(header_layer)} public headers placed; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

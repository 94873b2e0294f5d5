#!/usr/bin/env python3
"""gguf_patch.py - damages a GGUF file in place for tests of the loader's
guards (the file keeps its size, so offsets and alignment stay valid), and
rewrites a seed shard's manifest after such a change.

  gguf_patch.py FILE set KEY VALUE        a scalar key's value, in its own type
                                          (VALUE may be nan or inf for a float)
  gguf_patch.py FILE rename TENSOR NEW    a tensor's name (NEW of the same length)
  gguf_patch.py FILE swap TENSOR          a 2-D tensor's two dimensions exchanged
  gguf_patch.py FILE manifest JSON        JSON (a registry's <shard>.json) made to
                                          describe FILE as it is now
  gguf_patch.py FILE offset TENSOR        prints where TENSOR's bytes start in FILE and
                                          how many there are up to the next tensor (or
                                          the file's end); TENSOR "*": one "OFFSET BYTES
                                          NAME" line per tensor (nothing is changed)
  gguf_patch.py FILE types                prints "COUNT TYPE" per ggml tensor type id, in the
                                          order the types first appear (nothing is changed)
"""
import hashlib
import json
import os
import struct
import sys

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        at = self.p
        self.p += n
        return self.d[at:self.p].decode(), at

    def skip_value(self, t):
        if t in SCALARS:
            self.p += struct.calcsize(SCALARS[t])
        elif t == 8:
            self.string()
        elif t == 9:
            et, n = self.take("<I"), self.take("<Q")
            for _ in range(n):
                self.skip_value(et)
        else:
            sys.exit(f"gguf_patch: value type {t} at byte {self.p} is unknown; the file is damaged")


def layout(data):
    """Where each key's value and each tensor's name and dimensions are, each
    tensor's data offset, and where the data starts."""
    r = Reader(data)
    if data[:4] != b"GGUF":
        sys.exit("gguf_patch: not a GGUF file (no GGUF magic)")
    r.p = 8
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    keys, tensors, offsets, align = {}, {}, {}, 32
    for _ in range(n_kv):
        name, _ = r.string()
        t = r.take("<I")
        keys[name] = (t, r.p)
        if name == "general.alignment" and t == 4:
            align = struct.unpack_from("<I", data, r.p)[0]
        r.skip_value(t)
    for _ in range(n_tensors):
        name, at = r.string()
        n_dims = r.take("<I")
        tensors[name] = (at, n_dims, r.p)
        r.p += 8 * n_dims + 4
        offsets[name] = r.take("<Q")
    return keys, tensors, offsets, (r.p + align - 1) // align * align


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    path, op, args = argv[1], argv[2], argv[3:]
    data = bytearray(open(path, "rb").read())
    keys, tensors, offsets, start = layout(data)
    if op == "offset" and len(args) == 1:
        def extent(name):
            later = sorted(o for o in offsets.values() if o > offsets[name])
            end = start + later[0] if later else os.path.getsize(path)
            return start + offsets[name], end - start - offsets[name]
        if args[0] == "*":
            for name in offsets:
                print(*extent(name), name)
        elif args[0] in offsets:
            print(*extent(args[0]))
        else:
            sys.exit(f"gguf_patch: {path} has no tensor '{args[0]}'")
        return
    if op == "types" and not args:
        counts = {}
        for at, n_dims, dims in tensors.values():
            t = struct.unpack_from("<I", data, dims + 8 * n_dims)[0]
            counts[t] = counts.get(t, 0) + 1
        for t, n in counts.items():
            print(n, t)
        return
    if op == "set" and len(args) == 2:
        if args[0] not in keys:
            sys.exit(f"gguf_patch: {path} has no key '{args[0]}'")
        t, at = keys[args[0]]
        if t not in SCALARS:
            sys.exit(f"gguf_patch: key '{args[0]}' is not a scalar (type {t})")
        v = float(args[1]) if t in (6, 12) else int(args[1])
        struct.pack_into(SCALARS[t], data, at, v)
    elif op == "rename" and len(args) == 2:
        if args[0] not in tensors or len(args[1]) != len(args[0]):
            sys.exit(f"gguf_patch: no tensor '{args[0]}', or '{args[1]}' is of another length")
        at = tensors[args[0]][0]
        data[at:at + len(args[1])] = args[1].encode()
    elif op == "swap" and len(args) == 1:
        if args[0] not in tensors or tensors[args[0]][1] != 2:
            sys.exit(f"gguf_patch: no 2-D tensor '{args[0]}'")
        at = tensors[args[0]][2]
        ne0, ne1 = struct.unpack_from("<QQ", data, at)
        struct.pack_into("<QQ", data, at, ne1, ne0)
    elif op == "manifest" and len(args) == 1:
        m = json.load(open(args[0]))
        pb = m["piece_bytes"]
        m["bytes"] = len(data)
        m["blake2b"] = hashlib.blake2b(bytes(data), digest_size=32).hexdigest()
        m["pieces"] = [hashlib.blake2b(bytes(data[i:i + pb]), digest_size=32).hexdigest()
                       for i in range(0, len(data), pb)]
        json.dump(m, open(args[0], "w"))
        return
    else:
        sys.exit(__doc__)
    open(path, "wb").write(data)


main(sys.argv)

#!/usr/bin/env python3
# gguf_tensor_offset.py - where a named tensor's bytes start in a GGUF file,
# for tests that corrupt one tensor on disk: prints the absolute file offset
# of its first byte and the bytes up to the next tensor (or the file's end);
# for the name "*", one "OFFSET BYTES NAME" line per tensor.
#   python3 gguf_tensor_offset.py FILE TENSOR_NAME
import os
import struct
import sys

# fixed sizes of the scalar value types of GGUF metadata, by type id
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, UINT32 = 8, 9, 4


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_tensor_offset.py FILE TENSOR_NAME")
    path, want = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the header is far smaller than this
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def skip_value(t):
        nonlocal pos
        if t in SCALAR:
            pos += SCALAR[t]
        elif t == STRING:
            string()
        elif t == ARRAY:
            et, n = take("I"), take("Q")
            for _ in range(n):
                skip_value(et)
        else:
            sys.exit(f"{path}: unknown metadata type {t}; is this a GGUF file?")

    if data[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file (no GGUF magic)")
    pos = 4
    take("I")  # version
    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        key, t = string(), take("I")
        if key == "general.alignment" and t == UINT32:
            align = take("I")
        else:
            skip_value(t)
    offsets = {}
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        pos += 8 * n_dims
        take("I")  # type
        offsets[name] = take("Q")
    start = (pos + align - 1) // align * align

    def extent(name):
        later = sorted(o for o in offsets.values() if o > offsets[name])
        end = start + later[0] if later else os.path.getsize(path)
        return start + offsets[name], end - start - offsets[name]

    if want == "*":
        for name in offsets:
            print(*extent(name), name)
    elif want in offsets:
        print(*extent(want))
    else:
        sys.exit(f"{path}: no tensor '{want}' (it has {', '.join(sorted(offsets))})")


main()

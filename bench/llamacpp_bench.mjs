#!/usr/bin/env node
// llamacpp_bench.mjs - the llama.cpp half of bench/vs-llamacpp.sh: prefill
// and decode tokens/s of one GGUF with the llama.cpp that node-llama-cpp
// 3.21.1 ships prebuilt (the same library the golden tests compare against),
// measured the way `moontail bench` measures MoonTail.
//
//   node bench/llamacpp_bench.mjs MODEL.gguf [-t THREADS] [-p PROMPT] [-n GEN] [-r RUNS]
//
// One run = the prompt ids (i*37+5) mod n_vocab evaluated as one batch
// (prefill), then GEN tokens decoded one at a time, each the greedy choice
// after the previous one (decode). A context is created once; its history is
// cleared before every run; one untimed run comes first. Prints one JSON
// line: {"prefill_tps", "decode_tps", "runs": [...], ...}.
//
// node-llama-cpp is loaded from tools/golden/node_modules (install it with
// tools/golden's `npm ci`, as tools/golden/regen.sh does; remove the AMX
// library as regen.sh explains, or ggml picks it on AMX machines).

import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../tools/golden/package.json"));
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);

function usage(msg) {
    if (msg) process.stderr.write(`llamacpp_bench.mjs: ${msg}\n`);
    process.stderr.write("usage: node llamacpp_bench.mjs MODEL.gguf [-t N] [-p N] [-n N] [-r N]\n");
    process.exit(2);
}

const argv = process.argv.slice(2);
let modelPath = null, threads = null, nPrompt = 128, nGen = 32, runs = 3;
for (let i = 0; i < argv.length; i++) {
    const a = argv[i], num = () => {
        const v = Number(argv[++i]);
        if (!Number.isInteger(v) || v < 1) usage(`${a} needs a positive whole number`);
        return v;
    };
    if (a === "-t") threads = num();
    else if (a === "-p") nPrompt = num();
    else if (a === "-n") nGen = num();
    else if (a === "-r") runs = num();
    else if (a.startsWith("-")) usage(`unknown option ${a}`);
    else modelPath = a;
}
if (!modelPath) usage("no model given");

const logLines = [];
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    logLevel: LlamaLogLevel.debug,
    logger: (level, message) => { logLines.push(String(message)); }
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const nVocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
if (!nVocab) throw new Error("cannot read the vocabulary size");
const context = await model.createContext({
    contextSize: nPrompt + nGen + 8,
    batchSize: nPrompt,
    sequences: 1,
    ...(threads != null ? { threads } : {}),
    ignoreMemorySafetyChecks: true,
    failedCreationRemedy: false
});
const seq = context.getSequence();
const prompt = Array.from({ length: nPrompt }, (_, i) => (i * 37 + 5) % nVocab);
const now = () => Number(process.hrtime.bigint()) / 1e9;

async function once(gen) {
    await seq.clearHistory();
    const t0 = now();
    await seq.evaluateWithoutGeneratingNewTokens(prompt);
    const t1 = now();
    // the first decode step evaluates one more id; each later one the greedy
    // token the step before produced
    let n = 0;
    for await (const tok of seq.evaluate([prompt[nPrompt - 1]], { temperature: 0 })) {
        void tok;
        if (++n >= gen) break;
    }
    const t2 = now();
    return { prefill_tps: nPrompt / (t1 - t0), decode_tps: gen / (t2 - t1) };
}

await once(Math.min(nGen, 4));
const res = [];
for (let r = 0; r < runs; r++) res.push(await once(nGen));
const median = v => {
    const s = [...v].sort((a, b) => a - b), m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const backend = logLines.join("\n").match(/loaded CPU backend from (\S+)/);
if (process.env.LLAMA_BENCH_LOG) process.stderr.write(logLines.join(""));
console.log(JSON.stringify({
    engine: "llama.cpp",
    llama_cpp: llama.llamaCppRelease,
    cpu_backend: backend ? path.basename(backend[1]) : null,
    model: modelPath,
    threads: context.currentThreads,
    prompt_tokens: nPrompt,
    gen_tokens: nGen,
    runs: res,
    prefill_tps: median(res.map(r => r.prefill_tps)),
    decode_tps: median(res.map(r => r.decode_tps))
}));
await context.dispose();
await model.dispose();
await llama.dispose();

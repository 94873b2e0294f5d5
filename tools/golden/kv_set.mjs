// kv_set.mjs - the models of the "kv" golden set (tests/golden/kv.json): the
// same synthetic models run with llama.cpp's F16, BF16 and Q8_0 KV caches.
//
// F16 and BF16 run with flash attention off (llama.cpp then rounds the query
// and the softmax weights to the cache type for its two attention matmuls);
// Q8_0 needs flash attention (a quantized V cache is refused without it), and
// its kernel quantizes the query to Q8_0 and decodes V rows to f32. For plain
// K/V caches whose head width is a multiple of 64, llama.cpp also rotates Q, K
// and V with a Walsh-Hadamard matrix before a quantized cache; the MLA layers
// (one K-only cache, V a view of it) never rotate, even when the log flags K.
// NOTES.md §7 has the details and what was measured.
//
// Each entry names the cache type and the attention flags llama.cpp must log
// (`rot`: attn_rot_k, attn_rot_v); regen.mjs refuses output that differs.

// ~190 byte tokens: long enough that later positions attend over a full cache.
const LONG_TEXT =
    "A key and value cache keeps every earlier position of the prompt, so each new token " +
    "reads all of them again: any rounding of the stored rows is seen by every later step, " +
    "and a long prompt shows it.";

export const KV_PROMPTS = [
    { name: "hello", text: "Hello world", n_predict: 16 },
    { name: "fox", text: "The quick brown fox jumps over", n_predict: 16 },
    { name: "code", text: "a1b2c3 => {x: [1, 2]}", n_predict: 16 },
    { name: "long", text: LONG_TEXT, n_predict: 8 },
];

// The KV cache settings per cache type: the flash-attention state llama.cpp
// allows and the tightest comparison for it.
const KV = {
    f16: { kv_cache_type: "F16", flash_attention: false },
    bf16: { kv_cache_type: "BF16", flash_attention: false },
    q8_0: { kv_cache_type: "Q8_0", flash_attention: true },
};

const ALL = ["f16", "bf16", "q8_0"];

// Kimi at small widths (as the kimi set) but with MLA K rows of kv_lora + rope
// that Q8_0 blocks divide: k3 has 32 + 32 = 64 (llama.cpp flags attn_rot_k,
// which MLA does not apply), kimi-linear 64 + 32 = 96 (no flag).
const KIMI_SMALL = ["--embd", "64", "--heads", "4", "--kda-head-dim", "16", "--ff", "96",
    "--experts", "16", "--experts-used", "4", "--ff-exp", "32", "--shared-experts", "1",
    "--nope", "16", "--v-dim", "16"];
const K3 = ["--arch", "kimi-k3", ...KIMI_SMALL, "--kv-lora", "32", "--rope", "32",
    "--layers", "4", "--mla-layers", "1,3", "--res-block", "2", "--latent", "32"];
const KL = ["--arch", "kimi-linear", ...KIMI_SMALL, "--kv-lora", "64", "--rope", "32",
    "--layers", "4", "--mla-layers", "1,3"];

// name, mkmodel arguments (without --seed), weight label, cache types, and
// llama.cpp's attn_rot_k/_v flags for a Q8_0 cache (F16/BF16 never rotate).
const MODELS = [
    // GQA (4 heads, 2 KV heads) of width 64: Q8_0 rotates K and V by 64x64
    ["qwen3moe-hd64", ["--arch", "qwen3moe", "--type", "f32"], "f32", ALL, [true, true]],
    // width 96: 3 Q8_0 blocks, not a multiple of 64, so no rotation
    ["qwen3moe-hd96", ["--arch", "qwen3moe", "--head-dim", "96", "--type", "f32"], "f32", ALL, [false, false]],
    ["qwen3moe-hd64", ["--arch", "qwen3moe", "--type", "q8_0"], "q8_0", ["f16", "q8_0"], [true, true]],
    // width 128, one KV head: K rotates by 128x128, V by 64x64
    ["llama-dense-hd128", ["--arch", "llama", "--dense", "--tied", "--heads", "2", "--heads-kv", "1",
        "--head-dim", "128", "--type", "f32"], "f32", ALL, [true, true]],
    // absorbed MLA, K-only cache: K = 256 + 32 = 288 (9 blocks), V = its first 256
    ["deepseek2", ["--arch", "deepseek2", "--layers", "2", "--type", "f32"], "f32", ALL, [false, false]],
    ["deepseek2", ["--arch", "deepseek2", "--layers", "2", "--type", "q8_0"], "q8_0", ["q8_0"], [false, false]],
    // legacy MLA: per-head K = 64 + 32 = 96 and V = 64, so Q8_0 rotates V only
    ["deepseek2-legacy", ["--arch", "deepseek2", "--layers", "2", "--mla-legacy", "--type", "f32"], "f32",
        ["f16", "q8_0"], [false, true]],
    ["k3", [...K3, "--type", "f32", "--expert-type", "f32"], "f32", ALL, [true, false]],
    ["k3", [...K3, "--type", "q8_0", "--expert-type", "mxfp4"], "q8_0-mxfp4", ["q8_0"], [true, false]],
    ["kl", [...KL, "--type", "f32"], "f32", ["f16", "q8_0"], [false, false]],
];

// One entry per model x cache type; the weights (and seed) are shared by all
// cache types of a model, so entries differ only in the cache.
export function kvModels() {
    const list = [];
    let seed = 500;
    for (const [base, args, weights, types, rot] of MODELS) {
        const s = seed++;
        for (const t of types)
            list.push({
                name: `${base}-${weights}-kv${t}`,
                mkmodel: [...args, "--seed", String(s)],
                texts: [],
                prompts: KV_PROMPTS,
                context: { ...KV[t], threads: 2 },
                expect: {
                    kv_cache_type_k: KV[t].kv_cache_type,
                    kv_cache_type_v: KV[t].kv_cache_type,
                    flash_attention: KV[t].flash_attention,
                    attn_rot_k: t === "q8_0" && rot[0],
                    attn_rot_v: t === "q8_0" && rot[1],
                },
            });
    }
    return list;
}

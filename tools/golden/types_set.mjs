// types_set.mjs - the models of the "types" golden set (tests/golden/types.json):
// every tensor type beyond the base set's (the K-quants Q2_K/Q3_K/Q5_K, the
// 32-blocks Q4_1/Q5_0/Q5_1/IQ4_NL, the i-quants and the ternary types), each
// as the whole model's type, and llama.cpp's named quantization mixes
// (`mkmodel --ftype`, which also picks the fallbacks for rows that are not
// whole 256-element super-blocks), on qwen3moe, deepseek2 and kimi-k3.
//
// Widths are multiples of 256 so that the K-, IQ- and TQ-types apply to most
// tensors; deepseek2's and kimi-k3's attn_k_b rows (qk_nope wide: 64 and 128)
// and kimi-k3's latent expert rows are not, and take the fallbacks.

export const NEW_TYPES = ["q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q5_k", "iq4_xs", "tq1_0",
    "tq2_0", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"];

export const MIXES = ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ2_XXS", "IQ3_XXS", "IQ4_XS", "IQ1_M"];

const PROMPTS = [
    { name: "hello", text: "Hello world", n_predict: 8 },
    { name: "fox", text: "The quick brown fox jumps over", n_predict: 8 },
];

const ARCHS = [
    { name: "qwen3moe", args: ["--arch", "qwen3moe"] },
    { name: "deepseek2", args: ["--arch", "deepseek2", "--layers", "2"] },
    // K2/K3's head widths at n_embd 256: 128-wide attn_k_b rows, a latent
    // of 128 for the routed experts (the mixes' fallbacks), KDA and MLA
    { name: "k3", args: ["--arch", "kimi-k3", "--embd", "256", "--heads", "4", "--kda-head-dim", "64",
        "--ff", "256", "--experts", "16", "--experts-used", "4", "--ff-exp", "256",
        "--shared-experts", "1", "--q-lora", "256", "--kv-lora", "256", "--nope", "128", "--rope", "64",
        "--v-dim", "128", "--layers", "3", "--mla-layers", "1", "--res-block", "2", "--latent", "128"] },
];

export function typeModels() {
    const list = [];
    let seed = 500;
    const add = (name, args) =>
        list.push({ name, mkmodel: [...args, "--seed", String(seed++)], texts: [], prompts: PROMPTS });
    for (const a of ARCHS) {
        for (const t of NEW_TYPES)
            add(`${a.name}-${t}`, [...a.args, "--type", t, "--expert-type", t]);
        for (const m of MIXES) add(`${a.name}-mix-${m}`, [...a.args, "--ftype", m]);
    }
    return list;
}

/* synth_model.h - deterministic synthetic models for tests and the built-in
 * default: any supported architecture and tensor type, chosen sizes, seeded
 * random weights scaled so the next-token distribution is clearly peaked.
 * The same parameters always give a byte-identical file. */
#ifndef MOONTAIL_SYNTH_MODEL_H
#define MOONTAIL_SYNTH_MODEL_H

#include "moontail/error.h"
#include "moontail/tensor_type.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mt_synth_params {
    const char *arch; /* llama | qwen2moe | qwen3moe | deepseek2 */
    mt_type type;     /* type of the large matrices (1-D tensors and routers stay F32) */
    uint64_t seed;
    const char *vocab; /* "bytes" or the path of a Hugging Face tokenizer.json */
    const char *pre;   /* pre-tokenizer name; NULL = per architecture/vocab default */
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    int32_t n_expert, n_expert_used, n_ff_exp, n_expert_shared, n_leading_dense;
    int32_t n_group, n_group_used;
    int32_t q_lora, kv_lora, qk_nope, qk_rope, v_dim; /* deepseek2 */
    float yarn_factor;                                /* > 1 turns YaRN on */
    int32_t yarn_orig_ctx;
    bool tied_output; /* no output.weight: the head reuses token_embd */
    bool dense;       /* llama only: no experts at all */
    bool mla_legacy;  /* deepseek2: one attn_kv_b instead of attn_k_b/attn_v_b */
    bool rope_freqs;  /* llama: a rope_freqs.weight (n_rot/2 divisors in [1, 8], llama-3 style) */
    float logit_gain; /* scale of the output head; larger = more peaked */
    bool readable;    /* byte vocab: damp the head's rows for bytes other than
                         letters, digits, space and common punctuation */
} mt_synth_params;

/* Defaults for an architecture (small: n_embd 256, 2-3 layers, 8 experts). */
mt_synth_params mt_synth_default_params(const char *arch);

/* Writes the model to path. Returns 0 or -1 with err filled. */
int mt_synth_write(const mt_synth_params *p, const char *path, mt_error *err);

#endif

/* synth_model.h - deterministic synthetic models for tests and the built-in
 * default: any supported architecture and tensor type, chosen sizes, seeded
 * random weights scaled so the next-token distribution is clearly peaked.
 * The same parameters always give a byte-identical file.
 *
 * kimi-linear and kimi-k3 are hybrids of KDA (linear attention with a
 * recurrent state) and MLA layers; they are written for llama.cpp (the
 * reference), with the tensors and keys its converters produce. */
#ifndef MOONTAIL_SYNTH_MODEL_H
#define MOONTAIL_SYNTH_MODEL_H

#include "moontail/error.h"
#include "moontail/quant_mix.h"
#include "moontail/tensor_type.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mt_synth_params {
    const char *arch;    /* llama | qwen2moe | qwen3moe | deepseek2 | kimi-linear | kimi-k3 */
    mt_type type;        /* type of the large matrices (1-D tensors and routers stay F32) */
    int32_t expert_type; /* type of the routed experts (ffn_*_exps): an mt_type, -1 = type */
    mt_quant_mix ftype;  /* NONE: the types above; else every tensor's type as llama.cpp's
                            quantizer gives it from F32 under this mix (quant_mix.h), and
                            type and expert_type are ignored */
    uint64_t seed;
    const char *vocab; /* "bytes" or the path of a Hugging Face tokenizer.json */
    const char *pre;   /* pre-tokenizer name; NULL = per architecture/vocab default */
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    int32_t n_expert, n_expert_used, n_ff_exp, n_expert_shared, n_leading_dense;
    int32_t n_group, n_group_used;
    int32_t q_lora, kv_lora, qk_nope, qk_rope, v_dim; /* MLA: deepseek2 and the kimi archs */
    float yarn_factor;                                /* > 1 turns YaRN on */
    int32_t yarn_orig_ctx;
    /* kimi-linear and kimi-k3: KDA layers have n_head heads of kda_head_dim */
    int32_t kda_head_dim, conv_kernel;
    const char *mla_layers; /* 0-based MLA layers ("3,7"), "all" or "none"; every other
                               layer is KDA. NULL = every 4th (3, 7, ...) and the last */
    /* kimi-k3 only */
    int32_t res_block;      /* attn_res.block_size; 0 = no cross-layer residual attention */
    int32_t latent;         /* expert_latent_length; 0 = routed experts at n_embd */
    float situ_beta;        /* activation.situ_beta (> 0) */
    float situ_linear_beta; /* activation.situ_linear_beta (0 = plain up branch) */
    float gate_lower_bound; /* kda.gate_lower_bound (< 0); 0 = not written (softplus decay) */
    bool mla_gate;          /* MLA layers have an output gate (attn_gate) */
    bool tied_output;       /* no output.weight: the head reuses token_embd */
    bool dense;             /* llama only: no experts at all */
    bool mla_legacy;        /* deepseek2: one attn_kv_b instead of attn_k_b/attn_v_b */
    bool rope_freqs;  /* llama: a rope_freqs.weight (n_rot/2 divisors in [1, 8], llama-3 style) */
    float logit_gain; /* scale of the output head; larger = more peaked */
    bool readable;    /* byte vocab: damp the head's rows for bytes other than
                         letters, digits, space and common punctuation */
    /* byte vocab: tokens after <|endoftext|>, <|im_start|> and <|im_end|> (ids 259..),
     * control tokens where added_control[i], else user-defined; at most 32 */
    const char *const *added_tokens;
    const bool *added_control;
    int n_added;
    const char *chat_template; /* byte vocab: tokenizer.chat_template, or NULL for none */
    /* for tests of the loader's guards: */
    const char *extra_tensor; /* also a tensor of this name (F32, n_embd) that no
                                 architecture uses; NULL = none */
    const char *arch_name;    /* general.architecture written instead of arch (the keys
                                 stay arch's); NULL = arch */
    /* progress (NULL: none): layers made so far of n_layer (writing false), then bytes of
     * tensor data written of the total (writing true) */
    void (*progress)(void *ctx, bool writing, uint64_t done, uint64_t total);
    void *progress_ctx;
} mt_synth_params;

/* Defaults for an architecture: small (n_embd 256, 2-3 layers, 8 experts),
 * except the kimi archs, whose layer and expert counts are the real models'
 * (kimi-linear: 27 layers, 256 experts, 8 used; kimi-k3: 93 layers, 896
 * experts, 16 used, MXFP4 experts) at tiny widths (n_embd 64). */
mt_synth_params mt_synth_default_params(const char *arch);

/* Writes the model to path. Returns 0 or -1 with err filled (with ftype, also
 * when a tensor's type is one the engine cannot quantize to yet). */
int mt_synth_write(const mt_synth_params *p, const char *path, mt_error *err);

/* One tensor of a model as mt_synth_plan describes it. */
typedef struct mt_synth_tensor {
    char name[96];
    int n_dims;
    int64_t ne[3];
    mt_type type; /* the type it is written in */
} mt_synth_tensor;

/* The tensors mt_synth_write would write, in file order, with their types,
 * without making or quantizing any weights (so also for types the engine cannot
 * quantize yet). *tensors is malloc'd (free it). Returns 0 or -1 with err filled. */
int mt_synth_plan(const mt_synth_params *p, mt_synth_tensor **tensors, size_t *n, mt_error *err);

#endif

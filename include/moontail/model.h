/* model.h - a model loaded from GGUF: hyperparameters, weight views, and the
 * forward pass expressed as "run layers [a, b) on these hidden states".
 *
 * Local generation and distributed execution share this one forward path:
 * the requester embeds tokens (mt_model_embed), some process runs layer
 * ranges (mt_model_forward_layers) and the requester turns the last hidden
 * states into logits (mt_model_head). */
#ifndef MOONTAIL_MODEL_H
#define MOONTAIL_MODEL_H

#include "moontail/error.h"
#include "moontail/gguf.h"
#include "moontail/matmul.h"
#include "moontail/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum mt_arch {
    MT_ARCH_LLAMA,     /* llama dense or Mixtral-style MoE */
    MT_ARCH_QWEN2MOE,  /* softmax router, sigmoid-gated shared expert, qkv biases */
    MT_ARCH_QWEN3MOE,  /* softmax router with renorm, QK-norm */
    MT_ARCH_DEEPSEEK2, /* MLA attention, sigmoid+bias router, shared experts */
} mt_arch;

typedef enum mt_gating { MT_GATING_SOFTMAX = 1, MT_GATING_SIGMOID = 2 } mt_gating;

typedef struct mt_hparams {
    mt_arch arch;
    const char *arch_name;
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_ctx_train;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim_k; /* per-head q/k width (MLA: qk_nope + qk_rope) */
    int32_t head_dim_v;
    float eps; /* every RMSNorm */

    /* RoPE */
    int32_t n_rot;
    bool rope_neox; /* rotate (x[i], x[i+n_rot/2]) instead of (x[2i], x[2i+1]) */
    float rope_base;
    float rope_freq_scale; /* 1 / scaling factor */
    bool rope_yarn;
    int32_t yarn_orig_ctx;
    float yarn_beta_fast, yarn_beta_slow;
    float rope_mscale; /* cos/sin multiplier */
    float attn_scale;  /* softmax scale */

    /* FFN / MoE */
    int32_t n_ff;     /* dense FFN width */
    int32_t n_ff_exp; /* per-expert width */
    int32_t n_ff_shexp;
    int32_t n_expert;
    int32_t n_expert_used;
    int32_t n_expert_shared;
    int32_t n_leading_dense;
    mt_gating gating;
    bool expert_weights_norm;
    float expert_weights_scale; /* 0 = none */
    int32_t n_group, n_group_used;

    /* MLA (deepseek2) */
    int32_t q_lora_rank; /* 0 = plain attn_q ("lite") */
    int32_t kv_lora_rank;
    int32_t qk_nope, qk_rope, v_head_dim;
} mt_hparams;

/* A merged expert tensor {n_cols, n_rows, n_expert}: expert e is the 2-D
 * matrix at data + e * expert_bytes. */
typedef struct mt_experts {
    mt_matrix m; /* expert 0 */
    size_t expert_bytes;
    int32_t n_expert;
} mt_experts;

/* Most layers a model may declare (the shard format's limit too). */
#define MT_MAX_LAYERS 65536

typedef struct mt_layer {
    float *attn_norm; /* (n_embd) */
    float *ffn_norm;  /* (n_embd) */

    /* GQA attention */
    mt_matrix wq;           /* (n_head*head_dim_k, n_embd) */
    mt_matrix wk, wv;       /* (n_head_kv*head_dim, n_embd) */
    mt_matrix wo;           /* (n_embd, n_head*head_dim_v) */
    float *bq, *bk, *bv;    /* optional biases */
    float *q_norm, *k_norm; /* (head_dim_k) QK-norm, qwen3 */

    /* MLA attention */
    mt_matrix wq_a;    /* (q_lora, n_embd) */
    float *q_a_norm;   /* (q_lora) */
    mt_matrix wq_b;    /* (n_head*(nope+rope), q_lora) */
    mt_matrix wkv_a;   /* (kv_lora+rope, n_embd) */
    float *kv_a_norm;  /* (kv_lora) */
    mt_experts wk_b;   /* per head: (kv_lora rows, nope cols) */
    mt_experts wv_b;   /* per head: (v_dim rows, kv_lora cols) */
    mt_matrix wkv_b;   /* legacy: (n_head*(nope+v), kv_lora) */
    bool mla_absorbed; /* wk_b/wv_b present */

    /* FFN: dense */
    bool is_moe;
    mt_matrix ffn_gate, ffn_up; /* (n_ff, n_embd) */
    mt_matrix ffn_down;         /* (n_embd, n_ff) */

    /* FFN: MoE */
    mt_matrix router;     /* (n_expert, n_embd) */
    float *exp_probs_b;   /* (n_expert) selection bias, optional */
    mt_experts gate_exps; /* (n_ff_exp, n_embd) each */
    mt_experts up_exps;
    mt_experts down_exps; /* (n_embd, n_ff_exp) each */
    bool has_shexp;
    mt_matrix gate_shexp, up_shexp; /* (n_ff_shexp, n_embd) */
    mt_matrix down_shexp;           /* (n_embd, n_ff_shexp) */
    mt_matrix shexp_gate_inp;       /* (1, n_embd) qwen2moe sigmoid gate; data NULL if none */
} mt_layer;

typedef struct mt_model {
    gguf_file *gguf;
    mt_hparams hp;
    /* What this file holds: a whole model, or a shard (moontail.shard.* keys):
     * layers [layer_begin, layer_end), their attention part (norms, attention,
     * router, shared and dense FFN) and/or routed experts, and the head. */
    int32_t layer_begin, layer_end;
    bool has_head;
    bool has_attention;
    bool has_experts;
    int32_t n_local_experts; /* experts held per MoE layer */
    int32_t *expert_slot;    /* (n_expert) local slot of each expert id, -1 = not held */
    mt_matrix tok_embd;      /* (n_vocab, n_embd) */
    float *output_norm;      /* (n_embd) */
    mt_matrix output;        /* (n_vocab, n_embd); tok_embd when tied */
    float *rope_freqs;       /* (n_rot/2) divisors, optional */
    mt_layer *layers;        /* n_layer */
} mt_model;

/* Local slot of expert e in this model's expert tensors, or -1 if not held. */
static inline int32_t mt_model_expert_slot(const mt_model *m, int32_t e) {
    return e >= 0 && e < m->hp.n_expert ? m->expert_slot[e] : -1;
}

/* Loads hyperparameters and binds every tensor, checking names, shapes and
 * types. The model keeps the gguf_file open (weights are views into it).
 * A shard binds only what it holds; using a part it lacks is an error. */
mt_model *mt_model_load(const char *path, mt_error *err);
mt_model *mt_model_from_gguf(gguf_file *f, mt_error *err); /* takes ownership of f */
void mt_model_free(mt_model *m);

/* ------------------------------------------------------------- KV cache */

/* Per-sequence attention cache for layers [layer_begin, layer_end). GQA
 * layers keep K (n_head_kv*head_dim_k) and V (n_head_kv*head_dim_v) per
 * position; MLA layers keep the compressed [c_kv (kv_lora) ; k_pe (rope)]. */
typedef struct mt_kv_cache {
    int32_t layer_begin, layer_end;
    int32_t n_ctx;
    int32_t k_width, v_width; /* floats per position per layer */
    float *k;                 /* (n_layers, n_ctx, k_width) */
    float *v;                 /* (n_layers, n_ctx, v_width); NULL for MLA */
} mt_kv_cache;

mt_kv_cache *mt_kv_cache_new(const mt_model *m, int32_t layer_begin, int32_t layer_end,
                             int32_t n_ctx, mt_error *err);
void mt_kv_cache_free(mt_kv_cache *kv);
/* Bytes the cache reserves for its whole context (0 for NULL); the memory
 * resident is what the positions written so far touched. */
size_t mt_kv_cache_bytes(const mt_kv_cache *kv);

/* -------------------------------------------------------------- forward */

/* hidden (n_tok, n_embd) <- token embeddings. Ids must be < n_vocab. */
int mt_model_embed(const mt_model *m, const int32_t *tokens, int32_t n_tok, float *hidden,
                   mt_error *err);

/* Where the routed experts of MoE layers run. run() computes, for each of n
 * rows, y[r] = Expert_ids[r](u[r]) of layer il: the unweighted SwiGLU output,
 * n_embd floats per row. The caller weights and sums the rows of a token in
 * its top-k order, so any backend that computes each row exactly gives
 * bit-identical results (a local model, an expert shard, a remote server).
 *
 * concurrent: run() does not use the pool and may be called from another
 * thread at the same time as other holders' run() (a remote expert server
 * waiting on the network); an expert dispatcher (expert_dispatch.h) then
 * runs it on a thread of its own, overlapping the other holders. It comes
 * last so that a {run, ctx} initializer still means false. */
typedef struct mt_expert_backend {
    int (*run)(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u, float *y,
               mt_pool *pool, mt_error *err);
    void *ctx;
    bool concurrent;
} mt_expert_backend;

/* The experts this model (or shard) holds, as an mt_expert_backend run():
 * ctx is the mt_model. Rows whose expert is not held are an error. */
int mt_model_run_experts(void *model, int32_t il, int32_t n, const int32_t *ids, const float *u,
                         float *y, mt_pool *pool, mt_error *err);

/* Runs layers [a, b) on hidden (n_tok, n_embd), in place. Token i sits at
 * position pos[i]; it attends to cache positions [0, pos[i]], and its K/V
 * is written at pos[i]. Positions must be < kv->n_ctx and a token may only
 * see positions already filled (by this call or earlier ones). Routed
 * experts run on `experts` (NULL: this model's own). */
int mt_model_forward_layers(const mt_model *m, mt_kv_cache *kv, int32_t a, int32_t b,
                            const int32_t *pos, int32_t n_tok, float *hidden,
                            const mt_expert_backend *experts, mt_pool *pool, mt_error *err);

/* The same for a batch mixing sessions: token t sits at pos[t] of the
 * session cached in kv[t] (tokens of one session in position order). Every
 * token's result is the same as if its session ran alone. */
int mt_model_forward_batch(const mt_model *m, mt_kv_cache *const *kv, int32_t a, int32_t b,
                           const int32_t *pos, int32_t n_tok, float *hidden,
                           const mt_expert_backend *experts, mt_pool *pool, mt_error *err);

/* logits (n_tok, n_vocab) <- output · rmsnorm(hidden, output_norm). The
 * model must hold the head (m->has_head). */
void mt_model_head(const mt_model *m, const float *hidden, int32_t n_tok, float *logits,
                   mt_pool *pool);

#endif

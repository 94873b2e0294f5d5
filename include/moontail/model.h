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
    MT_ARCH_LLAMA,       /* llama dense or Mixtral-style MoE */
    MT_ARCH_QWEN2MOE,    /* softmax router, sigmoid-gated shared expert, qkv biases */
    MT_ARCH_QWEN3MOE,    /* softmax router with renorm, QK-norm */
    MT_ARCH_DEEPSEEK2,   /* MLA attention, sigmoid+bias router, shared experts */
    MT_ARCH_KIMI_LINEAR, /* KDA (linear attention) and nope MLA layers, deepseek2-style MoE */
    MT_ARCH_KIMI_K3,     /* kimi-linear + attention residuals, latent MoE, situ, gates */
} mt_arch;

/* kimi-linear or kimi-k3: KDA layers, nope MLA, per-layer layer kinds. */
static inline bool mt_arch_is_kimi(mt_arch a) {
    return a == MT_ARCH_KIMI_LINEAR || a == MT_ARCH_KIMI_K3;
}
/* Attention layers are MLA (a compressed latent cache), not GQA. */
static inline bool mt_arch_has_mla(mt_arch a) {
    return a == MT_ARCH_DEEPSEEK2 || mt_arch_is_kimi(a);
}

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
    bool mla_nope;     /* kimi: the rope slice of q and k is never rotated */
    bool mla_expanded; /* older MLA files (attn_kv_b, no attn_k_b): K and V cached per head */

    /* KDA layers (kimi-linear, kimi-k3): head_count_kv 0 in the per-layer array */
    int32_t n_kda_layers;       /* counted by the loader from the per-layer head_count_kv */
    int32_t kda_head_dim;       /* KDA heads = n_head, each kda_head_dim wide */
    int32_t ssm_conv;           /* short causal convolution kernel K */
    float kda_gate_lower_bound; /* -INFINITY: kimi-linear's softplus decay gate */

    /* kimi-k3 */
    int32_t attn_res_block;  /* 0 = no cross-layer attention residuals */
    int32_t n_res_bank;      /* checkpoints banked by the last layer: ceil(n_layer / block) */
    int32_t n_expert_latent; /* 0 = routed experts at n_embd */
    bool act_situ;           /* situ instead of SwiGLU in every FFN */
    float situ_beta, situ_linear_beta;

    /* Derived widths */
    int32_t n_embd_exp; /* what routed experts read and write: n_expert_latent or n_embd */
    int32_t n_hidden;   /* floats per token between layers: n_embd * (1 + n_res_bank) */
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

    /* kimi: layer kind and the MoE's per-layer expert width */
    bool is_kda;      /* a KDA layer (else attention) */
    int32_t n_ff_exp; /* routed expert width of this layer */

    /* KDA attention; D = n_head * kda_head_dim, hd = kda_head_dim */
    float *conv_q, *conv_k, *conv_v; /* (D, K) taps per channel, oldest first */
    mt_matrix ssm_f_a;               /* (hd, n_embd) */
    mt_matrix ssm_f_b;               /* (D, hd) decay gate, low rank */
    mt_matrix ssm_beta;              /* (n_head, n_embd) */
    float *ssm_a;                    /* (n_head) -exp(A_log) */
    float *ssm_dt_b;                 /* (D) */
    mt_matrix ssm_g;                 /* (D, n_embd) k3 output gate, full rank */
    mt_matrix ssm_g_a;               /* (hd, n_embd) kimi-linear output gate, low rank */
    mt_matrix ssm_g_b;               /* (D, hd) */
    float *ssm_norm;                 /* (hd) per-head RMSNorm of the output */

    /* kimi-k3 */
    mt_matrix attn_gate;   /* (n_head * v_head_dim, n_embd) MLA output gate; data NULL if none */
    float *attn_res_score; /* (n_embd) attention residual scores, before attention */
    float *ffn_res_score;  /* (n_embd) before the FFN */
    mt_matrix routed_down; /* (latent, n_embd) */
    mt_matrix routed_up;   /* (n_embd, latent) */
    float *routed_norm;    /* (latent) optional */
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
    float *output_res_score; /* (n_embd) k3: attention residual scores before the head */
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

/* The checks of mt_model_load on an open file, keeping nothing: its
 * architecture is one the engine runs, its hyperparameters are sane, every
 * tensor the architecture needs is there with its shape and a supported
 * type, and every tensor it holds is one the architecture uses (a stray
 * tensor is named). Commands that open a model without loading it (split,
 * plan check, the registry, tokenize) call it right after opening, so that
 * such a file is refused there and not first on a node. */
int mt_model_check_file(const gguf_file *f, mt_error *err);

/* ------------------------------------------------------------- KV cache */

/* Element type of the attention cache's rows (`--kv-type`). f16 is the
 * default, as in llama.cpp. Each type gives llama.cpp's numbers for that
 * cache type: f32 and the 16-bit types as its attention without flash
 * attention (the query and the softmax weights rounded to the cache type
 * before their dot products), q8_0 as its flash attention (the query
 * quantized to q8_0, values decoded to f32), with its Hadamard rotation of
 * the heads of separate K and V rows (GQA, and the older MLA layout's
 * expanded heads) whose width is a multiple of 64; the MLA latent is never
 * rotated. KDA state is always f32. */
typedef enum mt_kv_type {
    MT_KV_F16, /* 0, so that a zeroed config has the default */
    MT_KV_F32,
    MT_KV_BF16,
    MT_KV_Q8_0,
    MT_KV_TYPE_COUNT
} mt_kv_type;
#define MT_KV_DEFAULT MT_KV_F16

const char *mt_kv_type_name(mt_kv_type t); /* "f32", "f16", "bf16", "q8_0" */
/* s is one of those names (case-insensitive); the error lists them. */
int mt_kv_type_parse(const char *s, mt_kv_type *t, mt_error *err);
/* The tensor type a cache row of type t is stored as. */
mt_type mt_kv_row_type(mt_kv_type t);

/* Per-sequence state for layers [layer_begin, layer_end). GQA layers keep
 * K (n_head_kv*head_dim_k) and V (n_head_kv*head_dim_v) per position; MLA
 * layers keep the compressed [c_kv (kv_lora) ; k_pe (rope)], except files
 * in the older layout (one attn_kv_b per layer, hp.mla_expanded), which
 * keep every head's K (nope + rope) and V (v_head_dim) as llama.cpp does
 * for them. Rows are stored as the cache's type. KDA layers keep a
 * fixed-size f32 recurrent state instead: the last K-1 inputs of the q, k
 * and v convolutions and one (hd x hd) delta-rule matrix per head. */
typedef struct mt_kv_cache {
    int32_t layer_begin, layer_end;
    int32_t n_ctx;
    mt_kv_type type;
    int32_t k_width, v_width; /* elements per position per attention layer */
    size_t k_row, v_row;      /* their bytes as the cache's type */
    uint8_t *k;               /* (n_attn_layers, n_ctx, k_row bytes) */
    uint8_t *v;               /* (n_attn_layers, n_ctx, v_row bytes); NULL for MLA */
    int32_t *slot;            /* (layer_end - layer_begin) index among the range's
                                 attention layers, or among its KDA layers */
    int32_t n_rec;            /* KDA layers in the range */
    size_t rec_floats;        /* recurrent state per KDA layer */
    float *rec;               /* (n_kda_layers, rec_floats) */
    int32_t *rec_next;        /* (n_kda_layers) position each KDA state expects next */
    /* rewind snapshots (mt_kv_snap_begin): each KDA layer's state after the token at
     * position snap_p0 + i, for i < snap_n (snap_n <= snap_cap); none when snap_cap is 0 */
    int32_t snap_p0, snap_cap, snap_n;
    float *snap;        /* (n_kda_layers, snap_alloc, rec_floats) */
    int32_t snap_alloc; /* snapshots allocated per layer (kept between windows) */
} mt_kv_cache;

/* A cache of type t; refused (naming the widths) when the model's rows do
 * not fit t's blocks (q8_0 needs multiples of 32). The memory is mapped
 * without reserving it: pages are backed as positions are written. */
mt_kv_cache *mt_kv_cache_new(const mt_model *m, int32_t layer_begin, int32_t layer_end,
                             int32_t n_ctx, mt_kv_type t, mt_error *err);
void mt_kv_cache_free(mt_kv_cache *kv);
/* Whether a model with these hyperparameters can keep a cache of type t. */
int mt_kv_type_check(const mt_hparams *hp, mt_kv_type t, mt_error *err);
/* Bytes the cache reserves for its whole context (0 for NULL); the memory
 * resident is what the positions written so far touched, plus the
 * recurrent state (mt_kv_cache_rec_bytes), which is fixed. */
size_t mt_kv_cache_bytes(const mt_kv_cache *kv);
size_t mt_kv_cache_rec_bytes(const mt_kv_cache *kv);
/* dst <- src: positions, recurrent state and its position, for two caches
 * made by mt_kv_cache_new with the same model, layers, context and type. */
void mt_kv_cache_copy(mt_kv_cache *dst, const mt_kv_cache *src);

/* Rewinding (exact speculative decoding, docs/design.md). Attention rows are simply
 * rewritten after a rewind, but a KDA layer's recurrent state cannot drop tokens: while a
 * window of n snapshots is open from position p0, each KDA layer copies its state after
 * every token at a position in [p0, p0 + n) (a head's part as that head finishes the
 * token), so that mt_kv_rewind can restore it by memcpy. mt_kv_snap_begin(kv, p0, n) opens
 * such a window (replacing any other; the memory grows to n snapshots per KDA layer and is
 * kept for the next window), n == 0 closes it (no copies). The window stays open across
 * evaluations until the next call. Returns -1 when out of memory (the window is closed). */
int mt_kv_snap_begin(mt_kv_cache *kv, int32_t p0, int32_t n, mt_error *err);
/* Bytes the snapshots hold now (allocated; 0 without KDA layers or a window ever opened). */
size_t mt_kv_cache_snap_bytes(const mt_kv_cache *kv);
/* Makes the cache hold positions [0, n_past): a KDA state already there is kept, one past it
 * is restored from the snapshot after position n_past - 1 (it must be inside the open
 * window and written), n_past 0 restarts it; later snapshots are dropped. Attention rows at
 * n_past and after are left to be overwritten. -1 (nothing changed) when a KDA layer has no
 * snapshot for n_past. */
int mt_kv_rewind(mt_kv_cache *kv, int32_t n_past, mt_error *err);

/* What one session's cache of type t keeps for one layer, in bytes: a KDA
 * layer (is_kda) a fixed recurrent state (*fixed), any other layer a K/V or
 * MLA latent row per context position (*per_position); the other is 0.
 * These are the cache's own sizes: mt_kv_cache_bytes of a cache of layers
 * [a, b) and n_ctx positions = the sum over those layers of fixed + n_ctx *
 * per_position, and mt_kv_cache_rec_bytes the sum of fixed. */
void mt_kv_layer_bytes(const mt_hparams *hp, bool is_kda, mt_kv_type t, uint64_t *fixed,
                       uint64_t *per_position);

/* The same for every layer of a model or shard file, from its metadata
 * alone (no tensor is read, so a registry can size sessions from the file
 * it places): fixed and per_position get n_layer entries, which must be the
 * file's block_count; *n_ctx_train (if non-NULL) gets its training context
 * (context_length, 4096 when absent). */
int mt_kv_session_bytes(const gguf_file *f, int32_t n_layer, mt_kv_type t, uint64_t *fixed,
                        uint64_t *per_position, int32_t *n_ctx_train, mt_error *err);

/* -------------------------------------------------------------- forward */

/* Hidden states are hp.n_hidden floats per token: the residual stream
 * (n_embd) followed, in kimi-k3 models with attention residuals, by the
 * n_res_bank checkpoints the layers bank for that token (n_embd each). */

/* hidden (n_tok, n_hidden) <- token embeddings. Ids must be < n_vocab. */
int mt_model_embed(const mt_model *m, const int32_t *tokens, int32_t n_tok, float *hidden,
                   mt_error *err);

/* Where the routed experts of MoE layers run. run() computes, for each of n
 * rows, y[r] = Expert_ids[r](u[r]) of layer il: the unweighted SwiGLU (or
 * situ) output; u and y have hp.n_embd_exp floats per row (n_embd, or the
 * latent width of a kimi-k3 latent MoE). The caller weights and sums the rows of a token in
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

/* Runs layers [a, b) on hidden (n_tok, n_hidden), in place. Token i sits at
 * position pos[i]; it attends to cache positions [0, pos[i]], and its K/V
 * is written at pos[i]. Positions must be < kv->n_ctx and a token may only
 * see positions already filled (by this call or earlier ones). KDA layers
 * take tokens strictly in order: position 0 starts a new recurrent state,
 * any other position must be the one after the state's last. Routed
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

/* out (n_tok, n_embd) <- what the head normalises, from hidden (n_tok,
 * n_hidden) after the last layer: the stream, or (k3) the stream mixed with
 * every checkpoint by output_res_score, which the head and the last layer's
 * shard both hold (the last stage of a pipeline sends this instead of the
 * checkpoints). -1 with err for a k3 shard without it. */
int mt_model_head_input(const mt_model *m, const float *hidden, int32_t n_tok, float *out,
                        mt_error *err);

/* logits (n_tok, n_vocab) <- output · rmsnorm(x, output_norm), x (n_tok,
 * n_embd) the head's input (mt_model_head_input). Needs m->has_head. */
void mt_model_head_from_input(const mt_model *m, const float *x, int32_t n_tok, float *logits,
                              mt_pool *pool);

/* logits (n_tok, n_vocab) <- output · rmsnorm(hidden, output_norm), hidden
 * (n_tok, n_hidden) (k3: the stream mixed with its checkpoints first): the
 * two above in one. The model must hold the head (m->has_head). */
void mt_model_head(const mt_model *m, const float *hidden, int32_t n_tok, float *logits,
                   mt_pool *pool);

#endif

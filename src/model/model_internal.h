/* model_internal.h - declarations shared by the files of the model layer
 * (hyperparameters, layer kinds, RoPE) but not part of the public API. */
#ifndef MOONTAIL_MODEL_INTERNAL_H
#define MOONTAIL_MODEL_INTERNAL_H

#include "moontail/model.h"

#include <math.h>
#include <stdlib.h>

/* Fills hp from f's metadata; n_vocab comes from the embedding tensor. */
int mt_hparams_read(const gguf_file *f, int64_t n_vocab, mt_hparams *hp, mt_error *err);

/* out[il] for every layer <- the integer key `<arch>.suffix`, stored once or
 * as an int32/uint32 array of one entry per layer; dflt when absent. */
int mt_hparams_read_per_layer(const gguf_file *f, const mt_hparams *hp, const char *suffix,
                              int32_t dflt, int32_t *out, mt_error *err);

/* ------------------------------------------------------------ building blocks */

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] for one vector of n. */
void mt_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out);

/* RoPE for position pos: cs[i], sn[i] (i < n_rot / 2, n_rot <= 1024 is
 * checked at load) are the cosine and sine of pair i's (YaRN-corrected)
 * angle times mscale; mt_rope_rotate turns the first n_rot dims of each of
 * n_heads heads (head_dim apart) by them. */
void mt_rope_table(const mt_hparams *hp, const float *freq_divisors, int32_t pos, float *cs,
                   float *sn);
void mt_rope_rotate(const mt_hparams *hp, const float *cs, const float *sn, float *x,
                    int32_t head_dim, int32_t n_heads);

/* ------------------------------------------------------------ layer kinds */

/* Scratch buffers sized for one forward call; owned by the caller. */
typedef struct mt_scratch {
    float *a; /* (n_tok, n_embd) normalised input of the current block */
    float *o; /* (n_tok, n_embd) output of the current block */
} mt_scratch;

/* ------------------------------------------------------------ KV cache rows */

/* Attention layer il's K rows (and V rows) in a session's cache: row s of
 * the layer starts at s * k_row (v_row) bytes. */
static inline uint8_t *mt_kv_layer_k(const mt_kv_cache *kv, int32_t il) {
    return kv->k + (size_t)kv->slot[il - kv->layer_begin] * kv->n_ctx * kv->k_row;
}
static inline uint8_t *mt_kv_layer_v(const mt_kv_cache *kv, int32_t il) {
    return kv->v + (size_t)kv->slot[il - kv->layer_begin] * kv->n_ctx * kv->v_row;
}
/* KDA layer il's recurrent state: conv (3, D, K-1), then delta (H, hd, hd). */
static inline float *mt_kv_layer_rec(const mt_kv_cache *kv, int32_t il) {
    return kv->rec + (size_t)kv->slot[il - kv->layer_begin] * kv->rec_floats;
}

/* Stores n values of x (n a multiple of the type's block) as type t at dst. */
void mt_kv_store(mt_kv_type t, const float *x, int64_t n, uint8_t *dst);

/* Byte offset of element i (a multiple of the type's block) in a row of type t. */
static inline size_t mt_kv_offset(mt_kv_type t, int64_t i) {
    return i ? mt_type_row_size(mt_kv_row_type(t), i) : 0;
}

/* Working memory of mt_attend_cached for contexts up to max_pos positions
 * and heads up to max_dim wide. V rows of a quantized cache are decoded
 * MT_ATTEND_RUN positions at a time. */
enum { MT_ATTEND_RUN = 16 };
typedef struct mt_attend_work {
    float *scores; /* max_pos */
    float *rows;   /* MT_ATTEND_RUN x max_dim: a run of decoded V rows */
    uint8_t *conv; /* the query converted to the cache's partner format; also
                      the rounded weights (max_pos 16-bit values) */
} mt_attend_work;
int mt_attend_work_init(mt_attend_work *w, int32_t max_pos, int32_t max_dim);
void mt_attend_work_free(mt_attend_work *w);

/* One head: out (dv) = softmax(scale q . k_s) . v_s over s < n_pos, with
 * k_s = k + s * k_stride bytes (dk values) and v_s = v + s * v_stride bytes
 * (dv values) stored as type t; q is f32. The arithmetic is llama.cpp's for
 * that cache type (see mt_kv_type). */
void mt_attend_cached(mt_kv_type t, const float *q, const uint8_t *k, size_t k_stride, int32_t dk,
                      const uint8_t *v, size_t v_stride, int32_t dv, int32_t n_pos, float scale,
                      mt_attend_work *w, float *out);

/* Rotates every block of `block` values of x (n values) by the orthonormal
 * Walsh-Hadamard matrix; its own inverse. */
void mt_hadamard_rows(float *x, int64_t n, int32_t block);
/* The rotation block for a q8_0 cache's K heads of head_dim values (the
 * largest power of two >= 64 dividing it) and V heads (64); 0: none. */
int32_t mt_hadamard_block_k(int32_t head_dim);
int32_t mt_hadamard_block_v(int32_t head_dim);

/* Grouped-query attention over cached rows, shared by GQA layers and the
 * older MLA layout (whose heads are expanded before they are cached). */
typedef struct mt_gqa_shape {
    int32_t n_head, n_head_kv, dk, dv;
    float scale;
} mt_gqa_shape;
/* Caches position pos's k (n_head_kv * dk) and v (n_head_kv * dv) in layer
 * il of kv, as its type (rotating them first for q8_0; k and v change). */
void mt_gqa_store(const mt_gqa_shape *sh, mt_kv_cache *kv, int32_t il, int32_t pos, float *k,
                  float *v);
/* o (n_tok, n_head * dv) <- each token's heads q (n_tok, n_head * dk; changed)
 * attending to positions [0, pos[t]] of its cache kv[t]. */
void mt_gqa_attend(const mt_gqa_shape *sh, mt_kv_cache *const *kv, int32_t il, const int32_t *pos,
                   int32_t n_tok, float *q, float *o, mt_pool *pool);

/* Attention for a batch whose token t belongs to the session cached in kv[t]. */
int mt_attn_gqa(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err);
int mt_attn_mla(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err);
/* KDA for a batch whose token t belongs to kv[t]; a session's tokens come in
 * position order and continue its recurrent state (position 0 restarts it). */
int mt_attn_kda(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err);

/* k3 attention residuals: out (n_embd) = softmax-weighted mix of the n_bank
 * checkpoints bank[c] (n_embd each, stride apart) and the stream x, scored
 * by sum(rmsnorm(v) * score) for each. */
void mt_attn_res_mix(const float *x, const float *bank, size_t stride, int32_t n_bank,
                     const float *score, int64_t n_embd, float eps, float *out);
/* One SwiGLU block over its own tokens: out (n_tok, down rows) =
 * down . (silu(gate . x) * (up . x)), x (n_tok, gate cols). */
/* The gated activation of an FFN: SwiGLU silu(g) * u when situ is false,
 * else k3's situ: beta tanh(g / beta) sigmoid(g) * lb tanh(u / lb) (the up
 * branch untouched when linear_beta lb <= 0). */
typedef struct mt_ffn_act {
    bool situ;
    float beta, linear_beta;
} mt_ffn_act;

typedef struct mt_ffn_task {
    const mt_matrix *gate, *up, *down;
    int32_t n_tok;
    const float *x;
    float *out;
    const mt_ffn_act *act; /* NULL: SwiGLU */
} mt_ffn_task;

/* The activation of hp's FFNs (NULL for SwiGLU models). */
static inline const mt_ffn_act *mt_hparams_act(const mt_hparams *hp, mt_ffn_act *buf) {
    if (!hp->act_situ) return NULL;
    *buf = (mt_ffn_act){true, hp->situ_beta, hp->situ_linear_beta};
    return buf;
}

/* Runs all blocks in two parallel sections of the pool (gate/up of all, then
 * down of all); each output row is bit-identical to a run of its block on
 * that row alone. */
int mt_ffn_multi(const mt_ffn_task *tasks, int n_tasks, mt_pool *pool, mt_error *err);
/* h = act(g, h) (SwiGLU when act is NULL) for n_rows rows of n, g and h
 * row-major; large batches in the pool. */
void mt_ffn_act_rows(const mt_ffn_act *act, const float *g, float *h, int64_t n_rows, int64_t n,
                     mt_pool *pool);
int mt_ffn_dense(const mt_matrix *gate, const mt_matrix *up, const mt_matrix *down,
                 const mt_ffn_act *act, int32_t n_tok, const float *u, float *out, mt_pool *pool,
                 mt_error *err);
int mt_ffn_moe(const mt_model *m, const mt_layer *l, int32_t il, int32_t n_tok, const float *u,
               float *out, const mt_expert_backend *experts, mt_pool *pool, mt_error *err);

/* Picks the experts (idx, largest selection score first) and their weights w
 * for one token from its router scores z (n_expert); scratch holds 2 * n_expert. */
void mt_moe_route(const mt_hparams *hp, const float *exp_probs_b, const float *z, int32_t *idx,
                  float *w, float *scratch);

/* Causal attention of n_q query rows against cache rows [0, pos+1) for one
 * head: out = softmax(scale * q.K^T) . V. K rows are k_stride floats apart
 * (width dk), V rows v_stride apart (width dv). Fixed summation order. */
void mt_attend_one(const float *q, const float *k, size_t k_stride, int32_t dk, const float *v,
                   size_t v_stride, int32_t dv, int32_t n_pos, float scale, float *scores,
                   float *out);

#endif

/* model_internal.h - declarations shared by the files of the model layer
 * (hyperparameters, layer kinds, RoPE) but not part of the public API. */
#ifndef MOONTAIL_MODEL_INTERNAL_H
#define MOONTAIL_MODEL_INTERNAL_H

#include "moontail/model.h"

#include <math.h>
#include <stdlib.h>

/* Fills hp from f's metadata; n_vocab comes from the embedding tensor. */
int mt_hparams_read(const gguf_file *f, int64_t n_vocab, mt_hparams *hp, mt_error *err);

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

/* Layer il's K rows (and V rows) in a session's cache. */
static inline float *mt_kv_layer_k(const mt_kv_cache *kv, int32_t il) {
    return kv->k + (size_t)(il - kv->layer_begin) * kv->n_ctx * kv->k_width;
}
static inline float *mt_kv_layer_v(const mt_kv_cache *kv, int32_t il) {
    return kv->v + (size_t)(il - kv->layer_begin) * kv->n_ctx * kv->v_width;
}

/* Attention for a batch whose token t belongs to the session cached in kv[t]. */
int mt_attn_gqa(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err);
int mt_attn_mla(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err);
/* One SwiGLU block over its own tokens: out (n_tok, down rows) =
 * down . (silu(gate . x) * (up . x)), x (n_tok, gate cols). */
typedef struct mt_ffn_task {
    const mt_matrix *gate, *up, *down;
    int32_t n_tok;
    const float *x;
    float *out;
} mt_ffn_task;

/* Runs all blocks in two parallel sections of the pool (gate/up of all, then
 * down of all); each output row is bit-identical to a run of its block on
 * that row alone. */
int mt_ffn_multi(const mt_ffn_task *tasks, int n_tasks, mt_pool *pool, mt_error *err);
int mt_ffn_dense(const mt_matrix *gate, const mt_matrix *up, const mt_matrix *down, int32_t n_tok,
                 const float *u, float *out, mt_pool *pool, mt_error *err);
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

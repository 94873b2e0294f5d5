/* attn_gqa.c - grouped-query attention (llama, qwen2moe, qwen3moe).
 *
 *   q, k, v = Wq a (+bq), Wk a (+bk), Wv a (+bv)      split into heads
 *   q, k    = rmsnorm per head (qwen3 QK-norm), then RoPE at each position
 *   o_h     = softmax(q_h . K_g^T / sqrt(d)) . V_g    g = h / (n_head / n_head_kv)
 *   out     = Wo concat_h(o_h)
 *
 * All K/V rows of the batch are written to the cache before any token
 * attends, so a token sees exactly the positions [0, pos] whether it came
 * alone or in a batch. Rows are stored as the cache's type; with a q8_0
 * cache, q and k (and v, then o back) are rotated as llama.cpp does
 * (hadamard.c). The older MLA layout (attn_kv_b) comes here too, its
 * heads expanded once per position as they are cached (attn_mla.c). */
#include "model_internal.h"

#include <string.h>

typedef struct attn_job {
    const mt_gqa_shape *sh;
    const float *q;         /* (n_tok, n_head * dk) */
    mt_kv_cache *const *kv; /* (n_tok) each token's session cache */
    int32_t il;
    const int32_t *pos;
    float *o; /* (n_tok, n_head * dv) */
    int32_t max_pos;
} attn_job;

/* Task index = t * n_head + h. */
static void attn_heads(void *ctx, int64_t begin, int64_t end) {
    const attn_job *j = ctx;
    const mt_gqa_shape *sh = j->sh;
    const int32_t dk = sh->dk, dv = sh->dv, group = sh->n_head / sh->n_head_kv;
    mt_attend_work w;
    if (mt_attend_work_init(&w, j->max_pos + 1, dk > dv ? dk : dv))
        abort(); /* a few KiB per thread; cannot continue without it */
    for (int64_t task = begin; task < end; task++) {
        int64_t t = task / sh->n_head, h = task % sh->n_head, g = h / group;
        const mt_kv_cache *kv = j->kv[t];
        mt_attend_cached(kv->type, j->q + (t * sh->n_head + h) * dk,
                         mt_kv_layer_k(kv, j->il) + mt_kv_offset(kv->type, g * dk), kv->k_row, dk,
                         mt_kv_layer_v(kv, j->il) + mt_kv_offset(kv->type, g * dv), kv->v_row, dv,
                         j->pos[t] + 1, sh->scale, &w, j->o + (t * sh->n_head + h) * dv);
    }
    mt_attend_work_free(&w);
}

void mt_gqa_store(const mt_gqa_shape *sh, mt_kv_cache *kv, int32_t il, int32_t pos, float *k,
                  float *v) {
    const int64_t nk = (int64_t)sh->n_head_kv * sh->dk, nv = (int64_t)sh->n_head_kv * sh->dv;
    if (kv->type == MT_KV_Q8_0) {
        int32_t bk = mt_hadamard_block_k(sh->dk), bv = mt_hadamard_block_v(sh->dv);
        if (bk) mt_hadamard_rows(k, nk, bk);
        if (bv) mt_hadamard_rows(v, nv, bv);
    }
    mt_kv_store(kv->type, k, nk, mt_kv_layer_k(kv, il) + (size_t)pos * kv->k_row);
    mt_kv_store(kv->type, v, nv, mt_kv_layer_v(kv, il) + (size_t)pos * kv->v_row);
}

void mt_gqa_attend(const mt_gqa_shape *sh, mt_kv_cache *const *kv, int32_t il, const int32_t *pos,
                   int32_t n_tok, float *q, float *o, mt_pool *pool) {
    int32_t max_pos = 0;
    for (int32_t t = 0; t < n_tok; t++)
        if (pos[t] > max_pos) max_pos = pos[t];
    /* with a q8_0 cache the query meets rotated keys, and the output comes
     * back from rotated values; every token of a batch shares its layer's type */
    const bool rot = n_tok > 0 && kv[0]->type == MT_KV_Q8_0;
    const int32_t bk = rot ? mt_hadamard_block_k(sh->dk) : 0,
                  bv = rot ? mt_hadamard_block_v(sh->dv) : 0;
    if (bk) mt_hadamard_rows(q, (int64_t)n_tok * sh->n_head * sh->dk, bk);
    attn_job job = {sh, q, kv, il, pos, o, max_pos};
    mt_pool_run(pool, (int64_t)n_tok * sh->n_head, attn_heads, &job);
    if (bv) mt_hadamard_rows(o, (int64_t)n_tok * sh->n_head * sh->dv, bv);
}

static void add_bias(float *x, const float *b, int32_t n_tok, int64_t n) {
    if (!b) return;
    for (int32_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n; i++) x[t * n + i] += b[i];
}

int mt_attn_gqa(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const int64_t dk = hp->head_dim_k, dv = hp->head_dim_v;
    const int64_t nq = hp->n_head * dk, nk = hp->n_head_kv * dk, nv = hp->n_head_kv * dv;
    float *q = malloc((size_t)n_tok * (size_t)(nq + nk + nv + hp->n_head * dv) * sizeof(float));
    if (!q) return mt_error_set(err, "attention: out of memory for %d tokens", n_tok);
    float *k = q + (size_t)n_tok * nq, *v = k + (size_t)n_tok * nk, *o = v + (size_t)n_tok * nv;

    const mt_matrix *qkv[3] = {&l->wq, &l->wk, &l->wv};
    float *const qkv_out[3] = {q, k, v};
    mt_matmul_many(qkv, qkv_out, 3, a, n_tok, pool);
    add_bias(q, l->bq, n_tok, nq);
    add_bias(k, l->bk, n_tok, nk);
    add_bias(v, l->bv, n_tok, nv);

    const mt_gqa_shape sh = {hp->n_head, hp->n_head_kv, (int32_t)dk, (int32_t)dv, hp->attn_scale};
    for (int32_t t = 0; t < n_tok; t++) {
        float *qt = q + (size_t)t * nq, *kt = k + (size_t)t * nk;
        if (l->q_norm) {
            for (int32_t h = 0; h < hp->n_head; h++)
                mt_rmsnorm(qt + h * dk, l->q_norm, dk, hp->eps, qt + h * dk);
            for (int32_t h = 0; h < hp->n_head_kv; h++)
                mt_rmsnorm(kt + h * dk, l->k_norm, dk, hp->eps, kt + h * dk);
        }
        float cs[512], sn[512];
        mt_rope_table(hp, m->rope_freqs, pos[t], cs, sn);
        mt_rope_rotate(hp, cs, sn, qt, (int32_t)dk, hp->n_head);
        mt_rope_rotate(hp, cs, sn, kt, (int32_t)dk, hp->n_head_kv);
        mt_gqa_store(&sh, kv[t], il, pos[t], kt, v + (size_t)t * nv);
    }
    mt_gqa_attend(&sh, kv, il, pos, n_tok, q, o, pool);
    mt_matmul(&l->wo, o, n_tok, out, pool);
    free(q);
    return 0;
}

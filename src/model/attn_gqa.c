/* attn_gqa.c - grouped-query attention (llama, qwen2moe, qwen3moe).
 *
 *   q, k, v = Wq a (+bq), Wk a (+bk), Wv a (+bv)      split into heads
 *   q, k    = rmsnorm per head (qwen3 QK-norm), then RoPE at each position
 *   o_h     = softmax(q_h . K_g^T / sqrt(d)) . V_g    g = h / (n_head / n_head_kv)
 *   out     = Wo concat_h(o_h)
 *
 * All K/V rows of the batch are written to the cache before any token
 * attends, so a token sees exactly the positions [0, pos] whether it came
 * alone or in a batch. */
#include "model_internal.h"

#include <string.h>

typedef struct attn_job {
    const mt_hparams *hp;
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
    const mt_hparams *hp = j->hp;
    const int32_t dk = hp->head_dim_k, dv = hp->head_dim_v, group = hp->n_head / hp->n_head_kv;
    float *scores = malloc((size_t)(j->max_pos + 1) * sizeof *scores);
    if (!scores) abort(); /* a few KiB per thread; cannot continue without it */
    for (int64_t task = begin; task < end; task++) {
        int64_t t = task / hp->n_head, h = task % hp->n_head, g = h / group;
        const float *kc = mt_kv_layer_k(j->kv[t], j->il), *vc = mt_kv_layer_v(j->kv[t], j->il);
        mt_attend_one(j->q + (t * hp->n_head + h) * dk, kc + g * dk, (size_t)hp->n_head_kv * dk, dk,
                      vc + g * dv, (size_t)hp->n_head_kv * dv, dv, j->pos[t] + 1, hp->attn_scale,
                      scores, j->o + (t * hp->n_head + h) * dv);
    }
    free(scores);
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

    int32_t max_pos = 0;
    for (int32_t t = 0; t < n_tok; t++) {
        float *kc = mt_kv_layer_k(kv[t], il), *vc = mt_kv_layer_v(kv[t], il);
        if (pos[t] > max_pos) max_pos = pos[t];
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
        memcpy(kc + (size_t)pos[t] * kv[t]->k_width, kt, (size_t)nk * sizeof(float));
        memcpy(vc + (size_t)pos[t] * kv[t]->v_width, v + (size_t)t * nv,
               (size_t)nv * sizeof(float));
    }

    attn_job job = {hp, q, kv, il, pos, o, max_pos};
    mt_pool_run(pool, (int64_t)n_tok * hp->n_head, attn_heads, &job);
    mt_matmul(&l->wo, o, n_tok, out, pool);
    free(q);
    return 0;
}

/* attn_mla.c - multi-head latent attention (deepseek2: DeepSeek-V3, Kimi K2).
 *
 * Absorbed form, which keeps only the compressed latent in the cache:
 *   q       = Wq_b rmsnorm(Wq_a a)          (or Wq a for "lite" models)
 *   q_h     = [q_nope_h (nope) | q_pe_h (rope)]
 *   [c|k_pe]= Wkv_a a;  c = rmsnorm(c, kv_a_norm);  RoPE(q_pe_h), RoPE(k_pe)
 *   cache   <- [c ; k_pe]                   (kv_lora + rope floats per position)
 *   q~_h    = Wk_b[h] q_nope_h              (kv_lora)
 *   o_h     = softmax(scale [q~_h ; q_pe_h] . [c_s ; k_pe_s]) . c_s
 *   out     = Wo concat_h(Wv_b[h] o_h)
 * Legacy files (one attn_kv_b) are expanded per position instead. */
#include "model_internal.h"

#include <string.h>

typedef struct mla_job {
    const mt_hparams *hp;
    const float *qa;        /* (n_tok, n_head, kv_lora + rope): absorbed queries */
    mt_kv_cache *const *kv; /* (n_tok) each token's session cache */
    int32_t il;
    const int32_t *pos;
    float *lat; /* (n_tok, n_head, kv_lora) */
    int32_t max_pos;
} mla_job;

static void mla_heads(void *ctx, int64_t begin, int64_t end) {
    const mla_job *j = ctx;
    const mt_hparams *hp = j->hp;
    const int32_t w = hp->kv_lora_rank + hp->qk_rope;
    float *scores = malloc((size_t)(j->max_pos + 1) * sizeof *scores);
    if (!scores) abort();
    for (int64_t task = begin; task < end; task++) {
        int64_t t = task / hp->n_head;
        const float *cache = mt_kv_layer_k(j->kv[t], j->il);
        mt_attend_one(j->qa + task * w, cache, (size_t)w, w, cache, (size_t)w, hp->kv_lora_rank,
                      j->pos[t] + 1, hp->attn_scale, scores, j->lat + task * hp->kv_lora_rank);
    }
    free(scores);
}

/* Matrix of expert/head e of a 3-D tensor. */
static mt_matrix head_matrix(const mt_experts *x, int32_t e) {
    mt_matrix m = x->m;
    m.data = (const char *)m.data + (size_t)e * x->expert_bytes;
    return m;
}

/* Legacy layout: K_h = [Wkv_b c_s]_k_nope ; k_pe_s and V_h = [Wkv_b c_s]_v,
 * expanded for every cached position. */
static int mla_expanded(const mt_model *m, const mt_layer *l, const float *cache, int32_t n_ctx,
                        const float *q, const int32_t *pos, int32_t n_tok, float *o, mt_pool *pool,
                        mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const int32_t H = hp->n_head, nope = hp->qk_nope, rope = hp->qk_rope, dv = hp->v_head_dim;
    const int32_t lora = hp->kv_lora_rank, w = lora + rope, qk = nope + rope;
    int32_t n_pos = 0;
    for (int32_t t = 0; t < n_tok; t++)
        if (pos[t] + 1 > n_pos) n_pos = pos[t] + 1;
    float *c = malloc((size_t)n_pos * lora * sizeof(float));
    float *kvb = malloc((size_t)n_pos * H * (nope + dv) * sizeof(float));
    float *K = malloc((size_t)n_pos * qk * sizeof(float));
    float *V = malloc((size_t)n_pos * dv * sizeof(float));
    float *scores = malloc((size_t)n_ctx * sizeof(float));
    if (!c || !kvb || !K || !V || !scores) {
        free(c), free(kvb), free(K), free(V), free(scores);
        return mt_error_set(err, "MLA attention: out of memory for %d positions", n_pos);
    }
    for (int32_t s = 0; s < n_pos; s++)
        memcpy(c + (size_t)s * lora, cache + (size_t)s * w, lora * sizeof(float));
    mt_matmul(&l->wkv_b, c, n_pos, kvb, pool);
    for (int32_t h = 0; h < H; h++) {
        for (int32_t s = 0; s < n_pos; s++) {
            const float *row = kvb + ((size_t)s * H + h) * (nope + dv);
            memcpy(K + (size_t)s * qk, row, nope * sizeof(float));
            memcpy(K + (size_t)s * qk + nope, cache + (size_t)s * w + lora, rope * sizeof(float));
            memcpy(V + (size_t)s * dv, row + nope, dv * sizeof(float));
        }
        for (int32_t t = 0; t < n_tok; t++)
            mt_attend_one(q + ((size_t)t * H + h) * qk, K, qk, qk, V, dv, dv, pos[t] + 1,
                          hp->attn_scale, scores, o + ((size_t)t * H + h) * dv);
    }
    free(c), free(kvb), free(K), free(V), free(scores);
    return 0;
}

int mt_attn_mla(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const int32_t H = hp->n_head, nope = hp->qk_nope, rope = hp->qk_rope, dv = hp->v_head_dim;
    const int32_t lora = hp->kv_lora_rank, w = lora + rope, qk = nope + rope;
    const size_t T = (size_t)n_tok;
    size_t n_qa = hp->q_lora_rank > 0 ? T * hp->q_lora_rank : 0;
    size_t g = (size_t)(lora > nope ? lora : nope) + (size_t)(lora > dv ? lora : dv);
    size_t total = n_qa + T * H * qk + T * w + T * H * w + T * H * lora + T * H * dv + T * g;
    float *buf = malloc(total * sizeof(float));
    if (!buf) return mt_error_set(err, "MLA attention: out of memory for %d tokens", n_tok);
    float *qa = buf, *q = qa + n_qa, *kva = q + T * H * qk, *qabs = kva + T * w,
          *lat = qabs + T * H * w, *o = lat + T * H * lora, *gin = o + T * H * dv,
          *gout = gin + T * (size_t)(lora > nope ? lora : nope);
    int rc = 0;

    if (hp->q_lora_rank > 0) {
        mt_matmul(&l->wq_a, a, n_tok, qa, pool);
        for (size_t t = 0; t < T; t++)
            mt_rmsnorm(qa + t * hp->q_lora_rank, l->q_a_norm, hp->q_lora_rank, hp->eps,
                       qa + t * hp->q_lora_rank);
        mt_matmul(&l->wq_b, qa, n_tok, q, pool);
    } else {
        mt_matmul(&l->wq, a, n_tok, q, pool);
    }
    mt_matmul(&l->wkv_a, a, n_tok, kva, pool);

    int32_t max_pos = 0;
    for (size_t t = 0; t < T; t++) {
        float *cache = mt_kv_layer_k(kv[t], il);
        if (pos[t] > max_pos) max_pos = pos[t];
        float *kt = kva + t * w;
        mt_rmsnorm(kt, l->kv_a_norm, lora, hp->eps, kt);
        mt_rope_apply(hp, NULL, pos[t], kt + lora, rope, 1);
        mt_rope_apply(hp, NULL, pos[t], q + t * H * qk + nope, qk, H); /* rope slice of each head */
        memcpy(cache + (size_t)pos[t] * w, kt, (size_t)w * sizeof(float));
    }

    if (!l->mla_absorbed) {
        /* one expansion per run of tokens from the same session */
        for (size_t t0 = 0, t1; rc == 0 && t0 < T; t0 = t1) {
            for (t1 = t0 + 1; t1 < T && kv[t1] == kv[t0];) t1++;
            rc = mla_expanded(m, l, mt_kv_layer_k(kv[t0], il), kv[t0]->n_ctx, q + t0 * H * qk,
                              pos + t0, (int32_t)(t1 - t0), o + t0 * H * dv, pool, err);
        }
    } else {
        /* q~_h = Wk_b[h] q_nope_h, then append q_pe_h; one matmul per head over all tokens */
        for (int32_t h = 0; h < H; h++) {
            mt_matrix kb = head_matrix(&l->wk_b, h);
            for (size_t t = 0; t < T; t++)
                memcpy(gin + t * nope, q + (t * H + h) * qk, (size_t)nope * sizeof(float));
            mt_matmul(&kb, gin, n_tok, gout, pool);
            for (size_t t = 0; t < T; t++) {
                float *dst = qabs + (t * H + h) * w;
                memcpy(dst, gout + t * lora, (size_t)lora * sizeof(float));
                memcpy(dst + lora, q + (t * H + h) * qk + nope, (size_t)rope * sizeof(float));
            }
        }
        mla_job job = {hp, qabs, kv, il, pos, lat, max_pos};
        mt_pool_run(pool, (int64_t)T * H, mla_heads, &job);
        for (int32_t h = 0; h < H; h++) {
            mt_matrix vb = head_matrix(&l->wv_b, h);
            for (size_t t = 0; t < T; t++)
                memcpy(gin + t * lora, lat + (t * H + h) * lora, (size_t)lora * sizeof(float));
            mt_matmul(&vb, gin, n_tok, gout, pool);
            for (size_t t = 0; t < T; t++)
                memcpy(o + (t * H + h) * dv, gout + t * dv, (size_t)dv * sizeof(float));
        }
    }
    if (rc == 0) mt_matmul(&l->wo, o, n_tok, out, pool);
    free(buf);
    return rc;
}

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
 * Files in the older layout (one attn_kv_b) cache every head's expanded
 * K_h = [Wkv_b c]_nope_h ; k_pe and V_h = [Wkv_b c]_v_h instead, as llama.cpp
 * does for them, each expanded once when its position is cached, and
 * attend as GQA (attn_gqa.c). kimi models skip RoPE (the rope slice is used
 * as it is) and k3 may gate the heads' output: out = Wo (concat_h(...) *
 * sigmoid(Wgate a)). Rows are stored as the cache's type. */
#include "model_internal.h"
#include "moontail/quant.h"
#include "moontail/vecops.h"

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
    mt_attend_work work;
    if (mt_attend_work_init(&work, j->max_pos + 1, w)) abort();
    for (int64_t task = begin; task < end; task++) {
        int64_t t = task / hp->n_head;
        const mt_kv_cache *kv = j->kv[t];
        const uint8_t *cache = mt_kv_layer_k(kv, j->il);
        /* the values are the c_kv part of the same rows */
        mt_attend_cached(kv->type, j->qa + task * w, cache, kv->k_row, w, cache, kv->k_row,
                         hp->kv_lora_rank, j->pos[t] + 1, hp->attn_scale, &work,
                         j->lat + task * hp->kv_lora_rank);
    }
    mt_attend_work_free(&work);
}

/* Matrix of expert/head e of a 3-D tensor. */
static mt_matrix head_matrix(const mt_experts *x, int32_t e) {
    mt_matrix m = x->m;
    m.data = (const char *)m.data + (size_t)e * x->expert_bytes;
    return m;
}

/* y_h = M_h x_h for every head h of a per-head 3-D tensor, all heads in one
 * parallel section. Row (t, h) of x starts at x + (t * H + h) * xs floats
 * (n_cols = M's columns long); its result goes to y + (t * H + h) * ys. */
static int per_head_matmul(const mt_experts *heads, int32_t H, const float *x, size_t xs, int64_t T,
                           float *y, size_t ys, mt_pool *pool, mt_error *err) {
    const int64_t n_cols = heads->m.n_cols, rows = T * H;
    const mt_type vt = quant_vec_dot_type(heads->m.type);
    const size_t rb = mt_type_row_size(vt, n_cols);
    mt_matrix *mats = calloc((size_t)H, sizeof *mats);
    mt_matmul_task *tasks = calloc((size_t)H, sizeof *tasks);
    float *packed = xs == (size_t)n_cols ? NULL : malloc((size_t)rows * n_cols * sizeof(float));
    uint8_t *xc = vt == MT_TYPE_F32 ? NULL : malloc((size_t)rows * rb);
    int rc = 0;
    if (!mats || !tasks || (xs != (size_t)n_cols && !packed) || (vt != MT_TYPE_F32 && !xc)) {
        rc = mt_error_set(err, "MLA attention: out of memory for %lld rows", (long long)rows);
        goto done;
    }
    const float *src = x;
    if (packed) {
        for (int64_t i = 0; i < rows; i++)
            memcpy(packed + i * n_cols, x + (size_t)i * xs, (size_t)n_cols * sizeof(float));
        src = packed;
    }
    const uint8_t *xv = (const uint8_t *)src;
    if (xc) {
        mt_convert_rows(vt, src, rows, n_cols, xc, pool);
        xv = xc;
    }
    for (int32_t h = 0; h < H; h++) {
        mats[h] = head_matrix(heads, h);
        tasks[h] = (mt_matmul_task){&mats[h], xv + (size_t)h * rb, (size_t)H * rb,
                                    T,        y + (size_t)h * ys,  (size_t)H * ys};
    }
    mt_matmul_tasks(tasks, H, pool);
done:
    free(mats), free(tasks), free(packed), free(xc);
    return rc;
}

/* Older layout: every token's heads expanded from its latent kt = [c ; k_pe]
 * (n_tok rows of kva), cached as GQA rows, then attended as GQA. */
static int mla_expanded(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                        const float *kva, float *q, const int32_t *pos, int32_t n_tok, float *o,
                        mt_pool *pool, mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const int32_t H = hp->n_head, nope = hp->qk_nope, rope = hp->qk_rope, dv = hp->v_head_dim;
    const int32_t lora = hp->kv_lora_rank, w = lora + rope, qk = nope + rope;
    const size_t T = (size_t)n_tok;
    float *c = malloc(T * lora * sizeof(float));
    float *kvb = malloc(T * H * (nope + dv) * sizeof(float));
    float *K = malloc((size_t)H * qk * sizeof(float)), *V = malloc((size_t)H * dv * sizeof(float));
    int rc = 0;
    if (!c || !kvb || !K || !V) {
        rc = mt_error_set(err, "MLA attention: out of memory for %d tokens", n_tok);
        goto done;
    }
    for (size_t t = 0; t < T; t++) memcpy(c + t * lora, kva + t * w, lora * sizeof(float));
    mt_matmul(&l->wkv_b, c, n_tok, kvb, pool);
    const mt_gqa_shape sh = {H, H, qk, dv, hp->attn_scale};
    for (size_t t = 0; t < T; t++) {
        for (int32_t h = 0; h < H; h++) {
            const float *row = kvb + (t * H + h) * (nope + dv);
            memcpy(K + (size_t)h * qk, row, nope * sizeof(float));
            memcpy(K + (size_t)h * qk + nope, kva + t * w + lora, rope * sizeof(float));
            memcpy(V + (size_t)h * dv, row + nope, dv * sizeof(float));
        }
        mt_gqa_store(&sh, kv[t], il, pos[t], K, V);
    }
    mt_gqa_attend(&sh, kv, il, pos, n_tok, q, o, pool);
done:
    free(c), free(kvb), free(K), free(V);
    return rc;
}

int mt_attn_mla(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const int32_t H = hp->n_head, nope = hp->qk_nope, rope = hp->qk_rope, dv = hp->v_head_dim;
    const int32_t lora = hp->kv_lora_rank, w = lora + rope, qk = nope + rope;
    const size_t T = (size_t)n_tok;
    const size_t n_qa = hp->q_lora_rank > 0 ? T * hp->q_lora_rank : 0;
    const size_t n_gate = l->attn_gate.data ? T * (size_t)l->attn_gate.n_rows : 0;
    size_t total = n_qa + T * H * qk + T * w + T * H * w + T * H * lora + T * H * dv + n_gate;
    float *buf = malloc(total * sizeof(float));
    if (!buf) return mt_error_set(err, "MLA attention: out of memory for %d tokens", n_tok);
    float *qa = buf, *q = qa + n_qa, *kva = q + T * H * qk, *qabs = kva + T * w,
          *lat = qabs + T * H * w, *o = lat + T * H * lora, *gate = o + T * H * dv;
    int rc = 0;

    /* every product of the layer input a in one section: the query (or its
     * down-projection), the latent kv and (k3) the output gate */
    const mt_matrix *in[3] = {hp->q_lora_rank > 0 ? &l->wq_a : &l->wq, &l->wkv_a, &l->attn_gate};
    float *const res[3] = {hp->q_lora_rank > 0 ? qa : q, kva, gate};
    mt_matmul_many(in, res, n_gate ? 3 : 2, a, n_tok, pool);
    if (hp->q_lora_rank > 0) {
        for (size_t t = 0; t < T; t++)
            mt_rmsnorm(qa + t * hp->q_lora_rank, l->q_a_norm, hp->q_lora_rank, hp->eps,
                       qa + t * hp->q_lora_rank);
        mt_matmul(&l->wq_b, qa, n_tok, q, pool);
    }

    int32_t max_pos = 0;
    for (size_t t = 0; t < T; t++) {
        if (pos[t] > max_pos) max_pos = pos[t];
        float *kt = kva + t * w;
        mt_rmsnorm(kt, l->kv_a_norm, lora, hp->eps, kt);
        if (!hp->mla_nope) { /* kimi never rotates the rope slice */
            float cs[512], sn[512];
            mt_rope_table(hp, NULL, pos[t], cs, sn);
            mt_rope_rotate(hp, cs, sn, kt + lora, rope, 1);
            mt_rope_rotate(hp, cs, sn, q + t * H * qk + nope, qk, H); /* rope slice of each head */
        }
        if (l->mla_absorbed)
            mt_kv_store(kv[t]->type, kt, w,
                        mt_kv_layer_k(kv[t], il) + (size_t)pos[t] * kv[t]->k_row);
    }

    if (!l->mla_absorbed) {
        rc = mla_expanded(m, l, kv, il, kva, q, pos, n_tok, o, pool, err);
    } else {
        /* q~_h = Wk_b[h] q_nope_h for all heads at once, then append q_pe_h */
        rc = per_head_matmul(&l->wk_b, H, q, (size_t)qk, n_tok, qabs, (size_t)w, pool, err);
        for (size_t i = 0; rc == 0 && i < T * H; i++)
            memcpy(qabs + i * w + lora, q + i * qk + nope, (size_t)rope * sizeof(float));
        if (rc == 0) {
            mla_job job = {hp, qabs, kv, il, pos, lat, max_pos};
            mt_pool_run(pool, (int64_t)T * H, mla_heads, &job);
            /* o_h = Wv_b[h] lat_h, all heads at once */
            rc = per_head_matmul(&l->wv_b, H, lat, (size_t)lora, n_tok, o, (size_t)dv, pool, err);
        }
    }
    if (rc == 0 && n_gate) { /* k3: o *= sigmoid(attn_gate . a) */
        mt_vec_sigmoid(gate, gate, (int64_t)n_gate);
        for (size_t i = 0; i < n_gate; i++) o[i] *= gate[i];
    }
    if (rc == 0) mt_matmul(&l->wo, o, n_tok, out, pool);
    free(buf);
    return rc;
}

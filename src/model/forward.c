/* forward.c - the forward pass: embeddings, "run layers [a, b) on these
 * hidden states", and the output head. Local generation and (later) every
 * distributed stage call exactly these functions.
 *
 * Per layer (all four architectures):
 *   h  = x + Attn(rmsnorm(x, attn_norm))
 *   x' = h + FFN(rmsnorm(h, ffn_norm))     FFN = dense SwiGLU or MoE */
#include "model_internal.h"

#include <string.h>

int mt_model_embed(const mt_model *m, const int32_t *tokens, int32_t n_tok, float *hidden,
                   mt_error *err) {
    if (!m->has_head)
        return mt_error_set(err,
                            "%s is a shard without the head (embeddings); the requester"
                            " holds it",
                            m->gguf->path);
    for (int32_t t = 0; t < n_tok; t++) {
        if (tokens[t] < 0 || tokens[t] >= m->hp.n_vocab)
            return mt_error_set(err, "token id %d at index %d is outside the vocabulary [0, %d)",
                                tokens[t], t, m->hp.n_vocab);
        mt_matrix_get_row(&m->tok_embd, tokens[t], hidden + (size_t)t * m->hp.n_embd);
    }
    return 0;
}

static int check_positions(mt_kv_cache *const *kv, const int32_t *pos, int32_t n_tok, int32_t a,
                           int32_t b, mt_error *err) {
    for (int32_t t = 0; t < n_tok; t++) {
        if (!kv[t] || a < kv[t]->layer_begin || b > kv[t]->layer_end)
            return mt_error_set(
                err, "token %d: layers [%d, %d) are not covered by its session's cache", t, a, b);
        if (pos[t] < 0 || pos[t] >= kv[t]->n_ctx)
            return mt_error_set(err,
                                "position %d of token %d is outside the context [0, %d); start a"
                                " new session or use a larger context",
                                pos[t], t, kv[t]->n_ctx);
    }
    return 0;
}

int mt_model_forward_batch(const mt_model *m, mt_kv_cache *const *kv, int32_t a, int32_t b,
                           const int32_t *pos, int32_t n_tok, float *hidden,
                           const mt_expert_backend *experts, mt_pool *pool, mt_error *err) {
    const mt_hparams *hp = &m->hp;
    if (n_tok <= 0) return mt_error_set(err, "forward: no tokens given");
    if (a > b || a < m->layer_begin || b > m->layer_end || !m->has_attention)
        return mt_error_set(err, "%s holds %s of layers [%d, %d); layers [%d, %d) were asked for",
                            m->gguf->path, m->has_attention ? "the attention" : "no attention part",
                            m->layer_begin, m->layer_end, a, b);
    if (check_positions(kv, pos, n_tok, a, b, err)) return -1;
    const size_t E = (size_t)hp->n_embd, T = (size_t)n_tok;
    float *x_norm = malloc(T * E * sizeof(float));
    float *out = malloc(T * E * sizeof(float));
    int rc = 0;
    if (!x_norm || !out) {
        rc = mt_error_set(err, "forward: out of memory for %d tokens", n_tok);
        goto done;
    }
    for (int32_t il = a; il < b && rc == 0; il++) {
        const mt_layer *l = &m->layers[il];
        for (size_t t = 0; t < T; t++)
            mt_rmsnorm(hidden + t * E, l->attn_norm, (int64_t)E, hp->eps, x_norm + t * E);
        rc = hp->arch == MT_ARCH_DEEPSEEK2
                 ? mt_attn_mla(m, l, kv, il, pos, n_tok, x_norm, out, pool, err)
                 : mt_attn_gqa(m, l, kv, il, pos, n_tok, x_norm, out, pool, err);
        if (rc) break;
        for (size_t i = 0; i < T * E; i++) hidden[i] += out[i];

        for (size_t t = 0; t < T; t++)
            mt_rmsnorm(hidden + t * E, l->ffn_norm, (int64_t)E, hp->eps, x_norm + t * E);
        rc = l->is_moe ? mt_ffn_moe(m, l, il, n_tok, x_norm, out, experts, pool, err)
                       : mt_ffn_dense(&l->ffn_gate, &l->ffn_up, &l->ffn_down, n_tok, x_norm, out,
                                      pool, err);
        if (rc) break;
        for (size_t i = 0; i < T * E; i++) hidden[i] += out[i];
    }
done:
    free(x_norm);
    free(out);
    return rc;
}

int mt_model_forward_layers(const mt_model *m, mt_kv_cache *kv, int32_t a, int32_t b,
                            const int32_t *pos, int32_t n_tok, float *hidden,
                            const mt_expert_backend *experts, mt_pool *pool, mt_error *err) {
    if (n_tok <= 0) return mt_error_set(err, "forward: no tokens given");
    mt_kv_cache **kvs = malloc((size_t)n_tok * sizeof *kvs);
    if (!kvs) return mt_error_set(err, "forward: out of memory");
    for (int32_t t = 0; t < n_tok; t++) kvs[t] = kv;
    int rc = mt_model_forward_batch(m, kvs, a, b, pos, n_tok, hidden, experts, pool, err);
    free(kvs);
    return rc;
}

void mt_model_head(const mt_model *m, const float *hidden, int32_t n_tok, float *logits,
                   mt_pool *pool) {
    const size_t E = (size_t)m->hp.n_embd;
    float *x = malloc((size_t)n_tok * E * sizeof(float));
    if (!x) abort(); /* n_tok * n_embd floats; the logits buffer is far larger */
    for (int32_t t = 0; t < n_tok; t++)
        mt_rmsnorm(hidden + t * E, m->output_norm, (int64_t)E, m->hp.eps, x + t * E);
    mt_matmul(&m->output, x, n_tok, logits, pool);
    free(x);
}

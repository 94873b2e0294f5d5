/* session.c - local evaluation of one sequence: embed -> all layers -> head,
 * in micro-batches, with the KV cache carried between calls. */
#include "moontail/session.h"

#include <stdlib.h>
#include <string.h>

mt_session *mt_session_new(const mt_model *m, int32_t n_ctx, mt_kv_type kv_type, int n_threads,
                           mt_error *err) {
    mt_session *s = calloc(1, sizeof *s);
    if (!s) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    s->model = m;
    s->kv = mt_kv_cache_new(m, 0, m->hp.n_layer, n_ctx, kv_type, err);
    s->pool = s->kv ? mt_pool_create(n_threads) : NULL;
    if (!s->kv || !s->pool) {
        if (s->kv && !s->pool) mt_error_set(err, "cannot start %d worker threads", n_threads);
        mt_session_free(s);
        return NULL;
    }
    return s;
}

void mt_session_free(mt_session *s) {
    if (!s) return;
    mt_kv_cache_free(s->kv);
    mt_pool_free(s->pool);
    free(s);
}

int mt_session_eval(mt_session *s, const int32_t *tokens, int32_t n, int32_t ubatch,
                    bool all_logits, float *logits, mt_error *err) {
    const mt_model *m = s->model;
    const size_t E = (size_t)m->hp.n_hidden, V = (size_t)m->hp.n_vocab;
    if (n <= 0) return mt_error_set(err, "nothing to evaluate: the token list is empty");
    if (s->n_past + n > s->kv->n_ctx)
        return mt_error_set(err,
                            "%d tokens after %d already in the context exceed its size %d; use a"
                            " larger --ctx",
                            n, s->n_past, s->kv->n_ctx);
    if (ubatch <= 0 || ubatch > n) ubatch = n;
    float *hidden = malloc((size_t)ubatch * E * sizeof(float));
    int32_t *pos = malloc((size_t)ubatch * sizeof(int32_t));
    int rc = 0;
    if (!hidden || !pos) rc = mt_error_set(err, "out of memory for a batch of %d", ubatch);
    for (int32_t b = 0; rc == 0 && b < n; b += ubatch) {
        int32_t nb = n - b < ubatch ? n - b : ubatch;
        for (int32_t i = 0; i < nb; i++) pos[i] = s->n_past + i;
        rc = mt_model_embed(m, tokens + b, nb, hidden, err);
        if (rc == 0)
            rc = mt_model_forward_layers(m, s->kv, 0, m->hp.n_layer, pos, nb, hidden, NULL, s->pool,
                                         err);
        if (rc) break;
        s->n_past += nb;
        if (all_logits) {
            mt_model_head(m, hidden, nb, logits + (size_t)b * V, s->pool);
        } else if (b + nb == n) {
            mt_model_head(m, hidden + (size_t)(nb - 1) * E, 1, logits, s->pool);
        }
    }
    free(hidden);
    free(pos);
    return rc;
}

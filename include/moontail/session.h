/* session.h - one sequence being evaluated locally: a model, its KV cache
 * for all layers, a thread pool, and how many positions are filled.
 * `moontail run`, `moontail eval` and the tests drive the model through it. */
#ifndef MOONTAIL_SESSION_H
#define MOONTAIL_SESSION_H

#include "moontail/model.h"

typedef struct mt_session {
    const mt_model *model;
    mt_kv_cache *kv;
    mt_pool *pool;
    int32_t n_past; /* positions [0, n_past) are in the cache */
} mt_session;

/* A cache of kv_type for n_ctx positions; n_threads <= 0: all CPUs. */
mt_session *mt_session_new(const mt_model *m, int32_t n_ctx, mt_kv_type kv_type, int n_threads,
                           mt_error *err);
void mt_session_free(mt_session *s);

/* Evaluates n tokens at positions n_past.. in micro-batches of at most
 * ubatch tokens (<= 0: all at once) and advances n_past. logits receives
 * (n, n_vocab) floats when all_logits, else only the last token's n_vocab.
 * Results are bit-identical whatever ubatch or the thread count. */
int mt_session_eval(mt_session *s, const int32_t *tokens, int32_t n, int32_t ubatch,
                    bool all_logits, float *logits, mt_error *err);

#endif

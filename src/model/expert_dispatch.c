/* expert_dispatch.c - forwards routed-expert rows to whoever holds each
 * expert and gathers the results in row order (see expert_dispatch.h). */
#include "moontail/expert_dispatch.h"

#include <stdlib.h>
#include <string.h>

int mt_expert_dispatch_init(mt_expert_dispatch *d, const mt_hparams *hp, mt_error *err) {
    memset(d, 0, sizeof *d);
    int32_t n_expert = hp->n_expert;
    if (n_expert <= 0) return mt_error_set(err, "expert dispatch: the model has no experts");
    d->n_expert = n_expert;
    d->n_embd = hp->n_embd;
    d->owner = malloc((size_t)n_expert * sizeof *d->owner);
    if (!d->owner) return mt_error_set(err, "out of memory");
    for (int32_t e = 0; e < n_expert; e++) d->owner[e] = -1;
    return 0;
}

void mt_expert_dispatch_free(mt_expert_dispatch *d) {
    free(d->owner);
    free(d->holders);
    memset(d, 0, sizeof *d);
}

int mt_expert_dispatch_add(mt_expert_dispatch *d, mt_expert_backend holder, const int32_t *ids,
                           int32_t n, mt_error *err) {
    mt_expert_backend *h = realloc(d->holders, (size_t)(d->n_holders + 1) * sizeof *h);
    if (!h) return mt_error_set(err, "out of memory");
    d->holders = h;
    int32_t k = d->n_holders;
    for (int32_t i = 0; i < (n < 0 ? d->n_expert : n); i++) {
        int32_t e = n < 0 ? i : ids[i];
        if (e < 0 || e >= d->n_expert)
            return mt_error_set(err, "expert dispatch: expert id %d is outside [0, %d)", e,
                                d->n_expert);
        if (n < 0 && d->owner[e] >= 0) continue;
        if (d->owner[e] >= 0)
            return mt_error_set(err, "expert dispatch: expert %d is already held by holder %d", e,
                                d->owner[e]);
        d->owner[e] = k;
    }
    d->holders[k] = holder;
    d->n_holders++;
    return 0;
}

int mt_expert_dispatch_add_model(mt_expert_dispatch *d, const mt_model *m, mt_error *err) {
    if (!m->has_experts || m->hp.n_expert != d->n_expert)
        return mt_error_set(err, "%s holds no routed experts of this model", m->gguf->path);
    int32_t *ids = malloc((size_t)d->n_expert * sizeof *ids), n = 0;
    if (!ids) return mt_error_set(err, "out of memory");
    for (int32_t e = 0; e < d->n_expert; e++)
        if (mt_model_expert_slot(m, e) >= 0) ids[n++] = e;
    mt_expert_backend b = {mt_model_run_experts, (void *)m, false}; /* uses the pool */
    int rc = mt_expert_dispatch_add(d, b, ids, n, err);
    free(ids);
    return rc;
}

int mt_expert_dispatch_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                           float *y, mt_pool *pool, mt_error *err) {
    const mt_expert_dispatch *d = ctx;
    const size_t E = (size_t)d->n_embd;
    for (int32_t r = 0; r < n; r++)
        if (ids[r] < 0 || ids[r] >= d->n_expert || d->owner[ids[r]] < 0)
            return mt_error_set(err, "layer %d: nobody holds expert %d", il, ids[r]);
    int rc = 0;
    int32_t *rows = malloc((size_t)n * sizeof *rows),
            *sub_ids = malloc((size_t)n * sizeof *sub_ids);
    float *sub_u = malloc((size_t)n * E * sizeof *sub_u),
          *sub_y = malloc((size_t)n * E * sizeof *sub_y);
    if (!rows || !sub_ids || !sub_u || !sub_y) {
        rc = mt_error_set(err, "expert dispatch: out of memory for %d rows", n);
        goto done;
    }
    for (int32_t h = 0; h < d->n_holders && rc == 0; h++) {
        int32_t k = 0;
        for (int32_t r = 0; r < n; r++)
            if (d->owner[ids[r]] == h) {
                rows[k] = r;
                sub_ids[k] = ids[r];
                memcpy(sub_u + (size_t)k * E, u + (size_t)r * E, E * sizeof(float));
                k++;
            }
        if (k == 0) continue;
        rc = d->holders[h].run(d->holders[h].ctx, il, k, sub_ids, sub_u, sub_y, pool, err);
        for (int32_t i = 0; rc == 0 && i < k; i++)
            memcpy(y + (size_t)rows[i] * E, sub_y + (size_t)i * E, E * sizeof(float));
    }
done:
    free(rows), free(sub_ids), free(sub_u), free(sub_y);
    return rc;
}

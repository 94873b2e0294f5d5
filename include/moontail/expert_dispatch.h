/* expert_dispatch.h - routed experts spread over several holders.
 *
 * A dispatcher is an mt_expert_backend that owns a table "expert id ->
 * holder" and forwards each holder the rows routed to its experts, then puts
 * the results back in row order. Holders can be local models (a paired
 * layer's own experts), expert shards in the same process, or remote expert
 * servers; since every row is computed exactly and the MoE layer sums in
 * top-k order itself, the logits are bit-identical whatever the split. */
#ifndef MOONTAIL_EXPERT_DISPATCH_H
#define MOONTAIL_EXPERT_DISPATCH_H

#include "moontail/model.h"

typedef struct mt_expert_dispatch {
    int32_t n_expert;
    int32_t n_embd; /* floats per row */
    int32_t *owner; /* (n_expert) index into holders, -1 = nobody */
    mt_expert_backend *holders;
    int32_t n_holders;
} mt_expert_dispatch;

/* An empty table for the experts of model hp (nobody holds anything yet). */
int mt_expert_dispatch_init(mt_expert_dispatch *d, const mt_hparams *hp, mt_error *err);
void mt_expert_dispatch_free(mt_expert_dispatch *d);

/* Adds a holder for experts ids[0..n) (n < 0: every expert not yet owned).
 * An id already owned by another holder is an error. */
int mt_expert_dispatch_add(mt_expert_dispatch *d, mt_expert_backend holder, const int32_t *ids,
                           int32_t n, mt_error *err);

/* Adds a loaded model or shard as a holder of the experts it holds. */
int mt_expert_dispatch_add_model(mt_expert_dispatch *d, const mt_model *m, mt_error *err);

/* mt_expert_backend run(): ctx is the mt_expert_dispatch. */
int mt_expert_dispatch_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                           float *y, mt_pool *pool, mt_error *err);

static inline mt_expert_backend mt_expert_dispatch_backend(mt_expert_dispatch *d) {
    mt_expert_backend b = {mt_expert_dispatch_run, d, false}; /* its local holders use the pool */
    return b;
}

#endif

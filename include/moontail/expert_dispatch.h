/* expert_dispatch.h - routed experts spread over several holders.
 *
 * A dispatcher is an mt_expert_backend that owns a table "(layer, expert)
 * -> holder" and forwards each holder the rows routed to its experts, then puts
 * the results back in row order. Holders can be local models (a paired
 * layer's own experts), expert shards in the same process, or remote expert
 * servers; since every row is computed exactly and the MoE layer sums in
 * top-k order itself, the logits are bit-identical whatever the split.
 *
 * Holders run side by side: when a call has rows for more than one holder,
 * each concurrent holder (mt_expert_backend.concurrent: a remote server
 * waiting on the network) runs on a thread of its own while the calling
 * thread runs the other (local) holders with the pool, then waits for all.
 * A holder's thread is started the first time it is needed and kept until
 * mt_expert_dispatch_free; a call hands it its rows through a mutex and a
 * condition variable. A call whose rows all go to one holder runs it on the
 * calling thread. Who computes a row never changes its bits. */
#ifndef MOONTAIL_EXPERT_DISPATCH_H
#define MOONTAIL_EXPERT_DISPATCH_H

#include "moontail/model.h"

typedef struct mt_expert_worker mt_expert_worker; /* a concurrent holder's thread */

typedef struct mt_expert_dispatch {
    int32_t n_expert, n_layer;
    int32_t n_embd; /* floats per row: the model's hp.n_embd_exp */
    int32_t *owner; /* (n_layer, n_expert) index into holders, -1 = nobody; expert fastest */
    mt_expert_backend *holders;
    mt_expert_worker **workers; /* (n_holders) NULL until that holder's thread is needed */
    int32_t n_holders;
} mt_expert_dispatch;

/* An empty table for the experts of model hp (nobody holds anything yet). */
int mt_expert_dispatch_init(mt_expert_dispatch *d, const mt_hparams *hp, mt_error *err);
/* Stops and joins the holders' threads and frees the table. */
void mt_expert_dispatch_free(mt_expert_dispatch *d);

/* Adds a holder for experts ids[0..n) (n < 0: every expert not yet owned)
 * of every layer. An (layer, expert) already owned by another holder is an
 * error. */
int mt_expert_dispatch_add(mt_expert_dispatch *d, mt_expert_backend holder, const int32_t *ids,
                           int32_t n, mt_error *err);
/* The same for layers [layer_begin, layer_end) only (a swarm expert server
 * may hold a rectangle: some layers x some experts). */
int mt_expert_dispatch_add_layers(mt_expert_dispatch *d, mt_expert_backend holder,
                                  int32_t layer_begin, int32_t layer_end, const int32_t *ids,
                                  int32_t n, mt_error *err);
/* The holder of expert e of layer il, or -1. */
int32_t mt_expert_dispatch_owner(const mt_expert_dispatch *d, int32_t il, int32_t e);

/* Adds a loaded model or shard as a holder of the experts it holds (in the
 * layers it holds). */
int mt_expert_dispatch_add_model(mt_expert_dispatch *d, const mt_model *m, mt_error *err);

/* mt_expert_backend run(): ctx is the mt_expert_dispatch. One caller at a
 * time: a dispatcher is not to be run from two threads at once (its
 * holders' threads serve one call at a time). The first failing holder, in
 * the order they were added, gives the error. */
int mt_expert_dispatch_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                           float *y, mt_pool *pool, mt_error *err);

static inline mt_expert_backend mt_expert_dispatch_backend(mt_expert_dispatch *d) {
    mt_expert_backend b = {mt_expert_dispatch_run, d, false}; /* its local holders use the pool */
    return b;
}

#endif

/* expert_dispatch.c - forwards routed-expert rows to whoever holds each
 * expert and gathers the results in row order, running concurrent holders
 * (remote servers) on threads of their own beside the local ones (see
 * expert_dispatch.h). */
#include "moontail/expert_dispatch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- a concurrent holder's thread ------------------------------------------------------ */

/* One call's work for a holder: its rows, contiguous in the call's scratch. */
typedef struct holder_job {
    int32_t il, n;
    const int32_t *ids; /* (n) */
    const float *u;     /* (n, n_embd_exp) */
    float *y;           /* (n, n_embd_exp) */
} holder_job;

struct mt_expert_worker {
    mt_expert_backend holder; /* a copy: the holders array may move when one is added */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t go;   /* the thread waits here for a job or stop */
    pthread_cond_t done; /* the caller waits here for the job's end */
    bool pending;        /* a job is posted and not finished (guarded by lock) */
    bool stop;           /* end the thread (guarded by lock) */
    holder_job job;      /* written by the caller while !pending */
    int rc;              /* the job's result, read by the caller once !pending */
    mt_error err;
};

static void *worker_main(void *arg) {
    mt_expert_worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->pending && !w->stop) pthread_cond_wait(&w->go, &w->lock);
        if (!w->pending) break; /* stop, nothing posted */
        holder_job j = w->job;
        pthread_mutex_unlock(&w->lock);
        /* a concurrent holder does not use the pool (model.h) */
        int rc = w->holder.run(w->holder.ctx, j.il, j.n, j.ids, j.u, j.y, NULL, &w->err);
        pthread_mutex_lock(&w->lock);
        w->rc = rc;
        w->pending = false;
        pthread_cond_signal(&w->done);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Starts a thread for holder; NULL when the system refuses one. */
static mt_expert_worker *worker_start(const mt_expert_backend *holder) {
    mt_expert_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->holder = *holder;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->go, NULL);
    pthread_cond_init(&w->done, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->go);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    return w;
}

static void worker_stop(mt_expert_worker *w) {
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->go);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->go);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

static void worker_post(mt_expert_worker *w, const holder_job *j) {
    pthread_mutex_lock(&w->lock);
    w->job = *j;
    w->rc = 0;
    w->pending = true;
    pthread_cond_signal(&w->go);
    pthread_mutex_unlock(&w->lock);
}

/* Waits for the posted job to finish; its result. */
static int worker_wait(mt_expert_worker *w) {
    pthread_mutex_lock(&w->lock);
    while (w->pending) pthread_cond_wait(&w->done, &w->lock);
    int rc = w->rc;
    pthread_mutex_unlock(&w->lock);
    return rc;
}

/* ---- the table ------------------------------------------------------------------------- */

int mt_expert_dispatch_init(mt_expert_dispatch *d, const mt_hparams *hp, mt_error *err) {
    memset(d, 0, sizeof *d);
    int32_t n_expert = hp->n_expert;
    if (n_expert <= 0) return mt_error_set(err, "expert dispatch: the model has no experts");
    d->n_expert = n_expert;
    d->n_layer = hp->n_layer;
    d->n_embd = hp->n_embd_exp; /* latent experts read and write narrower rows */
    size_t cells = (size_t)d->n_layer * (size_t)n_expert;
    d->owner = malloc(cells * sizeof *d->owner);
    if (!d->owner) return mt_error_set(err, "out of memory");
    for (size_t c = 0; c < cells; c++) d->owner[c] = -1;
    return 0;
}

void mt_expert_dispatch_free(mt_expert_dispatch *d) {
    for (int32_t h = 0; d->workers && h < d->n_holders; h++)
        if (d->workers[h]) worker_stop(d->workers[h]);
    free(d->workers);
    free(d->owner);
    free(d->holders);
    memset(d, 0, sizeof *d);
}

int mt_expert_dispatch_add_layers(mt_expert_dispatch *d, mt_expert_backend holder,
                                  int32_t layer_begin, int32_t layer_end, const int32_t *ids,
                                  int32_t n, mt_error *err) {
    if (layer_begin < 0 || layer_end > d->n_layer || layer_begin > layer_end)
        return mt_error_set(err, "expert dispatch: layers [%d, %d) are outside [0, %d)",
                            layer_begin, layer_end, d->n_layer);
    mt_expert_backend *h = realloc(d->holders, (size_t)(d->n_holders + 1) * sizeof *h);
    if (!h) return mt_error_set(err, "out of memory");
    d->holders = h;
    mt_expert_worker **w = realloc(d->workers, (size_t)(d->n_holders + 1) * sizeof *w);
    if (!w) return mt_error_set(err, "out of memory");
    d->workers = w;
    int32_t k = d->n_holders;
    d->workers[k] = NULL;
    /* check everything first, so that a refused holder leaves the table as it was */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < (n < 0 ? d->n_expert : n); i++) {
            int32_t e = n < 0 ? i : ids[i];
            if (e < 0 || e >= d->n_expert)
                return mt_error_set(err, "expert dispatch: expert id %d is outside [0, %d)", e,
                                    d->n_expert);
            for (int32_t il = layer_begin; il < layer_end; il++) {
                int32_t *o = &d->owner[(size_t)il * (size_t)d->n_expert + (size_t)e];
                if (n < 0 && *o >= 0 && *o != k) continue;
                if (*o >= 0 && *o != k)
                    return mt_error_set(err,
                                        "expert dispatch: expert %d of layer %d is already held"
                                        " by holder %d",
                                        e, il, *o);
                if (pass == 1) *o = k;
            }
        }
    d->holders[k] = holder;
    d->n_holders++;
    return 0;
}

int mt_expert_dispatch_add(mt_expert_dispatch *d, mt_expert_backend holder, const int32_t *ids,
                           int32_t n, mt_error *err) {
    return mt_expert_dispatch_add_layers(d, holder, 0, d->n_layer, ids, n, err);
}

int32_t mt_expert_dispatch_owner(const mt_expert_dispatch *d, int32_t il, int32_t e) {
    if (il < 0 || il >= d->n_layer || e < 0 || e >= d->n_expert) return -1;
    return d->owner[(size_t)il * (size_t)d->n_expert + (size_t)e];
}

int mt_expert_dispatch_add_model(mt_expert_dispatch *d, const mt_model *m, mt_error *err) {
    if (!m->has_experts || m->hp.n_expert != d->n_expert)
        return mt_error_set(err, "%s holds no routed experts of this model", m->gguf->path);
    int32_t *ids = malloc((size_t)d->n_expert * sizeof *ids), n = 0;
    if (!ids) return mt_error_set(err, "out of memory");
    for (int32_t e = 0; e < d->n_expert; e++)
        if (mt_model_expert_slot(m, e) >= 0) ids[n++] = e;
    mt_expert_backend b = {mt_model_run_experts, (void *)m, false}; /* uses the pool */
    int rc = mt_expert_dispatch_add_layers(d, b, m->layer_begin, m->layer_end, ids, n, err);
    free(ids);
    return rc;
}

/* ---- a call ---------------------------------------------------------------------------- */

/* Rows of several holders: gathers each holder's rows into one block
 * (holder h's are rows [at[h], at[h + 1]) of the scratch, in row order),
 * starts the concurrent holders on their threads, runs the others here,
 * waits for all and scatters the results back. */
static int run_split(mt_expert_dispatch *d, int32_t il, int32_t n, const int32_t *ids,
                     const float *u, float *y, mt_pool *pool, mt_error *err) {
    const size_t E = (size_t)d->n_embd;
    const int32_t H = d->n_holders;
    int rc = 0;
    int32_t *at = calloc(2 * (size_t)H + 1, sizeof *at), *fill = at ? at + H + 1 : NULL,
            *rows = malloc((size_t)n * sizeof *rows),
            *sub_ids = malloc((size_t)n * sizeof *sub_ids);
    float *sub_u = malloc((size_t)n * E * sizeof *sub_u),
          *sub_y = malloc((size_t)n * E * sizeof *sub_y);
    bool *posted = calloc((size_t)H, sizeof *posted);
    if (!at || !rows || !sub_ids || !sub_u || !sub_y || !posted) {
        rc = mt_error_set(err, "expert dispatch: out of memory for %d rows", n);
        goto done;
    }
    const int32_t *owner = d->owner + (size_t)il * (size_t)d->n_expert; /* this layer's */
    for (int32_t r = 0; r < n; r++) at[owner[ids[r]] + 1]++;
    for (int32_t h = 0; h < H; h++) at[h + 1] += at[h];
    memcpy(fill, at, (size_t)H * sizeof *fill); /* the next free row of each block */
    for (int32_t r = 0; r < n; r++) {
        int32_t k = fill[owner[ids[r]]]++;
        rows[k] = r;
        sub_ids[k] = ids[r];
        memcpy(sub_u + (size_t)k * E, u + (size_t)r * E, E * sizeof(float));
    }
    /* the concurrent holders first, so that they overlap the local ones */
    for (int32_t h = 0; h < H; h++) {
        if (at[h + 1] == at[h] || !d->holders[h].concurrent) continue;
        if (!d->workers[h]) d->workers[h] = worker_start(&d->holders[h]);
        if (!d->workers[h]) continue; /* no thread to be had: it runs here below */
        holder_job j = {il, at[h + 1] - at[h], sub_ids + at[h], sub_u + (size_t)at[h] * E,
                        sub_y + (size_t)at[h] * E};
        worker_post(d->workers[h], &j);
        posted[h] = true;
    }
    int32_t failed = -1; /* the first holder (in holder order) that failed */
    mt_error here = {{0}};
    for (int32_t h = 0; h < H && failed < 0; h++) {
        if (at[h + 1] == at[h] || posted[h]) continue;
        if (d->holders[h].run(d->holders[h].ctx, il, at[h + 1] - at[h], sub_ids + at[h],
                              sub_u + (size_t)at[h] * E, sub_y + (size_t)at[h] * E, pool, &here))
            failed = h;
    }
    /* every thread must be done with the scratch before it is freed */
    for (int32_t h = 0; h < H; h++) {
        if (!posted[h] || worker_wait(d->workers[h]) == 0 || (failed >= 0 && failed < h)) continue;
        failed = h;
        here = d->workers[h]->err;
    }
    if (failed >= 0) {
        rc = -1;
        if (err) *err = here;
        goto done;
    }
    for (int32_t k = 0; k < n; k++)
        memcpy(y + (size_t)rows[k] * E, sub_y + (size_t)k * E, E * sizeof(float));
done:
    free(at), free(rows), free(sub_ids), free(sub_u), free(sub_y), free(posted);
    return rc;
}

int mt_expert_dispatch_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                           float *y, mt_pool *pool, mt_error *err) {
    mt_expert_dispatch *d = ctx;
    int32_t first = -1; /* the holder of row 0, and whether every row has that holder */
    bool one_holder = true;
    if (il < 0 || il >= d->n_layer)
        return mt_error_set(err, "expert dispatch: layer %d is outside [0, %d)", il, d->n_layer);
    const int32_t *owner = d->owner + (size_t)il * (size_t)d->n_expert; /* this layer's */
    for (int32_t r = 0; r < n; r++) {
        if (ids[r] < 0 || ids[r] >= d->n_expert || owner[ids[r]] < 0)
            return mt_error_set(err, "layer %d: nobody holds expert %d", il, ids[r]);
        if (r == 0) first = owner[ids[r]];
        one_holder &= owner[ids[r]] == first;
    }
    if (n <= 0) return 0;
    if (one_holder) /* no copies, no handoff */
        return d->holders[first].run(d->holders[first].ctx, il, n, ids, u, y, pool, err);
    return run_split(d, il, n, ids, u, y, pool, err);
}

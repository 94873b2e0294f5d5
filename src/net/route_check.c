/* route_check.c - one spot-check of a route's stage (route_check.h): a
 * detached thread that owns the connection to the checker and runs the
 * shadow session's calls, and the route's side that hands it rows and
 * compares outputs. The check object is shared by the two sides and freed by
 * whichever lets go of it last. */
#include "route_check.h"
#include "moontail/clock.h"
#include "moontail/remote.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum job_state { JOB_NONE, JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

struct route_check {
    pthread_mutex_t lock;
    pthread_cond_t cv; /* CLOCK_MONOTONIC: job done, job queued, or quit */
    int refs;          /* the route's session and the thread */
    route_check_config cfg;
    mt_keys keys;
    uint64_t shadow; /* the shadow session's id on the checker */
    job_state state;
    bool quit;    /* the route let go */
    bool failed;  /* a connect or call failed: nothing more is checked */
    bool started; /* rows were sent once: the checker holds a session */
    char why[256];
    int32_t n, cap;
    bool speculative; /* the job's pass is MT_PROTO_FLAG_SPECULATIVE */
    int32_t *pos;     /* (cap) */
    float *rows;      /* (cap, width) the input rows, then the checker's output */
    float *main;      /* (cap, width) the checked stage's output (route side only) */
    int32_t n_main;   /* rows kept in main for the job (0: none) */
};

static void release(route_check *k) {
    pthread_mutex_lock(&k->lock);
    bool last = --k->refs == 0;
    pthread_mutex_unlock(&k->lock);
    if (!last) return;
    mt_keys_wipe(&k->keys);
    pthread_mutex_destroy(&k->lock);
    pthread_cond_destroy(&k->cv);
    free(k->pos);
    free(k->rows);
    free(k->main);
    free(k);
}

/* ---- the checker's thread ----------------------------------------------------------- */

static void *check_thread(void *arg) {
    route_check *k = arg;
    const route_check_config *c = &k->cfg;
    mt_remote *rem = NULL;
    pthread_mutex_lock(&k->lock);
    for (;;) {
        while (!k->quit && k->state != JOB_QUEUED) pthread_cond_wait(&k->cv, &k->lock);
        if (k->quit) break;
        k->state = JOB_RUNNING;
        pthread_mutex_unlock(&k->lock);
        /* the route does not touch pos/rows while the job runs */
        mt_error err = {{0}};
        uint32_t code = 0;
        int rc = 0;
        if (!rem)
            rem = mt_remote_connect(c->peer.addr, c->peer.pk, &k->keys, c->timeout_ms,
                                    c->call_timeout_ms, &err);
        if (!rem) {
            rc = -1;
        } else if (mt_proto_hidden_width(mt_remote_info(rem)) != c->width) {
            rc = mt_error_set(&err,
                              "it holds a model whose hidden states are %d floats wide,"
                              " not %d",
                              mt_proto_hidden_width(mt_remote_info(rem)), c->width);
        } else if (mt_remote_info(rem)->layer_begin > c->layer_begin ||
                   mt_remote_info(rem)->layer_end < c->layer_end ||
                   !mt_remote_info(rem)->attention) {
            rc = mt_error_set(&err, "it does not hold the attention part of layers [%d, %d)",
                              c->layer_begin, c->layer_end);
        } else {
            rc = mt_remote_stage_forward_as(rem, k->shadow, c->layer_begin, c->layer_end,
                                            k->speculative, k->pos, k->n, k->rows, c->wire, &code,
                                            &err);
        }
        pthread_mutex_lock(&k->lock);
        k->state = JOB_DONE;
        if (rc) {
            k->failed = true;
            snprintf(k->why, sizeof k->why, "%.255s", err.msg);
        }
        pthread_cond_broadcast(&k->cv);
        if (rc) break;
    }
    bool end_session = k->started && !k->failed;
    pthread_mutex_unlock(&k->lock);
    if (rem && end_session) mt_remote_session_end(rem, k->shadow, NULL, NULL);
    mt_remote_close(rem);
    release(k);
    return NULL;
}

route_check *route_check_start(const route_check_config *cfg, mt_error *err) {
    route_check *k = calloc(1, sizeof *k);
    if (!k) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    k->cfg = *cfg;
    k->keys = *cfg->keys;
    k->cfg.keys = NULL;
    k->refs = 2;
    randombytes_buf(&k->shadow, sizeof k->shadow);
    pthread_mutex_init(&k->lock, NULL);
    mt_cond_init_mono(&k->cv);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, check_thread, k);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        k->refs = 1;
        release(k);
        mt_error_set(err, "cannot start a thread for the check on %s", cfg->peer.addr);
        return NULL;
    }
    return k;
}

/* ---- the route's side ---------------------------------------------------------------- */

void route_check_send(route_check *k, const int32_t *pos, int32_t n, const float *rows,
                      bool speculative) {
    const size_t E = (size_t)k->cfg.width;
    pthread_mutex_lock(&k->lock);
    k->n_main = 0;
    if (k->failed || k->quit || k->state == JOB_QUEUED || k->state == JOB_RUNNING) {
        pthread_mutex_unlock(&k->lock);
        return;
    }
    if (n > k->cap) {
        int32_t *p = realloc(k->pos, (size_t)n * sizeof *p);
        if (p) k->pos = p;
        float *r = p ? realloc(k->rows, (size_t)n * E * sizeof *r) : NULL;
        if (r) k->rows = r;
        float *m = r ? realloc(k->main, (size_t)n * E * sizeof *m) : NULL;
        if (m) k->main = m;
        if (!m) {
            k->failed = true;
            snprintf(k->why, sizeof k->why, "out of memory for %d rows", n);
            pthread_mutex_unlock(&k->lock);
            return;
        }
        k->cap = n;
    }
    memcpy(k->pos, pos, (size_t)n * sizeof *pos);
    memcpy(k->rows, rows, (size_t)n * E * sizeof *rows);
    k->n = n;
    k->speculative = speculative;
    k->state = JOB_QUEUED;
    k->started = true;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->lock);
}

void route_check_keep_main(route_check *k, const float *rows) {
    pthread_mutex_lock(&k->lock);
    bool sent = k->state != JOB_NONE && !k->quit && k->main;
    pthread_mutex_unlock(&k->lock);
    /* main belongs to this side: only the cap (changed in send, on this side) guards it */
    if (sent) {
        memcpy(k->main, rows, (size_t)k->n * (size_t)k->cfg.width * sizeof *rows);
        k->n_main = k->n;
    }
}

static void hash_hex(const float *rows, size_t count, char out[65]) {
    uint8_t h[32];
    crypto_generichash(h, sizeof h, (const uint8_t *)rows, count * sizeof *rows, NULL, 0);
    sodium_bin2hex(out, 65, h, sizeof h);
}

route_check_outcome route_check_wait(route_check *k, double deadline_ms, route_check_result *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&k->lock);
    while (!k->failed && (k->state == JOB_QUEUED || k->state == JOB_RUNNING)) {
        double left = deadline_ms - mt_mono_ms_frac();
        if (left <= 0) break;
        struct timespec ts = mt_mono_after_ms((int64_t)left + 1);
        mt_cond_wait_until(&k->cv, &k->lock, &ts);
    }
    route_check_outcome o = ROUTE_CHECK_LOST;
    if (k->failed)
        snprintf(out->why, sizeof out->why, "%.255s", k->why);
    else if (k->state != JOB_DONE)
        snprintf(out->why, sizeof out->why, "it did not answer before the route's deadline");
    else if (k->n_main != k->n)
        snprintf(out->why, sizeof out->why, "the checked stage's output was not kept");
    else
        o = ROUTE_CHECK_SAME;
    pthread_mutex_unlock(&k->lock);
    if (o == ROUTE_CHECK_LOST) return o;
    const size_t count = (size_t)k->n * (size_t)k->cfg.width;
    if (memcmp(k->main, k->rows, count * sizeof(float)) == 0) return ROUTE_CHECK_SAME;
    hash_hex(k->main, count, out->main_hash);
    hash_hex(k->rows, count, out->check_hash);
    return ROUTE_CHECK_DIFFER;
}

void route_check_end(route_check *k) {
    if (!k) return;
    pthread_mutex_lock(&k->lock);
    k->quit = true;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->lock);
    release(k);
}

const char *route_check_addr(const route_check *k) {
    return k->cfg.peer.addr;
}

const uint8_t *route_check_pk(const route_check *k) {
    return k->cfg.peer.pk;
}

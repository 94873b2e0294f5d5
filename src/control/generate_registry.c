/* generate_registry.c - the generation loop's backend (generate.h) for a
 * registry's cell or swarm: `moontail prompt`, `demo`, the shell and `serve
 * --registry` generate through the registry's routes with the requester's
 * failover (requester.h): a node lost mid-sequence costs a replay, not the
 * sequence.
 *
 * Each slot has its own requester, hence its own route and session, so
 * nodes see several sessions at once and batch them. The first requester
 * is opened at start (it fetches the head shard, whose GGUF holds the
 * tokenizer, and proves the registry answers); the others open when their
 * slot begins its first sequence, one at a time (they share the key file
 * and the shard cache). After each sequence the tokens it used are reported
 * to the registry for the account's metering. */
#include "moontail/log.h"
#include "moontail/requester.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct reg_backend {
    mt_gen_backend b;
    mt_requester_config cfg; /* strings below */
    char *registry, *token, *key_path, *cache_dir, *who;
    mt_requester *first; /* opened at start; slot 0 borrows it */
    pthread_mutex_t open_mu;
} reg_backend;

typedef struct reg_slot {
    reg_backend *rb;
    mt_requester *q; /* NULL until the slot's first sequence */
} reg_slot;

static void *reg_slot_open(mt_gen_backend *b, int index, mt_error *err) {
    reg_backend *rb = b->impl;
    reg_slot *rs = calloc(1, sizeof *rs);
    if (!rs) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    rs->rb = rb;
    if (index == 0) rs->q = rb->first;
    return rs;
}

static void reg_slot_close(mt_gen_backend *b, void *slot) {
    reg_backend *rb = b->impl;
    reg_slot *rs = slot;
    if (!rs) return;
    if (rs->q != rb->first) mt_requester_close(rs->q);
    free(rs);
}

static int reg_begin(void *slot, int32_t n_ctx, mt_error *err) {
    reg_slot *rs = slot;
    if (!rs->q) {
        pthread_mutex_lock(&rs->rb->open_mu);
        rs->q = mt_requester_open(&rs->rb->cfg, err);
        pthread_mutex_unlock(&rs->rb->open_mu);
        if (!rs->q) {
            mt_error_prefix(err, "cannot get a route from the registry %s", rs->rb->registry);
            return -1;
        }
    }
    return mt_requester_begin(rs->q, n_ctx, err);
}

static int reg_eval(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    return mt_requester_eval(((reg_slot *)slot)->q, ids, n, logits, err);
}

static int reg_eval_all(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    return mt_requester_eval_speculative(((reg_slot *)slot)->q, ids, n, logits, err);
}

static int reg_rewind(void *slot, int32_t n_past, mt_error *err) {
    return mt_requester_rewind(((reg_slot *)slot)->q, n_past, err);
}

static void reg_end(void *slot, int64_t evaluated) {
    reg_slot *rs = slot;
    if (!rs->q || evaluated <= 0) return;
    mt_error e = {{0}};
    if (mt_requester_report_usage(rs->q, evaluated, &e) && !rs->rb->cfg.quiet)
        mt_log(MT_LOG_WARN, rs->rb->who, "could not report %lld tokens of usage to %s: %s",
               (long long)evaluated, rs->rb->registry, e.msg);
}

static int reg_failovers(void *slot, double *recovery_ms) {
    reg_slot *rs = slot;
    *recovery_ms = 0;
    if (!rs->q) return 0;
    mt_requester_stats s;
    mt_requester_get_stats(rs->q, &s);
    *recovery_ms = s.total_recovery_ms;
    return s.failovers;
}

static void reg_destroy(mt_gen_backend *b) {
    if (!b) return;
    reg_backend *rb = b->impl;
    mt_requester_close(rb->first);
    free(rb->registry);
    free(rb->token);
    free(rb->key_path);
    free(rb->cache_dir);
    free(rb->who);
    pthread_mutex_destroy(&rb->open_mu);
    free(rb);
}

mt_gen_backend *mt_requester_backend(const mt_requester_config *cfg, const char *who,
                                     mt_error *err) {
    reg_backend *rb = calloc(1, sizeof *rb);
    if (!rb) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&rb->open_mu, NULL);
    rb->b = (mt_gen_backend){.kind = "registry",
                             .retry_may_succeed = true,
                             .slot_open = reg_slot_open,
                             .slot_close = reg_slot_close,
                             .begin = reg_begin,
                             .eval = reg_eval,
                             .eval_all = reg_eval_all,
                             .rewind = reg_rewind,
                             .end = reg_end,
                             .destroy = reg_destroy,
                             .impl = rb,
                             .failovers = reg_failovers};
    rb->cfg = *cfg;
    rb->cfg.registry = rb->registry = cfg->registry ? strdup(cfg->registry) : NULL;
    rb->cfg.token = rb->token = cfg->token ? strdup(cfg->token) : NULL;
    rb->cfg.key_path = rb->key_path = cfg->key_path ? strdup(cfg->key_path) : NULL;
    rb->cfg.cache_dir = rb->cache_dir = cfg->cache_dir ? strdup(cfg->cache_dir) : NULL;
    rb->who = strdup(who ? who : "moontail");
    if (!rb->who || !(rb->first = mt_requester_open(&rb->cfg, err))) {
        if (!rb->who)
            mt_error_set(err, "out of memory");
        else
            mt_error_prefix(err,
                            "cannot use the cell of the registry %s (check --registry, the token,"
                            " and that the cell has a route)",
                            cfg->registry ? cfg->registry : "(none)");
        reg_destroy(&rb->b);
        return NULL;
    }
    rb->b.model = mt_requester_head(rb->first);
    rb->b.n_vocab = rb->b.model->hp.n_vocab;
    rb->b.max_ctx = rb->b.model->hp.n_ctx_train > 0 ? rb->b.model->hp.n_ctx_train : 4096;
    return &rb->b;
}

mt_requester *mt_requester_of_slot(void *slot) {
    return ((reg_slot *)slot)->q;
}

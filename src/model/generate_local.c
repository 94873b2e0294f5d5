/* generate_local.c - the generation loop's backend (generate.h) for a model
 * computed in this process: `moontail run`, the shell and `serve --model`.
 *
 * One model, one thread pool, many slots: every slot keeps its own KV cache
 * (allocated per sequence for exactly the positions it may use), and
 * evaluations take turns on the model in arrival order (a ticket lock). The
 * loop evaluates a long prompt in micro-batches, each its own turn, so it
 * does not hold up the tokens of other slots for long. Slots numbered from
 * the backend's background_slots_from on (serve's batch slots) take a turn
 * only when no other slot waits (gen_turns.h). Results do not depend
 * on the turn order or the micro-batch size (docs/design.md invariant 1), so a
 * request's text is the same alone or in a crowd. */
#include "gen_turns.h"
#include "moontail/generate.h"
#include "moontail/session.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct local_backend {
    mt_gen_backend b;
    mt_model *model;
    mt_pool *pool; /* shared by all slots: only the slot whose turn it is uses it */
    mt_kv_type kv_type;
    gen_turns turns; /* whose evaluation runs on the model */
} local_backend;

typedef struct local_slot {
    local_backend *lb;
    mt_session s;    /* model, this request's KV cache, the shared pool, n_past */
    bool background; /* takes turns behind the other slots */
} local_slot;

/* ---- slots ---------------------------------------------------------------------------------- */

static void *local_slot_open(mt_gen_backend *b, int index, mt_error *err) {
    local_backend *lb = b->impl;
    local_slot *ls = calloc(1, sizeof *ls);
    if (!ls) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    ls->lb = lb;
    ls->background = b->background_slots_from > 0 && index >= b->background_slots_from;
    ls->s.model = lb->model;
    ls->s.pool = lb->pool;
    return ls;
}

static void local_slot_close(mt_gen_backend *b, void *slot) {
    (void)b;
    local_slot *ls = slot;
    if (!ls) return;
    mt_kv_cache_free(ls->s.kv);
    free(ls);
}

static int local_begin(void *slot, int32_t n_ctx, mt_error *err) {
    local_slot *ls = slot;
    mt_kv_cache_free(ls->s.kv);
    ls->s.n_past = 0;
    ls->s.kv =
        mt_kv_cache_new(ls->lb->model, 0, ls->lb->model->hp.n_layer, n_ctx, ls->lb->kv_type, err);
    return ls->s.kv ? 0 : -1;
}

/* A pass of n tokens; all_logits: every row, and snapshots of the KDA states after each
 * token so that local_rewind can go back inside the pass. */
static int local_pass(local_slot *ls, const int32_t *ids, int32_t n, bool all_logits, float *logits,
                      mt_error *err) {
    if (!ls->s.kv) return mt_error_set(err, "no sequence begun");
    if (mt_kv_snap_begin(ls->s.kv, ls->s.n_past, all_logits ? n : 0, err)) return -1;
    gen_turns_take(&ls->lb->turns, ls->background);
    int rc = mt_session_eval(&ls->s, ids, n, 0, all_logits, logits, err);
    gen_turns_give(&ls->lb->turns, ls->background);
    return rc ? -1 : 0;
}

static int local_eval(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    return local_pass(slot, ids, n, false, logits, err);
}

static int local_eval_all(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    return local_pass(slot, ids, n, true, logits, err);
}

static int local_rewind(void *slot, int32_t n_past, mt_error *err) {
    local_slot *ls = slot;
    if (!ls->s.kv) return mt_error_set(err, "no sequence begun");
    if (n_past > ls->s.n_past)
        return mt_error_set(err, "cannot rewind to %d tokens: the sequence has %d", n_past,
                            ls->s.n_past);
    if (mt_kv_rewind(ls->s.kv, n_past, err)) return -1;
    ls->s.n_past = n_past;
    return 0;
}

static void local_end(void *slot, int64_t evaluated) {
    (void)evaluated;
    local_slot *ls = slot;
    mt_kv_cache_free(ls->s.kv); /* the memory goes back between requests */
    ls->s.kv = NULL;
    ls->s.n_past = 0;
}

static void local_destroy(mt_gen_backend *b) {
    if (!b) return;
    local_backend *lb = b->impl;
    mt_pool_free(lb->pool);
    mt_model_free(lb->model);
    gen_turns_destroy(&lb->turns);
    free(lb);
}

mt_gen_backend *mt_gen_backend_local(mt_model *model, const char *name, int threads,
                                     mt_kv_type kv_type, mt_error *err) {
    if (!model) return NULL; /* a load that failed: err says why */
    local_backend *lb = calloc(1, sizeof *lb);
    if (!lb) {
        mt_model_free(model);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    gen_turns_init(&lb->turns);
    lb->model = model;
    lb->kv_type = kv_type;
    lb->b = (mt_gen_backend){.kind = "local",
                             .slot_open = local_slot_open,
                             .slot_close = local_slot_close,
                             .begin = local_begin,
                             .eval = local_eval,
                             .eval_all = local_eval_all,
                             .rewind = local_rewind,
                             .end = local_end,
                             .destroy = local_destroy,
                             .impl = lb};
    const mt_model *m = model;
    if (!m->has_head || !m->has_attention || m->layer_begin != 0 || m->layer_end != m->hp.n_layer ||
        (m->hp.n_expert > 0 && m->n_local_experts != m->hp.n_expert)) {
        mt_error_set(err,
                     "%s is a shard, not a whole model; give a whole model, or reach the cell"
                     " that holds it through its registry (moontail prompt, shell or serve with"
                     " --registry URL)",
                     name ? name : "the model");
        local_destroy(&lb->b);
        return NULL;
    }
    if (!(lb->pool = mt_pool_create(threads))) {
        mt_error_set(err, "cannot start %d compute threads", threads);
        local_destroy(&lb->b);
        return NULL;
    }
    lb->b.model = lb->model;
    lb->b.n_vocab = lb->model->hp.n_vocab;
    lb->b.max_ctx = lb->model->hp.n_ctx_train > 0 ? lb->model->hp.n_ctx_train : 4096;
    return &lb->b;
}

const mt_kv_cache *mt_gen_local_cache(const void *slot) {
    return ((const local_slot *)slot)->s.kv;
}

int mt_gen_local_threads(const mt_gen_backend *b) {
    return mt_pool_size(((const local_backend *)b->impl)->pool);
}

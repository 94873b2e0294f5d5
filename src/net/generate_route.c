/* generate_route.c - the generation loop's backend (generate.h) for a fixed
 * route of nodes (route.h): `moontail prompt --route`. The route is the
 * caller's; each slot runs one route session at a time. A route has no
 * failover: a node that stops answering fails the sequence. */
#include "moontail/route.h"

#include <stdlib.h>

typedef struct route_backend {
    mt_gen_backend b;
    mt_route *route; /* borrowed */
} route_backend;

typedef struct route_slot {
    route_backend *rb;
    mt_route_session *s; /* the sequence begun, or NULL */
} route_slot;

static void *route_slot_open(mt_gen_backend *b, int index, mt_error *err) {
    (void)index;
    route_slot *rs = calloc(1, sizeof *rs);
    if (!rs) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    rs->rb = b->impl;
    return rs;
}

static void route_end(void *slot, int64_t evaluated) {
    (void)evaluated;
    route_slot *rs = slot;
    if (rs->s) mt_route_session_end(rs->rb->route, rs->s); /* the stages forget it */
    rs->s = NULL;
}

static void route_slot_close(mt_gen_backend *b, void *slot) {
    (void)b;
    if (!slot) return;
    route_end(slot, 0);
    free(slot);
}

static int route_begin(void *slot, int32_t n_ctx, mt_error *err) {
    route_slot *rs = slot;
    route_end(rs, 0);
    rs->s = mt_route_session_new(rs->rb->route, n_ctx, err);
    return rs->s ? 0 : -1;
}

static int route_eval(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    route_slot *rs = slot;
    if (!rs->s) return mt_error_set(err, "no sequence begun");
    return mt_route_eval(rs->rb->route, rs->s, ids, n, false, logits, err);
}

static int route_eval_all(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    route_slot *rs = slot;
    if (!rs->s) return mt_error_set(err, "no sequence begun");
    return mt_route_eval_speculative(rs->rb->route, rs->s, ids, n, logits, err);
}

static int route_rewind(void *slot, int32_t n_past, mt_error *err) {
    route_slot *rs = slot;
    if (!rs->s) return mt_error_set(err, "no sequence begun");
    return mt_route_rewind(rs->rb->route, rs->s, n_past, err);
}

static void route_destroy(mt_gen_backend *b) {
    free(b ? b->impl : NULL);
}

mt_gen_backend *mt_route_backend(mt_route *r, mt_error *err) {
    route_backend *rb = calloc(1, sizeof *rb);
    if (!rb) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    const mt_model *head = mt_route_head(r);
    rb->route = r;
    rb->b = (mt_gen_backend){.kind = "route",
                             .model = head,
                             .n_vocab = head->hp.n_vocab,
                             .max_ctx = mt_route_max_ctx(r),
                             .slot_open = route_slot_open,
                             .slot_close = route_slot_close,
                             .begin = route_begin,
                             .eval = route_eval,
                             .eval_all = route_eval_all,
                             .rewind = route_rewind,
                             .end = route_end,
                             .destroy = route_destroy,
                             .impl = rb};
    return &rb->b;
}

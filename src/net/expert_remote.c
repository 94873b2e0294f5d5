/* expert_remote.c - a remote holder of routed experts that reconnects once
 * when its connection broke and must come back holding the same experts
 * (expert_remote.h). Shared by the requester's expert servers (route.c) and
 * a paired node's partners (node_partner.c). */
#include "expert_remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void expert_ids_format(const int32_t *ids, int32_t n, char *out, size_t cap) {
    size_t off = 0;
    out[0] = 0;
    for (int32_t i = 0; i < n && off + 24 < cap; i++) {
        int32_t j = i;
        while (j + 1 < n && ids[j + 1] == ids[j] + 1) j++;
        off += (size_t)snprintf(out + off, cap - off, j > i ? "%s%d-%d" : "%s%d", i ? "," : "",
                                ids[i], ids[j]);
        i = j;
    }
    if (n == 0) snprintf(out, cap, "none");
}

/* ---- connecting ------------------------------------------------------------------------ */

/* What the node at the other end of rem holds must be what x needs (and, on
 * a reconnect, what it held before). err gets the reason alone. */
static int check_holder(const expert_remote *x, mt_remote *rem, mt_error *err) {
    const mt_proto_info *in = mt_remote_info(rem);
    if (strcmp(in->source_id, x->source_id) != 0)
        return mt_error_set(err, "it holds another model (source_id %.16s..., wanted %.16s...)",
                            in->source_id, x->source_id);
    if (in->n_embd != x->n_embd || in->n_layer != x->n_layer || in->n_embd_exp != x->n_embd_exp)
        return mt_error_set(err,
                            "n_embd %d / %d layers / expert rows of %d differ from the model's"
                            " %d / %d / %d",
                            in->n_embd, in->n_layer, in->n_embd_exp, x->n_embd, x->n_layer,
                            x->n_embd_exp);
    if (!in->experts || in->layer_begin > x->layer_begin || in->layer_end < x->layer_end)
        return mt_error_set(err,
                            "it holds %s of layers [%d, %d); experts of layers [%d, %d) are"
                            " needed",
                            in->experts ? "experts" : "no routed experts", in->layer_begin,
                            in->layer_end, x->layer_begin, x->layer_end);
    if (x->held && (in->n_held != x->n_held ||
                    memcmp(in->held, x->held, (size_t)x->n_held * sizeof(int32_t)) != 0)) {
        char now[200], before[200];
        expert_ids_format(in->held, in->n_held, now, sizeof now);
        expert_ids_format(x->held, x->n_held, before, sizeof before);
        return mt_error_set(err, "it came back holding experts %s instead of %s", now, before);
    }
    return 0;
}

/* A new, checked connection; err gets the reason alone. */
static mt_remote *connect_checked(const expert_remote *x, mt_error *err) {
    mt_remote *rem =
        mt_remote_connect(x->addr, x->pk, x->keys, x->timeout_ms, x->call_timeout_ms, err);
    if (!rem) return NULL;
    if (check_holder(x, rem, err)) {
        mt_remote_close(rem);
        return NULL;
    }
    mt_remote_set_wire(rem, x->wire);
    return rem;
}

int expert_remote_open(expert_remote *x, const expert_remote_config *c, mt_error *err) {
    memset(x, 0, sizeof *x);
    snprintf(x->role, sizeof x->role, "%s", c->role);
    snprintf(x->addr, sizeof x->addr, "%s", c->addr);
    memcpy(x->pk, c->pk, sizeof x->pk);
    snprintf(x->source_id, sizeof x->source_id, "%s", c->source_id);
    x->keys = c->keys;
    x->timeout_ms = c->timeout_ms;
    x->call_timeout_ms = c->call_timeout_ms;
    x->wire = c->wire;
    x->n_embd = c->n_embd;
    x->n_embd_exp = c->n_embd_exp;
    x->n_layer = c->n_layer;
    x->layer_begin = c->layer_begin;
    x->layer_end = c->layer_end;
    x->no_reconnect = c->no_reconnect;
    if (!(x->r = connect_checked(x, err))) {
        mt_error_prefix(err, "%s %s", x->role, x->addr);
        return -1;
    }
    const mt_proto_info *in = mt_remote_info(x->r);
    x->held = malloc((size_t)(in->n_held > 0 ? in->n_held : 1) * sizeof(int32_t));
    if (!x->held) {
        expert_remote_close(x);
        return mt_error_set(err, "out of memory");
    }
    memcpy(x->held, in->held, (size_t)in->n_held * sizeof(int32_t));
    x->n_held = in->n_held;
    return 0;
}

void expert_remote_close(expert_remote *x) {
    mt_remote_close(x->r);
    free(x->held);
    x->r = NULL;
    x->held = NULL;
    x->n_held = 0;
}

/* ---- running rows ---------------------------------------------------------------------- */

int expert_remote_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                      float *y, mt_pool *pool, mt_error *err) {
    (void)pool;
    expert_remote *x = ctx;
    mt_error first = {{0}};
    if (mt_remote_experts_run(x->r, il, n, ids, u, y, NULL, &first) == 0) return 0;
    if (mt_remote_is_open(x->r)) { /* an ERROR reply: the node is there and said why */
        return mt_error_set(err, "%s %s: %s", x->role, x->addr, first.msg);
    }
    if (x->no_reconnect) return mt_error_set(err, "%s %s: %s", x->role, x->addr, first.msg);
    /* the connection broke (in this call or an earlier one): once more on a new one */
    mt_error again = {{0}};
    mt_remote *rem = connect_checked(x, &again);
    if (!rem)
        return mt_error_set(err, "%s %s: %.250s; reconnecting failed too: %.200s", x->role, x->addr,
                            first.msg, again.msg);
    mt_remote_close(x->r);
    x->r = rem;
    x->reconnects++;
    if (mt_remote_experts_run(x->r, il, n, ids, u, y, NULL, &again) == 0) return 0;
    return mt_error_set(err, "%s %s (reconnected after: %.200s): %.250s", x->role, x->addr,
                        first.msg, again.msg);
}

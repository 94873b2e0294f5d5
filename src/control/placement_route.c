/* placement_route.c - route choice: which nodes of a plan a request goes
 * through, avoiding failed nodes, spreading sessions over pipelines /
 * replicas (see mt_place_route_choose in moontail/placement.h).
 *
 * Cell: a whole live pipeline when there is one (session s tries pipeline
 * s % n first, or one drawn by the pipelines' free session memory when the
 * nodes reported it); else a shortest-switch path over live stage groups of any
 * pipeline from layer 0 to the last layer, moving between pipelines only
 * where one group ends and the other's begins. Swarm: the preferred
 * replica's live rectangles, then the gaps from the next replicas. */
#include "placement_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ common */

static int cmp_i64(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

typedef struct live_set {
    int64_t *ids; /* sorted avoid list */
    int32_t n;
} live_set;

static bool is_live(const live_set *s, int64_t id) {
    return s->n == 0 || !bsearch(&id, s->ids, (size_t)s->n, sizeof *s->ids, cmp_i64);
}

static int push_hop(mt_place_route *r, int32_t *cap, mt_place_hop h) {
    if (r->n_hops == *cap) {
        int32_t c = *cap ? 2 * *cap : 16;
        mt_place_hop *v = realloc(r->hops, (size_t)c * sizeof *v);
        if (!v) return -1;
        r->hops = v;
        *cap = c;
    }
    r->hops[r->n_hops++] = h;
    return 0;
}

static void append_text(char *buf, size_t cap, const char *s) {
    size_t len = strlen(buf);
    if (len + 1 < cap) snprintf(buf + len, cap - len, "%s", s);
}

/* ", nodes 3, 9" for the avoided nodes among assignments that hold any of
 * layers [a, b) (and experts [eb, ee) in swarm mode). */
static void failed_holders(const mt_place_plan *p, const live_set *s, int32_t a, int32_t b,
                           int32_t eb, int32_t ee, char *buf, size_t cap) {
    int shown = 0;
    char t[48];
    for (int32_t i = 0; i < p->n_assign && shown < 6; i++) {
        const mt_place_assign *x = &p->assign[i];
        if (x->role == MT_PLACE_SPARE || is_live(s, x->node)) continue;
        if (x->layer_end <= a || x->layer_begin >= b) continue;
        if (p->mode == MT_PLACE_SWARM && (x->expert_end <= eb || x->expert_begin >= ee)) continue;
        snprintf(t, sizeof t, "%s%lld", shown ? ", " : "; failed holders: nodes ",
                 (long long)x->node);
        append_text(buf, cap, t);
        shown++;
    }
}

/* ------------------------------------------------------------------ cell */

typedef struct route_group {
    int32_t first, count; /* assignments of the group */
    int32_t a, b;
    int32_t pipe; /* position in plan->pipelines */
    bool live;
} route_group;

static bool layer_held(const route_group *g, int32_t n, int32_t l) {
    for (int32_t i = 0; i < n; i++)
        if (g[i].live && g[i].a <= l && l < g[i].b) return true;
    return false;
}

static int emit_groups(const mt_place_plan *p, const route_group *g, const int32_t *order,
                       int32_t n, mt_place_route *out) {
    int32_t cap = 0;
    for (int32_t j = 0; j < n; j++) {
        const route_group *gr = &g[order[j]];
        for (int32_t i = gr->first; i < gr->first + gr->count; i++) {
            const mt_place_assign *x = &p->assign[i];
            mt_place_hop h = {x->node,      x->role,         x->pipeline,  x->layer_begin,
                              x->layer_end, x->expert_begin, x->expert_end};
            if (push_hop(out, &cap, h)) return -1;
        }
    }
    out->n_groups = n;
    return 0;
}

/* splitmix64's finaliser: spreads consecutive session ids over the draw */
static uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The pipeline session s tries first: s % P, or with a complete room hint
 * whose figures differ, a draw weighted by each pipeline's free session
 * memory (its fullest stage's room, counted in MiB and capped at 2^40 MiB so
 * nodes without a limit weigh alike and the sum cannot overflow). */
typedef struct room_entry {
    int64_t node, room;
} room_entry;

static int cmp_room(const void *pa, const void *pb) {
    return cmp_i64(&((const room_entry *)pa)->node, &((const room_entry *)pb)->node);
}

static int32_t first_pipeline(const mt_place_plan *p, const mt_place_room *room, uint64_t session) {
    int32_t P = p->n_pipelines, start = (int32_t)(session % (uint64_t)P);
    if (!room || room->n <= 0 || P < 2) return start;
    int64_t *least = malloc((size_t)P * sizeof *least); /* -1: no stage seen yet */
    uint64_t *w = malloc((size_t)P * sizeof *w), total = 0;
    room_entry *r = malloc((size_t)room->n * sizeof *r);
    bool known = least && w && r, differ = false;
    for (int32_t k = 0; known && k < P; k++) least[k] = -1;
    for (int32_t j = 0; known && j < room->n; j++)
        r[j] = (room_entry){room->node[j], room->room[j]};
    if (known) qsort(r, (size_t)room->n, sizeof *r, cmp_room);
    /* one pass over the stages: each pipeline's fullest stage */
    for (int32_t i = 0; known && i < p->n_assign; i++) {
        const mt_place_assign *x = &p->assign[i];
        if (x->role != MT_PLACE_STAGE) continue;
        int32_t k = 0;
        while (k < P && p->pipelines[k].index != x->pipeline) k++;
        if (k == P) continue;
        room_entry key = {x->node, 0};
        const room_entry *e = bsearch(&key, r, (size_t)room->n, sizeof *r, cmp_room);
        if (!e || e->room < 0)
            known = false;
        else if (least[k] < 0 || e->room < least[k])
            least[k] = e->room;
    }
    for (int32_t k = 0; known && k < P; k++) {
        if (least[k] < 0) known = false; /* a pipeline without a stage listed */
        uint64_t mib = (uint64_t)(least[k] < 0 ? 0 : least[k]) >> 20;
        w[k] = mib > ((uint64_t)1 << 40) ? (uint64_t)1 << 40 : mib;
        differ |= k > 0 && w[k] != w[0];
        total += w[k];
    }
    if (known && differ && total > 0) {
        uint64_t u = mix64(session) % total;
        for (start = 0; start < P - 1 && u >= w[start]; start++) u -= w[start];
    }
    free(least);
    free(w);
    free(r);
    return start;
}

static int route_cell(const mt_place_plan *p, const live_set *s, uint64_t session,
                      const mt_place_room *room, mt_place_route *out, mt_error *err) {
    int32_t P = p->n_pipelines, L = p->n_layer, n_groups = 0;
    route_group *g = malloc((size_t)(p->n_assign + 1) * sizeof *g);
    int32_t *order = malloc((size_t)(p->n_assign + 1) * sizeof *order);
    int64_t *cost = malloc((size_t)(L + 1) * P * sizeof *cost); /* switches * 2^32 + ranks */
    int32_t *back = malloc((size_t)(L + 1) * P * sizeof *back); /* group that got there */
    int rc = -1;
    if (!g || !order || !cost || !back) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < p->n_assign && p->assign[i].role != MT_PLACE_SPARE;) {
        const mt_place_assign *x = &p->assign[i];
        int32_t j = i, k = 0;
        bool live = true;
        while (j < p->n_assign && p->assign[j].role != MT_PLACE_SPARE &&
               p->assign[j].pipeline == x->pipeline && p->assign[j].layer_begin == x->layer_begin)
            live &= is_live(s, p->assign[j++].node);
        while (k < P && p->pipelines[k].index != x->pipeline) k++;
        if (k < P) g[n_groups++] = (route_group){i, j - i, x->layer_begin, x->layer_end, k, live};
        i = j;
    }
    int32_t start = first_pipeline(p, room, session);
    for (int32_t t = 0; t < P; t++) { /* a whole live pipeline */
        int32_t k = (start + t) % P, n = 0;
        bool live = true;
        for (int32_t i = 0; i < n_groups; i++)
            if (g[i].pipe == k) live &= g[i].live, order[n++] = i;
        if (!live || n == 0) continue;
        if (emit_groups(p, g, order, n, out)) {
            mt_error_set(err, "out of memory");
            goto done;
        }
        out->pipeline = p->pipelines[k].index;
        rc = 0;
        goto done;
    }
    /* compose: fewest switches, then pipelines earliest in the session's order.
     * Groups are sorted by pipeline, then layer; visit them by first layer. */
    for (int32_t i = 0; i < n_groups; i++) order[i] = i;
    for (int32_t i = 1; i < n_groups; i++) /* stable insertion sort by a: few groups */
        for (int32_t j = i; j > 0 && g[order[j - 1]].a > g[order[j]].a; j--) {
            int32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int64_t i = 0; i < (int64_t)(L + 1) * P; i++) cost[i] = INT64_MAX, back[i] = -1;
    for (int32_t oi = 0; oi < n_groups; oi++) {
        const route_group *gr = &g[order[oi]];
        if (!gr->live) continue;
        int64_t rank = (gr->pipe - start + P) % P, best = INT64_MAX;
        if (gr->a == 0) {
            best = rank;
        } else {
            for (int32_t q = 0; q < P; q++) {
                int64_t c0 = cost[(int64_t)gr->a * P + q];
                if (c0 == INT64_MAX) continue;
                int64_t c1 = c0 + rank + (q != gr->pipe ? (int64_t)1 << 32 : 0);
                if (c1 < best) best = c1;
            }
        }
        int64_t at = (int64_t)gr->b * P + gr->pipe;
        if (best < cost[at]) cost[at] = best, back[at] = order[oi];
    }
    int32_t end_q = -1;
    for (int32_t q = 0; q < P; q++)
        if (cost[(int64_t)L * P + q] != INT64_MAX &&
            (end_q < 0 || cost[(int64_t)L * P + q] < cost[(int64_t)L * P + end_q]))
            end_q = q;
    if (end_q >= 0) {
        int32_t n = 0, b = L, q = end_q;
        while (b > 0) { /* walk back: the best predecessor state at the group's start */
            int32_t gi = back[(int64_t)b * P + q];
            order[n++] = gi;
            b = g[gi].a;
            if (b == 0) break;
            int64_t rank = (g[gi].pipe - start + P) % P, want = cost[(int64_t)g[gi].b * P + q];
            int32_t prev = -1;
            for (int32_t r = 0; r < P && prev < 0; r++) {
                int64_t c0 = cost[(int64_t)b * P + r];
                if (c0 != INT64_MAX && c0 + rank + (r != g[gi].pipe ? (int64_t)1 << 32 : 0) == want)
                    prev = r;
            }
            q = prev;
        }
        for (int32_t i = 0; i < n / 2; i++) {
            int32_t t = order[i];
            order[i] = order[n - 1 - i];
            order[n - 1 - i] = t;
        }
        if (emit_groups(p, g, order, n, out)) {
            mt_error_set(err, "out of memory");
            goto done;
        }
        out->pipeline = -1;
        rc = 0;
        goto done;
    }
    /* no route: name the layers no live group holds, or where they misalign */
    char msg[400] = "";
    int32_t shown = 0;
    for (int32_t l = 0; l < L && shown < 3;) {
        if (layer_held(g, n_groups, l)) {
            l++;
            continue;
        }
        int32_t m = l + 1;
        while (m < L && !layer_held(g, n_groups, m)) m++;
        char t[64];
        snprintf(t, sizeof t, "%s%d-%d", shown ? ", " : "", l, m - 1);
        append_text(msg, sizeof msg, t);
        if (shown == 0) failed_holders(p, s, l, m, 0, 0, msg, sizeof msg);
        shown++;
        l = m;
    }
    if (shown)
        mt_error_set(err, "no route: no live stage group holds layers %s", msg);
    else
        mt_error_set(err,
                     "no route: live stage groups hold every layer, but their layer ranges do not"
                     " line up into a chain from layer 0 to layer %d",
                     L);
done:
    free(g);
    free(order);
    free(cost);
    free(back);
    return rc;
}

/* ----------------------------------------------------------------- swarm */

typedef struct swarm_route {
    mt_place_route *out;
    int32_t cap;
    bool *need; /* (n_layer, n_expert): MoE slices still without a holder */
    int32_t X;
    const mt_place_assign *x;
    char *msg;
    size_t msg_cap;
    int shown;
} swarm_route;

static int take_rect(void *ctx, int32_t a, int32_t b, int32_t eb, int32_t ee) {
    swarm_route *sr = ctx;
    for (int32_t l = a; l < b; l++)
        for (int32_t e = eb; e < ee; e++) sr->need[(size_t)l * sr->X + e] = false;
    mt_place_hop h = {sr->x->node, MT_PLACE_EXPERTS, sr->x->pipeline, a, b, eb, ee};
    return push_hop(sr->out, &sr->cap, h);
}

static int name_rect(void *ctx, int32_t a, int32_t b, int32_t eb, int32_t ee) {
    swarm_route *sr = ctx;
    if (sr->shown == 3) {
        append_text(sr->msg, sr->msg_cap, ", ...");
        return 1;
    }
    char t[96];
    snprintf(t, sizeof t, "%sexperts %d-%d of layers %d-%d", sr->shown ? ", " : "", eb, ee - 1, a,
             b - 1);
    append_text(sr->msg, sr->msg_cap, t);
    sr->shown++;
    return 0;
}

static int cmp_hop(const void *pa, const void *pb) {
    const mt_place_hop *a = pa, *b = pb;
    if (a->layer_begin != b->layer_begin) return a->layer_begin < b->layer_begin ? -1 : 1;
    return (a->expert_begin > b->expert_begin) - (a->expert_begin < b->expert_begin);
}

static int route_swarm(const mt_place_plan *p, const live_set *s, uint64_t session,
                       mt_place_route *out, mt_error *err) {
    int32_t R = p->n_pipelines, L = p->n_layer, X = p->n_expert;
    bool *need = malloc((size_t)L * X * sizeof *need);
    if (!need) return mt_error_set(err, "out of memory");
    for (int32_t l = 0; l < L; l++)
        for (int32_t e = 0; e < X; e++) need[(size_t)l * X + e] = p->moe_layer[l];
    swarm_route sr = {out, 0, need, X, NULL, NULL, 0, 0};
    int32_t start = (int32_t)(session % (uint64_t)R), used = 0, only = -1;
    for (int32_t t = 0; t < R; t++) {
        int32_t pipe = p->pipelines[(start + t) % R].index, before = out->n_hops;
        for (int32_t i = 0; i < p->n_assign; i++) {
            const mt_place_assign *x = &p->assign[i];
            if (x->role != MT_PLACE_EXPERTS || x->pipeline != pipe || !is_live(s, x->node))
                continue;
            sr.x = x;
            if (pl_rects(need, X, x->layer_begin, x->layer_end, x->expert_begin, x->expert_end,
                         take_rect, &sr)) {
                free(need);
                return mt_error_set(err, "out of memory");
            }
        }
        if (out->n_hops > before) used++, only = pipe;
    }
    char msg[400] = "";
    sr.msg = msg;
    sr.msg_cap = sizeof msg;
    pl_rects(need, X, 0, L, 0, X, name_rect, &sr);
    int rc = 0;
    if (sr.shown) {
        int32_t a = -1, b = -1, eb = X, ee = 0; /* failed holders of the first gap */
        for (int32_t l = 0; l < L; l++)
            for (int32_t e = 0; e < X; e++)
                if (need[(size_t)l * X + e]) {
                    if (a < 0) a = l;
                    b = l + 1;
                    if (e < eb) eb = e;
                    if (e + 1 > ee) ee = e + 1;
                }
        failed_holders(p, s, a, b, eb, ee, msg, sizeof msg);
        rc = mt_error_set(err, "no route: no live expert server holds %s", msg);
    } else {
        qsort(out->hops, (size_t)out->n_hops, sizeof *out->hops, cmp_hop);
        out->n_groups = out->n_hops;
        out->pipeline = used == 1 ? only : -1;
    }
    free(need);
    return rc;
}

/* ----------------------------------------------------------------- entry */

int mt_place_route_choose(const mt_place_plan *plan, const int64_t *avoid, int32_t n_avoid,
                          uint64_t session, const mt_place_room *room, mt_place_route *out,
                          mt_error *err) {
    memset(out, 0, sizeof *out);
    out->mode = plan->mode;
    out->pipeline = -1;
    if (plan->n_pipelines == 0)
        return mt_error_set(err, "no route: the plan has no complete %s (%s)",
                            plan->mode == MT_PLACE_CELL ? "pipeline" : "replica",
                            plan->reason[0] ? plan->reason : "no nodes");
    live_set s = {NULL, n_avoid > 0 ? n_avoid : 0};
    if (s.n > 0) {
        s.ids = malloc((size_t)s.n * sizeof *s.ids);
        if (!s.ids) return mt_error_set(err, "out of memory");
        memcpy(s.ids, avoid, (size_t)s.n * sizeof *s.ids);
        qsort(s.ids, (size_t)s.n, sizeof *s.ids, cmp_i64);
    }
    int rc = plan->mode == MT_PLACE_CELL ? route_cell(plan, &s, session, room, out, err)
                                         : route_swarm(plan, &s, session, out, err);
    free(s.ids);
    if (rc) mt_place_route_free(out);
    return rc;
}

void mt_place_route_free(mt_place_route *r) {
    if (!r) return;
    free(r->hops);
    memset(r, 0, sizeof *r);
}

/* placement_summary.c - turns the working pieces into the plan
 * (placement.h): assignments in a stable order, each with its bytes and
 * expected step time, and the plan's summary: coverage, balance, the moves
 * from the previous plan, and why it is short when it is. */
#include "placement_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the plan */

/* Order of the plan's assignments: pipelines by index, groups by first
 * layer, the stage before its partners, experts ascending; spares last. */
typedef struct keyed_piece {
    pl_piece q;
    int64_t id; /* the node's id */
} keyed_piece;

static int cmp_piece(const void *pa, const void *pb) {
    const keyed_piece *ka = pa, *kb = pb;
    const pl_piece *a = &ka->q, *b = &kb->q;
    bool sa = a->role == MT_PLACE_SPARE, sb = b->role == MT_PLACE_SPARE;
    if (sa != sb) return sa ? 1 : -1;
    if (!sa) {
        if (a->pipeline != b->pipeline) return a->pipeline < b->pipeline ? -1 : 1;
        if (a->a != b->a) return a->a < b->a ? -1 : 1;
        if (a->attention != b->attention) return a->attention ? -1 : 1;
        if (a->eb != b->eb) return a->eb < b->eb ? -1 : 1;
    }
    return (ka->id > kb->id) - (ka->id < kb->id);
}

static double piece_ms(const pl_ctx *c, const pl_piece *q) {
    if (q->role == MT_PLACE_SPARE) return 0;
    double touched = (q->attention ? (double)pl_attn(c, q->a, q->b) : 0);
    if (c->X > 0) touched += (double)c->U * (q->ee - q->eb) / c->X * (double)pl_exp(c, q->a, q->b);
    return touched / pl_speed_bpm(c, q->node);
}

/* Time of the cell group whose pieces are v[g..h) (h: the first piece of
 * another group or pipeline, at most j; stage first as pieces are sorted):
 * attention on the stage, the slowest member's experts, one partner call per
 * MoE layer when it has partners (the top of moontail/placement.h). */
static double group_ms(const pl_ctx *c, const pl_piece *v, int32_t g, int32_t j, int32_t *h_out) {
    int32_t h = g;
    double att = 0, exp_max = 0;
    while (h < j && v[h].pipeline == v[g].pipeline && v[h].a == v[g].a) {
        const pl_piece *q = &v[h];
        if (q->attention) att = (double)pl_attn(c, q->a, q->b) / pl_speed_bpm(c, q->node);
        double e = piece_ms(c, q) - (q->attention ? att : 0);
        if (e > exp_max) exp_max = e;
        h++;
    }
    double t = att + exp_max;
    if (h - g > 1) t += pl_moe(c, v[g].a, v[g].b) * c->p->partner_call_ms;
    *h_out = h;
    return t;
}

static int cmp_piece_plain(const void *pa, const void *pb) {
    const pl_piece *a = pa, *b = pb;
    if (a->pipeline != b->pipeline) return a->pipeline < b->pipeline ? -1 : 1;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    if (a->attention != b->attention) return a->attention ? -1 : 1;
    return (a->eb > b->eb) - (a->eb < b->eb);
}

double pl_cell_worst_trip(const pl_ctx *c, const pl_pieces *w) {
    pl_piece *v = malloc((size_t)(w->n > 0 ? w->n : 1) * sizeof *v);
    if (!v) return -1;
    int32_t n = 0;
    for (int32_t i = 0; i < w->n; i++)
        if (w->v[i].role != MT_PLACE_SPARE) v[n++] = w->v[i];
    qsort(v, (size_t)n, sizeof *v, cmp_piece_plain);
    double worst = 0, trip = 0;
    for (int32_t g = 0, h; g < n; g = h) {
        if (g == 0 || v[g].pipeline != v[g - 1].pipeline) trip = 0;
        trip += group_ms(c, v, g, n, &h) + c->p->hop_ms;
        if (trip > worst) worst = trip;
    }
    free(v);
    return worst;
}

static bool same_shard(const mt_place_assign *cur, const pl_piece *q) {
    bool holds_cur = cur->role == MT_PLACE_STAGE || cur->role == MT_PLACE_PARTNER ||
                     cur->role == MT_PLACE_EXPERTS;
    bool holds_new = q->role != MT_PLACE_SPARE;
    if (!holds_cur || !holds_new) return holds_cur == holds_new;
    return cur->layer_begin == q->a && cur->layer_end == q->b && cur->attention == q->attention &&
           cur->expert_begin == q->eb && cur->expert_end == q->ee;
}

static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len >= cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* Why the available nodes cannot make `want` pipelines / replicas. */
static void explain(const pl_ctx *c, int32_t made, char *buf, size_t cap) {
    int32_t R = c->p->replicas, n_avail = 0;
    bool cell = c->p->mode == MT_PLACE_CELL;
    uint64_t total = 0, largest = 0;
    char b1[32], b2[32], b3[32];
    for (int32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].available) {
            n_avail++;
            total += c->nodes[i].capacity;
            if (c->nodes[i].capacity > largest) largest = c->nodes[i].capacity;
        }
    const char *what = cell ? "pipelines" : "replicas";
    if (made == 0)
        snprintf(buf, cap, "no complete %s: ", cell ? "pipeline" : "replica");
    else
        snprintf(buf, cap, "made %d of %d %s: ", made, R, what);
    uint64_t one = cell ? c->model_need : c->experts_bytes;
    uint64_t work = cell ? c->work_pre[c->L] : 0; /* swarm: the requester keeps attention */
    if (n_avail == 0) {
        append(buf, cap, "no available node (%d known, none available): start or resume nodes",
               c->n_nodes);
        return;
    }
    if (total < (uint64_t)(made + 1) * one) {
        append(buf, cap, "total capacity %s of %d available node%s < %d replica%s x %s",
               pl_fmt_bytes(total, b1, sizeof b1), n_avail, n_avail == 1 ? "" : "s", made + 1,
               made + 1 == 1 ? "" : "s", pl_fmt_bytes(one, b2, sizeof b2));
        if (work)
            append(buf, cap, " (%s of it working memory: %d sessions x %d positions)",
                   pl_fmt_bytes(work, b3, sizeof b3), c->p->sessions, c->p->n_ctx);
        append(buf, cap, ": add nodes");
        return;
    }
    for (int32_t il = 0; il < c->L; il++) {
        uint64_t piece = cell ? pl_attn_room(c, il, il + 1) : c->m->expert_bytes[il];
        if (piece > largest) {
            append(buf, cap, "%s of layer %d (%s",
                   cell ? "the attention part" : "one routed expert", il,
                   pl_fmt_bytes(cell ? c->m->attn_bytes[il] : piece, b1, sizeof b1));
            if (cell && pl_work(c, il, il + 1))
                append(buf, cap, " + %s working memory",
                       pl_fmt_bytes(pl_work(c, il, il + 1), b3, sizeof b3));
            append(buf, cap,
                   ") fits on no available node (the largest holds %s): add a larger node",
                   pl_fmt_bytes(largest, b2, sizeof b2));
            return;
        }
    }
    uint64_t layer_max = 0;
    for (int32_t il = 0; il < c->L; il++) {
        uint64_t w = cell ? pl_piece_room(c, il, il + 1, true, 0, c->X) : c->m->expert_bytes[il];
        if (w > layer_max) layer_max = w;
    }
    append(buf, cap,
           "the %d available nodes (total %s, largest %s) cannot be packed into %d complete %s"
           " (largest %s %s): add nodes or larger ones",
           n_avail, pl_fmt_bytes(total, b1, sizeof b1), pl_fmt_bytes(largest, b2, sizeof b2),
           made + 1, what, cell ? "layer" : "expert of a layer",
           pl_fmt_bytes(layer_max, b3, sizeof b3));
}

/* The latency goal's outcome (cell): met, or a note naming the goal, the
 * slowest trip and what to do. count pipelines were made. */
static void goal_summary(const pl_ctx *c, int32_t count, mt_place_plan *out) {
    double goal = c->p->latency_goal_ms;
    out->latency_goal_ms = goal;
    if (!(goal > 0)) return;
    out->latency_goal_met = out->n_pipelines > 0 && out->worst_trip_ms <= goal;
    if (out->latency_goal_met) return;
    if (out->n_pipelines == 0) {
        snprintf(out->goal_note, sizeof out->goal_note,
                 "latency goal %g ms per token: no complete pipeline to meet it", goal);
        return;
    }
    snprintf(out->goal_note, sizeof out->goal_note,
             "latency goal %g ms per token missed: the slowest of %d pipeline%s takes %.1f ms"
             " (group times and hops)%s; add machines or faster ones%s",
             goal, out->n_pipelines, out->n_pipelines == 1 ? "" : "s", out->worst_trip_ms,
             count <= c->p->replicas ? ", and no fewer than --replicas pipelines are made" : "",
             c->p->objective == MT_PLACE_LATENCY
                 ? ", or raise the goal"
                 : ", or lay pipelines out for it with --objective latency");
}

/* The assignment that needs the most room (bytes + working memory). */
static const mt_place_assign *largest_need(const mt_place_plan *plan) {
    for (int32_t k = 0; k < plan->n_assign; k++)
        if (plan->assign[k].bytes + plan->assign[k].work_bytes == plan->largest_need)
            return &plan->assign[k];
    return &plan->assign[0];
}

int pl_finish(const pl_ctx *c, pl_pieces *w, bool *used, int32_t count, bool replanned,
              mt_place_plan *out, mt_error *err) {
    int32_t L = c->L, X = c->X;
    bool cell = c->p->mode == MT_PLACE_CELL;
    for (int32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].available && !used[i] &&
            pl_push(w, (pl_piece){i, MT_PLACE_SPARE, -1, 0, 0, false, 0, 0, -1}))
            return mt_error_set(err, "out of memory");
    keyed_piece *kp = malloc((size_t)(w->n > 0 ? w->n : 1) * sizeof *kp);
    if (!kp) return mt_error_set(err, "out of memory");
    for (int32_t i = 0; i < w->n; i++) kp[i] = (keyed_piece){w->v[i], c->nodes[w->v[i].node].id};
    qsort(kp, (size_t)w->n, sizeof *kp, cmp_piece);
    for (int32_t i = 0; i < w->n; i++) w->v[i] = kp[i].q;
    free(kp);

    out->mode = c->p->mode;
    out->n_layer = L;
    out->n_expert = X;
    out->replicas_wanted = c->p->replicas;
    out->replanned = replanned;
    size_t n_cov = cell ? (size_t)L : (size_t)L * (size_t)(X > 0 ? X : 1);
    out->moe_layer = calloc((size_t)L, sizeof *out->moe_layer);
    out->coverage = calloc(n_cov, sizeof *out->coverage);
    out->assign = calloc((size_t)(w->n > 0 ? w->n : 1), sizeof *out->assign);
    out->pipelines = calloc((size_t)w->n + 1, sizeof *out->pipelines); /* at most one each */
    double *layer_max = calloc((size_t)L, sizeof *layer_max);
    if (!out->moe_layer || !out->coverage || !out->assign || !out->pipelines || !layer_max) {
        free(layer_max);
        return mt_error_set(err, "out of memory");
    }
    for (int32_t il = 0; il < L; il++) out->moe_layer[il] = c->m->expert_bytes[il] > 0;

    /* assignments, group numbers */
    int32_t group = -1, prev_pipe = -1, prev_a = -1;
    for (int32_t i = 0; i < w->n; i++) {
        const pl_piece *q = &w->v[i];
        mt_place_assign *a = &out->assign[i];
        if (q->role != MT_PLACE_SPARE) {
            if (q->pipeline != prev_pipe) group = -1, prev_a = -1;
            if (!cell || q->a != prev_a) group++;
            prev_pipe = q->pipeline;
            prev_a = q->a;
        }
        *a = (mt_place_assign){
            .node = c->nodes[q->node].id,
            .role = q->role,
            .pipeline = q->role == MT_PLACE_SPARE ? -1 : q->pipeline,
            .group = q->role == MT_PLACE_SPARE ? -1 : group,
            .layer_begin = q->a,
            .layer_end = q->b,
            .attention = q->attention,
            .expert_begin = q->eb,
            .expert_end = q->ee,
            .paired_with = q->role == MT_PLACE_PARTNER ? c->nodes[q->paired].id : 0,
            .bytes = q->role == MT_PLACE_SPARE
                         ? 0
                         : pl_piece_bytes(c, q->a, q->b, q->attention, q->eb, q->ee),
            .ms_per_token = piece_ms(c, q),
            .work_bytes = q->role != MT_PLACE_SPARE && q->attention ? pl_work(c, q->a, q->b) : 0,
        };
        if (a->bytes > out->largest_shard) out->largest_shard = a->bytes;
        if (a->bytes + a->work_bytes > out->largest_need)
            out->largest_need = a->bytes + a->work_bytes;
        if (q->role == MT_PLACE_SPARE) out->n_spares++;
        if (!same_shard(&c->nodes[q->node].current, q)) out->moves++;
    }
    out->n_assign = w->n;

    /* pipelines: runs of one index; cell groups: runs of one first layer */
    int32_t i = 0;
    while (i < w->n && w->v[i].role != MT_PLACE_SPARE) {
        int32_t j = i, pipe = w->v[i].pipeline;
        while (j < w->n && w->v[j].role != MT_PLACE_SPARE && w->v[j].pipeline == pipe) j++;
        mt_place_pipeline *pp = &out->pipelines[out->n_pipelines++];
        pp->index = pipe;
        pp->n_nodes = j - i;
        double sum = 0;
        int32_t n_units = 0;
        if (cell) {
            for (int32_t g = i, h; g < j; g = h) {
                double t = group_ms(c, w->v, g, j, &h);
                for (int32_t il = w->v[g].a; il < w->v[g].b; il++) out->coverage[il]++;
                if (t > pp->slowest_ms) pp->slowest_ms = t;
                sum += t;
                n_units++;
                pp->latency_ms += t;
            }
            pp->trip_ms = pp->latency_ms + n_units * c->p->hop_ms;
        } else {
            for (int32_t il = 0; il < L; il++) layer_max[il] = 0;
            for (int32_t g = i; g < j; g++) {
                const pl_piece *q = &w->v[g];
                double t = piece_ms(c, q);
                if (t > pp->slowest_ms) pp->slowest_ms = t;
                sum += t;
                n_units++;
                for (int32_t il = q->a; il < q->b; il++) {
                    if (!out->moe_layer[il]) continue;
                    double tl = (double)c->U * (q->ee - q->eb) / X *
                                (double)c->m->expert_bytes[il] / pl_speed_bpm(c, q->node);
                    if (tl > layer_max[il]) layer_max[il] = tl;
                    for (int32_t e = q->eb; e < q->ee; e++) out->coverage[(size_t)il * X + e]++;
                }
            }
            for (int32_t il = 0; il < L; il++) pp->latency_ms += layer_max[il];
            pp->trip_ms = pp->latency_ms;
        }
        if (pp->trip_ms > out->worst_trip_ms) out->worst_trip_ms = pp->trip_ms;
        pp->n_groups = n_units;
        pp->average_ms = n_units ? sum / n_units : 0;
        i = j;
    }
    free(layer_max);

    /* coverage */
    out->min_replicas = -1;
    for (int32_t il = 0; il < L; il++) {
        if (cell) {
            if (out->min_replicas < 0 || out->coverage[il] < out->min_replicas)
                out->min_replicas = out->coverage[il];
        } else if (out->moe_layer[il]) {
            for (int32_t e = 0; e < X; e++) {
                int32_t k = out->coverage[(size_t)il * X + e];
                if (out->min_replicas < 0 || k < out->min_replicas) out->min_replicas = k;
            }
        }
    }
    if (out->min_replicas < 0) out->min_replicas = 0;
    out->complete = out->min_replicas >= 1;

    /* reasons */
    if (count < c->p->replicas) explain(c, count, out->reason, sizeof out->reason);
    int32_t S = c->p->spares, able = 0;
    for (int32_t k = 0; k < out->n_assign; k++)
        if (out->assign[k].role == MT_PLACE_SPARE) {
            const mt_place_node *x = &c->nodes[w->v[k].node];
            able += x->capacity >= out->largest_need;
        }
    goal_summary(c, count, out);
    char b1[32], b2[32];
    if (out->n_spares < S)
        append(out->warning, sizeof out->warning,
               "only %d of %d spares: the %s need every other node", out->n_spares, S,
               cell ? "pipelines" : "replicas");
    else if (able < S && count > 0 && out->largest_need == out->largest_shard)
        append(out->warning, sizeof out->warning,
               "only %d of %d spares can take over the largest shard (%s): add a larger node", able,
               S, pl_fmt_bytes(out->largest_shard, b1, sizeof b1));
    else if (able < S && count > 0)
        append(out->warning, sizeof out->warning,
               "only %d of %d spares can take over the largest shard (%s + %s working memory):"
               " add a larger node",
               able, S, pl_fmt_bytes(largest_need(out)->bytes, b1, sizeof b1),
               pl_fmt_bytes(largest_need(out)->work_bytes, b2, sizeof b2));
    return 0;
}

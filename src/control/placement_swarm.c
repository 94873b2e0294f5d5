/* placement_swarm.c - swarm mode: replicas of rectangles over the routed
 * experts (the requester keeps every attention part).
 *
 * One replica covers every (MoE layer, expert) slice once. Its MoE layers
 * are cut into bands of about equal bytes per expert column, few enough
 * that a column of a band is small next to a typical node (so a node wastes
 * little of its capacity on a partial column); each band's experts are then
 * split over a run of the replica's nodes (fastest first) into contiguous
 * ranges, full band height. A node's time is its share of the band's
 * expert reads: n_expert_used * n / n_expert * band bytes / speed; a
 * bisection on the largest node time T finds the smallest T at which the
 * bands fit, so rows (and reads) go to nodes in proportion to their speed as
 * far as capacity allows. Replicas get their nodes by a snake draft by
 * speed (placement.c).
 *
 * Keeping a previous plan: a replica whose rectangles do not overlap keeps
 * its healthy members; a lost member's rectangle (or any uncovered part)
 * goes to one free node that holds it, else is split by experts over free
 * nodes, else by layers. */
#include "placement_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- bands */

typedef struct swarm_band {
    int32_t a, b; /* layers [a, b): from its first MoE layer to after its last */
    uint64_t E;   /* bytes of one expert over the band */
} swarm_band;

static int cmp_u64(const void *pa, const void *pb) {
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return (a > b) - (a < b);
}

/* Cuts the MoE layers into bands for nodes v[0..n): a band's column is
 * about a quarter of the nodes' median capacity or less, with at most one
 * band per node and per MoE layer. Returns the number of bands (>= 1), -1
 * when out of memory. */
static int32_t make_bands(const pl_ctx *c, const int32_t *v, int32_t n, swarm_band *bands) {
    uint64_t *caps = malloc((size_t)(n > 0 ? n : 1) * sizeof *caps);
    if (!caps) return -1;
    for (int32_t i = 0; i < n; i++) caps[i] = c->nodes[v[i]].capacity;
    qsort(caps, (size_t)n, sizeof *caps, cmp_u64);
    uint64_t med = n > 0 ? caps[n / 2] : 0, col = pl_exp(c, 0, c->L);
    free(caps);
    int32_t n_moe = pl_moe(c, 0, c->L), B = 1;
    if (med / 4 > 0) {
        uint64_t want = (col + med / 4 - 1) / (med / 4);
        B = want > (uint64_t)n_moe ? n_moe : (int32_t)want;
    } else {
        B = n_moe;
    }
    if (B > n) B = n;
    if (B < 1) B = 1;
    int32_t nb = 0, first = -1, moe_seen = 0;
    uint64_t acc = 0, done = 0;
    for (int32_t il = 0; il < c->L; il++) {
        uint64_t e = c->m->expert_bytes[il];
        if (e == 0) continue;
        if (first < 0) first = il;
        acc += e;
        moe_seen++;
        int32_t left_layers = n_moe - moe_seen, left_bands = B - nb - 1;
        /* close when the band has its share, or when every later layer must open a band */
        bool share = (double)(done + acc) >= (double)col * (nb + 1) / B;
        if ((share && left_bands > 0) || left_layers == left_bands || left_layers == 0) {
            bands[nb++] = (swarm_band){first, il + 1, acc};
            done += acc;
            acc = 0;
            first = -1;
            if (left_layers == 0) break;
        }
    }
    return nb;
}

/* The experts node i may hold in a band: by capacity and, when T is finite,
 * by time. */
static int64_t band_limit(const pl_ctx *c, int32_t node, const swarm_band *bd, double T) {
    uint64_t m = c->nodes[node].capacity / bd->E;
    if (isfinite(T)) {
        double t = floor(T * pl_speed_bpm(c, node) * c->X / ((double)c->U * (double)bd->E));
        if (t < (double)m) m = t < 0 ? 0 : (uint64_t)t;
    }
    return m > (uint64_t)c->X ? c->X : (int64_t)m;
}

/* Fills the bands in order with runs of v; end[k] = index in v after band
 * k's run. False when the nodes run out. */
static bool bands_fill(const pl_ctx *c, const int32_t *v, int32_t n, const swarm_band *bands,
                       int32_t nb, double T, int32_t *end) {
    int32_t j = 0;
    for (int32_t k = 0; k < nb; k++) {
        int64_t covered = 0;
        while (covered < c->X) {
            if (j == n) return false;
            covered += band_limit(c, v[j++], &bands[k], T);
        }
        if (end) end[k] = j;
    }
    return true;
}

bool pl_swarm_feasible(const pl_ctx *c, const int32_t *v, int32_t n) {
    swarm_band *bands = malloc((size_t)(c->L + 1) * sizeof *bands);
    if (!bands) return false;
    int32_t nb = make_bands(c, v, n, bands);
    bool ok = nb > 0 && bands_fill(c, v, n, bands, nb, INFINITY, NULL);
    free(bands);
    return ok;
}

/* The bands for v[0..n) and the smallest T (bisection) at which they fit:
 * returns the number of bands, 0 when the nodes cannot hold a replica, -1
 * when out of memory. */
static int32_t replica_time(const pl_ctx *c, const int32_t *v, int32_t n, swarm_band *bands,
                            double *t_out) {
    *t_out = INFINITY;
    int32_t nb = make_bands(c, v, n, bands);
    if (nb <= 0) return nb;
    if (!bands_fill(c, v, n, bands, nb, INFINITY, NULL)) return 0;
    double s_min = INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (pl_speed_bpm(c, v[i]) < s_min) s_min = pl_speed_bpm(c, v[i]);
    /* at hi every node may hold a whole column: capacity alone decides */
    double lo = 0, hi = (double)c->U * (double)pl_exp(c, 0, c->L) / s_min * 1.001;
    if (!bands_fill(c, v, n, bands, nb, hi, NULL)) return nb; /* rounding: no bisection */
    for (int it = 0; it < 60 && hi - lo > 1e-5 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (bands_fill(c, v, n, bands, nb, mid, NULL))
            hi = mid;
        else
            lo = mid;
    }
    *t_out = hi;
    return nb;
}

double pl_swarm_time(const pl_ctx *c, const int32_t *v, int32_t n) {
    swarm_band *bands = malloc((size_t)(c->L + 1) * sizeof *bands);
    if (!bands) return -1;
    double t;
    int32_t nb = replica_time(c, v, n, bands, &t);
    free(bands);
    return nb < 0 ? -1 : t;
}

/* Plans one replica over v[0..n) at the smallest T; appends its pieces.
 * Returns 1, 0 when the nodes cannot hold it, -1 when out of memory. */
static int replica_fill(const pl_ctx *c, const int32_t *v, int32_t n, int32_t pipeline,
                        pl_pieces *out) {
    swarm_band *bands = malloc((size_t)(c->L + 1) * sizeof *bands);
    int32_t *end = malloc((size_t)(c->L + 1) * sizeof *end);
    int32_t *mem = malloc((size_t)(n + 1) * sizeof *mem), *lo = NULL, *max = NULL, *cnt = NULL;
    double *speed = malloc((size_t)(n + 1) * sizeof *speed), T;
    lo = malloc((size_t)(n + 1) * sizeof *lo);
    max = malloc((size_t)(n + 1) * sizeof *max);
    cnt = malloc((size_t)(n + 1) * sizeof *cnt);
    int rc = -1;
    int32_t nb;
    if (!bands || !end || !mem || !speed || !lo || !max || !cnt ||
        (nb = replica_time(c, v, n, bands, &T)) < 0)
        goto done;
    rc = 0;
    if (nb == 0 || !bands_fill(c, v, n, bands, nb, T, end)) goto done;
    for (int32_t k = 0, j = 0; k < nb; k++) {
        int32_t m = 0;
        for (; j < end[k]; j++) { /* the run's nodes that take part */
            int64_t lim = band_limit(c, v[j], &bands[k], T);
            if (lim < 1) continue;
            mem[m] = v[j];
            speed[m] = c->nodes[v[j]].speed;
            lo[m] = 1;
            max[m] = (int32_t)band_limit(c, v[j], &bands[k], INFINITY);
            m++;
        }
        if (!pl_water_fill(c->X, m, speed, lo, max, cnt)) goto done;
        for (int32_t i = 0, next = 0; i < m; i++) {
            pl_piece q = {mem[i], MT_PLACE_EXPERTS, pipeline, bands[k].a, bands[k].b, false,
                          next,   next + cnt[i],    -1};
            if (pl_push(out, q)) {
                rc = -1;
                goto done;
            }
            next += cnt[i];
        }
    }
    rc = 1;
done:
    free(bands);
    free(end);
    free(mem);
    free(speed);
    free(lo);
    free(max);
    free(cnt);
    return rc;
}

int32_t pl_swarm_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                       const int32_t *idx, pl_pieces *out) {
    return pl_build(c, pool, n_pool, want, idx, out, c->experts_bytes, pl_swarm_feasible,
                    pl_swarm_time, replica_fill);
}

/* ------------------------------------------------------------------ keep */

typedef struct swarm_keep {
    const pl_ctx *c;
    bool *used;
    pl_pieces *p;
    int32_t *marked, n_marked;
    pl_part *parts;
    int32_t pipeline;
} swarm_keep;

/* Places rectangle [a, b) x [eb, ee) on free nodes: one node, else split by
 * experts, else halve the layers. 0 = done, 1 = cannot, -1 = out of memory
 * (a pl_rect_fn). */
static int fill_rect(void *ctx, int32_t a, int32_t b, int32_t eb, int32_t ee) {
    swarm_keep *s = ctx;
    const pl_ctx *c = s->c;
    while (a < b && c->m->expert_bytes[a] == 0) a++;
    while (b > a && c->m->expert_bytes[b - 1] == 0) b--;
    if (a == b) return 0;
    int32_t n = pl_fill_piece(c, s->used, a, b, false, eb, ee, s->parts, c->n_nodes);
    if (n > 0) {
        for (int32_t i = 0; i < n; i++) {
            s->marked[s->n_marked++] = s->parts[i].node;
            pl_piece q = {s->parts[i].node, MT_PLACE_EXPERTS, s->pipeline, a, b, false,
                          s->parts[i].eb,   s->parts[i].ee,   -1};
            if (pl_push(s->p, q)) return -1;
        }
        return 0;
    }
    if (pl_moe(c, a, b) < 2) return 1;
    uint64_t half = pl_exp(c, a, b) / 2; /* cut where the column bytes are even */
    int32_t m = a + 1;
    while (m < b - 1 && pl_exp(c, a, m) < half) m++;
    int rc = fill_rect(ctx, a, m, eb, ee);
    return rc ? rc : fill_rect(ctx, m, b, eb, ee);
}

/* A member that still holds its rectangle: available and large enough. */
static bool rect_healthy(const pl_ctx *c, int32_t node) {
    const mt_place_node *x = &c->nodes[node];
    const mt_place_assign *a = &x->current;
    return x->available && x->capacity >= pl_piece_bytes(c, a->layer_begin, a->layer_end, false,
                                                         a->expert_begin, a->expert_end);
}

/* One previous replica: records r[0..n) (node indices whose current
 * assignment is in it). 1 = kept, 0 = not, -1 = out of memory. */
static int keep_replica(const pl_ctx *c, bool *used, const int32_t *r, int32_t n, pl_pieces *out) {
    int32_t L = c->L, X = c->X;
    bool *need = calloc((size_t)L * X, sizeof *need), *held = calloc((size_t)L * X, sizeof *held);
    int32_t *marked = malloc((size_t)(c->n_nodes + 1) * sizeof *marked);
    pl_part *parts = malloc((size_t)(c->n_nodes + 1) * sizeof *parts);
    pl_pieces p = {0};
    swarm_keep s = {c, used, &p, marked, 0, parts, c->nodes[r[0]].current.pipeline};
    int rc = -1;
    if (!need || !held || !marked || !parts) goto done;
    rc = 0;
    for (int32_t i = 0; i < n; i++) { /* rectangles must not overlap */
        const mt_place_assign *a = &c->nodes[r[i]].current;
        for (int32_t l = a->layer_begin; l < a->layer_end; l++)
            for (int32_t e = a->expert_begin; e < a->expert_end; e++) {
                if (held[(size_t)l * X + e]) goto done;
                held[(size_t)l * X + e] = true;
            }
    }
    for (int32_t i = 0; i < n; i++) { /* healthy members stay (pl_swarm_keep marked them) */
        const mt_place_assign *a = &c->nodes[r[i]].current;
        if (!rect_healthy(c, r[i])) continue;
        pl_piece q = {r[i],
                      MT_PLACE_EXPERTS,
                      s.pipeline,
                      a->layer_begin,
                      a->layer_end,
                      false,
                      a->expert_begin,
                      a->expert_end,
                      -1};
        if (pl_push(&p, q)) {
            rc = -1;
            goto done;
        }
    }
    for (int32_t i = 0; i < n; i++) { /* lost members' rectangles, as they were */
        const mt_place_assign *a = &c->nodes[r[i]].current;
        if (rect_healthy(c, r[i])) continue;
        int f = fill_rect(&s, a->layer_begin, a->layer_end, a->expert_begin, a->expert_end);
        if (f) {
            rc = f < 0 ? -1 : 0;
            goto done;
        }
    }
    for (int32_t l = 0; l < L; l++) /* slices nobody listed (nodes gone from the list) */
        for (int32_t e = 0; e < X; e++)
            need[(size_t)l * X + e] = c->m->expert_bytes[l] > 0 && !held[(size_t)l * X + e];
    int f = pl_rects(need, X, 0, L, 0, X, fill_rect, &s);
    if (f) {
        rc = f < 0 ? -1 : 0;
        goto done;
    }
    rc = 1;
    for (int32_t i = 0; i < p.n && rc == 1; i++)
        if (pl_push(out, p.v[i])) rc = -1;
done:
    if (rc != 1) { /* not kept: its members and whatever it took are free again */
        for (int32_t i = 0; i < n; i++) used[r[i]] = false;
        if (marked)
            for (int32_t i = 0; i < s.n_marked; i++) used[marked[i]] = false;
    }
    pl_pieces_free(&p);
    free(need);
    free(held);
    free(marked);
    free(parts);
    return rc;
}

typedef struct keep_rec {
    int32_t pipeline, node;
} keep_rec;

static int cmp_rec(const void *pa, const void *pb) {
    const keep_rec *a = pa, *b = pb;
    if (a->pipeline != b->pipeline) return a->pipeline < b->pipeline ? -1 : 1;
    return (a->node > b->node) - (a->node < b->node);
}

int32_t pl_swarm_keep(const pl_ctx *c, bool *used, pl_pieces *out, int32_t *kept) {
    keep_rec *recs = malloc((size_t)(c->n_nodes + 1) * sizeof *recs);
    int32_t *r = malloc((size_t)(c->n_nodes + 1) * sizeof *r), n = 0, n_kept = 0;
    if (!recs || !r) {
        free(recs);
        free(r);
        return -1;
    }
    for (int32_t i = 0; i < c->n_nodes; i++) {
        const mt_place_assign *a = &c->nodes[i].current;
        if (a->role != MT_PLACE_EXPERTS || a->pipeline < 0 || a->pipeline > (1 << 20) ||
            a->layer_begin < 0 || a->layer_end > c->L || a->layer_begin >= a->layer_end ||
            a->expert_begin < 0 || a->expert_end > c->X || a->expert_begin >= a->expert_end ||
            pl_exp(c, a->layer_begin, a->layer_end) == 0)
            continue;
        recs[n++] = (keep_rec){a->pipeline, i};
    }
    qsort(recs, (size_t)n, sizeof *recs, cmp_rec);
    for (int32_t i = 0; i < n; i++) { /* no replica's hole may take another's healthy member */
        r[i] = recs[i].node;
        if (rect_healthy(c, r[i])) used[r[i]] = true;
    }
    for (int32_t i = 0; i < n;) {
        int32_t j = i, pipe = recs[i].pipeline;
        while (j < n && recs[j].pipeline == pipe) j++;
        int rc = keep_replica(c, used, r + i, j - i, out);
        if (rc < 0) {
            n_kept = -1;
            break;
        }
        if (rc == 1) kept[n_kept++] = pipe;
        i = j;
    }
    free(recs);
    free(r);
    return n_kept;
}

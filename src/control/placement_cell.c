/* placement_cell.c - cell mode: complete pipelines of stage groups.
 *
 * A pipeline's nodes are taken fastest first. For a time budget T, a
 * dynamic program over that order finds the furthest layer the first j
 * nodes can reach: each step either skips a node or makes a group of the
 * next k nodes (k <= max_group) that holds layers [f, b) within capacity and
 * with a group time <= T (see the top of moontail/placement.h). Reach only
 * grows with T, so a bisection finds the smallest T at which the nodes cover
 * every layer: the pipeline's slowest group is then as fast as these nodes
 * allow in this order, faster nodes take more layers, and two or more small
 * nodes share a layer (stage + partners) when none holds it alone.
 * Pipelines get their nodes by a snake draft by speed (placement.c).
 *
 * Capacity is checked with the stage's working memory (pl_attn_room), time
 * with the bytes it reads (pl_attn); see the top of moontail/placement.h.
 *
 * Keeping a previous plan: a pipeline whose groups still chain over every
 * layer keeps its healthy members; the shard of a lost member goes to free
 * nodes (pl_fill_piece), a lost whole group to one free node or a small
 * pipeline of free nodes over its layers. */
#include "placement_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- groups */

typedef pl_group cell_group;

/* Whether members mem[0..k) can hold layers [a, b) as one group with a group
 * time <= T (T infinite: capacity only). Each member in turn (fastest
 * first) is tried as the stage; *stage gets the first that works. A member
 * of a multi-node group must hold at least one expert, so layers without
 * routed experts need a group of one. The stage needs room for the
 * attention parts and their working memory (AR); its time counts the
 * attention bytes read (A). */
static bool group_fits(const pl_ctx *c, const int32_t *mem, int32_t k, int32_t a, int32_t b,
                       double T, int32_t *stage) {
    uint64_t A = pl_attn(c, a, b), AR = pl_attn_room(c, a, b), E = pl_exp(c, a, b);
    int32_t X = c->X;
    bool timed = isfinite(T);
    if (k == 1) {
        if (c->nodes[mem[0]].capacity < AR + (uint64_t)X * E) return false;
        if (timed && ((double)A + (double)c->U * (double)E) / pl_speed_bpm(c, mem[0]) > T)
            return false;
        *stage = 0;
        return true;
    }
    if (E == 0) return false;
    double call = pl_moe(c, a, b) * c->p->partner_call_ms, ue = (double)c->U * (double)E;
    for (int32_t s = 0; s < k; s++) {
        if (c->nodes[mem[s]].capacity < AR) continue;
        double rem = INFINITY; /* time left for the experts after attention and the calls */
        if (timed) {
            rem = T - (double)A / pl_speed_bpm(c, mem[s]) - call;
            if (rem < 0) continue;
        }
        int64_t total = 0;
        bool ok = true;
        for (int32_t i = 0; i < k && ok; i++) {
            uint64_t m = (c->nodes[mem[i]].capacity - (i == s ? AR : 0)) / E;
            if (timed) { /* experts it can run within rem */
                double t = floor(rem * pl_speed_bpm(c, mem[i]) * X / ue);
                if (t < (double)m) m = (uint64_t)t;
            }
            if (i != s && m < 1) ok = false;
            total += m > (uint64_t)X ? X : (int64_t)m;
        }
        if (ok && total >= X) {
            *stage = s;
            return true;
        }
    }
    return false;
}

/* The furthest b in [a, b0] such that mem[0..k) hold layers [a, b) as a
 * group within T (a when not even one layer fits). */
static int32_t group_reach(const pl_ctx *c, const int32_t *mem, int32_t k, int32_t a, int32_t b0,
                           double T) {
    int32_t lo = a, hi = b0, s;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (group_fits(c, mem, k, a, mid, T, &s))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Plans layers [a0, b0) over v[0..n) (in this order) with every group within
 * T: f[j] = furthest layer the first j nodes reach (groups of consecutive
 * nodes, nodes may be skipped). Writes the groups (when groups is non-NULL)
 * and returns their number, 0 when the nodes cannot reach b0, -1 when out
 * of memory. Stops at the first j that reaches b0, so later nodes stay
 * free. */
static int32_t cell_dp(const pl_ctx *c, const int32_t *v, int32_t n, int32_t a0, int32_t b0,
                       double T, cell_group *groups) {
    int32_t K = c->p->max_group;
    int32_t *f = malloc(((size_t)n + 1) * sizeof *f), *kk = malloc(((size_t)n + 1) * sizeof *kk);
    if (!f || !kk) {
        free(f);
        free(kk);
        return -1;
    }
    f[0] = a0;
    for (int32_t j = 1; j <= n; j++) f[j] = -1, kk[j] = 0;
    int32_t end = f[0] == b0 ? 0 : -1;
    for (int32_t j = 0; j < n && end < 0; j++) {
        if (f[j] > f[j + 1]) f[j + 1] = f[j], kk[j + 1] = 0; /* skip node j */
        for (int32_t k = 1; k <= K && j + k <= n; k++) {
            int32_t b = group_reach(c, v + j, k, f[j], b0, T);
            if (b > f[j] && b > f[j + k]) f[j + k] = b, kk[j + k] = k;
            if (b == b0) break; /* more members cannot reach further */
        }
        if (f[j + 1] == b0) end = j + 1;
    }
    int32_t n_groups = 0;
    if (end >= 0 && groups) {
        for (int32_t j = end; j > 0;) /* count, then fill back to front */
            if (kk[j] == 0)
                j--;
            else
                n_groups++, j -= kk[j];
        int32_t g = n_groups;
        for (int32_t j = end; j > 0;) {
            if (kk[j] == 0) {
                j--;
                continue;
            }
            cell_group *gr = &groups[--g];
            gr->k = kk[j];
            gr->a = f[j - kk[j]];
            gr->b = f[j];
            memcpy(gr->mem, v + j - kk[j], (size_t)kk[j] * sizeof *gr->mem);
            group_fits(c, gr->mem, gr->k, gr->a, gr->b, T, &gr->stage);
            j -= kk[j];
        }
    } else if (end >= 0) {
        n_groups = 1;
    }
    free(f);
    free(kk);
    return n_groups;
}

/* cell_dp at the smallest T (bisection) that still reaches b0; *t_out (when
 * non-NULL) gets that T (INFINITY when the nodes cannot reach b0). */
static int32_t cell_fill(const pl_ctx *c, const int32_t *v, int32_t n, int32_t a0, int32_t b0,
                         cell_group *groups, double *t_out) {
    if (t_out) *t_out = INFINITY;
    int32_t g = cell_dp(c, v, n, a0, b0, INFINITY, NULL);
    if (g <= 0) return g;
    /* every group of the capacity-only plan is within hi: all bytes touched at
     * the slowest speed, plus every partner call */
    double s_min = INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (pl_speed_bpm(c, v[i]) < s_min) s_min = pl_speed_bpm(c, v[i]);
    double touched = (double)pl_attn(c, a0, b0) + (double)c->U * (double)pl_exp(c, a0, b0);
    double lo = 0, hi = (touched / s_min + pl_moe(c, a0, b0) * c->p->partner_call_ms) * 1.001;
    int32_t r = cell_dp(c, v, n, a0, b0, hi, NULL);
    if (r < 0) return -1;
    if (r == 0) { /* rounding: no bisection */
        if (t_out) *t_out = hi;
        return groups ? cell_dp(c, v, n, a0, b0, INFINITY, groups) : 1;
    }
    for (int it = 0; it < 60 && hi - lo > 1e-5 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        r = cell_dp(c, v, n, a0, b0, mid, NULL);
        if (r < 0) return -1;
        if (r > 0)
            hi = mid;
        else
            lo = mid;
    }
    if (t_out) *t_out = hi;
    return groups ? cell_dp(c, v, n, a0, b0, hi, groups) : 1;
}

/* The stage takes experts [0, n_stage), then the partners in member order,
 * split so the slowest member's share per speed is as small as capacity
 * allows. */
int pl_cell_emit_group(const pl_ctx *c, const cell_group *g, int32_t pipeline, pl_pieces *out) {
    int32_t stage = g->mem[g->stage];
    if (g->k == 1)
        return pl_push(out,
                       (pl_piece){stage, MT_PLACE_STAGE, pipeline, g->a, g->b, true, 0, c->X, -1});
    uint64_t AR = pl_attn_room(c, g->a, g->b), E = pl_exp(c, g->a, g->b);
    double speed[PL_MAX_GROUP];
    int32_t lo[PL_MAX_GROUP], max[PL_MAX_GROUP], cnt[PL_MAX_GROUP], order[PL_MAX_GROUP];
    order[0] = g->stage; /* stage first, then the others in member order */
    for (int32_t i = 0, k = 1; i < g->k; i++)
        if (i != g->stage) order[k++] = i;
    for (int32_t j = 0; j < g->k; j++) {
        int32_t node = g->mem[order[j]];
        uint64_t m = (c->nodes[node].capacity - (j == 0 ? AR : 0)) / E;
        speed[j] = c->nodes[node].speed;
        lo[j] = j == 0 ? 0 : 1;
        max[j] = m > (uint64_t)c->X ? c->X : (int32_t)m;
    }
    if (!pl_water_fill(c->X, g->k, speed, lo, max, cnt)) return -1; /* group_fits said it fits */
    int32_t next = 0;
    for (int32_t j = 0; j < g->k; j++) {
        int32_t node = g->mem[order[j]];
        pl_piece q = {node,
                      j == 0 ? MT_PLACE_STAGE : MT_PLACE_PARTNER,
                      pipeline,
                      g->a,
                      g->b,
                      j == 0,
                      next,
                      next + cnt[j],
                      j == 0 ? -1 : stage};
        if (pl_push(out, q)) return -1;
        next += cnt[j];
    }
    return 0;
}

/* ----------------------------------------------------------------- build */

bool pl_cell_feasible(const pl_ctx *c, const int32_t *v, int32_t n) {
    return cell_dp(c, v, n, 0, c->L, INFINITY, NULL) > 0;
}

double pl_cell_time(const pl_ctx *c, const int32_t *v, int32_t n) {
    double t;
    return cell_fill(c, v, n, 0, c->L, NULL, &t) < 0 ? -1 : t;
}

/* One pipeline: the groups cell_fill makes of the list, in layer order. */
int pl_cell_throughput_fill(const pl_ctx *c, const int32_t *list, int32_t n, int32_t idx,
                            pl_pieces *out) {
    cell_group *groups = malloc((size_t)(n > 0 ? n : 1) * sizeof *groups);
    if (!groups) return -1;
    int32_t g = cell_fill(c, list, n, 0, c->L, groups, NULL);
    int rc = g < 0 ? -1 : g > 0;
    for (int32_t j = 0; j < g && rc == 1; j++)
        if (pl_cell_emit_group(c, &groups[j], idx, out)) rc = 0;
    free(groups);
    return rc;
}

/* ------------------------------------------------------------------ keep */

typedef struct keep_rec {
    int32_t node;
    int64_t key; /* the group's stage node id */
    const mt_place_assign *cur;
} keep_rec;

static int cmp_rec(const void *pa, const void *pb) {
    const keep_rec *a = pa, *b = pb;
    if (a->cur->pipeline != b->cur->pipeline) return a->cur->pipeline < b->cur->pipeline ? -1 : 1;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    if (a->cur->role != b->cur->role) return a->cur->role == MT_PLACE_STAGE ? -1 : 1;
    return (a->cur->expert_begin > b->cur->expert_begin) -
           (a->cur->expert_begin < b->cur->expert_begin);
}

/* A record's shape is something this model can hold. */
static bool rec_valid(const pl_ctx *c, const mt_place_assign *a) {
    if (a->pipeline < 0 || a->pipeline > (1 << 20)) return false;
    if (a->layer_begin < 0 || a->layer_end > c->L || a->layer_begin >= a->layer_end) return false;
    if (a->expert_begin < 0 || a->expert_end > c->X || a->expert_begin > a->expert_end)
        return false;
    if (a->role == MT_PLACE_STAGE) return a->attention;
    return !a->attention && a->expert_end > a->expert_begin &&
           pl_exp(c, a->layer_begin, a->layer_end) > 0;
}

/* A member that still holds its shard: available and large enough (for the
 * shard and, as a stage, its working memory). */
static bool rec_healthy(const pl_ctx *c, const keep_rec *r) {
    const mt_place_node *x = &c->nodes[r->node];
    const mt_place_assign *a = r->cur;
    return x->available &&
           x->capacity >= pl_piece_room(c, a->layer_begin, a->layer_end, a->attention,
                                        a->expert_begin, a->expert_end);
}

typedef struct keep_state {
    const pl_ctx *c;
    bool *used;
    pl_pieces *p;    /* the pipeline's pieces so far */
    int32_t *marked; /* nodes this pipeline marked in used, to undo */
    int32_t n_marked;
    pl_part *parts; /* scratch (n_nodes) */
    int32_t pipeline;
} keep_state;

static void mark(keep_state *s, int32_t node) {
    s->used[node] = true;
    s->marked[s->n_marked++] = node;
}

/* Fills a shard through pl_fill_piece; 1 = done, 0 = no free nodes hold it,
 * -1 out of memory. *stage_node gets the part with attention (if any). */
static int fill(keep_state *s, int32_t a, int32_t b, bool attention, int32_t eb, int32_t ee,
                int32_t *stage_node, int32_t paired) {
    int32_t n = pl_fill_piece(s->c, s->used, a, b, attention, eb, ee, s->parts, s->c->n_nodes);
    if (n == 0) return 0;
    int32_t stage = attention ? s->parts[0].node : paired;
    if (stage_node && attention) *stage_node = stage;
    for (int32_t i = 0; i < n; i++) {
        const pl_part *q = &s->parts[i];
        s->marked[s->n_marked++] = q->node; /* pl_fill_piece marked it in used */
        pl_piece pc = {q->node,
                       q->attention ? MT_PLACE_STAGE : MT_PLACE_PARTNER,
                       s->pipeline,
                       a,
                       b,
                       q->attention,
                       q->eb,
                       q->ee,
                       q->attention ? -1 : stage};
        if (pl_push(s->p, pc)) return -1;
    }
    return 1;
}

/* Layers [a, b) that no group holds any more: one free node, or a stage
 * with partners, or a small pipeline of free nodes. */
static int fill_layers(keep_state *s, int32_t a, int32_t b) {
    int rc = fill(s, a, b, true, 0, s->c->X, NULL, -1);
    if (rc) return rc;
    const pl_ctx *c = s->c;
    int32_t *v = malloc((size_t)(c->n_nodes + 1) * sizeof *v), n = 0;
    cell_group *groups = malloc((size_t)(c->n_nodes + 1) * sizeof *groups);
    if (!v || !groups) {
        free(v);
        free(groups);
        return -1;
    }
    for (int32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].available && !s->used[i]) v[n++] = i;
    pl_sort_fastest(c, v, n);
    int32_t g = cell_fill(c, v, n, a, b, groups, NULL);
    rc = g < 0 ? -1 : g > 0;
    for (int32_t j = 0; j < g && rc == 1; j++) {
        if (pl_cell_emit_group(c, &groups[j], s->pipeline, s->p)) rc = -1;
        for (int32_t i = 0; i < groups[j].k; i++) mark(s, groups[j].mem[i]);
    }
    free(v);
    free(groups);
    return rc;
}

/* One stage group of a kept pipeline: records r[0..n) share its stage id.
 * Returns 1 when it is whole again, 0 when it cannot be, -1 out of memory. */
static int keep_group(keep_state *s, const keep_rec *r, int32_t n, bool *have) {
    const pl_ctx *c = s->c;
    int32_t a = r[0].cur->layer_begin, b = r[0].cur->layer_end, X = c->X;
    const keep_rec *stage = r[0].cur->role == MT_PLACE_STAGE ? &r[0] : NULL;
    for (int32_t e = 0; e < X; e++) have[e] = false;
    int32_t stage_node = -1, first_new = s->p->n;
    if (stage && rec_healthy(c, stage)) {
        stage_node = stage->node;
        mark(s, stage_node);
    }
    for (int32_t i = 0; i < n; i++) {
        const mt_place_assign *cur = r[i].cur;
        bool is_stage = &r[i] == stage;
        if (!is_stage && !rec_healthy(c, &r[i])) continue;
        if (is_stage && stage_node < 0) continue;
        if (!is_stage) mark(s, r[i].node);
        for (int32_t e = cur->expert_begin; e < cur->expert_end; e++) have[e] = true;
        pl_piece q = {r[i].node,      cur->role,         s->pipeline,     a, b,
                      cur->attention, cur->expert_begin, cur->expert_end, -1};
        if (pl_push(s->p, q)) return -1;
    }
    if (stage_node < 0) { /* a new stage: the lost one's experts, or those from 0 */
        int32_t eb = 0, ee = 0;
        if (stage) {
            eb = stage->cur->expert_begin, ee = stage->cur->expert_end;
        } else {
            while (ee < X && !have[ee]) ee++;
        }
        int rc = fill(s, a, b, true, eb, ee, &stage_node, -1);
        if (rc <= 0) return rc;
        for (int32_t e = eb; e < ee; e++) have[e] = true;
    }
    for (int32_t e = 0; e < X;) { /* experts nobody holds: new partners */
        if (have[e]) {
            e++;
            continue;
        }
        int32_t f = e;
        while (f < X && !have[f]) f++;
        int rc = fill(s, a, b, false, e, f, NULL, stage_node);
        if (rc <= 0) return rc;
        e = f;
    }
    for (int32_t i = first_new; i < s->p->n; i++) /* partners follow the (new) stage */
        if (s->p->v[i].role == MT_PLACE_PARTNER) s->p->v[i].paired = stage_node;
    return 1;
}

static int cmp_group_start(const void *pa, const void *pb) {
    const int32_t *a = pa, *b = pb; /* (start record, count, layer_begin) triples */
    return (a[2] > b[2]) - (a[2] < b[2]);
}

/* One previous pipeline: records r[0..n), sorted by cmp_rec. Returns 1 when
 * kept (pieces appended to out), 0 when not, -1 out of memory. */
static int keep_pipeline(const pl_ctx *c, bool *used, const keep_rec *r, int32_t n,
                         pl_pieces *out) {
    int32_t *grp = malloc((size_t)n * 3 * sizeof *grp), n_grp = 0;
    int32_t *marked = malloc((size_t)(c->n_nodes + 1) * sizeof *marked);
    pl_part *parts = malloc((size_t)(c->n_nodes + 1) * sizeof *parts);
    bool *have = malloc((size_t)(c->X + 1) * sizeof *have);
    pl_pieces p = {0};
    keep_state s = {c, used, &p, marked, 0, parts, r[0].cur->pipeline};
    int rc = -1;
    if (!grp || !marked || !parts || !have) goto done;
    rc = 0;
    for (int32_t i = 0; i < n;) { /* groups: runs of one stage id, one layer range */
        int32_t j = i;
        while (j < n && r[j].key == r[i].key) {
            if (r[j].cur->layer_begin != r[i].cur->layer_begin ||
                r[j].cur->layer_end != r[i].cur->layer_end ||
                (j > i && r[j].cur->role == MT_PLACE_STAGE))
                goto done;
            if (j > i && r[j].cur->expert_begin < r[j - 1].cur->expert_end &&
                r[j - 1].cur->role == MT_PLACE_PARTNER)
                goto done; /* partners overlap */
            j++;
        }
        grp[3 * n_grp] = i, grp[3 * n_grp + 1] = j - i, grp[3 * n_grp + 2] = r[i].cur->layer_begin;
        n_grp++;
        i = j;
    }
    qsort(grp, (size_t)n_grp, 3 * sizeof *grp, cmp_group_start);
    int32_t cursor = 0;
    for (int32_t g = 0; g < n_grp; g++) {
        const keep_rec *gr = &r[grp[3 * g]];
        int32_t a = gr->cur->layer_begin, k = grp[3 * g + 1];
        if (a < cursor) goto done; /* groups overlap */
        /* the stage's experts must not overlap its partners' */
        if (gr[0].cur->role == MT_PLACE_STAGE)
            for (int32_t i = 1; i < k; i++)
                if (gr[i].cur->expert_begin < gr[0].cur->expert_end &&
                    gr[0].cur->expert_begin < gr[i].cur->expert_end)
                    goto done;
        if (a > cursor && (rc = fill_layers(&s, cursor, a)) <= 0) goto done;
        if ((rc = keep_group(&s, gr, k, have)) <= 0) goto done;
        cursor = gr->cur->layer_end;
    }
    if (cursor < c->L && (rc = fill_layers(&s, cursor, c->L)) <= 0) goto done;
    rc = 1;
    for (int32_t i = 0; i < p.n && rc == 1; i++)
        if (pl_push(out, p.v[i])) rc = -1;
done:
    if (rc != 1) { /* not kept: its members and whatever it took are free again */
        for (int32_t i = 0; i < n; i++) used[r[i].node] = false;
        if (marked)
            for (int32_t i = 0; i < s.n_marked; i++) used[marked[i]] = false;
    }
    pl_pieces_free(&p);
    free(grp);
    free(marked);
    free(parts);
    free(have);
    return rc;
}

int32_t pl_cell_keep(const pl_ctx *c, bool *used, pl_pieces *out, int32_t *kept) {
    keep_rec *recs = malloc((size_t)(c->n_nodes + 1) * sizeof *recs);
    if (!recs) return -1;
    int32_t n = 0, n_kept = 0;
    for (int32_t i = 0; i < c->n_nodes; i++) {
        const mt_place_assign *a = &c->nodes[i].current;
        if ((a->role != MT_PLACE_STAGE && a->role != MT_PLACE_PARTNER) || !rec_valid(c, a))
            continue;
        recs[n++] = (keep_rec){i, a->role == MT_PLACE_STAGE ? c->nodes[i].id : a->paired_with, a};
    }
    qsort(recs, (size_t)n, sizeof *recs, cmp_rec);
    for (int32_t i = 0; i < n; i++) /* no pipeline's hole may take another's healthy member */
        if (rec_healthy(c, &recs[i])) used[recs[i].node] = true;
    for (int32_t i = 0; i < n;) {
        int32_t j = i;
        while (j < n && recs[j].cur->pipeline == recs[i].cur->pipeline) j++;
        int rc = keep_pipeline(c, used, recs + i, j - i, out);
        if (rc < 0) {
            n_kept = -1;
            break;
        }
        if (rc == 1) kept[n_kept++] = recs[i].cur->pipeline;
        i = j;
    }
    free(recs);
    return n_kept;
}

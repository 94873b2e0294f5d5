/* placement_latency.c - the LATENCY and BALANCED layouts of a cell pipeline
 * (mt_place_params.objective): the groups that make one token's trip through
 * the pipeline shortest, rather than its slowest group fastest.
 *
 * A token's trip is the sum over the pipeline's groups of the group time
 * (the top of moontail/placement.h: attention on the stage, one partner
 * call per MoE layer, the slowest member's share of the experts) plus one
 * hop (hop_ms) into each group. Many thin stages make the trip long: every
 * layer's bytes are read by one node after another, plus a hop each. Wider
 * groups let partners read a layer's experts at once (expert parallelism),
 * so the trip shrinks until the attention parts, the calls and the hops
 * dominate.
 *
 * A dynamic program over the nodes in list order (fastest first):
 * best[j][l] = the shortest trip over layers [0, l) using groups of
 * consecutive nodes among the first j (a node may be skipped and stays
 * free). A group of the k nodes from j on takes layers [l, b) when their
 * capacity holds them; its time is that of its best member as the stage,
 * with pl_water_fill's expert split, as pl_cell_emit_group lays it out. The
 * THROUGHPUT layout is one of the layouts searched (consecutive groups in
 * the same order), so LATENCY's trip is never longer than THROUGHPUT's.
 * BALANCED also refuses any group slower than 1.25x the THROUGHPUT layout's
 * slowest group over the same nodes. Of equal trips the one using the fewest
 * nodes wins, so the rest stay free for other pipelines and spares. */
#include "placement_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#define BALANCED_SLACK 1.25

/* Group time of mem[0..k) over layers [a, b) with member s as the stage (ms,
 * hop not included): attention on s, one partner call per MoE layer, the
 * slowest member's share of pl_water_fill's expert split (as
 * pl_cell_emit_group lays it out). INFINITY when their capacity cannot
 * hold the layers that way. */
static double stage_ms(const pl_ctx *c, const int32_t *mem, int32_t k, int32_t s, int32_t a,
                       int32_t b) {
    uint64_t A = pl_attn(c, a, b), AR = pl_attn_room(c, a, b), E = pl_exp(c, a, b);
    int32_t X = c->X;
    double ue = (double)c->U * (double)E;
    if (k < 1 || k > PL_MAX_GROUP || c->nodes[mem[s]].capacity < AR) return INFINITY;
    if (k == 1) {
        if (c->nodes[mem[0]].capacity < AR + (uint64_t)X * E) return INFINITY;
        return ((double)A + ue) / pl_speed_bpm(c, mem[0]);
    }
    if (E == 0) return INFINITY; /* partners need experts to hold */
    double speed[PL_MAX_GROUP];
    int32_t lo[PL_MAX_GROUP], max[PL_MAX_GROUP], cnt[PL_MAX_GROUP], order[PL_MAX_GROUP];
    order[0] = s;
    for (int32_t i = 0, j = 1; i < k; i++)
        if (i != s) order[j++] = i;
    for (int32_t j = 0; j < k; j++) {
        int32_t node = mem[order[j]];
        uint64_t m = (c->nodes[node].capacity - (j == 0 ? AR : 0)) / E;
        speed[j] = c->nodes[node].speed;
        lo[j] = j == 0 ? 0 : 1;
        max[j] = m > (uint64_t)X ? X : (int32_t)m;
    }
    if (!pl_water_fill(X, k, speed, lo, max, cnt)) return INFINITY;
    double experts = 0;
    for (int32_t j = 0; j < k; j++) {
        double t = (double)cnt[j] * ue / X / pl_speed_bpm(c, mem[order[j]]);
        if (t > experts) experts = t;
    }
    return (double)A / pl_speed_bpm(c, mem[s]) + pl_moe(c, a, b) * c->p->partner_call_ms + experts;
}

/* The best stage of mem[0..k) over layers [a, b) (into *stage) and its group
 * time; INFINITY when no member can be the stage. Capacity only shrinks and
 * time only grows as b grows, so INFINITY (or a time over a cap) at b means
 * the same at every larger b. */
static double group_ms(const pl_ctx *c, const int32_t *mem, int32_t k, int32_t a, int32_t b,
                       int32_t *stage) {
    double best = INFINITY;
    *stage = 0;
    for (int32_t s = 0; s < k; s++) {
        bool seen = false; /* a member like an earlier one gives the same time */
        for (int32_t q = 0; q < s && !seen; q++)
            seen = c->nodes[mem[q]].speed == c->nodes[mem[s]].speed &&
                   c->nodes[mem[q]].capacity == c->nodes[mem[s]].capacity;
        if (seen) continue;
        double t = stage_ms(c, mem, k, s, a, b);
        if (t < best) best = t, *stage = s;
    }
    return best;
}

int pl_cell_latency_fill(const pl_ctx *c, const int32_t *list, int32_t n, int32_t idx,
                         pl_pieces *out) {
    double cap = INFINITY;
    if (c->p->objective == MT_PLACE_BALANCED) {
        double t = pl_cell_time(c, list, n);
        if (t < 0) return -1;
        if (!isfinite(t)) return 0;
        cap = t * BALANCED_SLACK;
    }
    const int32_t L = c->L, K = c->p->max_group;
    const size_t W = (size_t)L + 1, cells = ((size_t)n + 1) * W;
    double *best = malloc(cells * sizeof *best);
    int32_t *from_k = malloc(cells * sizeof *from_k); /* 0: node j-1 skipped */
    int32_t *from_l = malloc(cells * sizeof *from_l);
    pl_group *groups = malloc((size_t)(n > 0 ? n : 1) * sizeof *groups);
    int rc = -1;
    if (!best || !from_k || !from_l || !groups) goto done;
    for (size_t i = 0; i < cells; i++) best[i] = INFINITY, from_k[i] = -1, from_l[i] = -1;
    best[0] = 0;
    for (int32_t j = 0; j < n; j++)
        for (int32_t l = 0; l < L; l++) {
            double here = best[(size_t)j * W + l];
            if (!isfinite(here)) continue;
            size_t skip = (size_t)(j + 1) * W + l;
            if (here < best[skip]) best[skip] = here, from_k[skip] = 0, from_l[skip] = l;
            for (int32_t k = 1; k <= K && j + k <= n; k++)
                for (int32_t b = l + 1; b <= L; b++) {
                    int32_t stage;
                    if (k > 1 && pl_exp(c, l, b) == 0)
                        continue; /* dense so far: partners
                                     need experts further on */
                    double t = group_ms(c, list + j, k, l, b, &stage);
                    if (!isfinite(t) || t > cap) break; /* both only grow with b */
                    size_t at = (size_t)(j + k) * W + b;
                    double v = here + t + c->p->hop_ms;
                    if (v < best[at]) best[at] = v, from_k[at] = k, from_l[at] = l;
                }
        }
    int32_t end = -1; /* fewest nodes among the shortest trips */
    for (int32_t j = 0; j <= n; j++)
        if (isfinite(best[(size_t)j * W + L]) &&
            (end < 0 || best[(size_t)j * W + L] < best[(size_t)end * W + L]))
            end = j;
    if (end < 0) { /* the search includes THROUGHPUT's layout: kept as a safety net */
        rc = pl_cell_throughput_fill(c, list, n, idx, out);
        goto done;
    }
    int32_t n_groups = 0;
    for (int32_t j = end, l = L; j > 0;) { /* walk back, groups last to first */
        size_t at = (size_t)j * W + l;
        int32_t k = from_k[at], a = from_l[at];
        if (k > 0) {
            pl_group *g = &groups[n_groups++];
            g->a = a, g->b = l, g->k = k;
            for (int32_t i = 0; i < k; i++) g->mem[i] = list[j - k + i];
            group_ms(c, g->mem, k, a, l, &g->stage);
            j -= k;
        } else {
            j--;
        }
        l = a;
    }
    rc = 1;
    for (int32_t i = n_groups - 1; i >= 0 && rc == 1; i--)
        if (pl_cell_emit_group(c, &groups[i], idx, out)) rc = -1;
done:
    free(best);
    free(from_k);
    free(from_l);
    free(groups);
    return rc;
}

/* ----------------------------------------------------------------- build */

int32_t pl_cell_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                      const int32_t *idx, pl_pieces *out) {
    /* the lists are balanced for throughput under every objective: a LATENCY
     * layout of each list costs a dynamic program too many for the swaps */
    return pl_build(c, pool, n_pool, want, idx, out, c->model_need, pl_cell_feasible, pl_cell_time,
                    c->p->objective == MT_PLACE_THROUGHPUT ? pl_cell_throughput_fill
                                                           : pl_cell_latency_fill);
}

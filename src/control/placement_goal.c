/* placement_goal.c - cell mode's per-user latency goal
 * (mt_place_params.latency_goal_ms): how many pipelines a fresh plan makes.
 *
 * The goal comes first and throughput second: of the pipeline counts
 * P >= replicas (replicas is the floor: never fewer), the plan takes the
 * largest whose every pipeline's trip (trip_ms: its group times plus a hop
 * into each group, what the LATENCY layout minimises) is within the goal,
 * since each pipeline serves its users at once and more of them serve more
 * users. A count P qualifies when the builder makes exactly P pipelines of
 * the pool, still keeps params.spares spares out of them (spares come before
 * extra pipelines; at P = replicas the usual rule holds: pipelines first),
 * and the longest trip is within the goal. Each pipeline is laid out for
 * params.objective: THROUGHPUT's groups, or LATENCY's / BALANCED's dynamic
 * program; the goal only chooses P.
 *
 * A kept plan (placement.c) calls this with no floor on the free nodes: as
 * many more pipelines as meet the goal beside the kept ones, or none.
 *
 * The search: the trip does not change monotonically with P. Under LATENCY
 * it mostly grows (each pipeline gets fewer nodes to group), under
 * THROUGHPUT it may fall (fewer nodes per pipeline make wider groups whose
 * partners share a layer's experts, and fewer hops: on a Kimi K3-sized model
 * and 200 machines 3.9 s at 2 pipelines, 3.2 s at 7), and the snake draft
 * deals the nodes differently for every P. So it assumes nothing and scans
 * the counts from P_max (the most pipelines the pool's capacity could hold)
 * down to replicas + 1, taking the first that qualifies; when none does,
 * the plan without a goal (replicas pipelines, as many as the nodes allow)
 * stands and plan.goal_note says the goal is missed. Past 16 counts the
 * scan is coarse (every sqrt(range)-th count) and then fine between the
 * first count that qualified and the one above it that did not, so it plans
 * at most about 2 sqrt(P_max - replicas) + 1 times. A plan costs what one
 * plan costs without a goal (a 200-node LATENCY plan about 0.5 s on a small
 * machine, THROUGHPUT's 0.02 s); counts the capacity cannot hold fail at
 * once. On the K3 case above that is at most 7 plans. */
#include "placement_internal.h"

#include <stdlib.h>
#include <string.h>

/* One trial: the pieces of a P-pipeline plan and the nodes it uses. */
typedef struct goal_trial {
    pl_pieces w;
    bool *used; /* (n_nodes + 1) */
    int32_t made;
    double worst; /* the longest trip */
} goal_trial;

/* Plans exactly P pipelines (or none) from pool into t; 0, or -1 when out
 * of memory. */
static int goal_try(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t P,
                    const int32_t *idx, goal_trial *t) {
    pl_ctx exact = *c;
    exact.build_min = P;
    t->w.n = 0;
    memset(t->used, 0, ((size_t)c->n_nodes + 1) * sizeof *t->used);
    t->made = pl_build_with_spares(&exact, pool, n_pool, P, idx, &t->w, t->used);
    if (t->made < 0) return -1;
    t->worst = pl_cell_worst_trip(c, &t->w);
    return t->worst < 0 ? -1 : 0;
}

/* P pipelines made, params.spares nodes left out of them (only asked
 * beyond the floor), every trip within the goal. */
static bool goal_ok(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t P, int32_t floor,
                    const goal_trial *t) {
    if (t->made != P || t->worst > c->p->latency_goal_ms) return false;
    if (P <= floor) return true;
    int32_t left = 0;
    for (int32_t j = 0; j < n_pool; j++) left += !t->used[pool[j]];
    return left >= c->p->spares;
}

#define GOAL_FINE_SCAN 16 /* counts above the floor scanned one by one */

static int cmp_int32(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

int32_t pl_goal_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t floor,
                      const int32_t *taken, int32_t n_taken, pl_pieces *out, bool *used) {
    const int32_t R = floor;
    uint64_t total = 0;
    for (int32_t j = 0; j < n_pool; j++) total += c->nodes[pool[j]].capacity;
    int64_t cap_max = c->model_need > 0 ? (int64_t)(total / c->model_need) : n_pool;
    int32_t p_max = (int32_t)(cap_max < n_pool ? cap_max : n_pool);
    if (p_max > 1024) p_max = 1024; /* placement_check's limit on replicas */
    if (p_max < R) p_max = R;
    if (p_max == 0) return 0; /* no floor, and no room for a pipeline */
    int32_t *idx = malloc((size_t)p_max * sizeof *idx), made = -1;
    int32_t *tk = malloc((size_t)(n_taken + 1) * sizeof *tk);
    goal_trial best = {{0}, calloc((size_t)c->n_nodes + 1, sizeof(bool)), 0, 0};
    goal_trial tmp = {{0}, calloc((size_t)c->n_nodes + 1, sizeof(bool)), 0, 0};
    if (!idx || !tk || !best.used || !tmp.used) goto done;
    if (n_taken > 0) memcpy(tk, taken, (size_t)n_taken * sizeof *tk);
    qsort(tk, (size_t)n_taken, sizeof *tk, cmp_int32);
    for (int32_t k = 0, next = 0, j = 0; k < p_max; next++) { /* smallest indices not taken */
        while (j < n_taken && tk[j] < next) j++;
        if (j < n_taken && tk[j] == next) continue;
        idx[k++] = next;
    }
    int32_t range = p_max - R, step = 1, found = 0, failed_above = p_max + 1;
    if (range > GOAL_FINE_SCAN)
        while (step * step < range) step++;
    for (int32_t P = p_max; P > R && !found; P -= step) { /* coarse (or every count) */
        if (goal_try(c, pool, n_pool, P, idx, &best)) goto done;
        if (goal_ok(c, pool, n_pool, P, R, &best))
            found = P;
        else
            failed_above = P;
    }
    /* fine: the counts the coarse pass stepped over, under the lowest that failed,
     * down to the one that qualified (or to the floor) */
    int32_t fine_lo = found ? found : R;
    for (int32_t P = failed_above - 1; step > 1 && P > fine_lo; P--) {
        if (goal_try(c, pool, n_pool, P, idx, &tmp)) goto done;
        if (goal_ok(c, pool, n_pool, P, R, &tmp)) {
            goal_trial t = best;
            best = tmp;
            tmp = t;
            found = P;
            break;
        }
    }
    if (!found) { /* the floor: the plan without a goal (as many of R as the nodes allow) */
        best.w.n = 0;
        memset(best.used, 0, ((size_t)c->n_nodes + 1) * sizeof *best.used);
        best.made = R > 0 ? pl_build_with_spares(c, pool, n_pool, R, idx, &best.w, best.used) : 0;
        if (best.made < 0) goto done;
    }
    made = best.made;
    for (int32_t i = 0; i < best.w.n; i++)
        if (pl_push(out, best.w.v[i])) {
            made = -1;
            break;
        }
    for (int32_t i = 0; i < c->n_nodes && made >= 0; i++) used[i] |= best.used[i];
done:
    pl_pieces_free(&best.w);
    pl_pieces_free(&tmp.w);
    free(best.used);
    free(tmp.used);
    free(idx);
    free(tk);
    return made;
}

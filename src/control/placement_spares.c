/* placement_spares.c - planning pipelines / replicas with hot spares held
 * back (pl_build_with_spares, placement_internal.h): the mode's builder
 * makes as many as it can, then as many of params.spares as the plan can do
 * without are kept out of it. placement.c (fresh and kept plans) and
 * placement_goal.c (the latency goal's trials) both plan through it. */
#include "placement_internal.h"

#include <stdlib.h>

/* Plans up to `want` pipelines / replicas from pool (every node offered),
 * then keeps `spares` of the nodes out of them: the nodes the plan leaves
 * unused, and if there are too few, the slowest nodes that can hold the
 * plan's largest shard with its working memory (then the largest others),
 * as many as the plan can do without and keep its number of pipelines.
 * Appends the pieces and marks their nodes in used. */
int32_t pl_build_with_spares(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                             const int32_t *idx, pl_pieces *out, bool *used) {
    pl_build_fn build = c->p->mode == MT_PLACE_CELL ? pl_cell_build : pl_swarm_build;
    pl_pieces best = {0}, tmp = {0};
    int32_t *pool2 = malloc((size_t)(n_pool > 0 ? n_pool : 1) * sizeof *pool2);
    int32_t *cand = malloc((size_t)(n_pool > 0 ? n_pool : 1) * sizeof *cand);
    bool *in = calloc((size_t)c->n_nodes + 1, sizeof *in);
    int32_t built = -1;
    if (!pool2 || !cand || !in) goto done;
    built = build(c, pool, n_pool, want, idx, &best);
    if (built <= 0) goto done;
    for (int32_t i = 0; i < best.n; i++) in[best.v[i].node] = true;
    int32_t n_used = 0;
    uint64_t largest = 0;
    for (int32_t j = 0; j < n_pool; j++) n_used += in[pool[j]];
    for (int32_t i = 0; i < best.n; i++) {
        const pl_piece *q = &best.v[i];
        uint64_t room = pl_piece_room(c, q->a, q->b, q->attention, q->eb, q->ee);
        if (room > largest) largest = room;
    }
    int32_t missing = c->p->spares - (n_pool - n_used);
    if (missing <= 0) goto done;
    /* candidates: used nodes able to hold the largest shard, slowest first;
     * then the others, largest first */
    int32_t n_cand = 0;
    for (int32_t j = 0; j < n_pool; j++)
        if (in[pool[j]] && c->nodes[pool[j]].capacity >= largest) cand[n_cand++] = pool[j];
    pl_sort_fastest(c, cand, n_cand);
    for (int32_t i = 0; i < n_cand / 2; i++) {
        int32_t t = cand[i];
        cand[i] = cand[n_cand - 1 - i];
        cand[n_cand - 1 - i] = t;
    }
    int32_t n_big = n_cand;
    for (int32_t j = 0; j < n_pool; j++)
        if (in[pool[j]] && c->nodes[pool[j]].capacity < largest) cand[n_cand++] = pool[j];
    pl_sort_largest(c, cand + n_big, n_cand - n_big);
    /* the most candidates (up to `missing`) the plan can do without: bisection,
     * as reserving more never gives more pipelines */
    int32_t lo = 0, hi = missing < n_cand ? missing : n_cand;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2, n2 = 0;
        for (int32_t t = 0; t < n_cand; t++) in[cand[t]] = t < mid; /* in = reserved now */
        for (int32_t j = 0; j < n_pool; j++)
            if (!in[pool[j]]) pool2[n2++] = pool[j];
        tmp.n = 0;
        int32_t b2 = build(c, pool2, n2, built, idx, &tmp);
        if (b2 < 0) {
            built = -1;
            goto done;
        }
        if (b2 == built) {
            pl_pieces t = best;
            best = tmp;
            tmp = t;
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
done:
    if (built > 0) {
        for (int32_t i = 0; i < best.n; i++) {
            if (pl_push(out, best.v[i])) {
                built = -1;
                break;
            }
            used[best.v[i].node] = true;
        }
    }
    pl_pieces_free(&best);
    pl_pieces_free(&tmp);
    free(pool2);
    free(cand);
    free(in);
    return built;
}

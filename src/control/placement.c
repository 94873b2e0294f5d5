/* placement.c - the placement engine's entry point (see moontail/placement.h):
 * checks the inputs (placement_check.c), keeps the previous plan where it
 * still holds or plans from scratch, reserves hot spares
 * (placement_spares.c), and turns the working pieces into the plan with its
 * summary (placement_summary.c). The building blocks both modes share are in
 * placement_blocks.c, the modes' own planning in placement_cell.c and
 * placement_swarm.c, routes in placement_route.c.
 *
 * Pipeline counts: a fresh plan makes `replicas`; with a latency goal (cell)
 * placement_goal.c chooses the count, `replicas` or more. A kept plan keeps
 * its pipelines (without a goal at most `replicas`, dropping the highest
 * indices), builds the missing ones up to `replicas` from free nodes and,
 * with a goal, adds as many pipelines of the free nodes as meet it: nodes
 * that join a cell with a goal become pipelines when enough of them meet the
 * goal, else spares. Pipelines already made are not laid out again for the
 * goal: one that misses it (a slower node took a lost member's shard) stays,
 * and the plan's goal_note says so. */
#include "placement_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- planning */

static int32_t plan_from_scratch(const pl_ctx *c, pl_pieces *out, bool *used) {
    int32_t *pool = malloc((size_t)(c->n_nodes + 1) * sizeof *pool), n_pool = 0;
    int32_t *idx = malloc((size_t)c->p->replicas * sizeof *idx);
    int32_t built = -1;
    if (pool && idx) {
        for (int32_t i = 0; i < c->n_nodes; i++)
            if (c->nodes[i].available) pool[n_pool++] = i;
        for (int32_t k = 0; k < c->p->replicas; k++) idx[k] = k;
        if (c->p->mode == MT_PLACE_CELL && c->p->latency_goal_ms > 0)
            built = pl_goal_build(c, pool, n_pool, c->p->replicas, NULL, 0, out, used);
        else
            built = pl_build_with_spares(c, pool, n_pool, c->p->replicas, idx, out, used);
    }
    free(pool);
    free(idx);
    return built;
}

static int cmp_int32(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

/* Keeps what the nodes' current assignments describe, then builds the
 * missing pipelines (up to `replicas`) from the free nodes and, with a
 * latency goal (cell), as many more from the free nodes as meet it
 * (pl_goal_build with no floor); with a goal, kept pipelines beyond
 * `replicas` stay. Returns the pipelines made; *n_kept_out gets how many of
 * them were kept. */
static int32_t plan_keeping(const pl_ctx *c, pl_pieces *out, bool *used, int32_t *n_kept_out) {
    int32_t R = c->p->replicas, n = c->n_nodes;
    bool goal = c->p->mode == MT_PLACE_CELL && c->p->latency_goal_ms > 0;
    int32_t *kept = malloc((size_t)(n + 1) * sizeof *kept);
    int32_t *pool = malloc((size_t)(n + 1) * sizeof *pool);
    int32_t *idx = malloc((size_t)R * sizeof *idx);
    int32_t *taken = NULL;
    int32_t count = -1;
    if (!kept || !pool || !idx) goto done;
    int32_t n_kept = c->p->mode == MT_PLACE_CELL ? pl_cell_keep(c, used, out, kept)
                                                 : pl_swarm_keep(c, used, out, kept);
    if (n_kept < 0) goto done;
    *n_kept_out = n_kept;
    qsort(kept, (size_t)n_kept, sizeof *kept, cmp_int32);
    if (n_kept > R && !goal) { /* fewer replicas asked than before: drop the highest indices */
        int32_t w = 0;
        for (int32_t i = 0; i < out->n; i++) {
            if (out->v[i].pipeline > kept[R - 1])
                used[out->v[i].node] = false;
            else
                out->v[w++] = out->v[i];
        }
        out->n = w;
        n_kept = R;
    }
    count = n_kept;
    int32_t n_pool = 0;
    if (n_kept < R) {
        int32_t next = 0, k = 0;
        for (int32_t i = 0; i < n; i++)
            if (c->nodes[i].available && !used[i]) pool[n_pool++] = i;
        for (int32_t j = 0; k < R - n_kept; next++) { /* smallest indices not kept */
            while (j < n_kept && kept[j] < next) j++;
            if (j < n_kept && kept[j] == next) continue;
            idx[k++] = next;
        }
        int32_t built = pl_build_with_spares(c, pool, n_pool, R - n_kept, idx, out, used);
        count = built < 0 ? -1 : n_kept + built;
    }
    if (goal && count >= 0) { /* more pipelines of the free nodes, as many as meet the goal */
        taken = malloc((size_t)(out->n + 1) * sizeof *taken);
        if (!taken) {
            count = -1;
            goto done;
        }
        n_pool = 0;
        for (int32_t i = 0; i < n; i++)
            if (c->nodes[i].available && !used[i]) pool[n_pool++] = i;
        for (int32_t i = 0; i < out->n; i++) taken[i] = out->v[i].pipeline;
        int32_t extra = pl_goal_build(c, pool, n_pool, 0, taken, out->n, out, used);
        count = extra < 0 ? -1 : count + extra;
    }
done:
    free(kept);
    free(pool);
    free(idx);
    free(taken);
    return count;
}

int mt_place_plan_make(const mt_place_model *m, const mt_place_node *nodes, int32_t n_nodes,
                       const mt_place_params *p, mt_place_plan *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    if (pl_check_inputs(m, nodes, n_nodes, p, err)) return -1;
    pl_ctx c;
    pl_pieces w = {0}, w2 = {0};
    bool *used = calloc((size_t)n_nodes + 1, sizeof *used);
    bool *used2 = calloc((size_t)n_nodes + 1, sizeof *used2);
    int rc = -1;
    if (pl_ctx_init(&c, m, nodes, n_nodes, p) || !used || !used2) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    bool has_prev = false;
    for (int32_t i = 0; i < n_nodes && !has_prev; i++) {
        mt_place_role r = nodes[i].current.role;
        has_prev = p->mode == MT_PLACE_CELL ? r == MT_PLACE_STAGE || r == MT_PLACE_PARTNER
                                            : r == MT_PLACE_EXPERTS;
    }
    int32_t count = -1;
    bool replanned = true;
    if (has_prev) {
        int32_t n_kept = 0;
        count = plan_keeping(&c, &w, used, &n_kept);
        replanned = n_kept == 0;
        if (count >= 0 && count < p->replicas) { /* would a fresh plan do better? */
            int32_t fresh = plan_from_scratch(&c, &w2, used2);
            if (fresh > count) {
                pl_pieces t = w;
                w = w2;
                w2 = t;
                bool *u = used;
                used = used2;
                used2 = u;
                count = fresh;
                replanned = true;
            } else if (fresh < 0) {
                count = -1;
            }
        }
    } else {
        count = plan_from_scratch(&c, &w, used);
    }
    if (count < 0) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (pl_finish(&c, &w, used, count, replanned, out, err)) {
        mt_place_plan_free(out);
        goto done;
    }
    rc = count < p->replicas ? MT_PLACE_SHORT : 0;
done:
    pl_pieces_free(&w);
    pl_pieces_free(&w2);
    free(used);
    free(used2);
    pl_ctx_free(&c);
    return rc;
}

void mt_place_plan_free(mt_place_plan *plan) {
    if (!plan) return;
    free(plan->moe_layer);
    free(plan->assign);
    free(plan->pipelines);
    free(plan->coverage);
    memset(plan, 0, sizeof *plan);
}

const mt_place_assign *mt_place_plan_find(const mt_place_plan *plan, int64_t id) {
    for (int32_t i = 0; i < plan->n_assign; i++)
        if (plan->assign[i].node == id) return &plan->assign[i];
    return NULL;
}

void mt_place_set_current(mt_place_node *nodes, int32_t n_nodes, const mt_place_plan *plan) {
    for (int32_t i = 0; i < n_nodes; i++) {
        const mt_place_assign *a = mt_place_plan_find(plan, nodes[i].id);
        if (a)
            nodes[i].current = *a;
        else
            memset(&nodes[i].current, 0, sizeof nodes[i].current);
    }
}

int mt_place_shard_spec(const mt_place_model *m, const mt_place_assign *a, int32_t *ids,
                        mt_shard_spec *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    if (a->role != MT_PLACE_STAGE && a->role != MT_PLACE_PARTNER && a->role != MT_PLACE_EXPERTS)
        return mt_error_set(err, "node %lld: a %s holds no shard", (long long)a->node,
                            mt_place_role_name(a->role));
    if (a->layer_begin < 0 || a->layer_end > m->n_layer || a->layer_begin >= a->layer_end ||
        a->expert_begin < 0 || a->expert_end > m->n_expert || a->expert_begin > a->expert_end)
        return mt_error_set(err,
                            "node %lld: layers [%d, %d) x experts [%d, %d) lie outside the model"
                            " (%d layers, %d experts)",
                            (long long)a->node, a->layer_begin, a->layer_end, a->expert_begin,
                            a->expert_end, m->n_layer, m->n_expert);
    for (int32_t e = a->expert_begin; e < a->expert_end; e++) ids[e - a->expert_begin] = e;
    out->layer_begin = a->layer_begin;
    out->layer_end = a->layer_end;
    out->attention = a->attention;
    out->head = false;
    out->experts = ids;
    out->n_experts = a->expert_end - a->expert_begin;
    return 0;
}

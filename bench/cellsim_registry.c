/* cellsim_registry.c - the simulated registry and the failure: placement by
 * the real mt_place_plan_make over equal machines (pipelines of stage groups,
 * partners, spares), routes by mt_place_route_choose skipping nodes that are
 * not serving (src/control/registry_plan.c), the node that dies (killed: its
 * connections reset, callers fail at once; silent: callers wait for their
 * timeouts), the registry marking it dead after dead_after and replanning (its
 * shard goes to a spare), and the spare serving after a heartbeat, the fetch,
 * the load and another heartbeat. */
#include "cellsim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the registry --------------------------------------------------------------------------- */

/* A route for user u (mt_place_route_choose over serving nodes, minus u's avoid list), or
 * the fixed pipeline. false when none. */
bool cs_reg_choose_route(sim *S, int u) {
    cs_user *U = &S->users[u];
    if (!S->have_plan) {
        for (int i = 0; i < S->n_nodes; i++) U->route[i] = i;
        U->n_route = S->n_nodes;
        return true;
    }
    int k = 0;
    for (int i = 0; i < S->n_nodes; i++)
        if (!S->nodes[i].serving) S->skip[k++] = S->nodes[i].id;
    for (int i = 0; i < U->n_avoid; i++) S->skip[k++] = U->avoid[i];
    mt_place_route r;
    mt_error e = {{0}};
    /* with route_by_memory, the registry's hint: every stage's free session bytes (read now;
     * the registry has them from heartbeats, up to a second old), which mt_place_route_choose
     * turns into a draw weighted by each pipeline's fullest stage */
    int64_t *ids = NULL, *room = NULL;
    mt_place_room hint = {NULL, NULL, 0};
    if (S->cfg->route_by_memory) {
        ids = malloc((size_t)S->n_nodes * sizeof *ids);
        room = malloc((size_t)S->n_nodes * sizeof *room);
        for (int i = 0; ids && room && i < S->n_nodes; i++) {
            const cs_node *n = &S->nodes[i];
            if (n->role != MT_PLACE_STAGE) continue;
            double left = n->kv_budget - n->kv_used;
            ids[hint.n] = n->id;
            room[hint.n++] = left > 0 ? (int64_t)fmin(left, 4e18) : 0;
        }
        hint.node = ids, hint.room = room;
    }
    int rc = mt_place_route_choose(&S->plan, S->skip, k, U->hint, hint.n ? &hint : NULL, &r, &e);
    free(ids);
    free(room);
    if (rc) return false;
    U->n_route = 0;
    for (int h = 0; h < r.n_hops; h++)
        if (r.hops[h].role == MT_PLACE_STAGE) U->route[U->n_route++] = (int)(r.hops[h].node - 1);
    mt_place_route_free(&r);
    return U->n_route > 0;
}

/* Node state from plan assignments: roles, ranges, partners, shard bytes. */
void cs_reg_apply_plan(sim *S) {
    for (int i = 0; i < S->n_nodes; i++) {
        cs_node *n = &S->nodes[i];
        const mt_place_assign *a = mt_place_plan_find(&S->plan, n->id);
        n->role = a ? a->role : MT_PLACE_NONE;
        n->pipeline = a ? a->pipeline : -1;
        n->a = a ? a->layer_begin : 0;
        n->b = a ? a->layer_end : 0;
        n->eb = a ? a->expert_begin : 0;
        n->ee = a ? a->expert_end : 0;
        n->bytes = a ? (double)a->bytes : 0;
        n->n_partners = 0;
    }
    for (int32_t i = 0; i < S->plan.n_assign; i++) {
        const mt_place_assign *a = &S->plan.assign[i];
        if (a->role != MT_PLACE_PARTNER) continue;
        cs_node *st = &S->nodes[a->paired_with - 1];
        if (st->n_partners < MAX_PARTNERS) st->partners[st->n_partners++] = (int)(a->node - 1);
    }
}

static bool same_shard(const mt_place_assign *x, const mt_place_assign *y) {
    return x->role == y->role && x->layer_begin == y->layer_begin && x->layer_end == y->layer_end &&
           x->expert_begin == y->expert_begin && x->expert_end == y->expert_end &&
           x->attention == y->attention;
}

/* The registry marks the failed node dead and replans: nodes given a new shard fetch it
 * and serve once it is loaded. */
void cs_reg_on_dead(sim *S) {
    cs_node *dead = &S->nodes[S->fail_node];
    dead->serving = false;
    S->pn[S->fail_node].available = false;
    mt_place_set_current(S->pn, S->n_nodes, &S->plan);
    mt_place_plan next;
    mt_error e = {{0}};
    int rc = mt_place_plan_make(&S->pm, S->pn, S->n_nodes, &S->pp, &next, &e);
    if (rc < 0) return; /* keeps the old plan: routes avoid the dead node */
    const cs_failure *f = &S->cfg->failure;
    for (int i = 0; i < S->n_nodes; i++) {
        if (i == S->fail_node) continue;
        const mt_place_assign *was = mt_place_plan_find(&S->plan, S->nodes[i].id),
                              *now = mt_place_plan_find(&next, S->nodes[i].id);
        if (!now || now->role == MT_PLACE_SPARE || now->role == MT_PLACE_NONE) continue;
        if (was && same_shard(was, now)) continue;
        /* learns it at its next heartbeat, fetches, loads, says so at the next heartbeat */
        S->nodes[i].serving = false;
        double fetch = (double)now->bytes * 8 / (f->fetch_gbps * 1e9) * 1e3;
        sim_push(S, S->now + 2 * f->heartbeat_ms + fetch + f->load_ms, EV_READY, i, 0);
    }
    mt_place_plan_free(&S->plan);
    S->plan = next;
    cs_reg_apply_plan(S);
}

void cs_reg_on_ready(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    n->serving = true;
    cs_node_reset_sessions(S, ni);
    if (S->res->restored_ms < 0) S->res->restored_ms = S->now - S->cfg->failure.at_ms;
}

/* ---- failures ------------------------------------------------------------------------------ */

/* EV_CALL_FAIL for endpoint e's call number `call`. */
void cs_reg_on_call_fail(sim *S, int e, int64_t call) {
    if (S->ep[e].call != call) return;
    if (e < S->n_nodes) { /* a stage's partner call */
        sim_call_end(S, e);
        cs_node *n = &S->nodes[e];
        if (n->alive && n->busy && n->phase == 1 && n->waiting > 0) {
            n->waiting = 1; /* every partner answer of this layer is moot now */
            cs_node_partner_answer(S, e, false);
        }
        return;
    }
    int u = e - S->n_nodes;
    cs_user *U = &S->users[u];
    if (U->phase == U_PASS) {
        cs_user_stage_answer(S, u, E_BROKEN);
    } else if (U->phase == U_END) {
        sim_call_end(S, e);
        U->stage++;
        cs_user_end_next(S, u);
    }
}

/* The stage of requester 0's route holding the middle layer (failure node -1). */
static int route_middle_stage(const sim *S) {
    const cs_user *U = &S->users[0];
    int32_t mid = S->cfg->shape.n_layer / 2;
    for (int i = 0; U->have_route && i < U->n_route; i++) {
        const cs_node *n = &S->nodes[U->route[i]];
        if (n->a <= mid && mid < n->b) return U->route[i];
    }
    return -1;
}

void cs_reg_on_fail(sim *S) {
    if (S->fail_node < 0 && (S->fail_node = route_middle_stage(S)) < 0) return; /* no route yet */
    cs_node *n = &S->nodes[S->fail_node];
    const cs_failure *f = &S->cfg->failure;
    n->alive = false;
    sim_job_cancel(S, S->fail_node);
    for (int i = 0; i < n->q_n; i++) sim_msg_free(S, n->queue[i]); /* the step's work too */
    n->q_n = n->n_step = 0;
    n->busy = false;
    cs_node_reset_sessions(S, S->fail_node);
    /* callers waiting for it: a reset reaches them after the latency; silence, at the timeout */
    const double reset = S->now + S->cfg->lan.latency_us * 1e-3;
    for (int e = 0; e < S->n_nodes + S->n_users; e++)
        if (S->ep[e].call_node == S->fail_node)
            sim_push(S, f->silent ? S->ep[e].call_t + f->call_timeout_ms : reset, EV_CALL_FAIL, e,
                     S->ep[e].call);
    /* oneway passes through it: the chain's abort reaches the requester at once (killed) or
     * its AWAIT times out (silent) */
    for (int u = 0; S->cfg->oneway && u < S->n_users; u++) {
        cs_user *U = &S->users[u];
        if (U->phase != U_PASS) continue;
        for (int i = 0; i < U->n_route; i++)
            if (U->route[i] == S->fail_node) {
                const int e = sim_user_ep(S, u);
                U->fail_hop = i;
                sim_push(S, f->silent ? S->ep[e].call_t + f->call_timeout_ms : reset, EV_CALL_FAIL,
                         e, S->ep[e].call);
                break;
            }
    }
    /* stages waiting for it as their partner */
    for (int i = 0; i < S->n_nodes; i++) {
        const cs_node *st = &S->nodes[i];
        if (!st->alive || !st->busy || st->phase != 1 || st->waiting == 0) continue;
        for (int k = 0; k < st->n_partners; k++)
            if (st->partners[k] == S->fail_node)
                sim_push(S, f->silent ? S->now + f->call_timeout_ms : reset, EV_CALL_FAIL, i,
                         S->ep[i].call);
    }
    if (S->have_plan) sim_push(S, S->now + f->dead_after_ms, EV_REG_DEAD, 0, 0);
}

/* ---- the cell ---------------------------------------------------------------------------------
 */

int cs_reg_setup(sim *S) {
    const cs_config *c = S->cfg;
    const cs_shape *sh = &c->shape;
    if (c->n_stages > 0) { /* one explicit pipeline */
        int32_t sum = 0;
        for (int i = 0; i < c->n_stages; i++) sum += c->stage_layers[i];
        if (sum != sh->n_layer)
            return mt_error_set(S->err, "the stages hold %d layers in all; the model has %d", sum,
                                sh->n_layer);
        S->n_nodes = c->n_stages;
        return 0;
    }
    if (c->machines < 1) return mt_error_set(S->err, "no machines");
    S->n_nodes = c->machines;
    S->attn_b = calloc((size_t)sh->n_layer, sizeof *S->attn_b);
    S->exp_b = calloc((size_t)sh->n_layer, sizeof *S->exp_b);
    S->state_b = calloc((size_t)sh->n_layer, sizeof *S->state_b);
    S->pos_b = calloc((size_t)sh->n_layer, sizeof *S->pos_b);
    S->pn = calloc((size_t)c->machines, sizeof *S->pn);
    if (!S->attn_b || !S->exp_b || !S->state_b || !S->pos_b || !S->pn)
        return mt_error_set(S->err, "out of memory");
    for (int32_t l = 0; l < sh->n_layer; l++) {
        cs_layer_cost lc = cs_layer_cost_of(sh, l);
        S->attn_b[l] = (uint64_t)lc.attn_bytes;
        S->exp_b[l] = (uint64_t)lc.expert_bytes;
        S->state_b[l] = (uint64_t)lc.state_bytes;
        S->pos_b[l] = (uint64_t)lc.bytes_per_position;
    }
    S->pm = (mt_place_model){sh->n_layer, sh->n_expert, sh->n_expert_used, S->attn_b, S->exp_b};
    S->pp = mt_place_default_params(MT_PLACE_CELL);
    S->pp.replicas = c->replicas;
    S->pp.spares = c->spares;
    S->pp.max_group = c->max_group;
    S->pp.objective = (mt_place_objective)c->objective;
    S->pp.latency_goal_ms = c->latency_goal_ms;
    /* a stage keeps its sessions beside its shard (placement.h's working memory): KDA states
     * and MLA caches of place_sessions sessions of a request's length (the cache is reserved
     * for the node's context but backed as positions are written); the node itself then
     * admits sessions while its leftover memory holds them (cs_node_reset_sessions) */
    S->pp.sessions = c->place_sessions;
    S->pp.n_ctx = c->session_ctx > 0 ? c->session_ctx : c->work.prompt + c->work.gen;
    S->pp.state_bytes = S->state_b;
    S->pp.position_bytes = S->pos_b;
    for (int i = 0; i < c->machines; i++)
        S->pn[i] = (mt_place_node){
            .id = i + 1, .capacity = (uint64_t)c->capacity_bytes, .speed = 1.0, .available = true};
    mt_error e = {{0}};
    int rc = mt_place_plan_make(&S->pm, S->pn, c->machines, &S->pp, &S->plan, &e);
    if (rc < 0) return mt_error_set(S->err, "placement: %s", e.msg);
    S->have_plan = true;
    for (int32_t i = 0; i < S->plan.n_assign; i++)
        if (S->plan.assign[i].role == MT_PLACE_STAGE)
            S->session_mem_max = fmax(S->session_mem_max, (double)S->plan.assign[i].work_bytes);
    if (S->plan.n_pipelines == 0)
        return mt_error_set(S->err,
                            "%d machines offering %.1f GB each cannot hold the model"
                            " (%.1f GB): %s",
                            c->machines, c->capacity_bytes / 1e9, cs_model_bytes(sh) / 1e9,
                            S->plan.reason);
    return 0;
}

void cs_reg_describe(sim *S) {
    cs_result *R = S->res;
    if (!S->have_plan) {
        R->pipelines = 1;
        R->nodes_used = S->n_nodes;
        R->stages_min = R->stages_max = S->n_nodes;
        snprintf(R->topology, sizeof R->topology, "1 pipeline of %d stages (given)", S->n_nodes);
        return;
    }
    const mt_place_plan *p = &S->plan;
    R->pipelines = p->n_pipelines;
    R->spares = p->n_spares;
    R->stages_min = INT32_MAX;
    for (int32_t k = 0; k < p->n_pipelines; k++) {
        int32_t g = p->pipelines[k].n_groups;
        if (g < R->stages_min) R->stages_min = g;
        if (g > R->stages_max) R->stages_max = g;
        R->groups += g;
        R->nodes_used += p->pipelines[k].n_nodes;
    }
    for (int32_t i = 0; i < p->n_assign; i++) R->partners += p->assign[i].role == MT_PLACE_PARTNER;
    R->session_mem_max = S->session_mem_max;
    snprintf(R->topology, sizeof R->topology,
             "%d machines: %d pipeline%s of %d-%d stage groups (%d nodes, %d of them partners),"
             " %d spare%s; largest shard %.1f GB; sessions up to %.2f GB on a stage",
             S->n_nodes, p->n_pipelines, p->n_pipelines == 1 ? "" : "s", R->stages_min,
             R->stages_max, R->nodes_used, R->partners, p->n_spares, p->n_spares == 1 ? "" : "s",
             (double)p->largest_shard / 1e9, S->session_mem_max / 1e9);
    size_t len = strlen(R->topology); /* placement's own estimate of a token's trip */
    snprintf(R->topology + len, sizeof R->topology - len, "; placement's slowest trip %.0f ms%s",
             p->worst_trip_ms,
             p->latency_goal_ms <= 0 ? ""
             : p->latency_goal_met   ? " (latency goal met)"
                                     : " (latency goal missed)");
}

/* The stage holding the middle layer of pipeline 0 (the default failure). */
int cs_reg_middle_stage(const sim *S) {
    int32_t mid = S->cfg->shape.n_layer / 2;
    for (int i = 0; i < S->n_nodes; i++) {
        const cs_node *n = &S->nodes[i];
        if (n->role == MT_PLACE_STAGE && n->pipeline == 0 && n->a <= mid && mid < n->b) return i;
    }
    return -1;
}

/* ---- the stages' hidden states ------------------------------------------------------------ */

int cs_plan_hops(const cs_config *cfg, cs_hop **out, int32_t *n_out, cs_result *res,
                 mt_error *err) {
    sim S0 = {0}, *S = &S0;
    cs_result r0 = {0};
    S->cfg = cfg;
    S->err = err;
    S->res = res ? res : &r0;
    memset(S->res, 0, sizeof *S->res);
    *out = NULL;
    *n_out = 0;
    int rc = -1;
    if (cs_reg_setup(S)) goto done;
    if (!S->have_plan) {
        mt_error_set(err, "the hops of a given pipeline (--stages) are its stages; place"
                          " machines instead");
        goto done;
    }
    cs_reg_describe(S);
    const mt_place_plan *p = &S->plan;
    cs_hop *h = calloc((size_t)p->n_assign + 1, sizeof *h);
    if (!h) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < p->n_assign; i++) { /* by pipeline, group; stage before partners */
        const mt_place_assign *a = &p->assign[i];
        if (a->role == MT_PLACE_PARTNER && n > 0) h[n - 1].partners++;
        if (a->role != MT_PLACE_STAGE) continue;
        h[n++] = (cs_hop){.pipeline = a->pipeline,
                          .group = a->group,
                          .layer_begin = a->layer_begin,
                          .layer_end = a->layer_end,
                          .cols_in = cs_cols_in(&cfg->shape, a->layer_begin),
                          .cols_out = cs_cols_out(&cfg->shape, a->layer_begin, a->layer_end)};
    }
    *out = h;
    *n_out = n;
    rc = 0;
done:
    free(S->attn_b), free(S->exp_b), free(S->state_b), free(S->pos_b), free(S->pn);
    if (S->have_plan) mt_place_plan_free(&S->plan);
    return rc;
}

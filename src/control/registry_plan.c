/* registry_plan.c - the registry's use of the placement engine
 * (placement.h): re-planning from the node rows, saving the assignments
 * that changed, and answering route requests from the current plan with
 * nodes that are alive and serve their assigned shard. */
#include "moontail/placement.h"
#include "moontail/log.h"
#include "registry_internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static reg_assign assign_of(const mt_place_assign *p) {
    reg_assign a = {.role = MT_PLACE_NONE, .replica = -1};
    if (!p) return a;
    a.role = p->role;
    a.replica = p->pipeline;
    a.layer_begin = p->layer_begin;
    a.layer_end = p->layer_end;
    a.attention = p->attention;
    a.expert_begin = p->expert_begin;
    a.expert_end = p->expert_end;
    a.paired_with = p->paired_with;
    return a;
}

static bool same_assign(const reg_assign *a, const reg_assign *b) {
    return a->role == b->role && a->replica == b->replica && a->layer_begin == b->layer_begin &&
           a->layer_end == b->layer_end && a->attention == b->attention &&
           a->expert_begin == b->expert_begin && a->expert_end == b->expert_end &&
           a->paired_with == b->paired_with;
}

static mt_place_params params_of(const mt_registry *r) {
    mt_place_params p =
        mt_place_default_params(r->cfg.mode == MT_REGISTRY_SWARM ? MT_PLACE_SWARM : MT_PLACE_CELL);
    p.replicas = r->cfg.replicas;
    p.spares = r->cfg.spares;
    p.objective = (mt_place_objective)r->cfg.objective;
    p.latency_goal_ms = r->cfg.latency_goal_ms;
    /* working memory of a stage's sessions (registry.c sized it; none when sessions is 0) */
    p.sessions = r->cfg.sessions;
    p.n_ctx = r->cfg.n_ctx;
    p.state_bytes = r->state_bytes;
    p.position_bytes = r->position_bytes;
    return p;
}

/* A digest of what a plan is made of: every node's id, capacity, speed, availability and
 * current assignment (the parameters stay as the registry started). Placement is a pure
 * function of them, so equal digests mean the same plan: the ticker (every 250 ms, under the
 * registry's lock) then skips planning, which a latency goal makes cost several plans. */
static void inputs_digest(const mt_place_node *pn, int32_t n, uint8_t out[32]) {
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    for (int32_t i = 0; i < n; i++) {
        const mt_place_node *x = &pn[i];
        int64_t v[12] = {x->id,
                         (int64_t)x->capacity,
                         x->available,
                         x->current.role,
                         x->current.pipeline,
                         x->current.layer_begin,
                         x->current.layer_end,
                         x->current.attention,
                         x->current.expert_begin,
                         x->current.expert_end,
                         x->current.paired_with,
                         0};
        memcpy(&v[11], &x->speed, sizeof x->speed);
        crypto_generichash_update(&h, (const unsigned char *)v, sizeof v);
    }
    crypto_generichash_final(&h, out, 32);
}

/* Builds the plan for the nodes as they are now: 0, 1 when the inputs are those of the
 * current plan (nothing made), -1 on error. */
static int make_plan(mt_registry *r, const reg_node *nodes, int32_t n, int64_t now,
                     mt_place_plan *plan, mt_error *err) {
    mt_place_model m = mt_place_model_from_layout(&r->layout, r->n_expert_used);
    mt_place_node *pn = calloc((size_t)(n ? n : 1), sizeof *pn);
    if (!pn) return mt_error_set(err, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        const reg_node *x = &nodes[i];
        pn[i].id = x->id;
        pn[i].capacity = (uint64_t)x->capacity;
        pn[i].speed = x->speed > 0 ? x->speed : 1.0;
        pn[i].available = reg_node_available(r, x, now);
        pn[i].current.role = x->a.role;
        pn[i].current.pipeline = x->a.replica;
        pn[i].current.layer_begin = x->a.layer_begin;
        pn[i].current.layer_end = x->a.layer_end;
        pn[i].current.attention = x->a.attention;
        pn[i].current.expert_begin = x->a.expert_begin;
        pn[i].current.expert_end = x->a.expert_end;
        pn[i].current.paired_with = x->a.paired_with;
    }
    uint8_t digest[32];
    inputs_digest(pn, n, digest);
    if (r->have_plan && memcmp(digest, r->plan_inputs, sizeof digest) == 0) {
        free(pn);
        return 1;
    }
    mt_place_params p = params_of(r);
    int rc = mt_place_plan_make(&m, pn, n, &p, plan, err);
    free(pn);
    if (rc >= 0) memcpy(r->plan_inputs, digest, sizeof digest);
    return rc < 0 ? -1 : 0;
}

void reg_replan(mt_registry *r, int64_t now) {
    reg_node *nodes;
    int32_t n;
    mt_error err = {{0}};
    if (reg_nodes_load(r, &nodes, &n, &err)) {
        mt_log_as(&r->log, MT_LOG_ERROR, "placement: %s", err.msg);
        return;
    }
    mt_place_plan plan;
    int made = make_plan(r, nodes, n, now, &plan, &err);
    if (made) {
        if (made < 0) mt_log_as(&r->log, MT_LOG_ERROR, "placement failed: %s", err.msg);
        free(nodes);
        return;
    }
    int32_t changed = 0;
    for (int32_t i = 0; i < n; i++) {
        reg_assign a = assign_of(mt_place_plan_find(&plan, nodes[i].id));
        if (same_assign(&a, &nodes[i].a)) continue;
        if (reg_node_save_assign(r, nodes[i].id, &a, &err) == 0) changed++;
        char was[96], now_name[96], room[96] = "";
        reg_shard_name(&nodes[i].a, was);
        reg_shard_name(&a, now_name);
        const mt_place_assign *pa = mt_place_plan_find(&plan, nodes[i].id);
        if (pa && pa->work_bytes) /* what a stage keeps besides its shard */
            snprintf(room, sizeof room, " (%.1f MB + %.1f MB working memory)",
                     (double)pa->bytes / 1e6, (double)pa->work_bytes / 1e6);
        mt_log_as(&r->log, MT_LOG_INFO, "node %lld '%s': %s %s -> %s %s%s", (long long)nodes[i].id,
                  nodes[i].name, mt_place_role_name(nodes[i].a.role), was[0] ? was : "-",
                  mt_place_role_name(a.role), now_name[0] ? now_name : "-", room);
    }
    bool why_changed = strcmp(r->plan_why, plan.reason) != 0;
    snprintf(r->plan_why, sizeof r->plan_why, "%s", plan.reason);
    if (changed) {
        r->plan_version++;
        r->moves += plan.moves;
        r->last_plan_ms = now;
    }
    char goal[160] = ""; /* with a latency goal, replicas is the floor: say what was made */
    if (plan.latency_goal_ms > 0)
        snprintf(goal, sizeof goal, " (latency goal %.1f ms %s, slowest trip %.1f ms)",
                 plan.latency_goal_ms, plan.latency_goal_met ? "met" : "missed",
                 plan.worst_trip_ms);
    if (changed || why_changed)
        mt_log_as(&r->log, MT_LOG_INFO, "plan %llu: %d of %s%d %s%s, %d spares%s%s",
                  (unsigned long long)r->plan_version, plan.n_pipelines,
                  plan.latency_goal_ms > 0 ? "at least " : "", plan.replicas_wanted,
                  r->cfg.mode == MT_REGISTRY_SWARM ? "replicas" : "pipelines", goal, plan.n_spares,
                  plan.reason[0] ? "; " : "", plan.reason);
    if (strcmp(r->goal_why, plan.goal_note) != 0) { /* said once per change, not per plan */
        if (plan.goal_note[0]) mt_log_as(&r->log, MT_LOG_WARN, "placement: %s", plan.goal_note);
        snprintf(r->goal_why, sizeof r->goal_why, "%s", plan.goal_note);
    }
    if (r->have_plan) mt_place_plan_free(&r->plan);
    r->plan = plan; /* what routes are chosen from: the assignments just saved */
    r->have_plan = true;
    free(nodes);
}

/* One route entry for node x. */
static json_t *hop_json(const reg_node *x, const mt_place_hop *h) {
    return json_pack("{s:I, s:s, s:s, s:[i,i], s:[i,i]}", "node_id", (json_int_t)x->id, "addr",
                     x->addr, "key", x->pubkey, "layers", h->layer_begin, h->layer_end, "experts",
                     h->expert_begin, h->expert_end);
}

enum { MAX_CHECKERS = 4 }; /* listed per stage */

static bool listed(const int64_t *ids, int32_t n, int64_t id) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* Spot-check candidates for a stage of layers [a, b) (docs/spot-checking.md):
 * other stages holding exactly those layers that serve now, are not on the
 * route and not skipped (avoided, or not serving). */
static json_t *checkers_json(const reg_node *nodes, int32_t n, const mt_place_route *route,
                             int32_t a, int32_t b, const int64_t *skip, int32_t n_skip) {
    json_t *out = json_array();
    for (int32_t i = 0; i < n && json_array_size(out) < MAX_CHECKERS; i++) {
        const reg_node *x = &nodes[i];
        if (x->a.role != MT_PLACE_STAGE || x->a.layer_begin != a || x->a.layer_end != b ||
            listed(skip, n_skip, x->id))
            continue;
        bool on_route = false;
        for (int32_t h = 0; h < route->n_hops; h++) on_route |= route->hops[h].node == x->id;
        if (!on_route)
            json_array_append_new(out, json_pack("{s:I, s:s, s:s}", "node_id", (json_int_t)x->id,
                                                 "addr", x->addr, "key", x->pubkey));
    }
    return out;
}

json_t *reg_route(mt_registry *r, uint64_t session, const int64_t *avoid, int32_t n_avoid,
                  mt_error *err) {
    reg_node *nodes;
    int32_t n;
    if (reg_nodes_load(r, &nodes, &n, err)) return NULL;
    int64_t now = mt_wall_ms();
    json_t *out = NULL;
    if (!r->have_plan) {
        free(nodes);
        mt_error_set(err, "no route: the registry has not placed any shard yet; wait a moment");
        return NULL;
    }
    /* not usable: asked to avoid, dead, paused, or not serving its shard yet */
    int64_t *skip = malloc((size_t)(n + n_avoid + 1) * sizeof *skip);
    int32_t k = 0;
    for (int32_t i = 0; skip && i < n_avoid; i++) skip[k++] = avoid[i];
    for (int32_t i = 0; skip && i < n; i++)
        if (strcmp(reg_node_state(r, &nodes[i], now), "serving") != 0) skip[k++] = nodes[i].id;
    /* free session memory per node, as last reported: spreads new sessions */
    int64_t *room_ids = malloc((size_t)(n + 1) * sizeof *room_ids);
    int64_t *room_bytes = malloc((size_t)(n + 1) * sizeof *room_bytes);
    mt_place_room room = {room_ids, room_bytes, 0};
    for (int32_t i = 0; room_ids && room_bytes && i < n; i++) {
        room_ids[room.n] = nodes[i].id;
        int64_t left = nodes[i].load_kv_budget - nodes[i].load_kv_used;
        room_bytes[room.n++] = nodes[i].load_kv_budget <= 0 ? -1 : left > 0 ? left : 0;
    }
    mt_place_route route;
    if (!skip || !room_ids || !room_bytes) {
        mt_error_set(err, "out of memory");
    } else if (mt_place_route_choose(&r->plan, skip, k, session, &room, &route, err) == 0) {
        bool swarm = r->cfg.mode == MT_REGISTRY_SWARM;
        json_t *hops = json_array();
        for (int32_t h = 0; h < route.n_hops; h++) {
            if (route.hops[h].role == MT_PLACE_PARTNER) continue; /* its stage calls it */
            for (int32_t i = 0; i < n; i++) {
                if (nodes[i].id != route.hops[h].node) continue;
                json_t *hop = hop_json(&nodes[i], &route.hops[h]);
                if (!swarm)
                    json_object_set_new(hop, "checkers",
                                        checkers_json(nodes, n, &route, route.hops[h].layer_begin,
                                                      route.hops[h].layer_end, skip, k));
                json_array_append_new(hops, hop);
            }
        }
        out = json_pack("{s:s, s:s, s:s, s:I, s:i, s:o}", "mode", swarm ? "swarm" : "cell",
                        "source_id", r->source_id, "head", swarm ? "backbone" : "head",
                        "plan_version", (json_int_t)r->plan_version, "pipeline", route.pipeline,
                        swarm ? "experts" : "stages", hops);
        mt_place_route_free(&route);
    } else {
        mt_error_prefix(err, "no route: %s", r->plan_why[0] ? r->plan_why : "the plan is complete");
    }
    free(room_ids);
    free(room_bytes);
    free(skip);
    free(nodes);
    return out;
}

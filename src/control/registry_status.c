/* registry_status.c - GET /v1/status: the cell or swarm at a glance, as
 * JSON for `moontail status` and the status page: every node's state, role,
 * shard, load and tokens/s; every layer's coverage (holders serving now and
 * holders assigned, against the replicas wanted), spares, queue, and
 * whether requests can be routed; quarantined nodes and spot-check reports
 * (docs/spot-checking.md). */
#include "registry_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Spot-check reports so far (docs/spot-checking.md): all, and the confirmed
 * ones, in which the registry's own check found a node wrong (now, or when
 * it quarantined it before). */
static json_t *reports_json(mt_registry *r) {
    int64_t total = 0, confirmed = 0;
    sqlite3_stmt *st = reg_db_prepare(r, NULL,
                                      "SELECT COUNT(*), COALESCE(SUM(checked_result IN"
                                      " ('wrong', 'quarantined') OR checker_result IN"
                                      " ('wrong', 'quarantined')), 0) FROM reports");
    if (st && sqlite3_step(st) == SQLITE_ROW) {
        total = sqlite3_column_int64(st, 0);
        confirmed = sqlite3_column_int64(st, 1);
    }
    if (st) sqlite3_finalize(st);
    return json_pack("{s:I, s:I, s:I}", "total", (json_int_t)total, "confirmed",
                     (json_int_t)confirmed, "unconfirmed", (json_int_t)(total - confirmed));
}

/* Cell mode: each pipeline's context, the fewest positions a session can
 * have on its serving stages (a route's context is its stages' smallest);
 * 0 while a stage has not reported one. The swarm keeps every session's
 * cache on the requester, so it has none. */
static json_t *pipelines_json(mt_registry *r, const reg_node *nodes, int32_t n, int64_t now,
                              int32_t *best) {
    json_t *out = json_array();
    *best = 0;
    int32_t n_rep = r->cfg.replicas; /* with a latency goal the plan may make more */
    for (int32_t k = 0; r->have_plan && k < r->plan.n_pipelines; k++)
        if (r->plan.pipelines[k].index >= n_rep) n_rep = r->plan.pipelines[k].index + 1;
    for (int32_t rep = 0; rep < n_rep; rep++) {
        int32_t ctx = 0, stages = 0;
        bool unknown = false;
        for (int32_t i = 0; i < n; i++) {
            const reg_node *x = &nodes[i];
            if (x->a.role != MT_PLACE_STAGE || x->a.replica != rep ||
                strcmp(reg_node_state(r, x, now), "serving") != 0)
                continue;
            stages++;
            if (x->load_ctx <= 0)
                unknown = true;
            else if (!ctx || x->load_ctx < ctx)
                ctx = x->load_ctx;
        }
        if (unknown || !stages) ctx = 0;
        if (ctx > *best) *best = ctx;
        json_t *o = json_pack("{s:i, s:i, s:i}", "replica", rep, "stages", stages, "context", ctx);
        /* the plan's estimates (moontail/placement.h): a token's trip, the slowest group */
        for (int32_t k = 0; r->have_plan && k < r->plan.n_pipelines; k++)
            if (r->plan.pipelines[k].index == rep) {
                const mt_place_pipeline *pp = &r->plan.pipelines[k];
                json_object_set_new(o, "groups", json_integer(pp->n_groups));
                json_object_set_new(o, "nodes", json_integer(pp->n_nodes));
                json_object_set_new(o, "latency_ms", json_real(pp->latency_ms));
                json_object_set_new(o, "slowest_ms", json_real(pp->slowest_ms));
                json_object_set_new(o, "trip_ms", json_real(pp->trip_ms));
            }
        json_array_append_new(out, o);
    }
    return out;
}

/* Per layer: the first live node assigned to it that reports why it cannot serve its shard
 * (-1: none), so that a layer short of replicas shows the reason next to it. */
static int32_t *layer_problems(mt_registry *r, const reg_node *nodes, int32_t n, int64_t now) {
    const int32_t L = r->layout.n_layer;
    int32_t *why = malloc(((size_t)L + 1) * sizeof *why);
    if (!why) return NULL;
    for (int32_t il = 0; il < L; il++) why[il] = -1;
    for (int32_t i = 0; i < n; i++) {
        const reg_node *x = &nodes[i];
        if (!x->problem[0] || !reg_node_alive(r, x, now)) continue;
        for (int32_t il = x->a.layer_begin; il < x->a.layer_end && il < L; il++)
            if (il >= 0 && why[il] < 0) why[il] = i;
    }
    return why;
}

/* The layers il in [0, L) where serving[il] is in [lo, hi], as `moontail status` writes
 * layer runs ("3-5, 7"); their count. */
static int32_t layer_runs(const int32_t *serving, int32_t L, int32_t lo, int32_t hi, char *out,
                          size_t cap) {
    int32_t count = 0;
    size_t k = 0;
    out[0] = 0;
    for (int32_t il = 0; il < L;) {
        if (serving[il] < lo || serving[il] > hi) {
            il++;
            continue;
        }
        int32_t j = il;
        while (j + 1 < L && serving[j + 1] >= lo && serving[j + 1] <= hi) j++;
        count += j - il + 1;
        if (k < cap)
            k += (size_t)snprintf(out + k, cap - k, j > il ? "%s%d-%d" : "%s%d", k ? ", " : "", il,
                                  j);
        il = j + 1;
    }
    return count;
}

/* The nodes by state, for the status's figures and the banner's advice. */
typedef struct node_counts {
    int32_t known, alive, serving, spares, loading, paused, quarantined;
    int32_t first_problem; /* index of the first alive node that reports one, or -1 */
} node_counts;

/* The readiness object: the banner, and the placement's note when the banner's reason
 * does not already give it (moontail status prints it on a line of its own). */
static json_t *banner_json(mt_registry *r, const char *state, const char *word, const char *why,
                           bool told_plan) {
    json_t *o = json_pack("{s:s, s:s, s:s}", "state", state, "word", word, "why", why);
    if (r->plan_why[0] && !told_plan) json_object_set_new(o, "note", json_string(r->plan_why));
    return o;
}

/* The banner `moontail status` and the status page show, one text for both: READY (every
 * layer has every replica wanted serving), SERVING (requests can be routed, but some
 * layers have fewer replicas: a failure there is not covered), or NOT READY; why, and
 * what to do about it when that is known. serving: each layer's serving replicas, the
 * fewest of which is min_serving. */
static json_t *readiness_json(mt_registry *r, const int32_t *serving, int32_t min_serving,
                              const node_counts *c, const reg_node *nodes) {
    const int32_t L = r->layout.n_layer, R = r->cfg.replicas;
    char why[1400], runs[400];
    const char *state, *word;
    size_t k = 0;
    if (L && min_serving >= R) {
        state = "ready", word = "READY";
        k = (size_t)snprintf(
            why, sizeof why,
            R == 1 ? "every layer is served" : "every layer has its %d replicas serving", R);
        if (r->cfg.mode == MT_REGISTRY_CELL && c->spares < r->cfg.spares)
            snprintf(why + k, sizeof why - k,
                     "; %s hot spare left (%d wanted): a failed node is replaced only when"
                     " another joins",
                     c->spares ? "too few" : "no", r->cfg.spares);
        return banner_json(r, state, word, why, false);
    }
    bool told_plan = false;
    if (L && min_serving >= 1) { /* so 1 <= min_serving < R */
        state = "degraded", word = "SERVING";
        int32_t one = layer_runs(serving, L, 1, 1, runs, sizeof runs);
        if (one)
            k = (size_t)snprintf(why, sizeof why,
                                 "no spare for layer%s %s (1 of %d replicas serving)",
                                 one == 1 ? "" : "s", runs, R);
        int32_t some = layer_runs(serving, L, 2, R - 1, runs, sizeof runs);
        if (some && k < sizeof why)
            k += (size_t)snprintf(why + k, sizeof why - k,
                                  "%sfewer than %d replicas serving for"
                                  " layer%s %s",
                                  k ? "; " : "", R, some == 1 ? "" : "s", runs);
    } else {
        state = "not-ready", word = "NOT READY";
        int32_t down = layer_runs(serving, L, 0, 0, runs, sizeof runs);
        k = (size_t)snprintf(why, sizeof why, L ? "no replica serving layer%s %s" : "no layers",
                             down == 1 ? "" : "s", runs);
    }
    /* the cause, with what to do, most telling first */
    const char *sep = k ? "; " : "";
    if (k >= sizeof why) {
    } else if (c->known == 0) {
        snprintf(why + k, sizeof why - k,
                 "%sno node has joined yet: on each PC run 'moontail setup --accept-terms"
                 " --registry %s' (or 'moontail node --registry %s --token-file FILE')",
                 sep, r->url, r->url);
    } else if (c->alive == 0) {
        snprintf(why + k, sizeof why - k,
                 "%snone of the %d known node%s is alive: start %s again (or new ones)", sep,
                 c->known, c->known == 1 ? "" : "s", c->known == 1 ? "it" : "them");
    } else if (c->first_problem >= 0) {
        const reg_node *x = &nodes[c->first_problem];
        snprintf(why + k, sizeof why - k, "%snode %lld '%s': %s", sep, (long long)x->id, x->name,
                 x->problem);
    } else if (r->plan_why[0]) {
        snprintf(why + k, sizeof why - k, "%s%s", sep, r->plan_why);
        told_plan = true;
    } else if (c->loading > 0) {
        snprintf(why + k, sizeof why - k,
                 "%s%d node%s still loading %s shard%s (fetching or reading it); wait", sep,
                 c->loading, c->loading == 1 ? " is" : "s are", c->loading == 1 ? "its" : "their",
                 c->loading == 1 ? "" : "s");
    } else if (c->paused + c->quarantined > 0) {
        snprintf(why + k, sizeof why - k, "%s%d node%s paused or quarantined", sep,
                 c->paused + c->quarantined, c->paused + c->quarantined == 1 ? "" : "s");
    }
    return banner_json(r, state, word, why, told_plan);
}

/* What the HTTP server's limits did, and the registry's own overload (http.h, registry.c). */
static json_t *http_json(mt_registry *r, int64_t now) {
    mt_http_stats h = {0};
    if (r->http) mt_http_server_stats(r->http, &h);
    int64_t until = atomic_load(&r->overload_until);
    return json_pack(
        "{s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:b, s:I, s:I}}", "conns",
        h.conns, "reserved_conns", h.reserved_conns, "peak_conns", h.peak_conns, "accepted",
        (json_int_t)h.accepted, "refused_full", (json_int_t)h.refused_full, "refused_per_addr",
        (json_int_t)h.refused_per_addr, "refused_inflight", (json_int_t)h.refused_inflight,
        "closed_headers", (json_int_t)h.closed_headers, "closed_body", (json_int_t)h.closed_body,
        "refused_unread", (json_int_t)h.refused_unread, "body_bytes", (json_int_t)h.body_bytes,
        "overload", "now", now <= until, "episodes", (json_int_t)atomic_load(&r->overloads),
        "grace_ms", (json_int_t)atomic_load(&r->overload_ms));
}

json_t *reg_status_json(mt_registry *r) {
    int64_t now = mt_wall_ms();
    reg_node *nodes = NULL;
    int32_t n = 0;
    reg_nodes_load(r, &nodes, &n, NULL);
    const int32_t L = r->layout.n_layer, X = r->layout.n_expert;
    bool swarm = r->cfg.mode == MT_REGISTRY_SWARM;
    /* per layer: fewest holders of any of its slices, serving and assigned */
    int32_t *serving = calloc((size_t)L * (size_t)(X ? X : 1) + 1, sizeof *serving);
    int32_t *assigned = calloc((size_t)L * (size_t)(X ? X : 1) + 1, sizeof *assigned);
    json_t *jn = json_array();
    node_counts nc = {.known = n, .first_problem = -1};
    int32_t queue = 0;
    double tok_per_s = 0;
    for (int32_t i = 0; i < n; i++) {
        const reg_node *x = &nodes[i];
        const char *state = reg_node_state(r, x, now);
        char shard[96];
        reg_shard_name(&x->a, shard);
        bool alive = reg_node_alive(r, x, now), is_serving = strcmp(state, "serving") == 0;
        nc.alive += alive;
        nc.serving += is_serving;
        nc.spares += strcmp(state, "spare") == 0;
        nc.quarantined += x->quarantined;
        nc.loading += strcmp(state, "loading") == 0;
        nc.paused += strcmp(state, "paused") == 0 || strcmp(state, "draining") == 0;
        if (alive) queue += x->load_queue, tok_per_s += x->tok_per_s;
        if (alive && x->problem[0] && x->a.role != MT_PLACE_NONE && nc.first_problem < 0)
            nc.first_problem = i;
        /* a slice (layer, expert) is covered by a stage's attention + its experts, or by
         * a partner / expert server; in cell mode a layer counts once per pipeline */
        for (int32_t il = x->a.layer_begin; serving && assigned && il < x->a.layer_end; il++) {
            bool moe = X > 0 && r->layout.expert_bytes[il] > 0;
            if (!moe) {
                if (x->a.attention || swarm) {
                    for (int32_t e = 0; e < (X ? X : 1); e++) {
                        assigned[il * (X ? X : 1) + e]++;
                        serving[il * (X ? X : 1) + e] += is_serving;
                    }
                }
                continue;
            }
            for (int32_t e = x->a.expert_begin; e < x->a.expert_end; e++) {
                assigned[il * X + e]++;
                serving[il * X + e] += is_serving;
            }
        }
        json_t *o = json_pack(
            "{s:I, s:s, s:s, s:s, s:s, s:s, s:i, s:[i,i], s:b, s:[i,i], s:I, s:f, s:I, s:I, s:I,"
            " s:I, s:i, s:i, s:f, s:I, s:s}",
            "node_id", (json_int_t)x->id, "name", x->name, "addr", x->addr, "state", state, "role",
            mt_place_role_name(x->a.role), "shard", shard, "replica", x->a.replica, "layers",
            x->a.layer_begin, x->a.layer_end, "attention", x->a.attention, "experts",
            x->a.expert_begin, x->a.expert_end, "capacity", (json_int_t)x->capacity, "speed",
            x->speed, "ram", (json_int_t)x->ram, "served_token_layers",
            (json_int_t)x->served_token_layers, "served_expert_rows",
            (json_int_t)x->served_expert_rows, "uptime_ms", (json_int_t)x->uptime_ms, "queue",
            x->load_queue, "sessions", x->load_sessions, "tok_per_s", x->tok_per_s,
            "last_seen_ms_ago", (json_int_t)(x->last_seen ? now - x->last_seen : -1), "schedule",
            x->schedule);
        /* more fields, kept out of the long pack format above */
        json_object_set_new(o, "alive", json_boolean(alive));
        json_object_set_new(o, "served_tokens", json_integer(x->served_tokens));
        json_object_set_new(o, "kv_bytes", json_integer(x->load_kv_bytes));
        json_object_set_new(o, "ctx", json_integer(x->load_ctx));
        json_object_set_new(o, "max_sessions", json_integer(x->load_max_sessions));
        json_object_set_new(o, "kv_budget", json_integer(x->load_kv_budget));
        json_object_set_new(o, "kv_used", json_integer(x->load_kv_used));
        if (x->a.role == MT_PLACE_PARTNER)
            json_object_set_new(o, "paired_with", json_integer(x->a.paired_with));
        json_object_set_new(o, "problem", json_string(x->problem));
        json_object_set_new(o, "quarantined", json_boolean(x->quarantined));
        /* the node table's replica, queue and rate as the page and `moontail status` show
         * them, null ("-") where they do not apply: a replica for a node in a role that
         * serves, a queue and a rate only while it is also alive (not for spares, not the
         * last ones a dead node reported) */
        bool works = x->a.role == MT_PLACE_STAGE || x->a.role == MT_PLACE_PARTNER ||
                     x->a.role == MT_PLACE_EXPERTS;
        json_t *shown = json_object();
        json_object_set_new(shown, "replica", works ? json_integer(x->a.replica) : json_null());
        json_object_set_new(shown, "queue",
                            works && alive ? json_integer(x->load_queue) : json_null());
        json_object_set_new(shown, "tok_per_s",
                            works && alive ? json_real(x->tok_per_s) : json_null());
        json_object_set_new(o, "shown", shown);
        if (x->quarantined)
            json_object_set_new(o, "quarantine",
                                json_pack("{s:I, s:s}", "since_ms", (json_int_t)x->quarantined_at,
                                          "reason", x->quarantine_reason));
        json_array_append_new(jn, o);
    }
    json_t *layers = json_array();
    int32_t *why = layer_problems(r, nodes, n, now);
    int32_t *layer_serving = calloc((size_t)L + 1, sizeof *layer_serving);
    int32_t min_serving = L ? 1 << 30 : 0;
    for (int32_t il = 0; il < L; il++) {
        int32_t s = 1 << 30, a = 1 << 30;
        int32_t w = X ? X : 1;
        bool moe = X > 0 && r->layout.expert_bytes[il] > 0;
        if (!swarm || moe) {
            for (int32_t e = 0; serving && e < w; e++) {
                if (serving[il * w + e] < s) s = serving[il * w + e];
                if (assigned[il * w + e] < a) a = assigned[il * w + e];
            }
        } else { /* swarm: dense layers run on the requester's backbone */
            s = a = r->cfg.replicas;
        }
        if (s == 1 << 30) s = a = 0;
        if (s < min_serving) min_serving = s;
        if (layer_serving) layer_serving[il] = s;
        json_t *lo =
            json_pack("{s:i, s:i, s:i, s:b}", "layer", il, "serving", s, "assigned", a, "moe", moe);
        if (why && why[il] >= 0 && s < r->cfg.replicas) {
            char text[MT_NODE_PROBLEM_MAX + 100];
            snprintf(text, sizeof text, "node %lld '%s': %s", (long long)nodes[why[il]].id,
                     nodes[why[il]].name, nodes[why[il]].problem);
            json_object_set_new(lo, "problem", json_string(text));
        }
        json_array_append_new(layers, lo);
    }
    free(why);
    free(serving);
    free(assigned);
    json_t *readiness =
        layer_serving ? readiness_json(r, layer_serving, min_serving, &nc, nodes) : NULL;
    free(layer_serving);
    int32_t best_ctx = 0;
    json_t *pipes = swarm ? NULL : pipelines_json(r, nodes, n, now, &best_ctx);
    free(nodes);
    int32_t active, waiting;
    reg_ticket_counts(r, now, &active, &waiting);
    json_t *st = json_pack(
        "{s:s, s:s, s:s, s:i, s:i, s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:f, s:b, s:s,"
        " s:I, s:I, s:I, s:I, s:o, s:o}",
        "mode", swarm ? "swarm" : "cell", "source_id", r->source_id, "registry_key", r->key_hex,
        "n_layer", L, "n_expert", X, "plan_version", (json_int_t)r->plan_version, "moves",
        (json_int_t)r->moves, "replicas", r->cfg.replicas, "min_replicas_serving", min_serving,
        "nodes_alive", nc.alive, "nodes_serving", nc.serving, "spares", nc.spares, "tok_per_s",
        tok_per_s, "ready", min_serving >= 1, "plan_note", r->plan_why, "queue", (json_int_t)queue,
        "routes_served", (json_int_t)r->routes_served, "nodes_known", (json_int_t)n, "started_ms",
        (json_int_t)r->started_ms, "layers", layers, "nodes", jn);
    if (!swarm)
        json_object_set_new(
            st, "objective",
            json_string(mt_place_objective_name((mt_place_objective)r->cfg.objective)));
    if (!swarm) { /* the per-user latency goal (0: none) and, with one, whether the plan meets it */
        json_object_set_new(st, "latency_goal_ms", json_real(r->cfg.latency_goal_ms));
        json_object_set_new(st, "latency_goal_met",
                            r->cfg.latency_goal_ms > 0 && r->have_plan
                                ? json_boolean(r->plan.latency_goal_met)
                                : json_null());
        if (r->goal_why[0]) json_object_set_new(st, "latency_goal_note", json_string(r->goal_why));
    }
    if (pipes) {
        json_object_set_new(st, "pipelines", pipes);
        json_object_set_new(st, "context", json_integer(best_ctx));
    }
    if (readiness) json_object_set_new(st, "readiness", readiness);
    json_object_set_new(st, "spares_wanted", json_integer(swarm ? 0 : r->cfg.spares));
    json_object_set_new(st, "kv_type", json_string(mt_kv_type_name(r->cfg.kv_type)));
    json_object_set_new(st, "requests_active", json_integer(active));
    json_object_set_new(st, "requests_waiting", json_integer(waiting));
    json_object_set_new(st, "max_active", json_integer(r->cfg.max_active));
    if (r->tls_pin[0]) json_object_set_new(st, "tls_pin", json_string(r->tls_pin));
    json_object_set_new(st, "nodes_quarantined", json_integer(nc.quarantined));
    json_object_set_new(st, "reports", reports_json(r));
    /* how the model's hashes were had at this start: read (and how fast) or from the cache */
    json_object_set_new(
        st, "model_hashes",
        json_pack("{s:I, s:I, s:f, s:o}", "bytes_read", (json_int_t)r->start_hash_read,
                  "bytes_cached", (json_int_t)r->start_hash_cached, "seconds", r->start_hash_s,
                  "cache",
                  r->io.cache ? json_string(mt_hash_cache_path(r->io.cache)) : json_null()));
    json_object_set_new(st, "http", http_json(r, now));
    return st;
}

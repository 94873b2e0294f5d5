/* registry_metrics.c - GET /metrics: what GET /v1/status says, in the
 * Prometheus text exposition format 0.0.4, so that a Prometheus server (or
 * anything that reads that format) can scrape a cell or swarm into graphs and
 * alerts. It is built from the status object itself (registry_status.c), so
 * the page, `moontail status` and the metrics never disagree.
 *
 * Every name starts with moontail_. Each family is written once, as
 * "# HELP", "# TYPE" and then all of its samples together, as the format
 * requires. Per-node series carry node_id and name labels; names come from
 * users, so label values are escaped (\\, \" and \n). Node counters are the
 * node's own cumulative counters since its process started: they restart at
 * 0 when a node rejoins, which Prometheus treats as a counter reset. The
 * registry's own counters restart with the registry process
 * (moontail_registry_start_time_seconds says when). */
#include "registry_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing the format ----------------------------------------------------------------- */

static void family(FILE *f, const char *name, const char *type, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value between double quotes, escaped as the format says. */
static void label_value(FILE *f, const char *s) {
    fputc('"', f);
    if (!s) s = "";
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f), fputc(*s, f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* A JSON number or boolean as a sample value (integers exactly; reals with
 * 17 digits, so they read back as the same double). */
static void value(FILE *f, json_t *v) {
    if (json_is_integer(v))
        fprintf(f, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        fprintf(f, "%.17g", json_real_value(v));
    else
        fputs(json_is_true(v) ? "1" : "0", f);
}

/* Milliseconds as seconds, exactly: 1234 -> 1.234. */
static void ms_as_seconds(FILE *f, long long ms) {
    fprintf(f, "%s%lld.%03lld", ms < 0 ? "-" : "", llabs(ms) / 1000, llabs(ms) % 1000);
}

/* One unlabelled family with one sample. */
static void single(FILE *f, const char *name, const char *type, const char *help, json_t *v) {
    family(f, name, type, help);
    fprintf(f, "%s ", name);
    value(f, v);
    fputc('\n', f);
}

/* ---- per node ----------------------------------------------------------------------------- */

typedef struct node_metric {
    const char *name, *type, *key, *help;
    bool ms; /* the JSON field is in milliseconds; the metric is in seconds */
} node_metric;

static const node_metric node_metrics[] = {
    {"moontail_node_up", "gauge", "alive",
     "1 while the node's heartbeats arrive, 0 once it is dead", false},
    {"moontail_node_queue", "gauge", "queue", "Requests waiting at the node", false},
    {"moontail_node_sessions", "gauge", "sessions", "Sessions the node holds state for", false},
    {"moontail_node_kv_cache_bytes", "gauge", "kv_bytes",
     "Bytes the KV caches of the node's sessions reserve", false},
    {"moontail_node_kv_budget_bytes", "gauge", "kv_budget",
     "Bytes of session memory (KV cache and state) the node offers", false},
    {"moontail_node_kv_used_bytes", "gauge", "kv_used",
     "Bytes of that memory its sessions hold now", false},
    {"moontail_node_tokens_per_second", "gauge", "tok_per_s",
     "Tokens per second the node computed recently", false},
    {"moontail_node_served_token_layers_total", "counter", "served_token_layers",
     "Token-layers the node computed as a stage since its process started", false},
    {"moontail_node_served_expert_rows_total", "counter", "served_expert_rows",
     "Expert rows the node computed for other nodes since its process started", false},
    {"moontail_node_served_tokens_total", "counter", "served_tokens",
     "Tokens that passed through the node since its process started", false},
    {"moontail_node_uptime_seconds_total", "counter", "uptime_ms",
     "Time the node has been alive (heartbeating), summed since it first joined", true},
    {"moontail_node_last_seen_seconds", "gauge", "last_seen_ms_ago",
     "Seconds since the node's last heartbeat", true},
    {"moontail_node_capacity_bytes", "gauge", "capacity", "Bytes of shard the node offers", false},
    {"moontail_node_quarantined", "gauge", "quarantined",
     "1 while the node is quarantined (a spot-check found it computing wrong results)", false},
};

static void node_labels(FILE *f, json_t *n) {
    fprintf(
        f, "{node_id=\"%lld\",name=", (long long)json_integer_value(json_object_get(n, "node_id")));
    label_value(f, json_string_value(json_object_get(n, "name")));
}

static void node_families(FILE *f, json_t *nodes) {
    size_t i;
    json_t *n;
    family(f, "moontail_node_info", "gauge",
           "A node's state, role and shard as labels; the value is always 1");
    json_array_foreach(nodes, i, n) {
        fputs("moontail_node_info", f);
        node_labels(f, n);
        static const char *const keys[] = {"state", "role", "shard", "addr"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            fprintf(f, ",%s=", keys[k]);
            label_value(f, json_string_value(json_object_get(n, keys[k])));
        }
        fputs("} 1\n", f);
    }
    for (size_t m = 0; m < sizeof node_metrics / sizeof *node_metrics; m++) {
        const node_metric *nm = &node_metrics[m];
        family(f, nm->name, nm->type, nm->help);
        json_array_foreach(nodes, i, n) {
            json_t *v = json_object_get(n, nm->key);
            if (!v) continue;
            /* a node never heard from has no last heartbeat: no sample */
            if (nm->ms && json_integer_value(v) < 0) continue;
            fputs(nm->name, f);
            node_labels(f, n);
            fputs("} ", f);
            if (nm->ms)
                ms_as_seconds(f, json_integer_value(v));
            else
                value(f, v);
            fputc('\n', f);
        }
    }
}

/* ---- the registry ------------------------------------------------------------------------- */

/* reg_node_state's answers: every state gets a sample, 0 when no node is in it */
static const char *const node_states[] = {"joining", "loading",    "failing", "serving",
                                          "spare",   "idle",       "paused",  "draining",
                                          "dead",    "quarantined"};

char *reg_metrics_text(mt_registry *r) {
    json_t *s = reg_status_json(r);
    if (!s) return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        json_decref(s);
        return NULL;
    }
    json_t *nodes = json_object_get(s, "nodes"), *layers = json_object_get(s, "layers");
    size_t i;
    json_t *x;

    family(f, "moontail_registry_up", "gauge",
           "1 while the registry answers (a failed scrape means it does not)");
    fputs("moontail_registry_up 1\n", f);
    family(f, "moontail_registry_info", "gauge",
           "The registry's mode and the model it places (source_id); the value is always 1");
    fputs("moontail_registry_info{mode=", f);
    label_value(f, json_string_value(json_object_get(s, "mode")));
    fputs(",source_id=", f);
    label_value(f, json_string_value(json_object_get(s, "source_id")));
    fputs("} 1\n", f);
    family(f, "moontail_registry_start_time_seconds", "gauge",
           "When the registry process started (Unix time); its counters restart then");
    fputs("moontail_registry_start_time_seconds ", f);
    ms_as_seconds(f, (long long)json_integer_value(json_object_get(s, "started_ms")));
    fputc('\n', f);
    single(f, "moontail_ready", "gauge",
           "1 when every layer has at least one serving replica, so requests can be routed",
           json_object_get(s, "ready"));
    single(f, "moontail_layers", "gauge", "Layers of the model", json_object_get(s, "n_layer"));
    single(f, "moontail_replicas_wanted", "gauge",
           "Replicas of every layer (cell: pipelines) placement aims for",
           json_object_get(s, "replicas"));
    single(f, "moontail_min_replicas_serving", "gauge",
           "Fewest serving replicas of any layer (0: some layer is down)",
           json_object_get(s, "min_replicas_serving"));
    single(f, "moontail_queue", "gauge", "Requests waiting, summed over the live nodes",
           json_object_get(s, "queue"));
    single(f, "moontail_tokens_per_second", "gauge",
           "Tokens per second, summed over the live nodes", json_object_get(s, "tok_per_s"));
    single(f, "moontail_plan_version", "gauge", "Placement plans made since the registry started",
           json_object_get(s, "plan_version"));
    single(f, "moontail_plan_moves_total", "counter",
           "Shard assignments placement changed since the registry started",
           json_object_get(s, "moves"));
    single(f, "moontail_routes_served_total", "counter",
           "Routes handed to requesters since the registry started",
           json_object_get(s, "routes_served"));

    family(f, "moontail_nodes", "gauge", "Nodes known to the registry, by state");
    for (size_t k = 0; k < sizeof node_states / sizeof *node_states; k++) {
        long long count = 0;
        json_array_foreach(nodes, i, x) {
            const char *st = json_string_value(json_object_get(x, "state"));
            count += st && strcmp(st, node_states[k]) == 0;
        }
        fprintf(f, "moontail_nodes{state=\"%s\"} %lld\n", node_states[k], count);
    }

    family(f, "moontail_layer_replicas_serving", "gauge",
           "Serving replicas of each layer (its least covered expert slice)");
    json_array_foreach(layers, i, x) {
        fprintf(f, "moontail_layer_replicas_serving{layer=\"%zu\"} ", i);
        value(f, json_object_get(x, "serving"));
        fputc('\n', f);
    }
    family(f, "moontail_layer_replicas_assigned", "gauge",
           "Assigned replicas of each layer, serving or still loading");
    json_array_foreach(layers, i, x) {
        fprintf(f, "moontail_layer_replicas_assigned{layer=\"%zu\"} ", i);
        value(f, json_object_get(x, "assigned"));
        fputc('\n', f);
    }

    json_t *reports = json_object_get(s, "reports");
    family(f, "moontail_spot_check_reports_total", "counter",
           "Spot-check reports taken, by what the registry's own check found: confirmed (a node"
           " computed wrong) or unconfirmed");
    fputs("moontail_spot_check_reports_total{verdict=\"confirmed\"} ", f);
    value(f, json_object_get(reports, "confirmed"));
    fputs("\nmoontail_spot_check_reports_total{verdict=\"unconfirmed\"} ", f);
    value(f, json_object_get(reports, "unconfirmed"));
    fputc('\n', f);

    node_families(f, nodes);
    json_decref(s);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

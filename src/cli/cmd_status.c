/* cmd_status.c - `moontail status`: the registry's view of the cell or
 * swarm, readable at a glance in a terminal (or --json): readiness, nodes
 * by state, every layer's coverage against the replicas wanted, spares,
 * queue and tokens/s, then one line per node; why a layer or a node does not
 * serve, when its node reports a reason. */
#include "cli.h"
#include "cli_config.h"
#include "moontail/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "usage: moontail status [--registry URL] [--token-file F] [--json]\n"
                            "       (default: the registry and account of 'moontail setup')\n"
                            "\n"
                            "  --registry URL   the registry (e.g. http://127.0.0.1:8470)\n"
                            "  --token-file F   also show this account's credits\n"
                            "  --json           print the registry's status object as it is\n";

static const char *str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}
static long long num(json_t *o, const char *k) {
    return json_integer_value(json_object_get(o, k));
}

/* "1 node" / "2 nodes" */
static const char *plural(long long n, const char *one, const char *many) {
    return n == 1 ? one : many;
}

/* Bytes as the status page writes them (base 1000: "1.50 MB", "17.3 GB", "512 B"). */
static void fmt_bytes(double n, char *out, size_t cap) {
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
    int i = 0;
    while (n >= 1000 && i < 4) n /= 1000, i++;
    if (i == 0)
        snprintf(out, cap, "%.0f B", n);
    else
        snprintf(out, cap, n < 10 ? "%.2f %s" : "%.1f %s", n, units[i]);
}

/* A duration as the status page writes it: "42s", "3m05s", "1h02m05s", "2d03h". */
static void fmt_duration(long long ms, char *out, size_t cap) {
    long long s = ms > 0 ? ms / 1000 : 0;
    if (s < 60)
        snprintf(out, cap, "%llds", s);
    else if (s < 3600)
        snprintf(out, cap, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400)
        snprintf(out, cap, "%lldh%02lldm%02llds", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(out, cap, "%lldd%02lldh", s / 86400, s / 3600 % 24);
}

/* A cell of the node table from the registry's "shown" values: the number, or "-" for
 * null (where it does not apply; the registry decides that, for the page too). */
static void fmt_cell(json_t *v, int decimals, char *out, size_t cap) {
    if (json_is_number(v))
        snprintf(out, cap, "%.*f", decimals, json_number_value(v));
    else
        snprintf(out, cap, "-");
}

/* Runs of layers with the same (serving, assigned) counts: "0-5 2/2". */
static void print_coverage(json_t *layers, int replicas) {
    size_t n = json_array_size(layers);
    printf("coverage (serving/assigned of %d):", replicas);
    for (size_t i = 0; i < n;) {
        json_t *l = json_array_get(layers, i);
        long long s = num(l, "serving"), a = num(l, "assigned");
        size_t j = i + 1;
        while (j < n && num(json_array_get(layers, j), "serving") == s &&
               num(json_array_get(layers, j), "assigned") == a)
            j++;
        if (j - i == 1)
            printf("  L%zu %lld/%lld", i, s, a);
        else
            printf("  L%zu-%zu %lld/%lld", i, j - 1, s, a);
        if (s < replicas) printf("%s", s == 0 ? " (DOWN)" : " (low)");
        i = j;
    }
    printf("\n");
    /* why layers short of replicas are not served, as their nodes report it */
    for (size_t i = 0; i < n;) {
        const char *why = str(json_array_get(layers, i), "problem");
        size_t j = i + 1;
        while (j < n && strcmp(str(json_array_get(layers, j), "problem"), why) == 0) j++;
        if (why[0] && j - i == 1)
            printf("  L%zu not served: %s\n", i, why);
        else if (why[0])
            printf("  L%zu-%zu not served: %s\n", i, j - 1, why);
        i = j;
    }
}

int cmd_status(int argc, char **argv) {
    const char *registry = NULL, *token_file = NULL;
    bool as_json = false;
    const cli_opt opts[] = {{"--registry", CLI_STRING, &registry, 0, 0},
                            {"--token-file", CLI_STRING, &token_file, 0, 0},
                            {"--json", CLI_FLAG, &as_json, 0, 0},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("status", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    cli_config conf;
    if (!registry && cli_config_load(&conf) == 0 && conf.registry[0]) {
        registry = conf.registry;
        if (!token_file && conf.has_token) token_file = conf.token_file;
    }
    if (!registry) {
        fprintf(stderr, "moontail status: --registry URL is required (or run 'moontail setup'"
                        " once)\n");
        return 2;
    }
    char url[600];
    snprintf(url, sizeof url, "%s/v1/status", registry);
    json_t *s = NULL;
    mt_error err = {{0}};
    if (mt_http_json("GET", url, NULL, NULL, 10000, &s, &err) != 200 || !json_is_object(s)) {
        fprintf(stderr, "moontail status: %s\n", err.msg[0] ? err.msg : "not a status object");
        json_decref(s);
        return 1;
    }
    /* your credits, when we know your account */
    char *tok = token_file ? cli_token("status", NULL, token_file) : NULL;
    if (tok) {
        snprintf(url, sizeof url, "%s/v1/accounts/me", registry);
        json_t *me = NULL;
        if (mt_http_json("GET", url, tok, NULL, 10000, &me, NULL) == 200)
            json_object_set(s, "account", me);
        json_decref(me);
        free(tok);
    }
    if (as_json) {
        json_dumpf(s, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(s);
        return 0;
    }
    int replicas = (int)num(s, "replicas");
    /* the banner (the registry words it, so that the page says the same), then the figures */
    json_t *rd = json_object_get(s, "readiness");
    printf("%s %s: %s%s%s\n", str(s, "mode"), registry,
           str(rd, "word")[0]                          ? str(rd, "word")
           : json_is_true(json_object_get(s, "ready")) ? "READY"
                                                       : "NOT READY",
           str(rd, "why")[0] ? ": " : "", str(rd, "why"));
    long long alive = num(s, "nodes_alive"), spares = num(s, "spares"), L = num(s, "n_layer");
    printf("%lld %s alive, %lld serving, %lld %s; %lld %s, fewest replicas serving %lld of %d;"
           " queue %lld; %.1f tok/s; plan %lld\n",
           alive, plural(alive, "node", "nodes"), num(s, "nodes_serving"), spares,
           plural(spares, "spare", "spares"), L, plural(L, "layer", "layers"),
           num(s, "min_replicas_serving"), replicas, num(s, "queue"),
           json_number_value(json_object_get(s, "tok_per_s")), num(s, "plan_version"));
    if (str(rd, "note")[0]) printf("note: %s\n", str(rd, "note"));
    json_t *pipes = json_object_get(s, "pipelines");
    if (json_array_size(pipes) > 0) { /* a route's context is its stages' smallest */
        printf("context:");
        size_t i;
        json_t *p;
        json_array_foreach(pipes, i, p) {
            long long c = num(p, "context");
            if (c > 0)
                printf("  pipeline %lld %lld positions", num(p, "replica"), c);
            else
                printf("  pipeline %lld %s", num(p, "replica"),
                       num(p, "stages") > 0 ? "(not reported yet)" : "(no stage serving)");
        }
        printf("\n");
    }
    double goal = json_number_value(json_object_get(s, "latency_goal_ms"));
    if (goal > 0) { /* registry --latency-goal-ms: met, or the registry's note */
        double worst = 0;
        size_t i;
        json_t *p;
        json_array_foreach(pipes, i, p) {
            double t = json_number_value(json_object_get(p, "trip_ms"));
            if (t > worst) worst = t;
        }
        if (json_is_true(json_object_get(s, "latency_goal_met")))
            printf("latency goal: %g ms per token, met (the slowest of %zu pipelines %.1f ms)\n",
                   goal, json_array_size(pipes), worst);
        else if (str(s, "latency_goal_note")[0]) /* "latency goal T ms per token missed: ..." */
            printf("%s\n", str(s, "latency_goal_note"));
        else
            printf("latency goal: %g ms per token, missed\n", goal);
    }
    json_t *reports = json_object_get(s, "reports");
    if (num(s, "nodes_quarantined") > 0 || num(reports, "total") > 0)
        printf("spot-checks: %lld node(s) quarantined; %lld report(s), %lld confirmed by the"
               " registry\n",
               num(s, "nodes_quarantined"), num(reports, "total"), num(reports, "confirmed"));
    if (num(s, "max_active") > 0 || num(s, "requests_waiting") > 0)
        printf("requests: %lld running, %lld waiting in line (at most %lld at once)\n",
               num(s, "requests_active"), num(s, "requests_waiting"), num(s, "max_active"));
    json_t *acc = json_object_get(s, "account");
    if (acc) {
        json_t *c = json_object_get(acc, "credits");
        printf("your account %lld: %zu node(s), served %lld token-layers, used %lld tokens,"
               " balance %.0f; %s\n",
               num(acc, "account_id"), json_array_size(json_object_get(acc, "nodes")),
               num(c, "served_token_layers"), num(c, "used_tokens"),
               json_number_value(json_object_get(c, "balance")),
               json_is_true(json_object_get(c, "volunteered")) ? "volunteering"
               : strcmp(str(s, "mode"), "swarm") == 0
                   ? "not volunteering yet: in a swarm you lend before you prompt; run"
                     " 'moontail setup --accept-terms' on a machine with spare RAM"
                   : "not volunteering yet");
    }
    print_coverage(json_object_get(s, "layers"), replicas);
    /* the page's columns, with the values the registry gives both ("-" where none) */
    printf("%5s  %-16s %-11s %-8s %-16s %7s %5s %8s %9s %9s\n", "id", "name", "state", "role",
           "shard", "replica", "queue", "tok/s", "capacity", "uptime");
    json_t *nodes = json_object_get(s, "nodes");
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        json_t *n = json_array_get(nodes, i);
        char upt[32], cap[32], rep[32], queue[32], rate[32];
        fmt_duration(num(n, "uptime_ms"), upt, sizeof upt);
        fmt_bytes((double)num(n, "capacity"), cap, sizeof cap);
        json_t *shown = json_object_get(n, "shown");
        fmt_cell(json_object_get(shown, "replica"), 0, rep, sizeof rep);
        fmt_cell(json_object_get(shown, "queue"), 0, queue, sizeof queue);
        fmt_cell(json_object_get(shown, "tok_per_s"), 1, rate, sizeof rate);
        printf("%5lld  %-16.16s %-11s %-8s %-16.16s %7s %5s %8s %9s %9s\n", num(n, "node_id"),
               str(n, "name"), str(n, "state"), str(n, "role"),
               str(n, "shard")[0] ? str(n, "shard") : "-", rep, queue, rate, cap, upt);
        if (str(n, "problem")[0]) printf("       problem: %s\n", str(n, "problem"));
        json_t *q = json_object_get(n, "quarantine");
        if (q)
            printf("       quarantined: %s; release with 'moontail cell release --node %lld'\n",
                   str(q, "reason"), num(n, "node_id"));
    }
    json_decref(s);
    return 0;
}

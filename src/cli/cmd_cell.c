/* cmd_cell.c - the operator's commands for a cell: `moontail cell earnings`,
 * what each machine earned, from the registry's ledger; `moontail cell
 * release`, letting a node that a spot-check quarantined work again
 * (docs/spot-checking.md).
 *
 * A cell sells tokens at P per million. A token passes every layer once, so
 * a node that computed T token-layers (plus its expert rows / n_expert_used,
 * for partners) served T / n_layer token-equivalents, and earns
 *   token-equivalents / 1e6 x P x S
 * where S is the share of revenue paid out to machines. */
#include "cli.h"
#include "moontail/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail cell earnings --registry URL --price-per-mtok P --share S [--json]\n"
    "       moontail cell release --registry URL --node ID --admin-token-file F\n"
    "\n"
    "earnings: what each node earned, from the ledger\n"
    "  --price-per-mtok P   what the cell charges per million tokens\n"
    "  --share S            the part of that paid to machines, 0..1\n"
    "  --admin-token-file F the registry's admin token, when it has one\n"
    "  --json               one JSON object\n"
    "\n"
    "release: a node that a spot-check quarantined (it computed wrong results) may work\n"
    "again; see 'moontail status' for why it was quarantined. Needs the admin token.\n";

static int cell_release(int argc, char **argv) {
    const char *registry = NULL, *admin_file = NULL;
    int64_t node = 0;
    const cli_opt opts[] = {{"--registry", CLI_STRING, &registry, 0, 0},
                            {"--node", CLI_INT, &node, 1, INT64_MAX},
                            {"--admin-token-file", CLI_STRING, &admin_file, 0, 0},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("cell release", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!registry || !node || !admin_file) {
        fprintf(stderr, "moontail cell release: --registry URL, --node ID and --admin-token-file F"
                        " are required\n");
        return 2;
    }
    char *admin =
        cli_secret_file("cell release", "--admin-token-file", admin_file, CLI_ADMIN_TOKEN);
    if (!admin) return 2;
    char url[600];
    snprintf(url, sizeof url, "%s/v1/nodes/%lld/release", registry, (long long)node);
    json_t *res = NULL, *body = json_object();
    mt_error err = {{0}};
    int st = mt_http_json("POST", url, admin, body, 10000, &res, &err);
    json_decref(body);
    free(admin);
    if (st == 200)
        printf("node %lld released: %s\n", (long long)node,
               json_string_value(json_object_get(res, "state")));
    else
        fprintf(stderr, "moontail cell release: %s\n", err.msg);
    json_decref(res);
    return st == 200 ? 0 : 1;
}

int cmd_cell(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "release") == 0) return cell_release(argc - 1, argv + 1);
    if (argc < 2 || strcmp(argv[1], "earnings") != 0) {
        bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
        fputs(usage, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    const char *registry = NULL, *admin_file = NULL;
    float price = -1, share = -1;
    bool json = false;
    const cli_opt opts[] = {{"--registry", CLI_STRING, &registry, 0, 0},
                            {"--price-per-mtok", CLI_FLOAT, &price, 0, 0},
                            {"--share", CLI_FLOAT, &share, 0, 0},
                            {"--admin-token-file", CLI_STRING, &admin_file, 0, 0},
                            {"--json", CLI_FLAG, &json, 0, 0},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("cell earnings", argc - 1, argv + 1, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!registry || price < 0 || share < 0 || share > 1) {
        fprintf(stderr, "moontail cell earnings: --registry, --price-per-mtok P >= 0 and --share"
                        " S in [0, 1] are required\n");
        return 2;
    }
    char *admin = admin_file ? cli_secret_file("cell earnings", "--admin-token-file", admin_file,
                                               CLI_ADMIN_TOKEN)
                             : NULL;
    if (admin_file && !admin) return 2;
    char url[600];
    snprintf(url, sizeof url, "%s/v1/ledger/nodes", registry);
    json_t *res = NULL;
    mt_error err = {{0}};
    int st = mt_http_json("GET", url, admin, NULL, 10000, &res, &err);
    free(admin);
    if (st != 200) {
        fprintf(stderr, "moontail cell earnings: %s\n", err.msg);
        json_decref(res);
        return 1;
    }
    double L = (double)json_integer_value(json_object_get(res, "n_layer"));
    double used = (double)json_integer_value(json_object_get(res, "n_expert_used"));
    if (L <= 0) L = 1;
    if (used <= 0) used = 1;
    json_t *nodes = json_object_get(res, "nodes"), *out = json_array();
    double total_tok = 0, total_earn = 0, total_up = 0;
    if (!json)
        printf("%5s  %-16s %14s %12s %14s %10s\n", "id", "name", "token-layers", "tokens", "uptime",
               "earnings");
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        json_t *n = json_array_get(nodes, i);
        double tl = (double)json_integer_value(json_object_get(n, "token_layers"));
        double er = (double)json_integer_value(json_object_get(n, "expert_rows"));
        double tokens = (tl + er / used) / L;
        double earn = tokens / 1e6 * price * share;
        double up_s = (double)json_integer_value(json_object_get(n, "uptime_ms")) / 1000;
        total_tok += tokens, total_earn += earn, total_up += up_s;
        const char *name = json_string_value(json_object_get(n, "name"));
        if (json)
            json_array_append_new(out, json_pack("{s:O, s:s, s:f, s:f, s:f, s:f}", "node_id",
                                                 json_object_get(n, "node_id"), "name", name,
                                                 "token_layers", tl, "tokens", tokens, "uptime_s",
                                                 up_s, "earnings", earn));
        else
            printf("%5lld  %-16.16s %14.0f %12.1f %13.0fs %10.4f\n",
                   json_integer_value(json_object_get(n, "node_id")), name, tl, tokens, up_s, earn);
    }
    if (json) {
        json_t *o =
            json_pack("{s:o, s:f, s:f, s:f, s:f, s:f, s:O}", "nodes", out, "tokens", total_tok,
                      "earnings", total_earn, "uptime_s", total_up, "price_per_mtok", (double)price,
                      "share", (double)share, "ledger_rows", json_object_get(res, "ledger_rows"));
        json_dumpf(o, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(o);
    } else {
        json_decref(out);
        printf("%5s  %-16s %14s %12.1f %13.0fs %10.4f\n", "", "total", "", total_tok, total_up,
               total_earn);
    }
    json_decref(res);
    return 0;
}

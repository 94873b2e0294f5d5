/* cmd_pause.c - `moontail pause`: pause a node now, resume it, or give it
 * pause windows ("Mon-Fri 09:00-18:00"). A paused node finishes what it
 * has, takes nothing new, and its work is placed elsewhere. */
#include "cli.h"
#include "cli_config.h"
#include "moontail/http.h"

#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: moontail pause [--registry URL --token-file FILE] --node ID   (default: setup's)\n"
    "                      [--resume | --schedule \"Mon-Fri 09:00-18:00\"]\n"
    "\n"
    "  (no option)      pause now, until --resume\n"
    "  --resume         take work again\n"
    "  --schedule S     pause during these windows (registry's local time); \"\" clears\n"
    "  --token-file F   the token of the node's account (or MOONTAIL_TOKEN, --token T)\n";

int cmd_pause(int argc, char **argv) {
    const char *registry = NULL, *schedule = NULL, *token = NULL, *token_file = NULL;
    int64_t node = 0;
    bool resume = false;
    const cli_opt opts[] = {{"--registry", CLI_STRING, &registry, 0, 0},
                            {"--node", CLI_INT, &node, 1, INT64_MAX},
                            {"--resume", CLI_FLAG, &resume, 0, 0},
                            {"--schedule", CLI_STRING, &schedule, 0, 0},
                            {"--token", CLI_STRING, &token, 0, 0},
                            {"--token-file", CLI_STRING, &token_file, 0, 0},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("pause", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    cli_config conf;
    if (!registry && cli_config_load(&conf) == 0 && conf.registry[0]) {
        registry = conf.registry;
        if (!token && !token_file && conf.has_token) token_file = conf.token_file;
    }
    if (!registry || !node) {
        fprintf(stderr, "moontail pause: --node ID is required, and --registry URL unless"
                        " 'moontail setup' was run\n");
        return 2;
    }
    char *tok = cli_token("pause", token, token_file);
    if (!tok) return 2;
    json_t *body = schedule ? json_pack("{s:s}", "schedule", schedule)
                            : json_pack("{s:b, s:b}", "now", !resume, "resume", resume);
    char url[600];
    snprintf(url, sizeof url, "%s/v1/nodes/%lld/pause", registry, (long long)node);
    json_t *out = NULL;
    mt_error err = {{0}};
    int st = mt_http_json("POST", url, tok, body, 10000, &out, &err);
    json_decref(body);
    free(tok);
    if (st != 200) {
        fprintf(stderr, "moontail pause: %s\n", err.msg);
        json_decref(out);
        return 1;
    }
    printf("node %lld: %s%s%s\n", (long long)node, json_string_value(json_object_get(out, "state")),
           json_string_value(json_object_get(out, "schedule"))[0] ? ", pause windows: " : "",
           json_string_value(json_object_get(out, "schedule")));
    json_decref(out);
    return 0;
}

/* cmd_prompt.c - `moontail prompt`: generates text like `moontail run`, but
 * through nodes: either a fixed route file (moontail/route.h) or a route from
 * a registry, with failover (moontail/requester.h). The head shard and the
 * tokenizer stay in this process, the layers run on nodes. The loop is the
 * model layer's (moontail/generate.h) on a registry's or a route's backend;
 * its options and output are generate.c's. */
#include "cli_config.h"
#include "moontail/clock.h"
#include "generate.h"
#include "moontail/log.h"
#include "moontail/requester.h"
#include "moontail/route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail prompt \"PROMPT\" [options]   (registry and token from moontail setup;\n"
    "                                           the prompt may also follow the options)\n"
    "       moontail prompt --registry URL --token-file FILE [-p PROMPT | -f FILE] [options]\n"
    "       moontail prompt --route FILE [-p PROMPT | -f FILE] [options]\n"
    "\n"
    "  --registry URL      ask this registry for a route (and a new one if a node fails)\n"
    "  --token-file FILE   the account token (or MOONTAIL_TOKEN, or --token T)\n"
    "  --key KEYFILE       the requester's identity (default ~/.moontail/requester.key)\n"
    "  --cache DIR         where the head shard is kept (default ~/.moontail/cache)\n"
    "  --wire f32|bf16     hidden states on the network (default f32: exact)\n"
    "  --spot-check RATE   with --registry: the fraction of stages per request computed\n"
    "                      twice, on another node holding the same layers, and compared\n"
    "                      bit for bit; a node found wrong is reported and avoided\n"
    "                      (default 0.05; 0: off, 1: every stage; docs/spot-checking.md)\n"
    "  --chain             with --registry: one-way passes: each pass goes to the first\n"
    "                      stage, each stage sends it straight on, the last one answers\n"
    "                      (far fewer bytes from this machine, prompts pipelined over the\n"
    "                      stages; no spot-checks; docs/design.md)\n"
    "  --route FILE        route file (JSON): the local head shard, the requester's key,\n"
    "                      the stage nodes and/or expert servers; see docs or route.h\n"
    "  -p PROMPT           prompt text; special tokens such as <|im_start|> are parsed\n"
    "  -f FILE             read the prompt from FILE\n"
    "  -n N                tokens to generate (default 32)\n"
    "  --temp T            temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K --top-p P --min-p P\n"
    "  --repeat-penalty R --repeat-last-n N --frequency-penalty F --presence-penalty F\n"
    "  --seed N            sampling seed (default: random)\n"
    "  -t N                local threads (default: all CPUs)\n"
    "  --ctx N             context size (default: prompt + N)\n"
    "  --ubatch N          tokens per pass through the route (default 512)\n"
    "  --kv-type T         the backbone's KV cache in a swarm: f16 (default), bf16, q8_0, f32\n"
    "  --stop TEXT         end the text before TEXT (up to 4 of them), as the API's stop\n"
    "  --ignore-eos        keep generating after an end-of-generation token\n"
    "  --draft ngram|FILE  exact speculative decoding: guesses from n-grams of the text so far,\n"
    "                      or from a small draft model of the same vocabulary (same output)\n"
    "  --draft-k K         guesses checked per pass (default 4, at most 32)\n"
    "  --json              print one JSON object instead of streaming text\n"
    "  --call-timeout-ms N the longest wait for a reply from a node before taking it for\n"
    "                      lost (default 30000 with --registry, 120000 with --route); once a\n"
    "                      node's step times are known, its waits are 5x the slowest + 1 s\n"
    "                      (at least 3 s), so a hung node costs seconds\n"
    "  --fixed-call-timeout always wait --call-timeout-ms (links whose replies stall for\n"
    "                      seconds, e.g. lossy ones)\n"
    "the requester's log (routes, failovers, spot checks; stderr by default):\n" CLI_LOG_USAGE;

/* ---- through a route file ----------------------------------------------------- */

typedef struct route_json_ctx {
    const char *route_path;
    const mt_route *route;
} route_json_ctx;

static void route_json(void *ctx, const mt_gen_backend *b, void *slot, json_t *root) {
    (void)b, (void)slot;
    const route_json_ctx *p = ctx;
    json_object_set_new(root, "route", json_string(p->route_path));
    json_object_set_new(root, "replays", json_integer(mt_route_replays(p->route)));
}

/* ---- through a registry --------------------------------------------------------- */

static void registry_json(void *ctx, const mt_gen_backend *b, void *slot, json_t *root) {
    (void)ctx, (void)b;
    mt_requester_stats s;
    mt_requester_get_stats(mt_requester_of_slot(slot), &s);
    json_object_set_new(root, "route", json_string(s.route));
    json_object_set_new(root, "failovers", json_integer(s.failovers));
    json_object_set_new(root, "recovery_ms", json_real(s.total_recovery_ms));
    json_object_set_new(root, "replays", json_integer(s.replays));
    if (s.failovers) json_object_set_new(root, "last_failure", json_string(s.last_failure));
    json_t *spot = json_pack(
        "{s:I, s:I, s:I, s:I, s:i, s:i}", "checks", (json_int_t)s.spot_checks, "compared",
        (json_int_t)s.spot_compared, "dropped", (json_int_t)s.spot_dropped, "mismatches",
        (json_int_t)s.spot_mismatches, "reports", s.reports, "confirmed", s.reports_confirmed);
    if (s.last_spot_check[0]) json_object_set_new(spot, "last", json_string(s.last_spot_check));
    json_object_set_new(root, "spot_check", spot);
}

static int prompt_registry(const cli_gen *g, const char *registry, const char *token,
                           const char *token_file, const char *key, const char *cache,
                           const char *wire, int call_timeout_ms, bool fixed_timeout,
                           double spot_check, bool chain) {
    if (strcmp(wire, "f32") != 0 && strcmp(wire, "bf16") != 0) {
        fprintf(stderr, "moontail prompt: --wire must be f32 or bf16\n");
        return 2;
    }
    char *tok = cli_token("prompt", token, token_file);
    if (!tok) return 2;
    mt_error err = {{0}};
    double t0 = mt_mono_ms_frac();
    mt_requester_config c = {.registry = registry,
                             .token = tok,
                             .key_path = key,
                             .cache_dir = cache,
                             .wire = strcmp(wire, "bf16") == 0 ? MT_PROTO_BF16 : MT_PROTO_F32,
                             .threads = (int)g->threads,
                             .ubatch = (int)g->ubatch,
                             .kv_type = g->kv_type,
                             .call_timeout_ms = call_timeout_ms,
                             .fixed_call_timeout = fixed_timeout,
                             .spot_check = spot_check,
                             .chain = chain,
                             .quiet = false};
    mt_gen_backend *b = mt_requester_backend(&c, "moontail prompt", &err);
    const cli_gen_hooks hooks = {.add_json = registry_json};
    int rc = b ? cli_generate(g, b, t0, &hooks, &err) : -1;
    if (rc) fprintf(stderr, "moontail prompt: %s\n", err.msg[0] ? err.msg : "failed");
    if (b) b->destroy(b);
    free(tok);
    return rc ? 1 : 0;
}

int cmd_prompt(int argc, char **argv) {
    cli_gen g;
    cli_gen_defaults(&g);
    /* `moontail prompt "text" ...`: the prompt itself may be an argument, before, between
     * or after the options */
    const char *positional = NULL;
    const char *route_path = NULL, *registry = NULL, *token = NULL, *token_file = NULL,
               *key = "requester.key", *cache = "moontail-cache", *wire = "f32";
    cli_config conf;
    int64_t call_timeout_ms = 0; /* 0: the default of the mode */
    float spot_check_opt = -1;   /* -1: not given */
    bool chain = false, fixed_timeout = false;
    cli_log_opts log_opts = {0};
    const cli_opt extra[] = {{"--route", CLI_STRING, &route_path, 0, 0},
                             {"--registry", CLI_STRING, &registry, 0, 0},
                             {"--token", CLI_STRING, &token, 0, 0},
                             {"--token-file", CLI_STRING, &token_file, 0, 0},
                             {"--key", CLI_STRING, &key, 0, 0},
                             {"--cache", CLI_STRING, &cache, 0, 0},
                             {"--wire", CLI_STRING, &wire, 0, 0},
                             {"--call-timeout-ms", CLI_INT, &call_timeout_ms, 100, 3600000},
                             {"--fixed-call-timeout", CLI_FLAG, &fixed_timeout, 0, 0},
                             {"--spot-check", CLI_FLOAT, &spot_check_opt, 0, 0},
                             {"--chain", CLI_FLAG, &chain, 0, 0},
                             {"the prompt", CLI_POSITIONAL, &positional, 0, 0},
                             CLI_LOG_OPTS(log_opts),
                             {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_gen_parse("prompt", argc, argv, &g, extra, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!cli_log_setup("prompt", &log_opts)) return 2;
    if (positional && (g.prompt || g.prompt_file)) {
        fprintf(stderr, "moontail prompt: give the prompt once (as text, -p or -f)\n");
        return 2;
    }
    if (positional) g.prompt = positional;
    double spot_check = CLI_SPOT_CHECK_DEFAULT;
    if (spot_check_opt != -1 && !cli_spot_check("prompt", spot_check_opt, &spot_check)) return 2;
    /* after `moontail setup`, the registry, token and keys come from ~/.moontail */
    if (!route_path && !registry && cli_config_load(&conf) == 0 && conf.registry[0]) {
        registry = conf.registry;
        if (!token && !token_file && conf.has_token) token_file = conf.token_file;
        if (strcmp(key, "requester.key") == 0) key = conf.requester_key;
        if (strcmp(cache, "moontail-cache") == 0) cache = conf.cache_dir;
    }
    if (!route_path == !registry) {
        fprintf(stderr, "moontail prompt: give either --registry URL or --route FILE (or run"
                        " 'moontail setup' once); see 'moontail prompt --help'\n");
        return 2;
    }
    if (registry)
        return prompt_registry(&g, registry, token, token_file, key, cache, wire,
                               (int)call_timeout_ms, fixed_timeout, spot_check, chain);
    if (spot_check_opt != -1) {
        fprintf(stderr, "moontail prompt: --spot-check needs --registry (a route file lists no"
                        " nodes to check on)\n");
        return 2;
    }
    mt_error err = {{0}};
    double t0 = mt_mono_ms_frac();
    mt_route_file rf;
    bool rf_loaded = false;
    mt_route *route = NULL;
    mt_gen_backend *b = NULL;
    int rc = -1;
    if (mt_route_file_load(route_path, &rf, &err) == 0) {
        rf_loaded = true;
        rf.cfg.threads = (int)g.threads;
        rf.cfg.ubatch = (int)g.ubatch;
        rf.cfg.kv_type = g.kv_type;
        if (call_timeout_ms) rf.cfg.call_timeout_ms = (int)call_timeout_ms;
        rf.cfg.fixed_call_timeout = fixed_timeout;
        route = mt_route_open(&rf.cfg, &err);
    }
    if (route && (b = mt_route_backend(route, &err))) {
        route_json_ctx jc = {route_path, route};
        rc = cli_generate(&g, b, t0, &(cli_gen_hooks){.add_json = route_json, .ctx = &jc}, &err);
    }
    if (rc) fprintf(stderr, "moontail prompt: %s\n", err.msg[0] ? err.msg : "failed");
    if (b) b->destroy(b);
    mt_route_close(route);
    if (rf_loaded) mt_route_file_free(&rf);
    return rc ? 1 : 0;
}

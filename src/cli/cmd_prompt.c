/* cmd_prompt.c - `moontail prompt`: generates text like `moontail run`, but
 * through nodes: either a fixed route file (moontail/route.h) or a route from
 * a registry, with failover (moontail/requester.h). The head shard and the
 * tokenizer stay in this process, the layers run on nodes. The loop itself
 * is generate.c. */
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
    "  --chain             with --registry: send each pass to the first stage, which passes\n"
    "                      it along the others (kimi-k3: far fewer bytes from this machine;\n"
    "                      no spot-checks; docs/kimi-k3-distributed.md)\n"
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
    "  --ignore-eos        keep generating after an end-of-generation token\n"
    "  --json              print one JSON object instead of streaming text\n"
    "  --call-timeout-ms N the longest wait for a reply from a node before taking it for\n"
    "                      lost (default 30000 with --registry, 120000 with --route); once a\n"
    "                      node's step times are known, its waits are 5x the slowest + 1 s\n"
    "                      (at least 3 s), so a hung node costs seconds\n"
    "  --fixed-call-timeout always wait --call-timeout-ms (links whose replies stall for\n"
    "                      seconds, e.g. lossy ones)\n"
    "the requester's log (routes, failovers, spot checks; stderr by default):\n" CLI_LOG_USAGE;

typedef struct prompt_ctx {
    const char *route_path;
    mt_route *route;
    mt_route_session *s;
} prompt_ctx;

static int prompt_open(void *ctx, int32_t n_ctx, mt_error *err) {
    prompt_ctx *p = ctx;
    p->s = mt_route_session_new(p->route, n_ctx, err);
    return p->s ? 0 : -1;
}

static int prompt_eval(void *ctx, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    prompt_ctx *p = ctx;
    return mt_route_eval(p->route, p->s, ids, n, false, logits, err);
}

static void prompt_json(void *ctx, json_t *root) {
    prompt_ctx *p = ctx;
    json_object_set_new(root, "route", json_string(p->route_path));
    json_object_set_new(root, "replays", json_integer(mt_route_replays(p->route)));
}

/* ---- through a registry --------------------------------------------------------- */

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
    cli_requester_ctx p = {mt_requester_open(&c, &err), 0};
    mt_vocab *vocab = NULL;
    int rc = -1;
    if (p.q && (vocab = mt_vocab_load(mt_requester_head(p.q)->gguf, &err))) {
        cli_gen_backend be = cli_requester_backend(&p);
        rc = cli_generate(g, vocab, mt_requester_head(p.q)->hp.n_vocab, &be, t0, &err);
    }
    if (rc) fprintf(stderr, "moontail prompt: %s\n", err.msg[0] ? err.msg : "failed");
    if (p.q && p.tokens) {
        mt_error e2 = {{0}};
        if (mt_requester_report_usage(p.q, p.tokens, &e2) && !g->json)
            fprintf(stderr, "moontail prompt: could not report usage: %s\n", e2.msg);
    }
    mt_vocab_free(vocab);
    mt_requester_close(p.q);
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
    prompt_ctx p = {route_path, NULL, NULL};
    mt_route_file rf;
    bool rf_loaded = false;
    mt_vocab *vocab = NULL;
    int rc = -1;
    if (mt_route_file_load(route_path, &rf, &err) == 0) {
        rf_loaded = true;
        rf.cfg.threads = (int)g.threads;
        rf.cfg.ubatch = (int)g.ubatch;
        rf.cfg.kv_type = g.kv_type;
        if (call_timeout_ms) rf.cfg.call_timeout_ms = (int)call_timeout_ms;
        rf.cfg.fixed_call_timeout = fixed_timeout;
        p.route = mt_route_open(&rf.cfg, &err);
    }
    if (p.route && (vocab = mt_vocab_load(mt_route_head(p.route)->gguf, &err))) {
        cli_gen_backend be = {prompt_open, prompt_eval, prompt_json, &p};
        rc = cli_generate(&g, vocab, mt_route_head(p.route)->hp.n_vocab, &be, t0, &err);
    }
    if (rc) fprintf(stderr, "moontail prompt: %s\n", err.msg[0] ? err.msg : "failed");
    mt_vocab_free(vocab);
    if (p.s) mt_route_session_end(p.route, p.s);
    mt_route_close(p.route);
    if (rf_loaded) mt_route_file_free(&rf);
    return rc ? 1 : 0;
}

/* cmd_prompt.c - `moontail prompt`: generates text like `moontail run`, but
 * through a route (moontail/route.h): the head shard and tokenizer stay in
 * this process, the layers run on nodes. The loop itself is generate.c. */
#include "generate.h"
#include "moontail/route.h"

#include <stdio.h>

static const char usage[] =
    "usage: moontail prompt --route FILE [-p PROMPT | -f FILE] [options]\n"
    "\n"
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
    "  --ignore-eos        keep generating after an end-of-generation token\n"
    "  --json              print one JSON object instead of streaming text\n";

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

int cmd_prompt(int argc, char **argv) {
    cli_gen g;
    cli_gen_defaults(&g);
    const char *route_path = NULL;
    const cli_opt extra[] = {{"--route", CLI_STRING, &route_path, 0, 0},
                             {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_gen_parse("prompt", argc, argv, &g, extra, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!route_path) {
        fprintf(stderr,
                "moontail prompt: --route FILE is required; see 'moontail prompt --help'\n");
        return 2;
    }
    mt_error err = {{0}};
    double t0 = cli_now_ms();
    prompt_ctx p = {route_path, NULL, NULL};
    mt_route_file rf;
    bool rf_loaded = false;
    mt_vocab *vocab = NULL;
    int rc = -1;
    if (mt_route_file_load(route_path, &rf, &err) == 0) {
        rf_loaded = true;
        rf.cfg.threads = (int)g.threads;
        rf.cfg.ubatch = (int)g.ubatch;
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

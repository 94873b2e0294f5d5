/* cli_api_backend.c - the backend options `serve` and `batch` share
 * (cli_api_backend.h): their defaults, checks, and the mt_api_config fields
 * they set. */
#include "cli_api_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_api_backend_init(cli_api_backend *b) {
    memset(b, 0, sizeof *b);
    b->key = CLI_DEFAULT_REQUESTER_KEY;
    b->cache = CLI_DEFAULT_CACHE;
    b->wire = "f32";
    b->chat_max = 1024;
    b->spot_check = (float)CLI_SPOT_CHECK_DEFAULT;
}

bool cli_api_backend_apply(const char *cmd, cli_api_backend *b, mt_api_config *c) {
    if (!b->model == !b->registry) {
        fprintf(stderr,
                "moontail %s: give either --model FILE or --registry URL; see"
                " 'moontail %s --help'\n",
                cmd, cmd);
        return false;
    }
    if (strcmp(b->wire, "f32") != 0 && strcmp(b->wire, "bf16") != 0) {
        fprintf(stderr, "moontail %s: --wire must be f32 or bf16\n", cmd);
        return false;
    }
    mt_kv_type kv_type;
    double spot_check = 0;
    if (!cli_kv_type(cmd, b->kv_name, &kv_type) || !cli_spot_check(cmd, b->spot_check, &spot_check))
        return false;
    if (b->registry) {
        cli_requester_paths(&b->conf, &b->key, &b->cache);
        if (!(b->tok = cli_token(cmd, b->token, b->token_file))) return false;
    }
    c->model_path = b->model;
    c->registry = b->registry;
    c->token = b->tok;
    c->key_path = b->key;
    c->cache_dir = b->cache;
    c->wire = strcmp(b->wire, "bf16") == 0 ? MT_PROTO_BF16 : MT_PROTO_F32;
    c->spot_check = spot_check;
    c->chain = b->chain;
    c->model_name = b->model_name;
    c->threads = (int)b->threads;
    c->ubatch = (int)b->ubatch;
    c->kv_type = kv_type;
    c->ctx = (int)b->ctx;
    c->chat_max_tokens = (int)b->chat_max;
    return true;
}

void cli_api_backend_free(cli_api_backend *b) {
    free(b->tok);
    b->tok = NULL;
}

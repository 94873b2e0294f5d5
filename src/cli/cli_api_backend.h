/* cli_api_backend.h - the options `serve` and `batch` share to choose and set
 * up the API engine's backend (a local model or a registry's cell) and its
 * generation settings, and their checks. Not a public API. */
#ifndef MOONTAIL_CLI_API_BACKEND_H
#define MOONTAIL_CLI_API_BACKEND_H

#include "cli.h"
#include "cli_config.h"
#include "moontail/api.h"

typedef struct cli_api_backend {
    const char *model, *registry, *token, *token_file, *key, *cache, *wire, *model_name, *kv_name;
    int64_t threads, ctx, ubatch, chat_max;
    bool chain;
    float spot_check;
    cli_config conf; /* holds the default key and cache paths cli_api_backend_apply chose */
    char *tok;       /* the account token read (cli_api_backend_free) */
} cli_api_backend;

/* The defaults: requester.key, moontail-cache, f32, chat_max 1024, the spot-check rate. */
void cli_api_backend_init(cli_api_backend *b);

#define CLI_API_BACKEND_OPTS(b)                                                                    \
    {"--model", CLI_STRING, &(b).model, 0, 0}, {"--registry", CLI_STRING, &(b).registry, 0, 0},    \
        {"--token", CLI_STRING, &(b).token, 0, 0},                                                 \
        {"--token-file", CLI_STRING, &(b).token_file, 0, 0},                                       \
        {"--key", CLI_STRING, &(b).key, 0, 0}, {"--cache", CLI_STRING, &(b).cache, 0, 0},          \
        {"--wire", CLI_STRING, &(b).wire, 0, 0},                                                   \
        {"--spot-check", CLI_FLOAT, &(b).spot_check, 0, 0},                                        \
        {"--chain", CLI_FLAG, &(b).chain, 0, 0},                                                   \
        {"--model-name", CLI_STRING, &(b).model_name, 0, 0},                                       \
        {"-t", CLI_INT, &(b).threads, 1, 1024}, {"--ctx", CLI_INT, &(b).ctx, 1, 1 << 24},          \
        {"--ubatch", CLI_INT, &(b).ubatch, 1, 1 << 24},                                            \
        {"--kv-type", CLI_STRING, &(b).kv_name, 0, 0}, {                                           \
        "--chat-max-tokens", CLI_INT, &(b).chat_max, 1, 1 << 24                                    \
    }

/* Checks the options (exactly one of --model and --registry, the wire, the KV type, the
 * spot-check rate; reads the token) and fills c's backend and generation fields. false,
 * having said why on stderr as `moontail CMD: ...`, when they are wrong. */
bool cli_api_backend_apply(const char *cmd, cli_api_backend *b, mt_api_config *c);
void cli_api_backend_free(cli_api_backend *b);

#endif

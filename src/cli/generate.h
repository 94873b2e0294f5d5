/* generate.h - the generation loop that `moontail run` (local model) and
 * `moontail prompt` (a route over nodes) share: options, prompt reading,
 * tokenization, sampling, streaming or JSON output. A command supplies only
 * how tokens are evaluated. */
#ifndef MOONTAIL_CLI_GENERATE_H
#define MOONTAIL_CLI_GENERATE_H

#include "cli.h"
#include "moontail/error.h"
#include "moontail/requester.h"
#include "moontail/sampler.h"
#include "moontail/tokenizer.h"

#include <jansson.h>

typedef struct cli_gen {
    const char *prompt, *prompt_file;
    int64_t n_predict, threads, ctx, ubatch, top_k, repeat_last_n, seed;
    const char *kv_type_name; /* --kv-type */
    mt_kv_type kv_type;       /* what it names (f16 when not given) */
    bool json, ignore_eos;
    mt_sampler_params sp;
} cli_gen;

/* How a command evaluates tokens. open() is called once the context size is
 * known; eval() evaluates n tokens at the next positions and writes the last
 * one's logits; add_json() (optional) adds command-specific fields. */
typedef struct cli_gen_backend {
    int (*open)(void *ctx, int32_t n_ctx, mt_error *err);
    int (*eval)(void *ctx, const int32_t *ids, int32_t n, float *logits, mt_error *err);
    void (*add_json)(void *ctx, json_t *root);
    void *ctx;
} cli_gen_backend;

/* A requester as the backend (requester_backend.c); tokens counts what was
 * evaluated, for usage reports. */
typedef struct cli_requester_ctx {
    mt_requester *q;
    int64_t tokens;
} cli_requester_ctx;
cli_gen_backend cli_requester_backend(cli_requester_ctx *ctx);

/* Defaults (-n 32, llama.cpp's sampler defaults). */
void cli_gen_defaults(cli_gen *g);

/* Parses the shared options plus `extra` (a NULL-name-terminated table, may
 * be NULL). Returns 0, 1 after --help, -1 on a bad command line. */
int cli_gen_parse(const char *cmd, int argc, char **argv, cli_gen *g, const cli_opt *extra,
                  const char *usage);

/* Tokenizes the prompt (-p, -f or the default), opens the backend, samples
 * up to -n tokens and prints them (streamed, or one JSON object with
 * prompt_tokens, tokens, text, stop, timings). t_start is when loading began.
 * Returns 0, or -1 with err filled. */
int cli_generate(const cli_gen *g, const mt_vocab *vocab, int32_t n_vocab,
                 const cli_gen_backend *be, double t_start, mt_error *err);

#endif

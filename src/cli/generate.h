/* generate.h - the command line's side of generation, shared by `moontail
 * run` (a model here), `moontail prompt` (a registry's cell or a route) and
 * `moontail demo`: their options, the backend's slot and tokenizer, reading
 * and tokenizing the prompt, and the output (streamed text, or one JSON
 * object). The loop itself is the model layer's (moontail/generate.h); a
 * command supplies only the backend and what it adds to the output. */
#ifndef MOONTAIL_CLI_GENERATE_H
#define MOONTAIL_CLI_GENERATE_H

#include "cli.h"
#include "moontail/error.h"
#include "moontail/generate.h"
#include "moontail/sampler.h"

#include <jansson.h>

typedef struct cli_gen {
    const char *prompt, *prompt_file;
    int64_t n_predict, threads, ctx, ubatch, top_k, repeat_last_n, seed;
    const char *kv_type_name; /* --kv-type */
    mt_kv_type kv_type;       /* what it names (f16 when not given) */
    bool json, ignore_eos;
    mt_sampler_params sp;
    const char *stop[MT_GEN_MAX_STOP]; /* --stop, as the API's "stop" */
    int n_stop;
    const char *draft; /* --draft: "ngram" or a draft model's GGUF (NULL: plain decoding) */
    int64_t draft_k;   /* --draft-k: guesses a pass */
} cli_gen;

/* Guesses a pass when --draft-k is not given. */
enum { CLI_DRAFT_K_DEFAULT = 4 }; /* docs/bench.md: 4 beat 8 on both prompts measured */

/* Defaults (-n 32, llama.cpp's sampler defaults). */
void cli_gen_defaults(cli_gen *g);

/* Parses the shared options plus `extra` (a NULL-name-terminated table, may
 * be NULL). Returns 0, 1 after --help, -1 on a bad command line. */
int cli_gen_parse(const char *cmd, int argc, char **argv, cli_gen *g, const cli_opt *extra,
                  const char *usage);

/* What a command adds to a generation; each may be NULL. */
typedef struct cli_gen_hooks {
    /* its own fields in the --json object; slot is the one generated on, its sequence not
     * yet ended */
    void (*add_json)(void *ctx, const mt_gen_backend *b, void *slot, json_t *root);
    /* after a generation that went well, before the slot closes */
    void (*done)(void *ctx, void *slot);
    void *ctx;
} cli_gen_hooks;

/* Opens slot 0 of b and the model's tokenizer, tokenizes the prompt (-p, -f or the default),
 * generates (up to -n tokens, stopping where `serve` would: end tokens, --stop strings) and
 * prints the text as it comes (or one JSON object with prompt_tokens, tokens, text, stop,
 * timings, with --draft "speculative", and add_json's fields), then ends the sequence and closes
 * the slot; b stays the caller's. Ctrl-C stops after the token being computed (a second one ends
 * the process). t_start is when loading began. Returns 0, or -1 with err filled. */
int cli_generate(const cli_gen *g, mt_gen_backend *b, double t_start, const cli_gen_hooks *hooks,
                 mt_error *err);

#endif

/* generate.c - the command line's side of generation (generate.h): options,
 * the backend's slot and tokenizer, the prompt, and streamed or JSON output
 * around the model layer's loop. */
#include "generate.h"
#include "model_source.h"
#include "moontail/clock.h"
#include "moontail/draft.h"
#include "moontail/text_buf.h"
#include "moontail/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_gen_defaults(cli_gen *g) {
    memset(g, 0, sizeof *g);
    g->n_predict = 32;
    g->sp = mt_sampler_default_params();
    g->top_k = g->sp.top_k;
    g->repeat_last_n = g->sp.repeat_last_n;
    g->seed = (int64_t)g->sp.seed;
    g->draft_k = CLI_DRAFT_K_DEFAULT;
}

int cli_gen_parse(const char *cmd, int argc, char **argv, cli_gen *g, const cli_opt *extra,
                  const char *usage) {
    cli_list stops = {g->stop, 0, MT_GEN_MAX_STOP}; /* as many as the API's "stop" takes */
    const cli_opt shared[] = {
        {"-p", CLI_STRING, &g->prompt, 0, 0},
        {"-f", CLI_STRING, &g->prompt_file, 0, 0},
        {"-n", CLI_INT, &g->n_predict, 0, 1 << 24},
        {"-t", CLI_INT, &g->threads, 1, 1024},
        {"--ctx", CLI_INT, &g->ctx, 1, 1 << 24},
        {"--ubatch", CLI_INT, &g->ubatch, 1, 1 << 24},
        {"--kv-type", CLI_STRING, &g->kv_type_name, 0, 0},
        {"--temp", CLI_FLOAT, &g->sp.temp, 0, 0},
        {"--top-k", CLI_INT, &g->top_k, 0, 1 << 30},
        {"--top-p", CLI_FLOAT, &g->sp.top_p, 0, 0},
        {"--min-p", CLI_FLOAT, &g->sp.min_p, 0, 0},
        {"--repeat-penalty", CLI_FLOAT, &g->sp.repeat_penalty, 0, 0},
        {"--repeat-last-n", CLI_INT, &g->repeat_last_n, -1, 1 << 24},
        {"--frequency-penalty", CLI_FLOAT, &g->sp.freq_penalty, 0, 0},
        {"--presence-penalty", CLI_FLOAT, &g->sp.presence_penalty, 0, 0},
        {"--seed", CLI_INT, &g->seed, 0, UINT32_MAX},
        {"--json", CLI_FLAG, &g->json, 0, 0},
        {"--ignore-eos", CLI_FLAG, &g->ignore_eos, 0, 0},
        {"--stop", CLI_LIST, &stops, 0, 0},
        {"--draft", CLI_STRING, &g->draft, 0, 0},
        {"--draft-k", CLI_INT, &g->draft_k, 1, MT_GEN_MAX_DRAFT},
    };
    enum { N_SHARED = sizeof shared / sizeof shared[0] };
    size_t n_extra = 0;
    while (extra && extra[n_extra].name) n_extra++;
    cli_opt *opts = malloc((N_SHARED + n_extra + 1) * sizeof *opts);
    if (!opts) {
        fprintf(stderr, "moontail %s: out of memory\n", cmd);
        return -1;
    }
    memcpy(opts, shared, sizeof shared);
    if (n_extra) memcpy(opts + N_SHARED, extra, n_extra * sizeof *extra);
    opts[N_SHARED + n_extra] = (cli_opt){NULL, CLI_FLAG, NULL, 0, 0};
    int rc = cli_parse(cmd, argc, argv, opts, usage);
    free(opts);
    if (rc) return rc;
    g->n_stop = stops.n;
    for (int i = 0; i < g->n_stop; i++)
        if (!g->stop[i][0]) {
            fprintf(stderr, "moontail %s: --stop needs some text (it was empty)\n", cmd);
            return -1;
        }
    if (!cli_kv_type(cmd, g->kv_type_name, &g->kv_type)) return -1;
    g->sp.top_k = (int32_t)g->top_k;
    g->sp.repeat_last_n = (int32_t)g->repeat_last_n;
    g->sp.seed = (uint64_t)g->seed;
    if (g->draft && !g->draft[0]) {
        fprintf(stderr, "moontail %s: --draft needs 'ngram' or a draft model's file\n", cmd);
        return -1;
    }
    if (g->prompt && g->prompt_file) {
        fprintf(stderr, "moontail %s: give either -p or -f, not both\n", cmd);
        return -1;
    }
    return 0;
}

/* ---- the output ------------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted; /* the first Ctrl-C (mt_interrupt_catch) */

/* Why the output cancelled the loop (mt_gen_result.cancel). */
enum { CANCEL_CTRL_C = 1, CANCEL_NO_MEMORY = -1 };

/* What the loop handed out: streamed to stdout, or kept for the JSON object. */
typedef struct cli_out {
    bool json;
    mt_text_buf text; /* with json */
    int32_t *tokens;  /* with json */
    int64_t n_tokens, cap_tokens;
} cli_out;

static int out_text(void *ctx, const char *s, size_t n) {
    cli_out *o = ctx;
    if (o->json) return mt_text_buf_add(&o->text, s, n) ? 0 : CANCEL_NO_MEMORY;
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    return 0;
}

/* Every sampled token (kept for --json); Ctrl-C stops here, after the token being computed. */
static int out_token(void *ctx, int32_t id) {
    cli_out *o = ctx;
    if (o->json) {
        if (o->n_tokens == o->cap_tokens) {
            int64_t cap = 2 * o->cap_tokens + 64;
            int32_t *t = realloc(o->tokens, (size_t)cap * sizeof *t);
            if (!t) return CANCEL_NO_MEMORY;
            o->tokens = t, o->cap_tokens = cap;
        }
        o->tokens[o->n_tokens++] = id;
    }
    return interrupted ? CANCEL_CTRL_C : 0;
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* The JSON object's word for why generation stopped: the loop's, but "eog" for an end token
 * (the word --json has always printed). */
static const char *stop_word(const mt_gen_result *r) {
    return r->finish == MT_GEN_END_TOKEN ? "eog" : mt_gen_finish_name(r->finish);
}

static void print_json(const cli_out *o, const mt_gen_params *p, const char *draft_name,
                       const mt_gen_result *r, double load_ms, const cli_gen_hooks *h,
                       const mt_gen_backend *b, void *slot) {
    const int32_t *prompt_ids = p->prompt;
    const int64_t n_prompt = p->n_prompt;
    json_t *root = json_object();
    if (h->add_json) h->add_json(h->ctx, b, slot, root);
    json_object_set_new(root, "prompt_tokens", ids_json(prompt_ids, (size_t)n_prompt));
    json_object_set_new(root, "tokens", ids_json(o->tokens, (size_t)o->n_tokens));
    json_object_set_new(root, "text", json_stringn(o->text.p ? o->text.p : "", o->text.len));
    json_object_set_new(root, "stop", json_string(stop_word(r)));
    json_t *tm = json_object();
    json_object_set_new(tm, "load_ms", json_real(load_ms));
    json_object_set_new(tm, "prompt_ms", json_real(r->prompt_ms));
    json_object_set_new(tm, "generate_ms", json_real(r->gen_ms));
    json_object_set_new(tm, "prompt_tokens_per_s",
                        json_real(n_prompt * 1e3 / (r->prompt_ms + 1e-9)));
    json_object_set_new(tm, "generate_tokens_per_s",
                        json_real(r->completion_tokens * 1e3 / (r->gen_ms + 1e-9)));
    json_object_set_new(root, "timings", tm);
    if (p->draft)
        json_object_set_new(root, "speculative",
                            json_pack("{s:s, s:i, s:I, s:I, s:I}", "draft", draft_name, "draft_k",
                                      (int)p->draft->k, "passes", (json_int_t)r->passes, "drafted",
                                      (json_int_t)r->drafted, "accepted", (json_int_t)r->accepted));
    char *out = json_dumps(root, JSON_COMPACT);
    puts(out ? out : "{}");
    free(out);
    json_decref(root);
}

/* ---- one generation --------------------------------------------------------------------- */

/* The drafter --draft names, for sequences of n_ctx tokens. */
static mt_gen_drafter *make_drafter(const cli_gen *g, const mt_gen_backend *b,
                                    const mt_vocab *vocab, int32_t n_ctx, mt_error *err) {
    if (!b->eval_all || !b->rewind) {
        mt_error_set(err,
                     "--draft: a %s backend cannot check guesses yet (it cannot go back"
                     " inside a pass); leave out --draft",
                     b->kind);
        return NULL;
    }
    if (strcmp(g->draft, "ngram") == 0) return mt_draft_ngram_new((int32_t)g->draft_k, err);
    return mt_draft_model_new(cli_open_model(g->draft, err), g->draft, vocab, (int32_t)g->draft_k,
                              n_ctx, (int)g->threads, g->kv_type, err);
}

/* cli_generate on an open slot. */
static int generate_on(const cli_gen *g, mt_gen_backend *b, void *slot, const mt_vocab *vocab,
                       double t_start, const cli_gen_hooks *h, mt_error *err) {
    int rc = -1;
    char *prompt_buf = NULL;
    size_t prompt_len = 0;
    int32_t *prompt_ids = NULL;
    cli_out o = {.json = g->json};
    mt_gen_drafter *draft = NULL;
    const char *prompt = g->prompt;
    if (g->prompt_file) {
        if (!(prompt_buf = cli_read_file(g->prompt_file, &prompt_len))) {
            mt_error_set(err, "cannot read the prompt file '%s'", g->prompt_file);
            return -1;
        }
        prompt = prompt_buf;
    } else {
        if (!prompt) prompt = "Once upon a time";
        prompt_len = strlen(prompt);
    }
    int64_t n_prompt = mt_tokenize(vocab, prompt, prompt_len, true, true, &prompt_ids, err);
    if (n_prompt < 0) goto done;
    if (n_prompt == 0) {
        mt_error_set(err, "the prompt is empty and the model adds no BOS token; give some text");
        goto done;
    }
    int64_t n_ctx = g->ctx ? g->ctx : n_prompt + g->n_predict;
    if (n_prompt + g->n_predict > n_ctx) {
        mt_error_set(err, "prompt (%lld tokens) + -n %lld exceed --ctx %lld", (long long)n_prompt,
                     (long long)g->n_predict, (long long)n_ctx);
        goto done;
    }
    if (g->draft && !(draft = make_drafter(g, b, vocab, (int32_t)n_ctx, err))) goto done;
    const mt_gen_params p = {.prompt = prompt_ids,
                             .n_prompt = (int32_t)n_prompt,
                             .max_tokens = (int32_t)g->n_predict,
                             .n_ctx = (int32_t)n_ctx,
                             .ubatch = (int32_t)g->ubatch,
                             .sp = g->sp,
                             .stop = g->stop,
                             .n_stop = g->n_stop,
                             .end_token = -1,
                             .ignore_eog = g->ignore_eos,
                             .draft = draft};
    const mt_gen_sink sink = {.text = out_text, .token = out_token, .ctx = &o};
    /* Ctrl-C stops after the token being computed, so the sequence is ended on every node
     * and usage is reported; a second Ctrl-C ends the process at once */
    mt_interrupt_catch(&interrupted);
    const double t_gen = mt_mono_ms_frac();
    mt_gen_result r;
    mt_generate(b, slot, vocab, &p, &sink, &r);
    mt_interrupt_release();
    const bool ctrl_c = r.finish == MT_GEN_CANCELLED && r.cancel == CANCEL_CTRL_C;
    if (r.finish == MT_GEN_FAILED) {
        *err = r.err;
    } else if (r.finish == MT_GEN_CANCELLED && !ctrl_c) {
        mt_error_set(err, "out of memory for the output");
    } else if (g->json) {
        print_json(&o, &p, g->draft, &r, t_gen - t_start + r.begin_ms, h, b, slot);
        rc = 0;
    } else {
        if (ctrl_c) fprintf(stderr, "\nmoontail: cancelled (Ctrl-C)\n");
        fputc('\n', stdout);
        fflush(stdout); /* the text, then the figures, also when both go to one terminal */
        fprintf(stderr,
                "moontail: prompt %lld tokens in %.1f ms, generated %d in %.1f ms (%.1f tok/s)\n",
                (long long)n_prompt, r.prompt_ms, r.completion_tokens, r.gen_ms,
                r.completion_tokens * 1e3 / (r.gen_ms + 1e-9));
        if (draft)
            fprintf(stderr,
                    "moontail: speculative (--draft %s, k %d): %lld passes, %lld of %lld"
                    " guesses accepted\n",
                    g->draft, (int)draft->k, (long long)r.passes, (long long)r.accepted,
                    (long long)r.drafted);
        rc = 0;
    }
    if (r.begun) b->end(slot, r.evaluated); /* e.g. the usage to the registry */
    if (rc == 0 && h->done) h->done(h->ctx, slot);
done:
    mt_gen_drafter_free(draft);
    free(prompt_buf);
    free(prompt_ids);
    mt_text_buf_free(&o.text);
    free(o.tokens);
    return rc;
}

int cli_generate(const cli_gen *g, mt_gen_backend *b, double t_start, const cli_gen_hooks *hooks,
                 mt_error *err) {
    static const cli_gen_hooks none = {0};
    mt_vocab *vocab = mt_vocab_load(b->model->gguf, err);
    void *slot = vocab ? b->slot_open(b, 0, err) : NULL;
    int rc = slot ? generate_on(g, b, slot, vocab, t_start, hooks ? hooks : &none, err) : -1;
    if (slot) b->slot_close(b, slot);
    mt_vocab_free(vocab);
    return rc;
}

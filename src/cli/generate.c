/* generate.c - the generation loop shared by `moontail run` and `moontail
 * prompt` (see generate.h). */
#include "generate.h"
#include "moontail/clock.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cli_gen_defaults(cli_gen *g) {
    memset(g, 0, sizeof *g);
    g->n_predict = 32;
    g->sp = mt_sampler_default_params();
    g->top_k = g->sp.top_k;
    g->repeat_last_n = g->sp.repeat_last_n;
    g->seed = (int64_t)g->sp.seed;
}

int cli_gen_parse(const char *cmd, int argc, char **argv, cli_gen *g, const cli_opt *extra,
                  const char *usage) {
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
    };
    enum { N_SHARED = sizeof shared / sizeof shared[0] };
    size_t n_extra = 0;
    while (extra && extra[n_extra].name) n_extra++;
    cli_opt opts[N_SHARED + 16 + 1];
    if (n_extra > 16) return -1;
    memcpy(opts, shared, sizeof shared);
    if (n_extra) memcpy(opts + N_SHARED, extra, n_extra * sizeof *extra);
    opts[N_SHARED + n_extra] = (cli_opt){NULL, CLI_FLAG, NULL, 0, 0};
    int rc = cli_parse(cmd, argc, argv, opts, usage);
    if (rc) return rc;
    if (!cli_kv_type(cmd, g->kv_type_name, &g->kv_type)) return -1;
    g->sp.top_k = (int32_t)g->top_k;
    g->sp.repeat_last_n = (int32_t)g->repeat_last_n;
    g->sp.seed = (uint64_t)g->seed;
    if (g->prompt && g->prompt_file) {
        fprintf(stderr, "moontail %s: give either -p or -f, not both\n", cmd);
        return -1;
    }
    return 0;
}

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* Appends bytes to a growing text buffer; false when out of memory. */
static bool text_add(char **text, size_t *len, size_t *cap, const char *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = 2 * (*len + n + 1) + 256;
        char *t = realloc(*text, nc);
        if (!t) return false;
        *text = t, *cap = nc;
    }
    memcpy(*text + *len, p, n);
    *len += n;
    (*text)[*len] = 0;
    return true;
}

int cli_generate(const cli_gen *g, const mt_vocab *vocab, int32_t n_vocab,
                 const cli_gen_backend *be, double t_start, mt_error *err) {
    int rc = -1;
    char *prompt_buf = NULL, *text = NULL;
    size_t prompt_len = 0, text_len = 0, text_cap = 0;
    int32_t *prompt_ids = NULL, *gen = NULL;
    float *logits = NULL;
    mt_sampler *smp = NULL;
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
    if (be->open(be->ctx, (int32_t)n_ctx, err)) goto done;
    logits = malloc((size_t)n_vocab * sizeof(float));
    gen = malloc((size_t)(g->n_predict + 1) * sizeof(int32_t));
    smp = mt_sampler_new(&g->sp, n_vocab);
    if (!logits || !gen || !smp) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n_prompt; i++) mt_sampler_accept(smp, prompt_ids[i]);
    double t1 = mt_mono_ms_frac();
    if (be->eval(be->ctx, prompt_ids, (int32_t)n_prompt, logits, err)) goto done;
    double t2 = mt_mono_ms_frac();

    mt_detok dt;
    mt_detok_init(&dt, vocab, false);
    int64_t n_gen = 0;
    const char *stop = "length";
    /* Ctrl-C stops after the token being computed, so the session is ended on every node
     * and usage is reported; a second Ctrl-C ends the process at once */
    struct sigaction sa = {0}, old_sa;
    sa.sa_handler = on_sigint;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &sa, &old_sa);
    char piece[1024];
    while (n_gen < g->n_predict) {
        int32_t id = mt_sampler_sample(smp, logits);
        gen[n_gen++] = id;
        mt_sampler_accept(smp, id);
        int64_t nb = mt_detok_push(&dt, id, piece, sizeof piece);
        if (nb < 0) nb = 0;
        if (g->json) {
            if (!text_add(&text, &text_len, &text_cap, piece, (size_t)nb)) {
                mt_error_set(err, "out of memory");
                goto done;
            }
        } else {
            fwrite(piece, 1, (size_t)nb, stdout);
            fflush(stdout);
        }
        if (!g->ignore_eos && mt_vocab_is_eog(vocab, id)) {
            stop = "eog";
            break;
        }
        if (n_gen == g->n_predict) break;
        if (interrupted) {
            stop = "cancelled";
            break;
        }
        if (be->eval(be->ctx, &id, 1, logits, err)) {
            sigaction(SIGINT, &old_sa, NULL);
            goto done;
        }
    }
    sigaction(SIGINT, &old_sa, NULL);
    if (interrupted && !g->json) fprintf(stderr, "\nmoontail: cancelled (Ctrl-C)\n");
    int64_t nb = mt_detok_flush(&dt, piece, sizeof piece);
    double t3 = mt_mono_ms_frac();
    if (g->json) {
        if (!text_add(&text, &text_len, &text_cap, piece, nb > 0 ? (size_t)nb : 0)) {
            mt_error_set(err, "out of memory");
            goto done;
        }
        json_t *root = json_object();
        if (be->add_json) be->add_json(be->ctx, root);
        json_object_set_new(root, "prompt_tokens", ids_json(prompt_ids, (size_t)n_prompt));
        json_object_set_new(root, "tokens", ids_json(gen, (size_t)n_gen));
        json_object_set_new(root, "text", json_stringn(text ? text : "", text_len));
        json_object_set_new(root, "stop", json_string(stop));
        json_t *tm = json_object();
        json_object_set_new(tm, "load_ms", json_real(t1 - t_start));
        json_object_set_new(tm, "prompt_ms", json_real(t2 - t1));
        json_object_set_new(tm, "generate_ms", json_real(t3 - t2));
        json_object_set_new(tm, "prompt_tokens_per_s",
                            json_real(n_prompt * 1e3 / (t2 - t1 + 1e-9)));
        json_object_set_new(tm, "generate_tokens_per_s", json_real(n_gen * 1e3 / (t3 - t2 + 1e-9)));
        json_object_set_new(root, "timings", tm);
        char *out = json_dumps(root, JSON_COMPACT);
        puts(out ? out : "{}");
        free(out);
        json_decref(root);
    } else {
        if (nb > 0) fwrite(piece, 1, (size_t)nb, stdout);
        fputc('\n', stdout);
        fflush(stdout); /* the text, then the figures, also when both go to one terminal */
        fprintf(stderr,
                "moontail: prompt %lld tokens in %.1f ms, generated %lld in %.1f ms (%.1f tok/s)\n",
                (long long)n_prompt, t2 - t1, (long long)n_gen, t3 - t2,
                n_gen * 1e3 / (t3 - t2 + 1e-9));
    }
    rc = 0;
done:
    free(prompt_buf);
    free(prompt_ids);
    free(gen);
    free(logits);
    free(text);
    mt_sampler_free(smp);
    return rc;
}

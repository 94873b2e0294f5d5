/* cmd_run.c - `moontail run`: tokenizes a prompt, evaluates it, and streams
 * the sampled continuation to stdout (or prints one JSON object with
 * --json). Without -m it runs on the built-in synthetic model. */
#include "cli.h"
#include "model_source.h"
#include "moontail/sampler.h"
#include "moontail/session.h"
#include "moontail/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: moontail run [-m MODEL] [-p PROMPT | -f FILE] [options]\n"
    "\n"
    "  -m MODEL            GGUF model (default: the built-in synthetic model)\n"
    "  -p PROMPT           prompt text; special tokens such as <|im_start|> are parsed\n"
    "  -f FILE             read the prompt from FILE\n"
    "  -n N                tokens to generate (default 32)\n"
    "  --temp T            temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K --top-p P --min-p P\n"
    "  --repeat-penalty R --repeat-last-n N --frequency-penalty F --presence-penalty F\n"
    "  --seed N            sampling seed (default: random)\n"
    "  -t N                threads (default: all CPUs)\n"
    "  --ctx N             context size (default: prompt + N)\n"
    "  --ubatch N          prompt micro-batch size (default: whole prompt)\n"
    "  --ignore-eos        keep generating after an end-of-generation token\n"
    "  --json              print one JSON object instead of streaming text\n";

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

typedef struct run_opts {
    const char *model, *prompt, *prompt_file;
    int64_t n_predict, threads, ctx, ubatch, top_k, repeat_last_n, seed;
    bool json, ignore_eos;
    mt_sampler_params sp;
} run_opts;

/* Returns 0 to go on, 1 after --help, -1 on a bad command line. */
static int parse(int argc, char **argv, run_opts *o) {
    o->top_k = o->sp.top_k;
    o->repeat_last_n = o->sp.repeat_last_n;
    o->seed = (int64_t)o->sp.seed;
    const cli_opt opts[] = {
        {"-m", CLI_STRING, &o->model, 0, 0},
        {"-p", CLI_STRING, &o->prompt, 0, 0},
        {"-f", CLI_STRING, &o->prompt_file, 0, 0},
        {"-n", CLI_INT, &o->n_predict, 0, 1 << 24},
        {"-t", CLI_INT, &o->threads, 1, 1024},
        {"--ctx", CLI_INT, &o->ctx, 1, 1 << 24},
        {"--ubatch", CLI_INT, &o->ubatch, 1, 1 << 24},
        {"--temp", CLI_FLOAT, &o->sp.temp, 0, 0},
        {"--top-k", CLI_INT, &o->top_k, 0, 1 << 30},
        {"--top-p", CLI_FLOAT, &o->sp.top_p, 0, 0},
        {"--min-p", CLI_FLOAT, &o->sp.min_p, 0, 0},
        {"--repeat-penalty", CLI_FLOAT, &o->sp.repeat_penalty, 0, 0},
        {"--repeat-last-n", CLI_INT, &o->repeat_last_n, -1, 1 << 24},
        {"--frequency-penalty", CLI_FLOAT, &o->sp.freq_penalty, 0, 0},
        {"--presence-penalty", CLI_FLOAT, &o->sp.presence_penalty, 0, 0},
        {"--seed", CLI_INT, &o->seed, 0, UINT32_MAX},
        {"--json", CLI_FLAG, &o->json, 0, 0},
        {"--ignore-eos", CLI_FLAG, &o->ignore_eos, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int rc = cli_parse("run", argc, argv, opts, usage);
    if (rc) return rc;
    o->sp.top_k = (int32_t)o->top_k;
    o->sp.repeat_last_n = (int32_t)o->repeat_last_n;
    o->sp.seed = (uint64_t)o->seed;
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "moontail run: give either -p or -f, not both\n");
        return -1;
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {.n_predict = 32, .sp = mt_sampler_default_params()};
    int prc = parse(argc, argv, &o);
    if (prc) return prc > 0 ? 0 : 2;
    char *prompt_buf = NULL;
    size_t prompt_len;
    const char *prompt = o.prompt;
    if (o.prompt_file) {
        if (!(prompt_buf = cli_read_file(o.prompt_file, &prompt_len))) return 1;
        prompt = prompt_buf;
    } else {
        if (!prompt) prompt = "Once upon a time";
        prompt_len = strlen(prompt);
    }
    if (!o.model && !o.json)
        fprintf(stderr, "moontail: no -m given: running the built-in synthetic model (qwen3moe,"
                        " Q8_0, random weights), so the text is not meaningful\n");

    int rc = 1;
    mt_error err = {{0}};
    mt_model *model = NULL;
    mt_vocab *vocab = NULL;
    mt_session *s = NULL;
    mt_sampler *smp = NULL;
    int32_t *prompt_ids = NULL, *gen = NULL;
    float *logits = NULL;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;

    double t0 = now_ms();
    if (!(model = cli_open_model(o.model, &err)) || !(vocab = mt_vocab_load(model->gguf, &err)))
        goto fail;
    int64_t n_prompt = mt_tokenize(vocab, prompt, prompt_len, true, true, &prompt_ids, &err);
    if (n_prompt < 0) goto fail;
    if (n_prompt == 0) {
        mt_error_set(&err, "the prompt is empty and the model adds no BOS token; give some text");
        goto fail;
    }
    int64_t n_ctx = o.ctx ? o.ctx : n_prompt + o.n_predict;
    if (n_prompt + o.n_predict > n_ctx) {
        mt_error_set(&err, "prompt (%lld tokens) + -n %lld exceed --ctx %lld", (long long)n_prompt,
                     (long long)o.n_predict, (long long)n_ctx);
        goto fail;
    }
    if (!(s = mt_session_new(model, (int32_t)n_ctx, (int)o.threads, &err))) goto fail;
    const int32_t V = model->hp.n_vocab;
    logits = malloc((size_t)V * sizeof(float));
    gen = malloc((size_t)(o.n_predict + 1) * sizeof(int32_t));
    smp = mt_sampler_new(&o.sp, V);
    if (!logits || !gen || !smp) {
        mt_error_set(&err, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < n_prompt; i++) mt_sampler_accept(smp, prompt_ids[i]);
    double t1 = now_ms();
    if (mt_session_eval(s, prompt_ids, (int32_t)n_prompt, (int32_t)o.ubatch, false, logits, &err))
        goto fail;
    double t2 = now_ms();

    mt_detok dt;
    mt_detok_init(&dt, vocab, false);
    int64_t n_gen = 0;
    const char *stop = "length";
    char piece[1024];
    while (n_gen < o.n_predict) {
        int32_t id = mt_sampler_sample(smp, logits);
        gen[n_gen++] = id;
        mt_sampler_accept(smp, id);
        int64_t nb = mt_detok_push(&dt, id, piece, sizeof piece);
        if (nb < 0) nb = 0;
        if (o.json) {
            if (text_len + (size_t)nb + 1 > text_cap) {
                text_cap = 2 * (text_len + (size_t)nb + 1) + 256;
                char *t = realloc(text, text_cap);
                if (!t) {
                    mt_error_set(&err, "out of memory");
                    goto fail;
                }
                text = t;
            }
            memcpy(text + text_len, piece, (size_t)nb);
            text_len += (size_t)nb;
        } else {
            fwrite(piece, 1, (size_t)nb, stdout);
            fflush(stdout);
        }
        if (!o.ignore_eos && mt_vocab_is_eog(vocab, id)) {
            stop = "eog";
            break;
        }
        if (n_gen == o.n_predict) break;
        if (mt_session_eval(s, &id, 1, 0, false, logits, &err)) goto fail;
    }
    int64_t nb = mt_detok_flush(&dt, piece, sizeof piece);
    double t3 = now_ms();
    if (o.json) {
        char *t = realloc(text, text_len + (nb > 0 ? (size_t)nb : 0) + 1);
        if (!t) goto fail;
        text = t;
        if (nb > 0) memcpy(text + text_len, piece, (size_t)nb), text_len += (size_t)nb;
        json_t *root = json_object();
        json_object_set_new(root, "model",
                            json_string(o.model ? o.model : "(built-in synthetic qwen3moe)"));
        json_object_set_new(root, "prompt_tokens", ids_json(prompt_ids, (size_t)n_prompt));
        json_object_set_new(root, "tokens", ids_json(gen, (size_t)n_gen));
        json_object_set_new(root, "text", json_stringn(text, text_len));
        json_object_set_new(root, "stop", json_string(stop));
        json_t *tm = json_object();
        json_object_set_new(tm, "load_ms", json_real(t1 - t0));
        json_object_set_new(tm, "prompt_ms", json_real(t2 - t1));
        json_object_set_new(tm, "generate_ms", json_real(t3 - t2));
        json_object_set_new(tm, "prompt_tokens_per_s",
                            json_real(n_prompt * 1e3 / (t2 - t1 + 1e-9)));
        json_object_set_new(tm, "generate_tokens_per_s", json_real(n_gen * 1e3 / (t3 - t2 + 1e-9)));
        json_object_set_new(tm, "threads", json_integer(mt_pool_size(s->pool)));
        json_object_set_new(root, "timings", tm);
        char *out = json_dumps(root, JSON_COMPACT);
        puts(out ? out : "{}");
        free(out);
        json_decref(root);
    } else {
        if (nb > 0) fwrite(piece, 1, (size_t)nb, stdout);
        fputc('\n', stdout);
        fprintf(stderr,
                "moontail: prompt %lld tokens in %.1f ms, generated %lld in %.1f ms (%.1f tok/s)\n",
                (long long)n_prompt, t2 - t1, (long long)n_gen, t3 - t2,
                n_gen * 1e3 / (t3 - t2 + 1e-9));
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "moontail run: %s\n", err.msg[0] ? err.msg : "failed");
    free(prompt_buf);
    free(prompt_ids);
    free(gen);
    free(logits);
    free(text);
    mt_sampler_free(smp);
    mt_session_free(s);
    mt_vocab_free(vocab);
    mt_model_free(model);
    return rc;
}

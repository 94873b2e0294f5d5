/* cmd_eval.c - `moontail eval`: evaluates a token sequence teacher-forced
 * and prints, for every position, the top logits relative to the maximum.
 * This is what the llama.cpp comparisons and determinism checks read. */
#include "cli.h"
#include "model_source.h"
#include "moontail/session.h"
#include "moontail/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail eval [-m MODEL] (-p TEXT | --ids 1,2,3) [options]\n"
    "\n"
    "  -m MODEL      GGUF model (default: the built-in synthetic model)\n"
    "  -p TEXT       tokenize TEXT (BOS and special tokens as for 'run')\n"
    "  --ids LIST    comma-separated token ids to evaluate as they are\n"
    "  --top K       top logits to print per position (default 8)\n"
    "  --ubatch N    micro-batch size (default: all tokens at once)\n"
    "  -t N          threads (default: all CPUs)\n"
    "  --kv-type T   KV cache type: f16 (default), bf16, q8_0 or f32\n"
    "  --dump FILE   also write all logits as raw little-endian f32 (tokens x vocab)\n";

static int parse_ids(const char *s, int32_t **out, int64_t *n) {
    size_t cap = 16;
    *n = 0;
    *out = malloc(cap * sizeof(int32_t));
    while (*out && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "moontail eval: --ids expects comma-separated ids, bad at '%s'\n", s);
            return -1;
        }
        if ((size_t)*n == cap) {
            int32_t *p = realloc(*out, (cap *= 2) * sizeof(int32_t));
            if (!p) return -1;
            *out = p;
        }
        (*out)[(*n)++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return *out ? 0 : -1;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *ids_arg = NULL, *dump = NULL, *kv_name = NULL;
    int64_t top = 8, ubatch = 0, threads = 0;
    const cli_opt opts[] = {
        {"-m", CLI_STRING, &model, 0, 0},      {"-p", CLI_STRING, &text, 0, 0},
        {"--ids", CLI_STRING, &ids_arg, 0, 0}, {"--dump", CLI_STRING, &dump, 0, 0},
        {"--top", CLI_INT, &top, 1, 1000},     {"--ubatch", CLI_INT, &ubatch, 1, 1 << 24},
        {"-t", CLI_INT, &threads, 1, 1024},    {"--kv-type", CLI_STRING, &kv_name, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("eval", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    mt_kv_type kv_type;
    if (!cli_kv_type("eval", kv_name, &kv_type)) return 2;
    if (!!text == !!ids_arg) {
        fprintf(stderr, "moontail eval: give exactly one of -p TEXT or --ids LIST\n");
        return 2;
    }
    mt_error err = {{0}};
    int rc = 1;
    int32_t *ids = NULL;
    int64_t n = 0;
    float *logits = NULL;
    mt_vocab *vocab = NULL;
    mt_session *s = NULL;
    mt_model *m = cli_open_model(model, &err);
    if (!m) goto fail;
    if (ids_arg) {
        if (parse_ids(ids_arg, &ids, &n)) return 2;
    } else {
        if (!(vocab = mt_vocab_load(m->gguf, &err))) goto fail;
        if ((n = mt_tokenize(vocab, text, strlen(text), true, true, &ids, &err)) < 0) goto fail;
    }
    if (n == 0) {
        mt_error_set(&err, "no tokens to evaluate");
        goto fail;
    }
    const int32_t V = m->hp.n_vocab;
    if (top > V) top = V;
    if (!(s = mt_session_new(m, (int32_t)n, kv_type, (int)threads, &err))) goto fail;
    if (!(logits = malloc((size_t)n * V * sizeof(float)))) {
        mt_error_set(&err, "out of memory for %lld x %d logits", (long long)n, V);
        goto fail;
    }
    if (mt_session_eval(s, ids, (int32_t)n, (int32_t)ubatch, true, logits, &err)) goto fail;
    if (dump) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(logits, sizeof(float), (size_t)n * V, f) != (size_t)n * V) {
            mt_error_set(&err, "cannot write '%s': %s", dump, strerror(errno));
            if (f) fclose(f);
            goto fail;
        }
        fclose(f);
    }
    json_t *root = json_object(), *pos = json_array(), *toks = json_array();
    for (int64_t t = 0; t < n; t++) json_array_append_new(toks, json_integer(ids[t]));
    int32_t *best = malloc((size_t)top * sizeof(int32_t));
    for (int64_t t = 0; best && t < n; t++) {
        const float *l = logits + (size_t)t * V;
        /* top-k by repeated selection; ties go to the lower id */
        for (int64_t k = 0; k < top; k++) {
            int32_t b = -1;
            for (int32_t i = 0; i < V; i++) {
                bool taken = false;
                for (int64_t q = 0; q < k && !taken; q++) taken = best[q] == i;
                if (!taken && (b < 0 || l[i] > l[b])) b = i;
            }
            best[k] = b;
        }
        json_t *row = json_array();
        for (int64_t k = 0; k < top; k++)
            json_array_append_new(row,
                                  json_pack("[i,f]", best[k], (double)(l[best[k]] - l[best[0]])));
        json_array_append_new(pos, row);
    }
    free(best);
    json_object_set_new(root, "tokens", toks);
    json_object_set_new(root, "top", pos);
    char *out = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    puts(out ? out : "{}");
    free(out);
    json_decref(root);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "moontail eval: %s\n", err.msg);
    free(ids);
    free(logits);
    mt_session_free(s);
    mt_vocab_free(vocab);
    mt_model_free(m);
    return rc;
}

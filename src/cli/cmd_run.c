/* cmd_run.c - `moontail run`: generates text from a prompt with a model in
 * this process (streamed, or one JSON object with --json). Without -m it
 * runs on the built-in synthetic model. The loop itself is generate.c. */
#include "generate.h"
#include "moontail/clock.h"
#include "model_source.h"
#include "moontail/session.h"

#include <stdio.h>

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
    "  --kv-type T         KV cache type: f16 (default), bf16, q8_0 or f32\n"
    "  --ignore-eos        keep generating after an end-of-generation token\n"
    "  --json              print one JSON object instead of streaming text\n";

typedef struct run_ctx {
    const mt_model *model;
    const char *model_path;
    const cli_gen *g;
    mt_session *s;
} run_ctx;

static int run_open(void *ctx, int32_t n_ctx, mt_error *err) {
    run_ctx *r = ctx;
    r->s = mt_session_new(r->model, n_ctx, r->g->kv_type, (int)r->g->threads, err);
    return r->s ? 0 : -1;
}

static int run_eval(void *ctx, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    run_ctx *r = ctx;
    return mt_session_eval(r->s, ids, n, (int32_t)r->g->ubatch, false, logits, err);
}

static void run_json(void *ctx, json_t *root) {
    run_ctx *r = ctx;
    json_object_set_new(
        root, "model",
        json_string(r->model_path ? r->model_path : "(built-in synthetic qwen3moe)"));
    json_object_set_new(root, "threads", json_integer(mt_pool_size(r->s->pool)));
    /* what the session holds: a fixed recurrent state (KDA layers) and a
     * per-position cache (attention layers), reserved for the whole context */
    const mt_kv_cache *kv = r->s->kv;
    const size_t rec = mt_kv_cache_rec_bytes(kv);
    json_object_set_new(root, "session_state",
                        json_pack("{s:I, s:I, s:I, s:I, s:I}", "context", (json_int_t)kv->n_ctx,
                                  "recurrent_bytes", (json_int_t)rec, "recurrent_layers",
                                  (json_int_t)kv->n_rec, "bytes_per_position",
                                  (json_int_t)((mt_kv_cache_bytes(kv) - rec) / kv->n_ctx),
                                  "reserved_bytes", (json_int_t)mt_kv_cache_bytes(kv)));
}

int cmd_run(int argc, char **argv) {
    cli_gen g;
    cli_gen_defaults(&g);
    const char *model_path = NULL;
    const cli_opt extra[] = {{"-m", CLI_STRING, &model_path, 0, 0}, {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_gen_parse("run", argc, argv, &g, extra, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!model_path && !g.json)
        fprintf(stderr, "moontail: no -m given: running the built-in synthetic model (qwen3moe,"
                        " Q8_0, random weights), so the text is not meaningful\n");
    mt_error err = {{0}};
    double t0 = mt_mono_ms_frac();
    run_ctx r = {NULL, model_path, &g, NULL};
    mt_vocab *vocab = NULL;
    mt_model *model = cli_open_model(model_path, &err);
    int rc = -1;
    if (model && (vocab = mt_vocab_load(model->gguf, &err))) {
        r.model = model;
        cli_gen_backend be = {run_open, run_eval, run_json, &r};
        rc = cli_generate(&g, vocab, model->hp.n_vocab, &be, t0, &err);
    }
    if (rc) fprintf(stderr, "moontail run: %s\n", err.msg[0] ? err.msg : "failed");
    mt_session_free(r.s);
    mt_vocab_free(vocab);
    mt_model_free(model);
    return rc ? 1 : 0;
}

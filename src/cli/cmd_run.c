/* cmd_run.c - `moontail run`: generates text from a prompt with a model in
 * this process (streamed, or one JSON object with --json). Without -m it
 * runs on the built-in synthetic model. The loop is the model layer's
 * (moontail/generate.h), its options and output generate.c's. */
#include "generate.h"
#include "moontail/clock.h"
#include "model_source.h"

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
    "  --ubatch N          prompt micro-batch size (default 512)\n"
    "  --kv-type T         KV cache type: f16 (default), bf16, q8_0 or f32\n"
    "  --stop TEXT         end the text before TEXT (up to 4 of them), as the API's stop\n"
    "  --ignore-eos        keep generating after an end-of-generation token\n"
    "  --draft ngram|FILE  exact speculative decoding: guesses from n-grams of the text so far,\n"
    "                      or from a small draft model of the same vocabulary (same output)\n"
    "  --draft-k K         guesses checked per pass (default 4, at most 32)\n"
    "  --json              print one JSON object instead of streaming text\n";

/* ctx: the model's path, NULL for the built-in model */
static void run_json(void *ctx, const mt_gen_backend *b, void *slot, json_t *root) {
    const char *model_path = ctx;
    json_object_set_new(root, "model",
                        json_string(model_path ? model_path : "(built-in synthetic qwen3moe)"));
    json_object_set_new(root, "threads", json_integer(mt_gen_local_threads(b)));
    /* what the sequence holds: a fixed recurrent state (KDA layers) and a
     * per-position cache (attention layers), reserved for the whole context */
    const mt_kv_cache *kv = mt_gen_local_cache(slot);
    if (!kv) return;
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
    mt_gen_backend *b = mt_gen_backend_local(cli_open_model(model_path, &err), model_path,
                                             (int)g.threads, g.kv_type, &err);
    const cli_gen_hooks hooks = {.add_json = run_json, .ctx = (void *)model_path};
    int rc = b ? cli_generate(&g, b, t0, &hooks, &err) : -1;
    if (rc) fprintf(stderr, "moontail run: %s\n", err.msg[0] ? err.msg : "failed");
    if (b) b->destroy(b);
    return rc ? 1 : 0;
}

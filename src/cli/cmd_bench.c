/* cmd_bench.c - `moontail bench`: prefill and decode speed of a model on this
 * machine, and how close decoding comes to the memory's bandwidth.
 *
 * One run = a fresh session; a prompt of P token ids is evaluated as one
 * batch (prefill), then G tokens are decoded one at a time, each the greedy
 * choice of the previous logits (decode). Reported per run and as medians:
 *   - prefill and decode tokens/s;
 *   - bytes of weights the matmuls read per decoded token (mt_matmul counts
 *     every matrix it streams; routed experts count only when chosen), and
 *     that figure times the decode rate, in GB/s;
 *   - the machine's memory bandwidth from a STREAM triad run in the same
 *     process with the same threads (membw.h), and the decode GB/s as a
 *     share of it.
 * Before the timed runs the whole file is read once and one untimed run
 * warms caches and the thread pool. Benchmarks measure; they do not judge:
 * there are no thresholds here. */
#include "cli.h"
#include "moontail/clock.h"
#include "model_source.h"
#include "moontail/matmul.h"
#include "moontail/membw.h"
#include "moontail/quant.h"
#include "moontail/session.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: moontail bench -m MODEL [options]\n"
    "\n"
    "  -m MODEL        GGUF model (default: the built-in synthetic model)\n"
    "  -t N            threads (default: all CPUs)\n"
    "  -p N            prompt tokens evaluated as one batch (default 128)\n"
    "  -n N            tokens decoded one at a time after the prompt (default 32)\n"
    "  -r N            timed runs (default 3); medians are reported\n"
    "  --ubatch N      prompt micro-batch (default: the whole prompt)\n"
    "  --kv-type T     KV cache type: f16 (default), bf16, q8_0 or f32\n"
    "  --stream-mib N  STREAM array size in MiB (default 512; 0 = skip the triad)\n"
    "  --stream-only   measure the memory bandwidth only (no model)\n"
    "  --json          one JSON object instead of the table\n"
    "\n"
    "  --layer-times   per-layer time of decode steps of B sessions computed together, as a\n"
    "                  node batches them (bench/cellsim's input, docs/cellsim.md); then -p is\n"
    "                  the context each session holds and -r the timed steps per size\n"
    "  --batches LIST  batch sizes for --layer-times (default 1,2,4,8,16,32,64)\n"
    "  --prefills LIST prefill sizes (one session, consecutive positions) for --layer-times\n"
    "                  (default none)\n";

typedef struct bench_run {
    double prefill_s, decode_s;
    uint64_t prefill_bytes, decode_bytes; /* weights read by matmuls */
} bench_run;

static int32_t argmax(const float *v, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Reads every page of the mapping once, so the first timed run does not
 * pay for faults or disk reads. */
static void touch_file(const mt_model *m) {
    uint8_t acc = 0;
    for (uint32_t k = 0; k < m->gguf->n_parts; k++) { /* every file of a split model */
        const volatile uint8_t *p = m->gguf->parts[k].base;
        for (size_t i = 0; i < m->gguf->parts[k].size; i += 4096) acc ^= p[i];
    }
    (void)acc;
}

/* One prefill of n_prompt tokens and n_gen decode steps in a new session. */
static int bench_once(const mt_model *m, int threads, mt_kv_type kv_type, int32_t n_prompt,
                      int32_t n_gen, int32_t ubatch, bench_run *r, mt_error *err) {
    const int32_t V = m->hp.n_vocab;
    mt_session *s = mt_session_new(m, n_prompt + n_gen + 1, kv_type, threads, err);
    int32_t *ids = malloc((size_t)n_prompt * sizeof(int32_t));
    float *logits = malloc((size_t)V * sizeof(float));
    int rc = -1;
    if (!s || !ids || !logits) {
        if (s) mt_error_set(err, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n_prompt; i++) ids[i] = (int32_t)((i * 37 + 5) % V);
    uint64_t b0 = mt_matmul_weight_bytes();
    double t0 = mt_mono_s();
    if (mt_session_eval(s, ids, n_prompt, ubatch, false, logits, err)) goto done;
    double t1 = mt_mono_s();
    uint64_t b1 = mt_matmul_weight_bytes();
    for (int32_t g = 0; g < n_gen; g++) {
        int32_t tok = argmax(logits, V);
        if (mt_session_eval(s, &tok, 1, 0, false, logits, err)) goto done;
    }
    double t2 = mt_mono_s();
    r->prefill_s = t1 - t0;
    r->decode_s = t2 - t1;
    r->prefill_bytes = b1 - b0;
    r->decode_bytes = mt_matmul_weight_bytes() - b1;
    rc = 0;
done:
    mt_session_free(s);
    free(ids);
    free(logits);
    return rc;
}

static int bench_stream_only(int threads, int64_t mib, bool json) {
    mt_pool *pool = mt_pool_create(threads);
    mt_membw bw;
    if (!pool || mt_membw_measure(pool, (size_t)mib << 20, 5, &bw)) {
        fprintf(stderr, "moontail bench: cannot allocate 3 x %lld MiB for the STREAM triad\n",
                (long long)mib);
        mt_pool_free(pool);
        return 1;
    }
    if (json)
        printf("{\"threads\":%d,\"triad_gbs\":%.3f,\"read_gbs\":%.3f,\"array_bytes\":%zu}\n",
               mt_pool_size(pool), bw.triad_gbs, bw.read_gbs, bw.array_bytes);
    else
        printf(
            "memory   STREAM triad %.1f GB/s, read-only %.1f GB/s (%d threads, 3 x %zu MiB, best "
            "of 5)\n",
            bw.triad_gbs, bw.read_gbs, mt_pool_size(pool), bw.array_bytes >> 20);
    mt_pool_free(pool);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL;
    int64_t threads = 0, n_prompt = 128, n_gen = 32, runs = 3, ubatch = 0, stream_mib = 512;
    bool json = false, stream_only = false, layer_times = false;
    const char *batches = "1,2,4,8,16,32,64", *prefills = "", *kv_name = NULL;
    const cli_opt opts[] = {
        {"-m", CLI_STRING, &model_path, 0, 0},
        {"-t", CLI_INT, &threads, 1, 1024},
        {"-p", CLI_INT, &n_prompt, 1, 1 << 20},
        {"-n", CLI_INT, &n_gen, 1, 1 << 20},
        {"-r", CLI_INT, &runs, 1, 1000},
        {"--ubatch", CLI_INT, &ubatch, 1, 1 << 20},
        {"--kv-type", CLI_STRING, &kv_name, 0, 0},
        {"--stream-mib", CLI_INT, &stream_mib, 0, 1 << 20},
        {"--json", CLI_FLAG, &json, 0, 0},
        {"--stream-only", CLI_FLAG, &stream_only, 0, 0},
        {"--layer-times", CLI_FLAG, &layer_times, 0, 0},
        {"--batches", CLI_STRING, &batches, 0, 0},
        {"--prefills", CLI_STRING, &prefills, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("bench", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    mt_kv_type kv_type;
    if (!cli_kv_type("bench", kv_name, &kv_type)) return 2;
    if (stream_only)
        return bench_stream_only((int)threads, stream_mib > 0 ? stream_mib : 512, json);
    mt_error err = {{0}};
    mt_model *m = cli_open_model(model_path, &err);
    if (!m) {
        fprintf(stderr, "moontail bench: %s\n", err.msg);
        return 1;
    }
    if (!m->has_head || !m->has_attention || m->layer_begin != 0 || m->layer_end != m->hp.n_layer) {
        fprintf(stderr, "moontail bench: %s is a shard; bench needs a whole model\n",
                m->gguf->path);
        mt_model_free(m);
        return 1;
    }
    if (layer_times) {
        int lrc = bench_layer_times(m, model_path, (int)threads, batches, prefills,
                                    (int32_t)n_prompt, (int)runs, json);
        mt_model_free(m);
        return lrc;
    }
    int rc = 1;
    bench_run *r = calloc((size_t)runs, sizeof *r);
    double *tmp = calloc((size_t)runs, sizeof *tmp);
    mt_pool *pool = mt_pool_create((int)threads);
    if (!r || !tmp || !pool) {
        fprintf(stderr, "moontail bench: out of memory\n");
        goto done;
    }
    const int n_threads = mt_pool_size(pool);

    /* memory bandwidth first, while the model's pages are not yet hot */
    mt_membw bw = {0};
    if (stream_mib > 0 && mt_membw_measure(pool, (size_t)stream_mib << 20, 5, &bw)) {
        fprintf(stderr, "moontail bench: cannot allocate 3 x %lld MiB for the STREAM triad\n",
                (long long)stream_mib);
        goto done;
    }
    mt_pool_free(pool); /* sessions bring their own pools */
    pool = NULL;
    touch_file(m);
    bench_run warm;
    if (bench_once(m, n_threads, kv_type, (int32_t)n_prompt, n_gen < 4 ? (int32_t)n_gen : 4,
                   (int32_t)ubatch, &warm, &err))
        goto fail;
    for (int64_t i = 0; i < runs; i++)
        if (bench_once(m, n_threads, kv_type, (int32_t)n_prompt, (int32_t)n_gen, (int32_t)ubatch,
                       &r[i], &err))
            goto fail;

    for (int64_t i = 0; i < runs; i++) tmp[i] = (double)n_prompt / r[i].prefill_s;
    const double pp = bench_median(tmp, (int)runs);
    for (int64_t i = 0; i < runs; i++) tmp[i] = (double)n_gen / r[i].decode_s;
    const double tg = bench_median(tmp, (int)runs);
    for (int64_t i = 0; i < runs; i++) tmp[i] = (double)r[i].decode_bytes / (double)n_gen;
    const double bytes_tok = bench_median(tmp, (int)runs);
    for (int64_t i = 0; i < runs; i++) tmp[i] = (double)r[i].prefill_bytes;
    const double bytes_prefill = bench_median(tmp, (int)runs);
    const double gbs = bytes_tok * tg / 1e9;

    if (json) {
        json_t *o = json_object(), *ja = json_array();
        json_object_set_new(o, "model", json_string(model_path ? model_path : "(built-in)"));
        json_object_set_new(o, "file_bytes", json_integer((json_int_t)gguf_total_size(m->gguf)));
        json_object_set_new(o, "threads", json_integer(n_threads));
        json_object_set_new(o, "kv_type", json_string(mt_kv_type_name(kv_type)));
        json_object_set_new(o, "kernels", json_string(quant_kernel_name()));
        json_object_set_new(o, "prompt_tokens", json_integer(n_prompt));
        json_object_set_new(o, "gen_tokens", json_integer(n_gen));
        for (int64_t i = 0; i < runs; i++)
            json_array_append_new(ja, json_pack("{s:f,s:f}", "prefill_tps",
                                                (double)n_prompt / r[i].prefill_s, "decode_tps",
                                                (double)n_gen / r[i].decode_s));
        json_object_set_new(o, "runs", ja);
        json_object_set_new(o, "prefill_tps", json_real(pp));
        json_object_set_new(o, "decode_tps", json_real(tg));
        json_object_set_new(o, "weight_bytes_per_token", json_real(bytes_tok));
        json_object_set_new(o, "weight_bytes_prefill", json_real(bytes_prefill));
        json_object_set_new(o, "decode_gbs", json_real(gbs));
        json_object_set_new(o, "triad_gbs", json_real(bw.triad_gbs));
        json_object_set_new(o, "read_gbs", json_real(bw.read_gbs));
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s ? s : "{}");
        free(s);
        json_decref(o);
    } else {
        printf("model    %s (%s, %d layers, %.2f GB file)\n", model_path ? model_path : "built-in",
               m->hp.arch_name, m->hp.n_layer, (double)gguf_total_size(m->gguf) / 1e9);
        printf("threads  %d, kernels %s, %s KV cache, prompt %lld tokens, decode %lld tokens,"
               " %lld runs\n",
               n_threads, quant_kernel_name(), mt_kv_type_name(kv_type), (long long)n_prompt,
               (long long)n_gen, (long long)runs);
        if (stream_mib > 0)
            printf(
                "memory   STREAM triad %.1f GB/s, read-only %.1f GB/s (3 x %zu MiB, best of 5)\n",
                bw.triad_gbs, bw.read_gbs, bw.array_bytes >> 20);
        printf("run   prefill tok/s   decode tok/s\n");
        for (int64_t i = 0; i < runs; i++)
            printf("%-4lld  %13.2f   %12.2f\n", (long long)i + 1, (double)n_prompt / r[i].prefill_s,
                   (double)n_gen / r[i].decode_s);
        printf("median prefill %.2f tok/s, decode %.2f tok/s\n", pp, tg);
        printf("decode   %.1f MB of weights per token -> %.2f GB/s", bytes_tok / 1e6, gbs);
        if (stream_mib > 0)
            printf(" = %.0f%% of triad, %.0f%% of read-only", 100.0 * gbs / bw.triad_gbs,
                   100.0 * gbs / bw.read_gbs);
        printf("\nprefill  %.1f MB of weights per %lld-token batch\n", bytes_prefill / 1e6,
               (long long)n_prompt);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moontail bench: %s\n", err.msg);
done:
    mt_pool_free(pool);
    free(r);
    free(tmp);
    mt_model_free(m);
    return rc;
}

/* bench_layers.c - `moontail bench --layer-times`: the compute time of one
 * layer as a function of how many tokens a node computes together, the input
 * of bench/cellsim's compute model (docs/cellsim.md).
 *
 * A node's worker gathers one token from each waiting session and runs them
 * as one mt_model_forward_batch over its layers (src/net/node_worker.c). This
 * does exactly that on a whole model for batch sizes B (--batches): B
 * sessions, each holding the same P-position context (-p; the first is
 * filled once and copied), each decoding a different token per step. For
 * every B it reports the median time of -r timed steps (after one untimed
 * step) divided by the layer count, and the weight bytes the step's matrix
 * products read per layer (mt_matmul_weight_bytes: routed experts count once
 * per step when any token chose them), from which the distinct experts the
 * step touched follow. It also times prefill steps (one fresh session, B
 * consecutive positions, as a replay or a prompt reaches a stage) and the
 * head of one token (the requester's part). Benchmarks measure; no
 * thresholds here. bench_median, which `moontail bench` uses too, is here. */
#include "cli.h"
#include "moontail/clock.h"
#include "moontail/matmul.h"
#include "moontail/model.h"
#include "moontail/quant.h"
#include "moontail/shard.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { MAX_BATCHES = 32 };

/* One batch size's figures. */
typedef struct layer_point {
    int32_t batch;
    double ms_per_layer;    /* median over the timed steps */
    double ms_min;          /* the fastest step (least disturbed by other work) */
    double cpu_ms;          /* median CPU time of the process per layer (all its threads) */
    double bytes_per_layer; /* weight bytes read per layer per step (mean) */
    double experts;         /* distinct routed experts per MoE layer per step (mean) */
} layer_point;

static double clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

/* CPU time of the whole process: the compute threads' work, whatever else ran meanwhile. */
static double cpu_ms(void) {
    return clock_ms(CLOCK_PROCESS_CPUTIME_ID);
}

/* Fills p's times from the per-step wall and CPU times (sorts both). */
static void step_times(layer_point *p, double *ms, double *cpu, int runs) {
    p->ms_per_layer = bench_median(ms, runs);
    p->ms_min = ms[0];
    p->cpu_ms = bench_median(cpu, runs);
}

/* Parses "1,2,4,8" into out (ascending not required); false with a message. */
static bool parse_batches(const char *s, int32_t *out, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || *n == MAX_BATCHES || (*end && *end != ',')) {
            fprintf(stderr,
                    "moontail bench: --batches takes up to %d comma-separated sizes in"
                    " [1, 4096], e.g. 1,2,4,8 (got '%s')\n",
                    MAX_BATCHES, s);
            return false;
        }
        out[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) fprintf(stderr, "moontail bench: --batches is empty\n");
    return *n > 0;
}

/* Bytes of the model's MoE layers, means over them: the non-expert part (every tensor, as a
 * shard holds it), the part the matrix products read (its matrices: norms and biases are
 * not products, and mt_matmul_weight_bytes counts products), and one expert. Zeros for a
 * dense model. */
static int moe_layer_bytes(const mt_model *m, double *attn, double *attn_matmul, double *expert,
                           int32_t *n_moe, int *matrix_type, mt_error *err) {
    mt_shard_layout l;
    if (mt_shard_layout_read(m->gguf, &l, err)) return -1;
    double a = 0, am = 0, e = 0, by_type[64] = {0};
    int32_t k = 0;
    for (int32_t il = 0; il < l.n_layer; il++)
        if (l.expert_bytes[il]) a += (double)l.attn_bytes[il], e += (double)l.expert_bytes[il], k++;
    for (uint64_t t = 0; t < m->gguf->n_tensors; t++) {
        const gguf_tensor *gt = &m->gguf->tensors[t];
        int32_t il = l.layer[t];
        /* KDA's convolution taps and decay rates are not products, whatever their dims */
        bool product =
            gt->n_dims >= 2 && !strstr(gt->name, "ssm_conv1d") && !strstr(gt->name, ".ssm_a");
        if (l.part[t] == MT_SHARD_PART_ATTENTION && il >= 0 && l.expert_bytes[il] && product) {
            am += (double)gt->nbytes;
            if (gt->type < 64 && gt->type != MT_TYPE_F32) by_type[gt->type] += (double)gt->nbytes;
        }
    }
    /* the type of the non-expert matrices: the one most of their bytes have (rows that are
     * not whole blocks of it fall back to Q8_0 or F32; routers are F32) */
    *matrix_type = -1;
    for (int ty = 0; ty < 64; ty++)
        if (by_type[ty] > 0 && (*matrix_type < 0 || by_type[ty] > by_type[*matrix_type]))
            *matrix_type = ty;
    *attn = k ? a / k : 0;
    *attn_matmul = k ? am / k : 0;
    *expert = k ? e / k : 0;
    *n_moe = k;
    mt_shard_layout_free(&l);
    return 0;
}

/* Step `step` of a timing loop has just finished a forward pass started at
 * t0 (wall), c0 (CPU) with the weight counter at w0: its per-layer wall and
 * CPU ms and weight bytes are recorded (step 0, the warm-up, is not). */
static void record_step(int step, int32_t L, double t0, double c0, uint64_t w0, double *ms,
                        double *cpu, double *bytes) {
    const double t1 = mt_mono_ms_frac(), c1 = cpu_ms();
    if (step == 0) return;
    ms[step - 1] = (t1 - t0) / L;
    cpu[step - 1] = (c1 - c0) / L;
    *bytes += (double)(mt_matmul_weight_bytes() - w0) / L;
}

/* Decode steps of B sessions; fills p. */
static int time_decode(const mt_model *m, mt_pool *pool, int32_t B, int32_t ctx, int runs,
                       double attn_matmul, double expert_bytes, int32_t n_moe, layer_point *p,
                       mt_error *err) {
    const int32_t L = m->hp.n_layer, E = m->hp.n_hidden, V = m->hp.n_vocab;
    const int32_t n_ctx = ctx + runs + 2;
    mt_kv_cache **kv = calloc((size_t)B, sizeof *kv);
    float *hidden = malloc((size_t)(B > ctx ? B : ctx) * (size_t)E * sizeof(float));
    int32_t *pos = malloc((size_t)(B > ctx ? B : ctx) * sizeof(int32_t));
    int32_t *tok = malloc((size_t)(B > ctx ? B : ctx) * sizeof(int32_t));
    double *ms = malloc((size_t)runs * sizeof(double)), bytes = 0;
    double *cpu = malloc((size_t)runs * sizeof(double));
    int rc = -1;
    if (!kv || !hidden || !pos || !tok || !ms || !cpu) {
        mt_error_set(err, "out of memory for a batch of %d sessions", B);
        goto done;
    }
    for (int32_t b = 0; b < B; b++)
        if (!(kv[b] = mt_kv_cache_new(m, 0, L, n_ctx, MT_KV_DEFAULT, err))) goto done;
    /* the shared context: filled once, copied into every session */
    for (int32_t i = 0; i < ctx; i++) tok[i] = (i * 37 + 5) % V, pos[i] = i;
    if (ctx > 0 && (mt_model_embed(m, tok, ctx, hidden, err) ||
                    mt_model_forward_layers(m, kv[0], 0, L, pos, ctx, hidden, NULL, pool, err)))
        goto done;
    for (int32_t b = 1; b < B; b++) mt_kv_cache_copy(kv[b], kv[0]);
    for (int step = 0; step <= runs; step++) { /* step 0 is untimed */
        for (int32_t b = 0; b < B; b++)
            tok[b] = (int32_t)(((int64_t)b * 131 + (int64_t)step * 977 + 11) % V),
            pos[b] = ctx + step;
        if (mt_model_embed(m, tok, B, hidden, err)) goto done;
        uint64_t w0 = mt_matmul_weight_bytes();
        double t0 = mt_mono_ms_frac(), c0 = cpu_ms();
        if (mt_model_forward_batch(m, kv, 0, L, pos, B, hidden, NULL, pool, err)) goto done;
        record_step(step, L, t0, c0, w0, ms, cpu, &bytes);
    }
    p->batch = B;
    step_times(p, ms, cpu, runs);
    p->bytes_per_layer = bytes / runs;
    /* what the products read beyond the MoE layers' matrices is experts (dense layers, if
     * any, are counted as MoE layers' non-expert parts: exact for models without them) */
    p->experts = n_moe && expert_bytes > 0
                     ? (p->bytes_per_layer * L - attn_matmul * n_moe) / n_moe / expert_bytes
                     : 0;
    if (p->experts < 0) p->experts = 0;
    rc = 0;
done:
    for (int32_t b = 0; kv && b < B; b++) mt_kv_cache_free(kv[b]);
    free(kv), free(hidden), free(pos), free(tok), free(ms), free(cpu);
    return rc;
}

/* Prefill steps: one fresh session, B consecutive positions from 0. */
static int time_prefill(const mt_model *m, mt_pool *pool, int32_t B, int runs, layer_point *p,
                        mt_error *err) {
    const int32_t L = m->hp.n_layer, E = m->hp.n_hidden, V = m->hp.n_vocab;
    mt_kv_cache *kv = mt_kv_cache_new(m, 0, L, B, MT_KV_DEFAULT, err);
    float *hidden = malloc((size_t)B * (size_t)E * sizeof(float));
    int32_t *pos = malloc((size_t)B * sizeof(int32_t)), *tok = malloc((size_t)B * sizeof(int32_t));
    double *ms = malloc((size_t)runs * sizeof(double)), bytes = 0;
    double *cpu = malloc((size_t)runs * sizeof(double));
    int rc = -1;
    if (!kv || !hidden || !pos || !tok || !ms || !cpu) {
        if (kv) mt_error_set(err, "out of memory for a prefill of %d tokens", B);
        goto done;
    }
    for (int step = 0; step <= runs; step++) {
        for (int32_t i = 0; i < B; i++)
            tok[i] = (int32_t)((i * 37 + step * 11 + 5) % V), pos[i] = i;
        if (mt_model_embed(m, tok, B, hidden, err)) goto done;
        uint64_t w0 = mt_matmul_weight_bytes();
        double t0 = mt_mono_ms_frac(), c0 = cpu_ms();
        if (mt_model_forward_layers(m, kv, 0, L, pos, B, hidden, NULL, pool, err)) goto done;
        record_step(step, L, t0, c0, w0, ms, cpu, &bytes);
    }
    p->batch = B;
    step_times(p, ms, cpu, runs);
    p->bytes_per_layer = bytes / runs;
    p->experts = 0;
    rc = 0;
done:
    mt_kv_cache_free(kv);
    free(hidden), free(pos), free(tok), free(ms), free(cpu);
    return rc;
}

/* The head (final norm + output matrix) of one token, median of runs. */
static void time_head(const mt_model *m, mt_pool *pool, int runs, double *ms_out,
                      double *bytes_out) {
    float *hidden = calloc((size_t)m->hp.n_hidden, sizeof(float)); /* checkpoints zero */
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    double *ms = malloc((size_t)(runs + 1) * sizeof(double));
    *ms_out = *bytes_out = 0;
    if (hidden && logits && ms) {
        for (int32_t i = 0; i < m->hp.n_embd; i++) hidden[i] = (float)((i % 7) - 3) * 0.25f;
        uint64_t w = 0;
        for (int r = 0; r <= runs; r++) {
            uint64_t w0 = mt_matmul_weight_bytes();
            double t0 = mt_mono_ms_frac();
            mt_model_head(m, hidden, 1, logits, pool);
            ms[r] = mt_mono_ms_frac() - t0;
            w = mt_matmul_weight_bytes() - w0;
        }
        *ms_out = bench_median(ms + 1, runs);
        *bytes_out = (double)w;
    }
    free(hidden), free(logits), free(ms);
}

static json_t *points_json(const layer_point *p, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:i,s:f,s:f,s:f,s:f,s:f}", "batch", p[i].batch,
                                           "ms_per_layer", p[i].ms_per_layer, "ms_min", p[i].ms_min,
                                           "cpu_ms_per_layer", p[i].cpu_ms, "bytes_per_layer",
                                           p[i].bytes_per_layer, "experts", p[i].experts));
    return a;
}

int bench_layer_times(const mt_model *m, const char *model_path, int threads, const char *batches,
                      const char *prefills, int32_t ctx, int runs, bool json) {
    int32_t bs[MAX_BATCHES], ps[MAX_BATCHES];
    int n_b = 0, n_p = 0;
    if (!parse_batches(batches, bs, &n_b)) return 2;
    if (prefills && *prefills && !parse_batches(prefills, ps, &n_p)) return 2;
    mt_error err = {{0}};
    double attn = 0, attn_matmul = 0, expert = 0;
    int32_t n_moe = 0;
    int matrix_type = -1;
    if (moe_layer_bytes(m, &attn, &attn_matmul, &expert, &n_moe, &matrix_type, &err)) {
        fprintf(stderr, "moontail bench: %s\n", err.msg);
        return 1;
    }
    mt_pool *pool = mt_pool_create(threads);
    layer_point dec[MAX_BATCHES], pre[MAX_BATCHES];
    int rc = 1;
    if (!pool) {
        fprintf(stderr, "moontail bench: cannot start %d threads\n", threads);
        return 1;
    }
    /* every page once, so that no timed step pays for a fault */
    uint8_t acc = 0;
    for (uint32_t k = 0; k < m->gguf->n_parts; k++) { /* every file of a split model */
        const volatile uint8_t *bytes = m->gguf->parts[k].base;
        for (size_t i = 0; i < m->gguf->parts[k].size; i += 4096) acc ^= bytes[i];
    }
    (void)acc;
    for (int i = 0; i < n_b; i++) {
        if (time_decode(m, pool, bs[i], ctx, runs, attn_matmul, expert, n_moe, &dec[i], &err))
            goto fail;
        if (!json)
            fprintf(stderr, "moontail bench: batch %d: %.3f ms per layer\n", bs[i],
                    dec[i].ms_per_layer);
    }
    for (int i = 0; i < n_p; i++)
        if (time_prefill(m, pool, ps[i], runs, &pre[i], &err)) goto fail;
    double head_ms, head_bytes;
    time_head(m, pool, runs < 5 ? 5 : runs, &head_ms, &head_bytes);
    const mt_hparams *hp = &m->hp;
    if (json) {
        json_t *o = json_pack(
            "{s:s,s:s,s:i,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}",
            "model", model_path ? model_path : "(built-in)", "arch", hp->arch_name, "threads",
            mt_pool_size(pool), "kernels", quant_kernel_name(), "n_layer", hp->n_layer,
            "n_moe_layer", n_moe, "n_embd", hp->n_embd, "n_vocab", hp->n_vocab, "n_head",
            hp->n_head, "n_head_kv", hp->n_head_kv, "head_dim_k", hp->head_dim_k, "head_dim_v",
            hp->head_dim_v, "n_ff", hp->n_ff, "n_ff_exp", hp->n_ff_exp, "n_expert", hp->n_expert,
            "n_expert_used", hp->n_expert_used, "n_expert_shared", hp->n_expert_shared, "q_lora",
            hp->q_lora_rank, "kv_lora", hp->kv_lora_rank, "qk_rope", hp->qk_rope, "context", ctx);
        json_object_set_new(o, "qk_nope", json_integer(hp->qk_nope));
        json_object_set_new(o, "v_dim", json_integer(hp->v_head_dim));
        /* the type of the layers' matrices (the first MoE layer's experts, else attention) */
        const mt_layer *l0 = &m->layers[m->hp.n_layer - 1];
        mt_type t = l0->is_moe ? l0->gate_exps.m.type : l0->wo.data ? l0->wo.type : l0->ffn_up.type;
        const mt_type_traits *tt = mt_type_traits_get(t);
        json_object_set_new(o, "type", json_string(tt ? tt->name : "?"));
        /* the non-expert matrices' type apart (kimi-k3's experts are MXFP4), and what
         * cellsim needs to lay out a kimi layer: KDA sizes, the residual block, the latent
         * width, the MLA gate, which layers are MLA */
        const mt_type_traits *mtt = mt_type_traits_get(matrix_type >= 0 ? (mt_type)matrix_type : t);
        json_object_set_new(o, "matrix_type", json_string(mtt ? mtt->name : "?"));
        json_object_set_new(o, "expert_type", json_string(tt ? tt->name : "?"));
        json_object_set_new(o, "kda_head_dim", json_integer(hp->kda_head_dim));
        json_object_set_new(o, "conv_kernel", json_integer(hp->ssm_conv));
        json_object_set_new(o, "res_block", json_integer(hp->attn_res_block));
        json_object_set_new(o, "latent", json_integer(hp->n_expert_latent));
        json_object_set_new(o, "n_hidden", json_integer(hp->n_hidden));
        json_t *mla = json_array();
        bool gate = false;
        for (int32_t il = 0; il < hp->n_layer; il++)
            if (!m->layers[il].is_kda) {
                json_array_append_new(mla, json_integer(il));
                gate |= m->layers[il].attn_gate.data != NULL;
            }
        json_object_set_new(o, "mla_layers", mla);
        json_object_set_new(o, "mla_gate", json_boolean(gate));
        json_object_set_new(o, "attn_bytes", json_real(attn));
        json_object_set_new(o, "attn_matmul_bytes", json_real(attn_matmul));
        json_object_set_new(o, "expert_bytes", json_real(expert));
        json_object_set_new(o, "head_ms", json_real(head_ms));
        json_object_set_new(o, "head_bytes", json_real(head_bytes));
        json_object_set_new(o, "decode", points_json(dec, n_b));
        json_object_set_new(o, "prefill", points_json(pre, n_p));
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s ? s : "{}");
        free(s);
        json_decref(o);
    } else {
        printf("model    %s: %d layers (%d MoE), n_embd %d, %d experts (%d used), %d threads,"
               " kernels %s\n",
               model_path ? model_path : "built-in", hp->n_layer, n_moe, hp->n_embd, hp->n_expert,
               hp->n_expert_used, mt_pool_size(pool), quant_kernel_name());
        printf("layer    %.1f MB non-expert part, %.2f MB per expert; each session holds %d"
               " positions\n",
               attn / 1e6, expert / 1e6, ctx);
        printf("decode   batch   ms/layer (fastest, CPU)       MB/layer   experts/layer\n");
        for (int i = 0; i < n_b; i++)
            printf("         %5d   %8.3f (%8.3f, %8.3f)   %8.1f   %13.1f\n", dec[i].batch,
                   dec[i].ms_per_layer, dec[i].ms_min, dec[i].cpu_ms, dec[i].bytes_per_layer / 1e6,
                   dec[i].experts);
        if (n_p) printf("prefill  tokens  ms/layer (fastest, CPU)       MB/layer\n");
        for (int i = 0; i < n_p; i++)
            printf("         %5d   %8.3f (%8.3f, %8.3f)   %8.1f\n", pre[i].batch,
                   pre[i].ms_per_layer, pre[i].ms_min, pre[i].cpu_ms, pre[i].bytes_per_layer / 1e6);
        printf("head     %.3f ms per token (%.1f MB)\n", head_ms, head_bytes / 1e6);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moontail bench: %s\n", err.msg);
done:
    mt_pool_free(pool);
    return rc;
}

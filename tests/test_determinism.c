/* test_determinism.c - invariant 1 of docs/design.md on one machine: logits are
 * bit-identical whatever the thread count, whether tokens are evaluated one
 * at a time, in micro-batches, or all at once, and whether a session's tokens
 * share a batch with other sessions', and whichever kernel set (portable,
 * AVX2, AVX-512) computes them. Checked for every architecture on F32 and on
 * quantized weights; for kimi-k3 and kimi-linear this covers the KDA
 * recurrence (computed token by token whatever the batch) and k3's banked
 * checkpoints. Every KV cache type is covered (f16, the default, for most
 * variants; f32, bf16 and q8_0 with its Hadamard-rotated heads for some). */
#include "check.h"
#include "moontail/quant.h"
#include "moontail/session.h"
#include "moontail/synth_model.h"

typedef struct variant {
    const char *arch;
    mt_type type;
    bool dense;
    bool mla_legacy;
    int32_t res_block; /* kimi-k3: attention-residual block size */
    mt_kv_type kv;     /* the cache type (0: f16, the default) */
} variant;

/* kimi archs default to the real layer and expert counts; a small shape
 * with KDA and MLA layers, a dense layer, (k3) banked checkpoints and a
 * latent MoE keeps the test fast. */
static void kimi_small(mt_synth_params *p, const variant *v) {
    p->n_layer = 5;
    p->mla_layers = "1,4";
    p->n_embd = 64;
    p->n_expert = 16;
    p->n_expert_used = 4;
    p->n_ff = 96;
    p->res_block = v->res_block;
    p->expert_type = (int32_t)v->type;
}

/* Evaluates ids with the given threads/ubatch; returns all logits (malloc). */
static float *eval(const mt_model *m, mt_kv_type kv, const int32_t *ids, int32_t n, int threads,
                   int32_t ubatch) {
    mt_error err = {{0}};
    mt_session *s = mt_session_new(m, n, kv, threads, &err);
    float *logits = malloc((size_t)n * m->hp.n_vocab * sizeof(float));
    CHECK(s && logits, "session: %s", err.msg);
    if (!s || !logits) return NULL;
    int rc = mt_session_eval(s, ids, n, ubatch, true, logits, &err);
    CHECK(rc == 0, "eval: %s", err.msg);
    mt_session_free(s);
    return logits;
}

static void check_variant(const variant *v) {
    mt_synth_params p = mt_synth_default_params(v->arch);
    p.type = v->type;
    p.dense = v->dense;
    p.mla_legacy = v->mla_legacy;
    p.seed = 99;
    if (strncmp(v->arch, "kimi", 4) == 0) kimi_small(&p, v);
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, path, &err) == 0, "%s: mkmodel: %s", v->arch, err.msg);
    mt_model *m = mt_model_load(path, &err);
    unlink(path);
    CHECK(m != NULL, "%s: load: %s", v->arch, err.msg);
    if (!m) return;
    enum { N = 11 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 5) % m->hp.n_vocab);
    const size_t bytes = (size_t)N * m->hp.n_vocab * sizeof(float);
    float *ref = eval(m, v->kv, ids, N, 1, 0);
    static const struct {
        int threads;
        int32_t ubatch;
    } runs[] = {{2, 0}, {3, 0}, {4, 1}, {1, 1}, {2, 4}, {3, 5}};
    for (size_t r = 0; ref && r < sizeof runs / sizeof runs[0]; r++) {
        float *got = eval(m, v->kv, ids, N, runs[r].threads, runs[r].ubatch);
        CHECK(got && memcmp(ref, got, bytes) == 0,
              "%s %s, %s cache: logits differ with %d threads, micro-batch %d", v->arch,
              mt_type_traits_get(v->type)->name, mt_kv_type_name(v->kv), runs[r].threads,
              runs[r].ubatch);
        free(got);
    }
    /* Every kernel set this CPU runs (portable C, AVX2, AVX-512) gives the
     * same logits: what a machine with another CPU computes. */
    static const char *const sets[] = {"reference", "avx2", "avx512"};
    const char *start = quant_kernel_name();
    for (size_t k = 0; ref && k < sizeof sets / sizeof sets[0]; k++) {
        if (quant_kernels_select(sets[k]) != 0) continue;
        float *got = eval(m, v->kv, ids, N, 2, 0);
        CHECK(got && memcmp(ref, got, bytes) == 0,
              "%s %s, %s cache: logits differ with the %s kernels", v->arch,
              mt_type_traits_get(v->type)->name, mt_kv_type_name(v->kv), sets[k]);
        free(got);
    }
    quant_kernels_select(start);
    /* Several sessions in one batch: token rows of sessions A (6 tokens), B (3)
     * and C (2) interleaved in one forward call give each session's logits
     * bit for bit (A alone is `ref`; B and C alone computed here). */
    if (ref) {
        const int32_t V = m->hp.n_vocab, E = m->hp.n_hidden;
        enum { NA = 6, NB = 3, NC = 2, NT = NA + NB + NC };
        int32_t idsB[NB] = {7, 3, 9}, idsC[NC] = {11, 2};
        float *solo_b = eval(m, v->kv, idsB, NB, 1, 0), *solo_c = eval(m, v->kv, idsC, NC, 2, 1);
        mt_kv_cache *ka = mt_kv_cache_new(m, 0, m->hp.n_layer, NA, v->kv, &err),
                    *kb = mt_kv_cache_new(m, 0, m->hp.n_layer, NB, v->kv, &err),
                    *kc = mt_kv_cache_new(m, 0, m->hp.n_layer, NC, v->kv, &err);
        /* interleave: A0 B0 A1 C0 B1 A2 A3 C1 B2 A4 A5 */
        static const char who[NT] = {'a', 'b', 'a', 'c', 'b', 'a', 'a', 'c', 'b', 'a', 'a'};
        int32_t toks[NT], pos[NT], na = 0, nb = 0, nc = 0;
        mt_kv_cache *kvs[NT];
        for (int t = 0; t < NT; t++) {
            if (who[t] == 'a') toks[t] = ids[na], pos[t] = na++, kvs[t] = ka;
            if (who[t] == 'b') toks[t] = idsB[nb], pos[t] = nb++, kvs[t] = kb;
            if (who[t] == 'c') toks[t] = idsC[nc], pos[t] = nc++, kvs[t] = kc;
        }
        float *hidden = malloc((size_t)NT * E * sizeof(float));
        float *logits = malloc((size_t)NT * V * sizeof(float));
        mt_pool *pool = mt_pool_create(3);
        int rc = mt_model_embed(m, toks, NT, hidden, &err);
        if (rc == 0)
            rc =
                mt_model_forward_batch(m, kvs, 0, m->hp.n_layer, pos, NT, hidden, NULL, pool, &err);
        CHECK(rc == 0, "%s: mixed batch: %s", v->arch, err.msg);
        if (rc == 0) mt_model_head(m, hidden, NT, logits, pool);
        bool same = rc == 0 && solo_b && solo_c;
        for (int t = 0; same && t < NT; t++) {
            const float *want = who[t] == 'a'   ? ref + (size_t)pos[t] * V
                                : who[t] == 'b' ? solo_b + (size_t)pos[t] * V
                                                : solo_c + (size_t)pos[t] * V;
            same = memcmp(want, logits + (size_t)t * V, (size_t)V * sizeof(float)) == 0;
        }
        CHECK(same, "%s %s: a session's logits change when batched with other sessions", v->arch,
              mt_type_traits_get(v->type)->name);
        mt_pool_free(pool);
        free(hidden), free(logits), free(solo_b), free(solo_c);
        mt_kv_cache_free(ka), mt_kv_cache_free(kb), mt_kv_cache_free(kc);
    }
    /* The logits must also be finite and not all equal (a dead model would
     * pass the comparisons above trivially). */
    bool finite = true, varied = false;
    for (size_t i = 0; ref && i < bytes / sizeof(float); i++) {
        finite &= isfinite(ref[i]) != 0;
        varied |= ref[i] != ref[0];
    }
    CHECK(finite && varied, "%s: logits are not finite and varied", v->arch);
    free(ref);
    mt_model_free(m);
}

int main(void) {
    static const variant variants[] = {
        {"qwen3moe", MT_TYPE_F32, false, false, 0, MT_KV_F16},
        {"qwen3moe", MT_TYPE_Q4_K, false, false, 0, MT_KV_F16},
        {"qwen2moe", MT_TYPE_F32, false, false, 0, MT_KV_F16},
        {"qwen2moe", MT_TYPE_Q8_0, false, false, 0, MT_KV_F16},
        {"deepseek2", MT_TYPE_F32, false, false, 0, MT_KV_F16},
        {"deepseek2", MT_TYPE_MXFP4, false, false, 0, MT_KV_F16},
        {"llama", MT_TYPE_F32, false, false, 0, MT_KV_F16},
        {"llama", MT_TYPE_Q6_K, true, false, 0, MT_KV_F16},
        {"llama", MT_TYPE_BF16, false, false, 0, MT_KV_F16},
        {"qwen3moe", MT_TYPE_F16, false, false, 0, MT_KV_F16},
        {"qwen3moe", MT_TYPE_Q4_0, false, false, 0, MT_KV_F16},
        {"deepseek2", MT_TYPE_Q8_0, false, true, 0, MT_KV_F16},
        {"kimi-k3", MT_TYPE_F32, false, false, 2, MT_KV_F16},
        {"kimi-k3", MT_TYPE_MXFP4, false, false, 1, MT_KV_F16},
        {"kimi-k3", MT_TYPE_Q8_0, false, false, 3, MT_KV_F16},
        {"kimi-linear", MT_TYPE_F32, false, false, 0, MT_KV_F16},
        {"kimi-linear", MT_TYPE_Q8_0, false, false, 0, MT_KV_F16},
        /* the other cache types; q8_0 rotates GQA heads of 64 (qwen3moe, the older MLA
         * layout's values) */
        {"qwen3moe", MT_TYPE_F32, false, false, 0, MT_KV_F32},
        {"qwen3moe", MT_TYPE_F32, false, false, 0, MT_KV_Q8_0},
        {"qwen2moe", MT_TYPE_Q8_0, false, false, 0, MT_KV_BF16},
        {"deepseek2", MT_TYPE_F32, false, false, 0, MT_KV_Q8_0},
        {"deepseek2", MT_TYPE_Q8_0, false, true, 0, MT_KV_Q8_0},
        {"deepseek2", MT_TYPE_F32, false, true, 0, MT_KV_BF16},
        {"llama", MT_TYPE_F32, false, false, 0, MT_KV_BF16},
        {"kimi-k3", MT_TYPE_F32, false, false, 2, MT_KV_F32},
        {"kimi-linear", MT_TYPE_F32, false, false, 0, MT_KV_BF16},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) check_variant(&variants[i]);
    return check_report("test_determinism");
}

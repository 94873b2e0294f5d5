/* test_determinism.c - invariant 1 of DESIGN.md on one machine: logits are
 * bit-identical whatever the thread count and whether tokens are evaluated
 * one at a time, in micro-batches, or all at once. Checked for every
 * architecture on F32 and on quantized weights. */
#include "check.h"
#include "moontail/session.h"
#include "moontail/synth_model.h"

typedef struct variant {
    const char *arch;
    mt_type type;
    bool dense;
    bool mla_legacy;
} variant;

/* Evaluates ids with the given threads/ubatch; returns all logits (malloc). */
static float *eval(const mt_model *m, const int32_t *ids, int32_t n, int threads, int32_t ubatch) {
    mt_error err = {{0}};
    mt_session *s = mt_session_new(m, n, threads, &err);
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
    float *ref = eval(m, ids, N, 1, 0);
    static const struct {
        int threads;
        int32_t ubatch;
    } runs[] = {{2, 0}, {3, 0}, {4, 1}, {1, 1}, {2, 4}, {3, 5}};
    for (size_t r = 0; ref && r < sizeof runs / sizeof runs[0]; r++) {
        float *got = eval(m, ids, N, runs[r].threads, runs[r].ubatch);
        CHECK(got && memcmp(ref, got, bytes) == 0,
              "%s %s: logits differ with %d threads, micro-batch %d", v->arch,
              mt_type_traits_get(v->type)->name, runs[r].threads, runs[r].ubatch);
        free(got);
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
        {"qwen3moe", MT_TYPE_F32, false, false},  {"qwen3moe", MT_TYPE_Q4_K, false, false},
        {"qwen2moe", MT_TYPE_F32, false, false},  {"qwen2moe", MT_TYPE_Q8_0, false, false},
        {"deepseek2", MT_TYPE_F32, false, false}, {"deepseek2", MT_TYPE_MXFP4, false, false},
        {"llama", MT_TYPE_F32, false, false},     {"llama", MT_TYPE_Q6_K, true, false},
        {"llama", MT_TYPE_BF16, false, false},    {"qwen3moe", MT_TYPE_F16, false, false},
        {"qwen3moe", MT_TYPE_Q4_0, false, false}, {"deepseek2", MT_TYPE_Q8_0, false, true},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) check_variant(&variants[i]);
    return check_report("test_determinism");
}

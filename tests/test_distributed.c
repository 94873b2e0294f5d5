/* test_distributed.c - invariant 1 of DESIGN.md across shards, in one
 * process: a model cut with mt_shard_write and run as
 *   (a) a requester holding the head plus a 4-stage pipeline of layer shards,
 *   (b) swarm mode: a backbone (head + attention) plus 3 expert shards,
 *   (c) a paired layer: a stage holding attention and half the experts,
 *       whose partner holds the other half,
 * gives logits bit-identical to the whole model, for every architecture, on
 * F32 and quantized weights (and a llama-3 style model whose RoPE divisors
 * every stage needs), with the prompt evaluated in one batch and the
 * last token decoded on its own (so KV caches carry over). The network
 * transport only moves these same f32 rows. */
#include "check.h"
#include "moontail/expert_dispatch.h"
#include "moontail/session.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"

enum { N = 9, N_LAYER = 4 };
static const int32_t prompt[N] = {5, 77, 3, 190, 42, 42, 8, 130, 64};

/* Logits of the whole prompt from the whole model. */
static float *reference(const mt_model *m) {
    mt_error err = {{0}};
    mt_session *s = mt_session_new(m, N, 1, &err);
    float *logits = malloc((size_t)N * m->hp.n_vocab * sizeof(float));
    CHECK(s && mt_session_eval(s, prompt, N, 0, true, logits, &err) == 0, "reference: %s", err.msg);
    mt_session_free(s);
    return logits;
}

static mt_model *write_and_load(const gguf_file *model, mt_shard_spec spec, const char *what) {
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    mt_model *m = NULL;
    if (mt_shard_write(model, &spec, path, &err) == 0) m = mt_model_load(path, &err);
    CHECK(m != NULL, "%s shard: %s", what, err.msg);
    unlink(path); /* the mapping stays valid */
    return m;
}

/* One pass over tokens [t0, t1) through `stages` (each a model holding layers
 * [begin[i], end[i]) with its own cache), embedding and head on `head`. */
static int run_pass(const mt_model *head, mt_model **stages, mt_kv_cache **kv, int n_stages,
                    const mt_expert_backend *experts, int32_t t0, int32_t t1, float *logits,
                    mt_pool *pool) {
    const int32_t E = head->hp.n_embd, V = head->hp.n_vocab, n = t1 - t0;
    float *hidden = malloc((size_t)n * E * sizeof(float));
    int32_t pos[N];
    for (int32_t i = 0; i < n; i++) pos[i] = t0 + i;
    mt_error err = {{0}};
    int rc = mt_model_embed(head, prompt + t0, n, hidden, &err);
    for (int i = 0; rc == 0 && i < n_stages; i++)
        rc = mt_model_forward_layers(stages[i], kv[i], stages[i]->layer_begin, stages[i]->layer_end,
                                     pos, n, hidden, experts, pool, &err);
    if (rc == 0) mt_model_head(head, hidden, n, logits + (size_t)t0 * V, pool);
    CHECK(rc == 0, "pass [%d, %d): %s", t0, t1, err.msg);
    free(hidden);
    return rc;
}

/* Prompt minus its last token in one batch, then the last token alone. */
static bool same_as_reference(const float *ref, const mt_model *head, mt_model **stages,
                              int n_stages, const mt_expert_backend *experts, mt_pool *pool) {
    const int32_t V = head->hp.n_vocab;
    mt_kv_cache *kv[N_LAYER];
    mt_error err = {{0}};
    for (int i = 0; i < n_stages; i++)
        kv[i] = mt_kv_cache_new(stages[i], stages[i]->layer_begin, stages[i]->layer_end, N, &err);
    float *logits = calloc((size_t)N * V, sizeof(float));
    bool ok = run_pass(head, stages, kv, n_stages, experts, 0, N - 1, logits, pool) == 0 &&
              run_pass(head, stages, kv, n_stages, experts, N - 1, N, logits, pool) == 0 &&
              memcmp(ref, logits, (size_t)N * V * sizeof(float)) == 0;
    for (int i = 0; i < n_stages; i++) mt_kv_cache_free(kv[i]);
    free(logits);
    return ok;
}

static void check_model(const char *arch, mt_type type, bool dense, bool rope_freqs) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.type = type;
    p.dense = dense;
    p.rope_freqs = rope_freqs;
    p.n_layer = N_LAYER;
    p.seed = 5;
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, path, &err) == 0, "%s: %s", arch, err.msg);
    mt_model *whole = mt_model_load(path, &err);
    CHECK(whole != NULL, "%s: %s", arch, err.msg);
    unlink(path);
    if (!whole) return;
    const char *tn = mt_type_traits_get(type)->name;
    float *ref = reference(whole);
    mt_pool *pool = mt_pool_create(2);
    const gguf_file *g = whole->gguf;

    /* (a) head on the requester + 4 pipeline stages of one layer each */
    mt_model *head = write_and_load(g, (mt_shard_spec){0, 0, false, true, NULL, 0}, "head");
    mt_model *stage[N_LAYER] = {0};
    for (int i = 0; i < N_LAYER; i++)
        stage[i] = write_and_load(g, (mt_shard_spec){i, i + 1, true, false, NULL, -1}, "stage");
    bool ok = head && stage[0] && stage[1] && stage[2] && stage[3];
    /* a llama-3 style model's RoPE divisors go with every stage, not just the head */
    for (int i = 0; ok && rope_freqs && i < N_LAYER; i++)
        CHECK(stage[i]->rope_freqs != NULL, "%s: stage %d has no rope_freqs", arch, i);
    CHECK(ok && same_as_reference(ref, head, stage, N_LAYER, NULL, pool),
          "%s %s: 4-stage pipeline logits differ from the whole model", arch, tn);
    for (int i = 0; i < N_LAYER; i++) mt_model_free(stage[i]);

    if (!dense) {
        const int32_t X = whole->hp.n_expert;
        int32_t ids[256];
        for (int32_t e = 0; e < X; e++) ids[e] = e;

        /* (b) swarm: backbone + 3 expert shards of contiguous id ranges */
        mt_model *backbone =
            write_and_load(g, (mt_shard_spec){0, N_LAYER, true, true, NULL, 0}, "backbone");
        mt_model *xs[3] = {0};
        mt_expert_dispatch d;
        ok = backbone && mt_expert_dispatch_init(&d, &whole->hp, &err) == 0;
        for (int k = 0; k < 3 && ok; k++) {
            int32_t lo = X * k / 3, hi = X * (k + 1) / 3;
            xs[k] = write_and_load(g, (mt_shard_spec){0, N_LAYER, false, false, ids + lo, hi - lo},
                                   "experts");
            ok = xs[k] && mt_expert_dispatch_add_model(&d, xs[k], &err) == 0;
        }
        CHECK(ok, "%s: swarm setup: %s", arch, err.msg);
        mt_expert_backend be = mt_expert_dispatch_backend(&d);
        CHECK(ok && same_as_reference(ref, backbone, &backbone, 1, &be, pool),
              "%s %s: swarm (backbone + 3 expert servers) logits differ", arch, tn);
        /* a backbone alone cannot run the experts: a clear error, not a crash */
        if (backbone) {
            mt_kv_cache *kv = mt_kv_cache_new(backbone, 0, N_LAYER, N, &err);
            float *hidden = calloc((size_t)backbone->hp.n_embd * 2, sizeof(float));
            int32_t pos[2] = {0, 1};
            mt_error e2 = {{0}};
            CHECK(mt_model_forward_layers(backbone, kv, 0, N_LAYER, pos, 2, hidden, NULL, pool,
                                          &e2) != 0 &&
                      strstr(e2.msg, "not held"),
                  "%s: backbone without experts: '%s'", arch, e2.msg);
            free(hidden);
            mt_kv_cache_free(kv);
        }
        mt_expert_dispatch_free(&d);
        for (int k = 0; k < 3; k++) mt_model_free(xs[k]);
        mt_model_free(backbone);

        /* (c) paired layers: attention + experts [0, X/2) here, the rest on a partner */
        mt_model *mine =
            write_and_load(g, (mt_shard_spec){0, N_LAYER, true, true, ids, X / 2}, "paired");
        mt_model *partner = write_and_load(
            g, (mt_shard_spec){0, N_LAYER, false, false, ids + X / 2, X - X / 2}, "partner");
        ok = mine && partner && mt_expert_dispatch_init(&d, &whole->hp, &err) == 0 &&
             mt_expert_dispatch_add_model(&d, mine, &err) == 0 &&
             mt_expert_dispatch_add_model(&d, partner, &err) == 0;
        CHECK(ok, "%s: paired setup: %s", arch, err.msg);
        be = mt_expert_dispatch_backend(&d);
        CHECK(ok && same_as_reference(ref, mine, &mine, 1, &be, pool),
              "%s %s: paired layer logits differ", arch, tn);
        mt_expert_dispatch_free(&d);
        mt_model_free(mine);
        mt_model_free(partner);
    }
    mt_model_free(head);
    mt_pool_free(pool);
    free(ref);
    mt_model_free(whole);
}

int main(void) {
    static const char *archs[] = {"qwen3moe", "qwen2moe", "deepseek2", "llama"};
    for (int a = 0; a < 4; a++) {
        check_model(archs[a], MT_TYPE_F32, false, false);
        check_model(archs[a], MT_TYPE_Q4_K, false, false);
    }
    check_model("llama", MT_TYPE_Q8_0, true, false);
    check_model("llama", MT_TYPE_F32, false, true);
    check_model("llama", MT_TYPE_Q8_0, true, true);
    return check_report("test_distributed");
}

/* test_distributed.c - invariant 1 of docs/design.md across shards, in one
 * process: a model cut with mt_shard_write and run as
 *   (a) a requester holding the head plus a 4-stage pipeline of layer shards,
 *   (b) swarm mode: a backbone (head + attention) plus 3 expert shards, two
 *       of them standing in for remote servers (concurrent holders, which
 *       the dispatcher runs on threads of their own: checked to overlap),
 *   (c) a paired layer: a stage holding attention and half the experts,
 *       whose partner holds the other half,
 * gives logits bit-identical to the whole model, for every architecture, on
 * F32 and quantized weights, on models of mixed tensor types as published
 * quants have them (mkmodel --ftype Q3_K_M, Q2_K, Q5_K_M: K-quants and their
 * fallbacks side by side), and a llama-3 style model whose RoPE divisors
 * every stage needs, with the prompt evaluated in one batch and the
 * last token decoded on its own (so KV caches carry over). The network
 * transport only moves these same f32 rows. Also: the dispatcher reports
 * the first failing holder's error, in holder order. */
#include "check.h"
#include "moontail/expert_dispatch.h"
#include "moontail/session.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

enum { N = 9, N_LAYER = 4 };
static const int32_t prompt[N] = {5, 77, 3, 190, 42, 42, 8, 130, 64};

/* Logits of the whole prompt from the whole model. */
static float *reference(const mt_model *m) {
    mt_error err = {{0}};
    mt_session *s = mt_session_new(m, N, MT_KV_DEFAULT, 1, &err);
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
        kv[i] = mt_kv_cache_new(stages[i], stages[i]->layer_begin, stages[i]->layer_end, N,
                                MT_KV_DEFAULT, &err);
    float *logits = calloc((size_t)N * V, sizeof(float));
    bool ok = run_pass(head, stages, kv, n_stages, experts, 0, N - 1, logits, pool) == 0 &&
              run_pass(head, stages, kv, n_stages, experts, N - 1, N, logits, pool) == 0 &&
              memcmp(ref, logits, (size_t)N * V * sizeof(float)) == 0;
    for (int i = 0; i < n_stages; i++) mt_kv_cache_free(kv[i]);
    free(logits);
    return ok;
}

/* ---- holders that watch each other ------------------------------------------------------- */

/* An expert shard as a holder that records how many holders were inside
 * run() at once. While no overlap has been seen, a holder waits a little
 * (up to 50 ms, 2 s in all) for another to come in, so that a dispatcher
 * running holders at the same time shows it every time, and one running them
 * in turn never does. */
typedef struct probe {
    const mt_model *m;
    bool concurrent;
} probe;

static atomic_int probe_inside, probe_most, probe_wait_ms, probe_off_thread;
static atomic_bool probe_bad_pool; /* a holder on another thread was given a pool */
static pthread_t main_thread;

static void probe_reset(void) {
    atomic_store(&probe_inside, 0);
    atomic_store(&probe_most, 0);
    atomic_store(&probe_wait_ms, 0);
    atomic_store(&probe_off_thread, 0);
}

static int probe_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u, float *y,
                     mt_pool *pool, mt_error *err) {
    const probe *p = ctx;
    int now = atomic_fetch_add(&probe_inside, 1) + 1, most = atomic_load(&probe_most);
    while (now > most && !atomic_compare_exchange_weak(&probe_most, &most, now)) {
    }
    if (!pthread_equal(pthread_self(), main_thread)) {
        atomic_fetch_add(&probe_off_thread, 1);
        if (pool) atomic_store(&probe_bad_pool, true);
    }
    for (int i = 0; i < 50 && atomic_load(&probe_most) < 2 && atomic_load(&probe_wait_ms) < 2000;
         i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        atomic_fetch_add(&probe_wait_ms, 1);
        now = atomic_load(&probe_inside), most = atomic_load(&probe_most);
        while (now > most && !atomic_compare_exchange_weak(&probe_most, &most, now)) {
        }
    }
    int rc = mt_model_run_experts((void *)p->m, il, n, ids, u, y, pool, err);
    atomic_fetch_sub(&probe_inside, 1);
    return rc;
}

/* A holder that always fails, naming itself. */
static int fail_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u, float *y,
                    mt_pool *pool, mt_error *err) {
    (void)il, (void)n, (void)ids, (void)u, (void)y, (void)pool;
    return mt_error_set(err, "holder %s failed", (const char *)ctx);
}

/* Two holders (experts [0, X/2) and the rest) that fail: the first one's
 * error comes back whatever ran where. */
static void check_first_error(const mt_hparams *hp, mt_pool *pool) {
    const int32_t X = hp->n_expert, E = hp->n_embd;
    int32_t lo[256], hi[256], ids[4] = {0, X - 1, X / 2, 1};
    for (int32_t e = 0; e < X / 2; e++) lo[e] = e;
    for (int32_t e = X / 2; e < X; e++) hi[e - X / 2] = e;
    float *u = calloc(4 * (size_t)E, sizeof(float)), *y = calloc(4 * (size_t)E, sizeof(float));
    static const bool kinds[3][2] = {{true, true}, {true, false}, {false, true}};
    for (int k = 0; k < 3; k++) {
        mt_expert_dispatch d;
        mt_error err = {{0}};
        bool ok = mt_expert_dispatch_init(&d, hp, &err) == 0 &&
                  mt_expert_dispatch_add(&d, (mt_expert_backend){fail_run, "A", kinds[k][0]}, lo,
                                         X / 2, &err) == 0 &&
                  mt_expert_dispatch_add(&d, (mt_expert_backend){fail_run, "B", kinds[k][1]}, hi,
                                         X - X / 2, &err) == 0;
        CHECK(ok, "failing holders: setup: %s", err.msg);
        for (int rep = 0; ok && rep < 3; rep++) { /* the threads serve call after call */
            err.msg[0] = 0;
            int rc = mt_expert_dispatch_run(&d, 1, 4, ids, u, y, pool, &err);
            CHECK(rc != 0 && strcmp(err.msg, "holder A failed") == 0,
                  "failing holders (concurrent %d, %d): rc %d, '%s' (wanted holder A's error)",
                  kinds[k][0], kinds[k][1], rc, err.msg);
        }
        mt_expert_dispatch_free(&d);
    }
    free(u), free(y);
}

/* ---- the model, cut every way ---------------------------------------------------------- */

static void check_params(const mt_synth_params *pp) {
    mt_synth_params p = *pp;
    const char *arch = p.arch;
    p.n_layer = N_LAYER;
    p.seed = 5;
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, path, &err) == 0, "%s: %s", arch, err.msg);
    mt_model *whole = mt_model_load(path, &err);
    CHECK(whole != NULL, "%s: %s", arch, err.msg);
    unlink(path);
    if (!whole) return;
    const char *tn = p.ftype ? mt_quant_mix_name(p.ftype) : mt_type_traits_get(p.type)->name;
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
    for (int i = 0; ok && p.rope_freqs && i < N_LAYER; i++)
        CHECK(stage[i]->rope_freqs != NULL, "%s: stage %d has no rope_freqs", arch, i);
    CHECK(ok && same_as_reference(ref, head, stage, N_LAYER, NULL, pool),
          "%s %s: 4-stage pipeline logits differ from the whole model", arch, tn);
    for (int i = 0; i < N_LAYER; i++) mt_model_free(stage[i]);

    if (!p.dense) {
        const int32_t X = whole->hp.n_expert;
        int32_t ids[256];
        for (int32_t e = 0; e < X; e++) ids[e] = e;

        /* (b) swarm: backbone + 3 expert shards of contiguous id ranges; the
         * first runs like a local holder (here, with the pool), the others
         * like remote servers (concurrent: on the dispatcher's threads) */
        mt_model *backbone =
            write_and_load(g, (mt_shard_spec){0, N_LAYER, true, true, NULL, 0}, "backbone");
        mt_model *xs[3] = {0};
        probe probes[3];
        mt_expert_dispatch d;
        ok = backbone && mt_expert_dispatch_init(&d, &whole->hp, &err) == 0;
        for (int k = 0; k < 3 && ok; k++) {
            int32_t lo = X * k / 3, hi = X * (k + 1) / 3;
            xs[k] = write_and_load(g, (mt_shard_spec){0, N_LAYER, false, false, ids + lo, hi - lo},
                                   "experts");
            probes[k] = (probe){xs[k], k > 0};
            mt_expert_backend pb = {probe_run, &probes[k], k > 0};
            ok = xs[k] && mt_expert_dispatch_add(&d, pb, ids + lo, hi - lo, &err) == 0;
        }
        CHECK(ok, "%s: swarm setup: %s", arch, err.msg);
        mt_expert_backend be = mt_expert_dispatch_backend(&d);
        probe_reset();
        CHECK(ok && same_as_reference(ref, backbone, &backbone, 1, &be, pool),
              "%s %s: swarm (backbone + 3 expert servers) logits differ", arch, tn);
        CHECK(atomic_load(&probe_most) >= 2 && atomic_load(&probe_off_thread) > 0,
              "%s %s: swarm: at most %d holders ran at once (%d calls on other threads); the"
              " concurrent ones should overlap",
              arch, tn, atomic_load(&probe_most), atomic_load(&probe_off_thread));
        CHECK(!atomic_load(&probe_bad_pool), "%s %s: a concurrent holder was given the pool", arch,
              tn);
        /* a backbone alone cannot run the experts: a clear error, not a crash */
        if (backbone) {
            mt_kv_cache *kv = mt_kv_cache_new(backbone, 0, N_LAYER, N, MT_KV_DEFAULT, &err);
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
        check_first_error(&whole->hp, pool);
    }
    mt_model_free(head);
    mt_pool_free(pool);
    free(ref);
    mt_model_free(whole);
}

static void check_model(const char *arch, mt_type type, bool dense, bool rope_freqs) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.type = type;
    p.dense = dense;
    p.rope_freqs = rope_freqs;
    check_params(&p);
}

/* A model whose tensors take llama.cpp's types under a quantization mix: the
 * K-quants where rows are whole super-blocks, fallbacks (Q4_0, Q5_0, IQ4_NL,
 * Q8_0) where not, F32 norms and routers, so shards hold mixed types. */
static void check_mix(const char *arch, const char *mix) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.ftype = mt_quant_mix_from_name(mix);
    CHECK(p.ftype != MT_QUANT_MIX_NONE, "mix %s unknown", mix);
    check_params(&p);
}

int main(void) {
    main_thread = pthread_self();
    static const char *archs[] = {"qwen3moe", "qwen2moe", "deepseek2", "llama"};
    for (int a = 0; a < 4; a++) {
        check_model(archs[a], MT_TYPE_F32, false, false);
        check_model(archs[a], MT_TYPE_Q4_K, false, false);
    }
    check_model("llama", MT_TYPE_Q8_0, true, false);
    check_model("llama", MT_TYPE_F32, false, true);
    check_model("llama", MT_TYPE_Q8_0, true, true);
    check_mix("qwen3moe", "Q3_K_M");
    check_mix("deepseek2", "Q2_K");
    check_mix("deepseek2", "Q5_K_M");
    return check_report("test_distributed");
}

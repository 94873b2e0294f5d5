/* test_speculative.c - exact speculative decoding (generate.h, draft.h) on a
 * model computed here: for synthetic qwen3moe (attention) and kimi-k3 (KDA
 * and MLA layers, so rejected guesses need the KDA state restored) models,
 * greedy and seeds 1-3 (one with a repeat penalty, whose history the sampler
 * keeps), 1, 4 and 8 guesses a pass, guesses from the n-gram drafter, from an
 * adversarial drafter (always wrong: every pass rewinds), from an oracle (the
 * plain run's own tokens: every guess is taken) and from a draft model (the
 * same model, a second copy) give token for token the text of plain decoding,
 * which is the expected value: the same loop without a drafter. Also with a
 * stop string, an end token and max_tokens falling inside a pass. The counts
 * say the drafters were used as meant (the oracle's guesses all taken, the
 * adversary's none, fewer passes than tokens). The n-gram drafter's guesses
 * on histories worked out by hand, and draft models of another vocabulary
 * refused by name. */
#include "check.h"
#include "moontail/draft.h"
#include "moontail/generate.h"
#include "moontail/synth_model.h"

enum { N_GEN = 40, MAX_TOK = 256 };

/* ---- what a generation gave ---------------------------------------------------------------- */

typedef struct got {
    int32_t ids[MAX_TOK];
    int n;
    char text[4096];
    size_t len;
} got;

static int got_token(void *ctx, int32_t id) {
    got *g = ctx;
    if (g->n < MAX_TOK) g->ids[g->n++] = id;
    return 0;
}

static int got_text(void *ctx, const char *s, size_t n) {
    got *g = ctx;
    if (g->len + n < sizeof g->text) memcpy(g->text + g->len, s, n), g->len += n;
    return 0;
}

/* ---- drafters for the test ----------------------------------------------------------------- */

/* The tokens of a plain run, after n_prompt prompt tokens. */
typedef struct oracle {
    const got *plain;
    int32_t n_prompt, n_vocab;
    bool wrong; /* adversary: each guess is the right token + 1 */
} oracle;

static int32_t oracle_draft(void *ctx, const int32_t *hist, int32_t n_hist, int32_t k, int32_t *out,
                            mt_error *err) {
    (void)hist, (void)err;
    const oracle *o = ctx;
    int32_t m = 0;
    for (int32_t i = n_hist - o->n_prompt; m < k && i < o->plain->n; i++, m++)
        out[m] = o->wrong ? (o->plain->ids[i] + 1) % o->n_vocab : o->plain->ids[i];
    return m;
}

/* ---- the runs ------------------------------------------------------------------------------- */

typedef struct setup {
    const char *arch, *path;
    mt_gen_backend *b;
    void *slot;
    mt_vocab *vocab;
    int32_t prompt[64];
    int32_t n_prompt;
} setup;

static void run(setup *su, const mt_sampler_params *sp, const mt_gen_drafter *d, int32_t max,
                const char *stop, got *g, mt_gen_result *r) {
    memset(g, 0, sizeof *g);
    const char *stops[1] = {stop};
    const mt_gen_params p = {.prompt = su->prompt,
                             .n_prompt = su->n_prompt,
                             .max_tokens = max,
                             .sp = *sp,
                             .stop = stops,
                             .n_stop = stop ? 1 : 0,
                             .end_token = -1,
                             .draft = d};
    const mt_gen_sink sink = {.text = got_text, .token = got_token, .ctx = g};
    mt_generate(su->b, su->slot, su->vocab, &p, &sink, r);
    CHECK(r->finish != MT_GEN_FAILED, "%s: generation failed: %s", su->arch, r->err.msg);
    if (r->begun) su->b->end(su->slot, r->evaluated);
}

static bool same(const got *a, const got *b) {
    return a->n == b->n && memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) == 0 &&
           a->len == b->len && memcmp(a->text, b->text, a->len) == 0;
}

/* Every drafter and k against plain decoding with sampling sp (name: for messages). */
static void check_sampling(setup *su, const mt_sampler_params *sp, const char *name) {
    got plain, g;
    mt_gen_result r0, r;
    run(su, sp, NULL, N_GEN, NULL, &plain, &r0);
    CHECK(plain.n > 4, "%s %s: the plain run gave only %d tokens", su->arch, name, plain.n);
    CHECK(r0.passes == plain.n - 1 && r0.drafted == 0, "%s %s: plain run: %lld passes for %d",
          su->arch, name, (long long)r0.passes, plain.n);
    static const int32_t ks[] = {1, 4, 8};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int32_t k = ks[ki];
        oracle orc = {&plain, su->n_prompt, su->b->n_vocab, false};
        oracle adv = {&plain, su->n_prompt, su->b->n_vocab, true};
        mt_error err = {{0}};
        mt_gen_drafter *ng = mt_draft_ngram_new(k, &err);
        mt_gen_drafter o = {.draft = oracle_draft, .ctx = &orc, .k = k};
        mt_gen_drafter a = {.draft = oracle_draft, .ctx = &adv, .k = k};
        mt_gen_drafter *dm = mt_draft_model_new(mt_model_load(su->path, &err), su->path, su->vocab,
                                                k, 512, 2, MT_KV_F16, &err);
        CHECK(ng && dm, "%s: drafters: %s", su->arch, err.msg);
        const struct {
            const char *name;
            const mt_gen_drafter *d;
        } ds[] = {{"n-gram", ng}, {"oracle", &o}, {"adversary", &a}, {"draft model", dm}};
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
            if (!ds[di].d) continue;
            run(su, sp, ds[di].d, N_GEN, NULL, &g, &r);
            CHECK(same(&plain, &g), "%s %s, %s guesses, k %d: %d tokens differ from plain decoding",
                  su->arch, name, ds[di].name, k, g.n);
            CHECK(r.accepted <= r.drafted && r.passes + r.accepted == g.n - 1,
                  "%s %s, %s, k %d: %lld passes + %lld accepted for %d tokens", su->arch, name,
                  ds[di].name, k, (long long)r.passes, (long long)r.accepted, g.n);
            /* the oracle's guesses are all taken but one that an end token came before */
            if (ds[di].d == &o)
                CHECK(r.drafted - r.accepted <= (r.finish == MT_GEN_END_TOKEN) &&
                          r.drafted >= (g.n - 1) * k / (k + 1) - 1,
                      "%s %s, oracle k %d: %lld of %lld guesses taken", su->arch, name, k,
                      (long long)r.accepted, (long long)r.drafted);
            if (ds[di].d == &a)
                CHECK(r.accepted == 0 && r.drafted > 0, "%s %s, adversary k %d: %lld of %lld",
                      su->arch, name, k, (long long)r.accepted, (long long)r.drafted);
            if (ds[di].d == dm && sp->temp <= 0)
                CHECK(r.drafted - r.accepted <= (r.finish == MT_GEN_END_TOKEN) && r.drafted > 0,
                      "%s greedy, the model as its own draft k %d: %lld of %lld guesses taken",
                      su->arch, k, (long long)r.accepted, (long long)r.drafted);
        }
        mt_gen_drafter_free(ng);
        mt_gen_drafter_free(dm);
    }
}

/* A stop string and max_tokens falling inside a pass: the oracle guesses past them. */
static void check_edges(setup *su) {
    mt_sampler_params sp = mt_sampler_default_params();
    sp.seed = 2;
    got plain, g;
    mt_gen_result r0, r;
    oracle orc = {&plain, su->n_prompt, su->b->n_vocab, false};
    mt_gen_drafter o = {.draft = oracle_draft, .ctx = &orc, .k = 8};
    for (int32_t max = 1; max <= 11; max += 5) {
        run(su, &sp, NULL, max, NULL, &plain, &r0);
        run(su, &sp, &o, max, NULL, &g, &r);
        CHECK(same(&plain, &g) && g.n == max && r.finish == MT_GEN_LENGTH,
              "%s: max_tokens %d inside a pass: %d tokens", su->arch, max, g.n);
    }
    run(su, &sp, NULL, N_GEN, NULL, &plain, &r0);
    if (plain.len < 8) return;
    char stop[3] = {plain.text[plain.len / 2], plain.text[plain.len / 2 + 1], 0};
    got ps;
    run(su, &sp, NULL, N_GEN, stop, &ps, &r0);
    run(su, &sp, &o, N_GEN, stop, &g, &r);
    CHECK(r0.finish == MT_GEN_STOP_STRING && r.finish == MT_GEN_STOP_STRING && same(&ps, &g),
          "%s: stop string '%s' inside a pass: %d tokens, %zu bytes vs %d, %zu", su->arch, stop,
          g.n, g.len, ps.n, ps.len);
}

static void check_arch(const char *arch) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.seed = 7;
    if (strcmp(arch, "kimi-k3") == 0) { /* a small shape with KDA layers 0, 2, 3 */
        p.n_layer = 5;
        p.mla_layers = "1,4";
        p.n_expert = 16;
        p.n_expert_used = 4;
        p.res_block = 2;
    } else {
        p.n_layer = 2;
    }
    setup su = {.arch = arch, .path = check_tmp(".gguf")};
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, su.path, &err) == 0, "%s: mkmodel: %s", arch, err.msg);
    su.b = mt_gen_backend_local(mt_model_load(su.path, &err), su.path, 2, MT_KV_F16, &err);
    CHECK(su.b != NULL, "%s: backend: %s", arch, err.msg);
    if (!su.b) goto out;
    su.vocab = mt_vocab_load(su.b->model->gguf, &err);
    su.slot = su.vocab ? su.b->slot_open(su.b, 0, &err) : NULL;
    CHECK(su.slot != NULL, "%s: slot: %s", arch, err.msg);
    if (!su.slot) goto out;
    /* a prompt that repeats itself, so that n-grams find something */
    static const char text[] = "the cat sat on the mat; the cat sat on the";
    su.n_prompt = (int32_t)strlen(text);
    for (int32_t i = 0; i < su.n_prompt; i++) su.prompt[i] = (unsigned char)text[i];
    mt_sampler_params sp = mt_sampler_default_params();
    sp.temp = 0;
    check_sampling(&su, &sp, "greedy");
    for (uint64_t seed = 1; seed <= 3; seed++) {
        sp = mt_sampler_default_params();
        sp.seed = seed;
        if (seed == 3) sp.repeat_penalty = 1.3f;
        char name[32];
        snprintf(name, sizeof name, "seed %llu", (unsigned long long)seed);
        check_sampling(&su, &sp, name);
    }
    check_edges(&su);
out:
    if (su.slot) su.b->slot_close(su.b, su.slot);
    mt_vocab_free(su.vocab);
    if (su.b) su.b->destroy(su.b);
    unlink(su.path);
}

/* The n-gram drafter on histories worked out by hand: the latest earlier occurrence of the
 * longest suffix (3, then 2, then 1 tokens) and what followed it, up to k and the history's
 * end. */
static void check_ngram(void) {
    mt_error err = {{0}};
    mt_gen_drafter *d = mt_draft_ngram_new(3, &err);
    CHECK(d != NULL, "n-gram drafter: %s", err.msg);
    if (!d) return;
    static const struct {
        int32_t hist[12], n, k, want[4], n_want;
    } cases[] = {
        {{1, 2, 3, 9, 1, 2, 3}, 7, 3, {9, 1, 2}, 3}, /* "1 2 3" seen at 0: then 9 1 2 */
        {{1, 2, 3, 9, 1, 2, 3}, 7, 2, {9, 1}, 2},    /* cut at k */
        {{5, 2, 3, 7, 8, 2, 3}, 7, 3, {7, 8, 2}, 3}, /* "2 3" (no "3 2 3" before) */
        {{4, 6, 4, 8, 6, 5, 4}, 7, 3, {8, 6, 5}, 3}, /* "4": the latest earlier one, at 2 */
        {{1, 2, 1, 2, 1, 2}, 6, 3, {1, 2}, 2},       /* "1 2 1 2" ends at the history's end */
        {{1, 2, 3, 4}, 4, 3, {0}, 0},                /* nothing repeats */
        {{7}, 1, 3, {0}, 0},                         /* too short */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t out[4] = {-1, -1, -1, -1};
        int32_t n = d->draft(d->ctx, cases[c].hist, cases[c].n, cases[c].k, out, &err);
        CHECK(n == cases[c].n_want && memcmp(out, cases[c].want, (size_t)n * sizeof *out) == 0,
              "n-gram case %zu: %d guesses (%d %d %d), want %d", c, n, out[0], out[1], out[2],
              cases[c].n_want);
    }
    mt_gen_drafter_free(d);
    CHECK(!mt_draft_ngram_new(0, &err) && strstr(err.msg, "--draft-k") &&
              !mt_draft_ngram_new(MT_GEN_MAX_DRAFT + 1, &err),
          "k out of range: %s", err.msg);
}

/* A draft model must have the model's vocabulary token for token. */
static void check_vocab_refused(void) {
    static const char *const x[] = {"<x>"}, *const y[] = {"<y>"};
    static const bool user[] = {false}; /* user-defined, not control */
    const char *paths[3];
    mt_error err = {{0}};
    for (int i = 0; i < 3; i++) {
        mt_synth_params p = mt_synth_default_params("qwen3moe");
        p.n_layer = 1;
        p.added_tokens = i == 0 ? x : y;
        p.added_control = user;
        p.n_added = i < 2 ? 1 : 0;
        paths[i] = check_tmp(".gguf");
        CHECK(mt_synth_write(&p, paths[i], &err) == 0, "mkmodel %d: %s", i, err.msg);
    }
    mt_model *target = mt_model_load(paths[0], &err);
    mt_vocab *v = target ? mt_vocab_load(target->gguf, &err) : NULL;
    CHECK(v != NULL, "target vocabulary: %s", err.msg);
    if (v) {
        mt_gen_drafter *d = mt_draft_model_new(mt_model_load(paths[1], &err), "y.gguf", v, 4, 64, 1,
                                               MT_KV_F16, &err);
        CHECK(!d && strstr(err.msg, "y.gguf: token 259 is not the model's"),
              "a draft model with another token 259: %s", err.msg);
        d = mt_draft_model_new(mt_model_load(paths[2], &err), "none.gguf", v, 4, 64, 1, MT_KV_F16,
                               &err);
        CHECK(!d && strstr(err.msg, "none.gguf has 259 tokens but the model has 260"),
              "a draft model with fewer tokens: %s", err.msg);
        d = mt_draft_model_new(mt_model_load(paths[0], &err), "x.gguf", v, 4, 64, 1, MT_KV_F16,
                               &err);
        CHECK(d != NULL, "a draft model with the same vocabulary: %s", err.msg);
        mt_gen_drafter_free(d);
    }
    mt_vocab_free(v);
    mt_model_free(target);
    for (int i = 0; i < 3; i++) unlink(paths[i]);
}

int main(void) {
    check_ngram();
    check_vocab_refused();
    check_arch("qwen3moe");
    check_arch("kimi-k3");
    return check_report("test_speculative");
}

/* test_sampler.c - tests of src/model/sampler.c on small hand-made logit
 * vectors whose outcomes follow from the definitions in sampler.h:
 * greedy and its tie rule, top-k, top-p, min-p, the repetition / frequency /
 * presence penalties and their window, seeded determinism, and the
 * frequencies of temperature sampling (bounded number of draws, fixed seed,
 * 5-sigma tolerance, so the test is deterministic). */
#include "moontail/sampler.h"

#include "check.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Params with every filter off and temperature 1: a plain softmax draw. */
static mt_sampler_params plain(uint64_t seed) {
    mt_sampler_params p = mt_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

/* Draws n tokens from logits and counts them in cnt[0..nv). */
static void draw(const mt_sampler_params *p, const float *logits, int32_t nv, int n, int *cnt) {
    mt_sampler *s = mt_sampler_new(p, nv);
    CHECK(s != NULL, "mt_sampler_new");
    if (!s) return;
    for (int i = 0; i < nv; i++) cnt[i] = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = mt_sampler_sample(s, logits);
        if (id >= 0 && id < nv)
            cnt[id]++;
        else
            CHECK(false, "sampled id %d out of range", id);
    }
    mt_sampler_free(s);
}

/* |observed frequency - p| within 5 standard deviations of a binomial. */
static void check_freq(const char *what, int count, int n, double p) {
    double f = (double)count / n, sd = sqrt(p * (1 - p) / n);
    CHECK(fabs(f - p) <= 5 * sd + 1e-12, "%s: frequency %.4f, expected %.4f (5 sd = %.4f)", what, f,
          p, 5 * sd);
}

static void test_defaults(void) {
    mt_sampler_params p = mt_sampler_default_params();
    CHECK(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f &&
              p.repeat_penalty == 1.0f && p.repeat_last_n == 64 && p.freq_penalty == 0.0f &&
              p.presence_penalty == 0.0f && p.seed == 0xFFFFFFFFu,
          "default parameters");
    CHECK(mt_sampler_new(&p, 0) == NULL, "n_vocab 0 is refused");
    p.temp = NAN;
    CHECK(mt_sampler_new(&p, 4) == NULL, "NaN temperature is refused");
    mt_sampler *s = mt_sampler_new(NULL, 4); /* defaults, random seed */
    float z[4] = {0, 10, 0, 0};
    CHECK(s && mt_sampler_sample(s, z) == 1, "NULL params = defaults; min-p keeps only the peak");
    mt_sampler_free(s);
}

static void test_greedy(void) {
    mt_sampler_params p = plain(1);
    p.temp = 0.0f;
    mt_sampler *s = mt_sampler_new(&p, 4);
    float z[4] = {1, 3, 3, 2};
    CHECK(mt_sampler_sample(s, z) == 1, "greedy takes the lowest id among equal maxima");
    float z2[4] = {-5, -1, -3, -1};
    CHECK(mt_sampler_sample(s, z2) == 1, "greedy with negative logits");
    float z3[4] = {NAN, -INFINITY, 2, NAN};
    CHECK(mt_sampler_sample(s, z3) == 2, "NaN counts as -inf");
    float z4[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(mt_sampler_sample(s, z4) == 0, "all -inf: id 0");
    mt_sampler_free(s);
    p.temp = -1.0f;
    s = mt_sampler_new(&p, 4);
    CHECK(mt_sampler_sample(s, z) == 1, "negative temperature is greedy too");
    mt_sampler_free(s);

    /* Sampling (temp > 0) with no probability anywhere but one token. */
    p = plain(3);
    s = mt_sampler_new(&p, 4);
    float z5[4] = {NAN, -INFINITY, 0.5f, NAN};
    int ok = 1;
    for (int i = 0; i < 50; i++) ok &= mt_sampler_sample(s, z5) == 2;
    CHECK(ok, "only the finite logit can be drawn");
    float z6[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(mt_sampler_sample(s, z6) == 0, "all -inf with temp > 0: id 0");
    mt_sampler_free(s);
}

/* top-k = 1 keeps only the argmax, whatever the temperature and seed. */
static void test_top_k(void) {
    uint64_t x = 42;
    int mismatches = 0;
    for (int t = 0; t < 100; t++) {
        float z[50];
        int best = 0;
        for (int i = 0; i < 50; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            z[i] = (float)((x >> 40) % 1000) / 100.0f;
            if (z[i] > z[best]) best = i;
        }
        mt_sampler_params p = mt_sampler_default_params();
        p.top_k = 1;
        p.temp = 1.5f;
        p.seed = (uint64_t)t;
        mt_sampler *s = mt_sampler_new(&p, 50);
        if (mt_sampler_sample(s, z) != best) mismatches++;
        mt_sampler_free(s);
    }
    CHECK(mismatches == 0, "top-k 1 differed from greedy %d times", mismatches);

    /* top-k 2 of {0.1, 5, 4.9, 3}: only ids 1 and 2, in proportion e^5 : e^4.9. */
    mt_sampler_params p = plain(7);
    p.top_k = 2;
    float z[4] = {0.1f, 5.0f, 4.9f, 3.0f};
    int cnt[4];
    draw(&p, z, 4, 4000, cnt);
    CHECK(cnt[0] == 0 && cnt[3] == 0 && cnt[1] > 0 && cnt[2] > 0, "top-k 2 kept {%d %d %d %d}",
          cnt[0], cnt[1], cnt[2], cnt[3]);
    check_freq("top-k 2, id 1", cnt[1], 4000, 1.0 / (1.0 + exp(-0.1)));
}

/* Probabilities 0.5, 0.3, 0.15, 0.05 as logits ln p. */
static void probs_logits(float *z) {
    z[0] = logf(0.5f);
    z[1] = logf(0.3f);
    z[2] = logf(0.15f);
    z[3] = logf(0.05f);
}

static void test_top_p_min_p(void) {
    float z[4];
    probs_logits(z);
    int cnt[4];

    /* top-p 0.75: 0.5 < 0.75 <= 0.8, so {0, 1} with weights 0.5 : 0.3. */
    mt_sampler_params p = plain(11);
    p.top_p = 0.75f;
    draw(&p, z, 4, 4000, cnt);
    CHECK(cnt[2] == 0 && cnt[3] == 0 && cnt[0] > 0 && cnt[1] > 0, "top-p 0.75 kept {%d %d %d %d}",
          cnt[0], cnt[1], cnt[2], cnt[3]);
    check_freq("top-p 0.75, id 0", cnt[0], 4000, 0.5 / 0.8);

    /* top-p 0.45: the first token alone reaches it. */
    p.top_p = 0.45f;
    draw(&p, z, 4, 500, cnt);
    CHECK(cnt[0] == 500, "top-p 0.45 keeps only id 0 (%d)", cnt[0]);

    /* top-p 0.9: 0.8 < 0.9 <= 0.95, so {0, 1, 2}. */
    p.top_p = 0.9f;
    draw(&p, z, 4, 4000, cnt);
    CHECK(cnt[3] == 0 && cnt[2] > 0, "top-p 0.9 kept {%d %d %d %d}", cnt[0], cnt[1], cnt[2],
          cnt[3]);

    /* min-p 0.2: keep p >= 0.2 * 0.5 = 0.1, i.e. {0, 1, 2}. */
    p = plain(12);
    p.min_p = 0.2f;
    draw(&p, z, 4, 4000, cnt);
    CHECK(cnt[3] == 0 && cnt[2] > 0, "min-p 0.2 kept {%d %d %d %d}", cnt[0], cnt[1], cnt[2],
          cnt[3]);
    check_freq("min-p 0.2, id 2", cnt[2], 4000, 0.15 / 0.95);

    /* min-p 0.7: only p >= 0.35, i.e. id 0. */
    p.min_p = 0.7f;
    draw(&p, z, 4, 500, cnt);
    CHECK(cnt[0] == 500, "min-p 0.7 keeps only id 0 (%d)", cnt[0]);

    /* Temperature comes last: with temp 10 the survivors of top-p 0.75 are
     * flattened, but id 2 and 3 stay out. */
    p = plain(13);
    p.top_p = 0.75f;
    p.temp = 10.0f;
    draw(&p, z, 4, 4000, cnt);
    CHECK(cnt[2] == 0 && cnt[3] == 0, "top-p before temperature");
    double w0 = pow(0.5, 0.1), w1 = pow(0.3, 0.1);
    check_freq("temp 10 after top-p, id 0", cnt[0], 4000, w0 / (w0 + w1));
}

static void test_penalties(void) {
    mt_sampler_params p = plain(5);
    p.temp = 0.0f;

    /* repeat penalty divides positive logits ... */
    p.repeat_penalty = 2.0f;
    mt_sampler *s = mt_sampler_new(&p, 3);
    float z[3] = {2.0f, 1.9f, -1.0f};
    CHECK(mt_sampler_sample(s, z) == 0, "no history: argmax");
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, z) == 1, "2.0 / 2 = 1.0 < 1.9");
    mt_sampler_reset(s);
    CHECK(mt_sampler_sample(s, z) == 0, "reset forgets the history");
    mt_sampler_accept(s, 99);
    mt_sampler_accept(s, -1);
    CHECK(mt_sampler_sample(s, z) == 0, "out-of-range accepts are ignored");
    mt_sampler_free(s);

    /* ... and multiplies negative ones. */
    s = mt_sampler_new(&p, 3);
    float zn[3] = {-1.0f, -1.5f, -9.0f};
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, zn) == 1, "-1 * 2 = -2 < -1.5");
    mt_sampler_free(s);

    /* frequency penalty scales with the count, presence does not. */
    p.repeat_penalty = 1.0f;
    p.freq_penalty = 0.3f;
    s = mt_sampler_new(&p, 2);
    float zf[2] = {1.0f, 0.5f};
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, zf) == 0, "1 - 0.3 = 0.7 > 0.5");
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, zf) == 1, "1 - 0.6 = 0.4 < 0.5");
    mt_sampler_free(s);

    p.freq_penalty = 0.0f;
    p.presence_penalty = 0.3f;
    s = mt_sampler_new(&p, 2);
    for (int i = 0; i < 5; i++) mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, zf) == 0, "presence: 1 - 0.3 = 0.7 > 0.5 however often seen");
    mt_sampler_free(s);
    p.presence_penalty = 0.6f;
    s = mt_sampler_new(&p, 2);
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, zf) == 1, "presence: 1 - 0.6 = 0.4 < 0.5");
    mt_sampler_free(s);

    /* The window: with repeat_last_n 2, a token three steps back is forgotten. */
    p.presence_penalty = 0.0f;
    p.repeat_penalty = 4.0f;
    p.repeat_last_n = 2;
    s = mt_sampler_new(&p, 8);
    float zw[8] = {3.0f, 2.0f, 0, 0, 0, 0, 0, 0};
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, zw) == 1, "0 in the window: 3/4 < 2");
    mt_sampler_accept(s, 5);
    CHECK(mt_sampler_sample(s, zw) == 1, "0 still in the window");
    mt_sampler_accept(s, 6);
    CHECK(mt_sampler_sample(s, zw) == 0, "0 left the window");
    mt_sampler_free(s);

    /* repeat_last_n 0 turns penalties off; -1 remembers everything. */
    p.repeat_last_n = 0;
    s = mt_sampler_new(&p, 8);
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, zw) == 0, "repeat_last_n 0: off");
    mt_sampler_free(s);
    p.repeat_last_n = -1;
    s = mt_sampler_new(&p, 8);
    mt_sampler_accept(s, 0);
    for (int i = 0; i < 1000; i++) mt_sampler_accept(s, 5);
    CHECK(mt_sampler_sample(s, zw) == 1, "repeat_last_n -1: whole history");
    mt_sampler_free(s);

    /* Penalties apply before greedy and before sampling filters: with top-k 1
     * the penalized token is no longer the one kept. */
    p = mt_sampler_default_params();
    p.seed = 9;
    p.top_k = 1;
    p.repeat_penalty = 2.0f;
    s = mt_sampler_new(&p, 3);
    mt_sampler_accept(s, 0);
    CHECK(mt_sampler_sample(s, z) == 1, "penalties before top-k");
    mt_sampler_free(s);
}

static void test_determinism(void) {
    float z[16];
    for (int i = 0; i < 16; i++) z[i] = (float)(i % 5) * 0.37f - (float)(i % 3);
    mt_sampler_params p = mt_sampler_default_params();
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temp = 1.3f;
    p.seed = 1234;
    mt_sampler *a = mt_sampler_new(&p, 16), *b = mt_sampler_new(&p, 16);
    p.seed = 1235;
    mt_sampler *c = mt_sampler_new(&p, 16);
    int same_ab = 1, diff_ac = 0;
    int32_t first[200];
    for (int i = 0; i < 200; i++) {
        int32_t x = mt_sampler_sample(a, z), y = mt_sampler_sample(b, z),
                w = mt_sampler_sample(c, z);
        first[i] = x;
        same_ab &= x == y;
        diff_ac |= x != w;
    }
    CHECK(same_ab, "same seed, same logits -> same tokens");
    CHECK(diff_ac, "a different seed gives a different stream");
    mt_sampler_free(a);
    mt_sampler_free(b);
    mt_sampler_free(c);
    /* A fresh sampler with the same seed repeats the stream from the start. */
    p.seed = 1234;
    a = mt_sampler_new(&p, 16);
    int same = 1;
    for (int i = 0; i < 200; i++) same &= mt_sampler_sample(a, z) == first[i];
    CHECK(same, "the stream depends only on the seed");
    mt_sampler_free(a);
}

/* Temperature: draws from {0, ln 2, ln 4} follow softmax(z / T). */
static void test_temperature_stats(void) {
    float z[3] = {0.0f, logf(2.0f), logf(4.0f)};
    const float temps[3] = {1.0f, 2.0f, 0.5f};
    const int n = 20000;
    for (int t = 0; t < 3; t++) {
        mt_sampler_params p = plain(100 + (uint64_t)t);
        p.temp = temps[t];
        int cnt[3];
        draw(&p, z, 3, n, cnt);
        double w[3], sum = 0;
        for (int i = 0; i < 3; i++) sum += (w[i] = pow(2.0, i / (double)temps[t]));
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "T=%.1f id %d", (double)temps[t], i);
            check_freq(what, cnt[i], n, w[i] / sum);
        }
    }
}

int main(void) {
    test_defaults();
    test_greedy();
    test_top_k();
    test_top_p_min_p();
    test_penalties();
    test_determinism();
    test_temperature_stats();
    return check_report("test_sampler");
}

/* sampler.c - picks the next token from a logit vector (see sampler.h).
 *
 * The chain is llama.cpp's default order, minus the stages MoonTail does not
 * offer (DRY, top-n-sigma, typical, XTC):
 *
 *   penalties -> top-k -> top-p -> min-p -> temperature -> draw
 *
 * so top-p and min-p see untempered probabilities. Definitions
 * (docs/engine-reference.md "Sampling", llama-sampling.cpp):
 *   penalties  for each id seen c > 0 times in the last repeat_last_n
 *              accepted tokens: z /= r if z > 0 else z *= r; then
 *              z -= c * freq_penalty + presence_penalty. Off when
 *              repeat_last_n == 0 or all three are neutral; a negative
 *              repeat_last_n counts every accepted token.
 *   top-k      keep the k largest (k <= 0: off).
 *   top-p      softmax over the survivors, keep the shortest prefix (by
 *              descending probability) whose sum is >= p (p >= 1: off).
 *   min-p      keep z_i >= z_max + ln(min_p) (min_p <= 0: off).
 *   temp       z /= temp; temp <= 0 means greedy: the argmax after the
 *              penalties, lowest id on ties.
 *   draw       softmax, then one uniform double in [0, 1) walked along the
 *              cumulative weights.
 * Candidates are ordered by (logit desc, id asc), so ties are broken by id
 * everywhere and the result depends only on the logits, the history and
 * the PRNG state.
 *
 * PRNG: xoshiro256** (Blackman & Vigna), its 256-bit state filled from the
 * seed with splitmix64. Same seed + same logits + same accepted tokens =
 * same draws, on every platform (exp and ln are mathf.h's, not libm's).
 * Seed 0xFFFFFFFF asks for a random seed from the system (libsodium). NaN
 * logits count as -infinity. */
#include "moontail/sampler.h"
#include "moontail/mathf.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <time.h>

#define MT_SEED_RANDOM 0xFFFFFFFFull

/* ---------------------------------------------------------------- PRNG */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: next 64 random bits. */
static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static double uniform01(uint64_t s[4]) {
    return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53;
}

/* ---------------------------------------------------------------- state */

typedef struct cand {
    float z;
    int32_t id;
} cand;

struct mt_sampler {
    mt_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];
    bool penalties_on;
    int32_t *count; /* (n_vocab) occurrences in the window */
    int32_t *ring;  /* last repeat_last_n accepted ids (when > 0) */
    int32_t ring_len, ring_head;
    cand *c; /* (n_vocab) scratch */
};

mt_sampler_params mt_sampler_default_params(void) {
    mt_sampler_params p = {
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .freq_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .seed = MT_SEED_RANDOM,
    };
    return p;
}

/* libsodium's system randomness: getrandom(2) on Linux, RtlGenRandom on Windows */
static uint64_t random_seed(void) {
    uint64_t s;
    randombytes_buf(&s, sizeof s);
    return s;
}

mt_sampler *mt_sampler_new(const mt_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0) return NULL;
    mt_sampler_params prm = p ? *p : mt_sampler_default_params();
    if (isnan(prm.temp) || isnan(prm.top_p) || isnan(prm.min_p) || isnan(prm.repeat_penalty) ||
        isnan(prm.freq_penalty) || isnan(prm.presence_penalty))
        return NULL;
    mt_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = prm;
    s->n_vocab = n_vocab;
    s->penalties_on =
        prm.repeat_last_n != 0 &&
        (prm.repeat_penalty != 1.0f || prm.freq_penalty != 0.0f || prm.presence_penalty != 0.0f);
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (prm.repeat_last_n > 0) s->ring = malloc((size_t)prm.repeat_last_n * sizeof *s->ring);
    if (!s->c || !s->count || (prm.repeat_last_n > 0 && !s->ring)) {
        mt_sampler_free(s);
        return NULL;
    }
    uint64_t x = prm.seed == MT_SEED_RANDOM ? random_seed() : prm.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

void mt_sampler_free(mt_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->count);
    free(s->ring);
    free(s);
}

void mt_sampler_reset(mt_sampler *s) {
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->ring_len = s->ring_head = 0;
}

void mt_sampler_accept(mt_sampler *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab) return;
    int32_t n = s->p.repeat_last_n;
    if (n < 0) {
        if (s->count[id] < INT32_MAX) s->count[id]++;
        return;
    }
    if (n == 0) return;
    if (s->ring_len == n) { /* evict the oldest */
        s->count[s->ring[s->ring_head]]--;
        s->ring[s->ring_head] = id;
        s->ring_head = (s->ring_head + 1) % n;
    } else {
        s->ring[(s->ring_head + s->ring_len) % n] = id;
        s->ring_len++;
    }
    s->count[id]++;
}

/* ---------------------------------------------------------------- stages */

/* a ranks before b: larger logit, then smaller id. */
static bool better(const cand *a, const cand *b) {
    return a->z > b->z || (a->z == b->z && a->id < b->id);
}

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

static void apply_penalties(const mt_sampler *s, cand *c) {
    for (int32_t i = 0; i < s->n_vocab; i++) {
        int32_t k = s->count[i];
        if (k <= 0) continue;
        float z = c[i].z;
        z = z <= 0 ? z * s->p.repeat_penalty : z / s->p.repeat_penalty;
        c[i].z = z - (float)k * s->p.freq_penalty - s->p.presence_penalty;
    }
}

/* Restores the heap c[0..k) below j; the root is the worst kept candidate. */
static void sift_down(cand *c, int32_t k, int32_t j) {
    for (;;) {
        int32_t w = j, l = 2 * j + 1, r = l + 1;
        if (l < k && better(&c[w], &c[l])) w = l;
        if (r < k && better(&c[w], &c[r])) w = r;
        if (w == j) return;
        cand t = c[j];
        c[j] = c[w];
        c[w] = t;
        j = w;
    }
}

/* Moves the k best of c[0..n) to c[0..k), sorted best first. O(n log k). */
static void top_k_select(cand *c, int32_t n, int32_t k) {
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    for (int32_t i = k; i < n; i++) {
        if (!better(&c[i], &c[0])) continue;
        c[0] = c[i];
        sift_down(c, k, 0);
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

/* Keeps the shortest prefix of the sorted c[0..n) with probability >= p. */
static int32_t top_p_cut(const cand *c, int32_t n, float p) {
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += mt_math_exp((double)c[i].z - (double)c[0].z);
    float cum = 0; /* float, like llama.cpp's cumulative sum */
    for (int32_t i = 0; i < n; i++) {
        cum += (float)(mt_math_exp((double)c[i].z - (double)c[0].z) / sum);
        if (cum >= p) return i + 1;
    }
    return n;
}

/* ---------------------------------------------------------------- sample */

int32_t mt_sampler_sample(mt_sampler *s, const float *logits) {
    int32_t n = s->n_vocab;
    cand *c = s->c;
    for (int32_t i = 0; i < n; i++) {
        c[i].id = i;
        c[i].z = isnan(logits[i]) ? -INFINITY : logits[i];
    }
    if (s->penalties_on) apply_penalties(s, c);

    if (s->p.temp <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].z > c[best].z) best = i;
        return best;
    }

    if (s->p.top_k > 0 && s->p.top_k < n) {
        top_k_select(c, n, s->p.top_k);
        n = s->p.top_k;
    } else {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
    }
    if (c[0].z == -INFINITY) return c[0].id; /* nothing has any probability */

    if (s->p.top_p < 1.0f) n = top_p_cut(c, n, s->p.top_p);
    if (s->p.min_p > 0.0f) {
        float thr = c[0].z + mt_math_logf(s->p.min_p);
        int32_t k = 1;
        while (k < n && c[k].z >= thr) k++;
        n = k;
    }

    /* Temperature, softmax and draw, in double for the cumulative walk. */
    double zmax = (double)(c[0].z / s->p.temp), sum = 0;
    for (int32_t i = 0; i < n; i++) sum += mt_math_exp((double)(c[i].z / s->p.temp) - zmax);
    double r = uniform01(s->rng) * sum, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += mt_math_exp((double)(c[i].z / s->p.temp) - zmax);
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}

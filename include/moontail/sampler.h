/* sampler.h - picks the next token from a logit vector.
 *
 * The chain follows llama.cpp's default order: repetition penalties, top-k,
 * top-p, min-p, then temperature, then a draw from a seeded PRNG. temp <= 0
 * is greedy (argmax, lowest id on ties). Same seed + same logits = same
 * tokens. */
#ifndef MOONTAIL_SAMPLER_H
#define MOONTAIL_SAMPLER_H

#include <stdint.h>

typedef struct mt_sampler_params {
    float temp;             /* default 0.8; <= 0 greedy */
    int32_t top_k;          /* default 40; <= 0 off */
    float top_p;            /* default 0.95; >= 1 off */
    float min_p;            /* default 0.05; <= 0 off */
    float repeat_penalty;   /* default 1.0 (off) */
    int32_t repeat_last_n;  /* default 64; 0 off; < 0 whole history */
    float freq_penalty;     /* default 0 */
    float presence_penalty; /* default 0 */
    uint64_t seed;          /* default 0xFFFFFFFF = random */
} mt_sampler_params;

typedef struct mt_sampler mt_sampler;

mt_sampler_params mt_sampler_default_params(void);
/* p == NULL means the defaults. Returns NULL when n_vocab <= 0, a float
 * parameter is NaN, or memory runs out. PRNG: xoshiro256** seeded through
 * splitmix64 (see sampler.c). A sampler is not thread-safe; use one per
 * request. */
mt_sampler *mt_sampler_new(const mt_sampler_params *p, int32_t n_vocab);
void mt_sampler_free(mt_sampler *s);

/* Forgets the recorded tokens (for a new, unrelated context); the PRNG state
 * is kept. */
void mt_sampler_reset(mt_sampler *s);

/* Records a token that is now part of the context (prompt or generated), for
 * the repetition penalties. */
void mt_sampler_accept(mt_sampler *s, int32_t id);

/* Samples from logits (n_vocab floats; not modified; NaN counts as -inf).
 * O(n_vocab) with top-k on, O(n_vocab log n_vocab) with top-k off. */
int32_t mt_sampler_sample(mt_sampler *s, const float *logits);

#endif

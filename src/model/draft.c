/* draft.c - the drafters of draft.h: n-gram lookup in the history, and a small
 * draft model of the same vocabulary. Guesses never change the text, only how
 * many tokens one pass of the real model settles (generate.c). */
#include "moontail/draft.h"
#include "moontail/session.h"

#include <stdlib.h>
#include <string.h>

void mt_gen_drafter_free(mt_gen_drafter *d) {
    if (!d) return;
    if (d->free) d->free(d->ctx);
    free(d);
}

static mt_gen_drafter *drafter_new(int32_t k, mt_error *err) {
    if (k < 1 || k > MT_GEN_MAX_DRAFT) {
        mt_error_set(err, "%d guesses a pass is not in [1, %d]; give --draft-k in that range", k,
                     MT_GEN_MAX_DRAFT);
        return NULL;
    }
    mt_gen_drafter *d = calloc(1, sizeof *d);
    if (!d) mt_error_set(err, "out of memory for a drafter");
    if (d) d->k = k;
    return d;
}

/* ---------------------------------------------- n-gram */

/* For n = MT_DRAFT_NGRAM down to 1: the latest earlier place where the history's last n
 * tokens occur; the guesses are what followed it (up to the end of the history). */
static int32_t ngram_draft(void *ctx, const int32_t *hist, int32_t n_hist, int32_t k, int32_t *out,
                           mt_error *err) {
    (void)ctx, (void)err;
    for (int32_t n = MT_DRAFT_NGRAM; n >= 1; n--) {
        if (n_hist < n + 1) continue;
        const int32_t *suffix = hist + n_hist - n;
        for (int32_t j = n_hist - n - 1; j >= 0; j--) { /* hist[j, j + n) vs the suffix */
            if (memcmp(hist + j, suffix, (size_t)n * sizeof *hist) != 0) continue;
            int32_t m = 0;
            while (m < k && j + n + m < n_hist) {
                out[m] = hist[j + n + m];
                m++;
            }
            return m;
        }
    }
    return 0;
}

mt_gen_drafter *mt_draft_ngram_new(int32_t k, mt_error *err) {
    mt_gen_drafter *d = drafter_new(k, err);
    if (d) d->draft = ngram_draft;
    return d;
}

/* ---------------------------------------------- draft model */

typedef struct draft_model {
    mt_model *model;
    mt_session *s; /* s->n_past tokens of `seen` are in its cache */
    int32_t *seen; /* (n_ctx) the tokens evaluated, in order */
    int32_t n_ctx;
    float *logits; /* (n_vocab) */
} draft_model;

static void draft_model_free(void *ctx) {
    draft_model *dm = ctx;
    if (!dm) return;
    mt_session_free(dm->s);
    mt_model_free(dm->model);
    free(dm->seen);
    free(dm->logits);
    free(dm);
}

/* The most likely token (the lowest id of equal ones): the draft model guesses greedily. */
static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Evaluates the tokens of hist the cache does not hold (at least the last one, whose
 * logits give the first guess), then each guess but the last. Snapshots cover the tokens
 * from the history's last on, which is where the next call goes back to: every later
 * history begins with this one. */
static int32_t model_draft(void *ctx, const int32_t *hist, int32_t n_hist, int32_t k, int32_t *out,
                           mt_error *err) {
    draft_model *dm = ctx;
    mt_session *s = dm->s;
    if (n_hist + k > dm->n_ctx) k = dm->n_ctx - n_hist;
    if (k <= 0) return 0;
    int32_t c = 0; /* tokens of hist the cache holds */
    while (c < s->n_past && c < n_hist && dm->seen[c] == hist[c]) c++;
    if (c == n_hist) c--;                    /* the last token's logits are needed */
    if (mt_kv_rewind(s->kv, c, NULL)) c = 0; /* beyond the snapshots: start over */
    if (c == 0 && mt_kv_rewind(s->kv, 0, err)) return -1;
    s->n_past = c;
    if (mt_kv_snap_begin(s->kv, n_hist - 1, k, err)) return -1;
    const int32_t V = dm->model->hp.n_vocab;
    if (mt_session_eval(s, hist + c, n_hist - c, MT_GEN_UBATCH_DEFAULT, false, dm->logits, err))
        return -1;
    memcpy(dm->seen + c, hist + c, (size_t)(n_hist - c) * sizeof *hist);
    for (int32_t i = 0; i < k; i++) {
        out[i] = argmax(dm->logits, V);
        if (i + 1 == k) break;
        if (mt_session_eval(s, &out[i], 1, 0, false, dm->logits, err)) return -1;
        dm->seen[n_hist + i] = out[i];
    }
    return k;
}

/* Whether the two vocabularies are the same token for token. */
static int same_vocab(const mt_vocab *a, const mt_vocab *b, const char *name, mt_error *err) {
    const int32_t n = mt_vocab_n_tokens(a);
    if (n != mt_vocab_n_tokens(b))
        return mt_error_set(err,
                            "%s has %d tokens but the model has %d; a draft model needs the"
                            " same vocabulary",
                            name, mt_vocab_n_tokens(b), n);
    for (int32_t id = 0; id < n; id++) {
        size_t la, lb;
        const char *ta = mt_vocab_token_text(a, id, &la), *tb = mt_vocab_token_text(b, id, &lb);
        if (la != lb || (la && memcmp(ta, tb, la) != 0))
            return mt_error_set(err,
                                "%s: token %d is not the model's; a draft model needs the same"
                                " vocabulary",
                                name, id);
    }
    return 0;
}

mt_gen_drafter *mt_draft_model_new(mt_model *draft, const char *name, const mt_vocab *target,
                                   int32_t k, int32_t n_ctx, int threads, mt_kv_type kv_type,
                                   mt_error *err) {
    if (!draft) return NULL;
    name = name ? name : "the draft model";
    mt_gen_drafter *d = drafter_new(k, err);
    draft_model *dm = d ? calloc(1, sizeof *dm) : NULL;
    if (!dm) {
        if (d) mt_error_set(err, "out of memory for a drafter");
        mt_model_free(draft);
        free(d);
        return NULL;
    }
    dm->model = draft;
    d->ctx = dm;
    d->free = draft_model_free;
    d->draft = model_draft;
    const mt_model *m = draft;
    mt_vocab *v = NULL;
    if (!m->has_head || !m->has_attention || m->layer_begin != 0 || m->layer_end != m->hp.n_layer ||
        (m->hp.n_expert > 0 && m->n_local_experts != m->hp.n_expert)) {
        mt_error_set(err, "%s is a shard, not a whole model; a draft model runs here whole", name);
        goto fail;
    }
    if (!(v = mt_vocab_load(m->gguf, err))) {
        mt_error_prefix(err, "%s", name);
        goto fail;
    }
    if (same_vocab(target, v, name, err)) goto fail;
    if (m->hp.n_vocab != mt_vocab_n_tokens(target)) {
        mt_error_set(err, "%s gives %d logits a token, not one per token of its vocabulary (%d)",
                     name, m->hp.n_vocab, mt_vocab_n_tokens(target));
        goto fail;
    }
    dm->n_ctx = n_ctx;
    dm->seen = malloc((size_t)(n_ctx > 0 ? n_ctx : 1) * sizeof *dm->seen);
    dm->logits = malloc((size_t)m->hp.n_vocab * sizeof *dm->logits);
    if (!dm->seen || !dm->logits) {
        mt_error_set(err, "out of memory for a drafter");
        goto fail;
    }
    if (!(dm->s = mt_session_new(m, n_ctx, kv_type, threads, err))) {
        mt_error_prefix(err, "%s", name);
        goto fail;
    }
    mt_vocab_free(v);
    return d;
fail:
    mt_vocab_free(v);
    mt_gen_drafter_free(d);
    return NULL;
}

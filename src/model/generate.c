/* generate.c - the generation loop (generate.h): evaluate the prompt, then
 * sample, detokenize, split a thinking reply, hold back what may become a
 * stop string, hand out what is final, and evaluate the token for the next
 * step, until an end token, a stop string, max_tokens or a cancel. With a
 * drafter the token goes in one pass with guesses of the ones after it, and
 * the following steps sample from that pass's rows while the guesses hold
 * (exact speculative decoding: the sampling is plain decoding's, call for
 * call). */
#include "moontail/generate.h"
#include "moontail/clock.h"
#include "moontail/text_buf.h"
#include "text_match_internal.h"

#include <stdlib.h>
#include <string.h>

const char *mt_gen_finish_name(mt_gen_finish f) {
    switch (f) {
    case MT_GEN_LENGTH:
        return "length";
    case MT_GEN_END_TOKEN:
        return "end";
    case MT_GEN_STOP_STRING:
        return "stop";
    case MT_GEN_CANCELLED:
        return "cancelled";
    case MT_GEN_FAILED:
        return "failed";
    }
    return "?";
}

/* ---- output ----------------------------------------------------------------------------- */

/* What one generation hands out, and where. */
typedef struct gen_out {
    const mt_gen_params *p;
    const mt_gen_sink *sink;
    mt_detok dt;
    mt_reasoning_split split;
    /* the answer (the whole reply when it is not split) not yet handed out: what may still
     * become a stop string, and the new token's text; what goes out is dropped */
    mt_text_buf text;
    int cancel; /* a sink callback's nonzero return */
    bool oom;
} gen_out;

/* Results of the steps below. */
enum { OUT_OK = 0, OUT_CANCEL = 1, OUT_OOM = 2 };

/* Looks for a stop string in the text not yet handed out (text handed out never holds the
 * start of one). Returns where the first one starts, or -1; then *safe receives how far text
 * may go out: up to the longest tail that begins some stop string, which the next token may
 * complete. */
static long find_stop(const gen_out *o, size_t *safe) {
    const mt_gen_params *p = o->p;
    *safe = o->text.len;
    if (o->text.len == 0) return -1; /* text.p may be NULL */
    const long at = mt_text_match_first(o->text.p, o->text.len, p->stop, p->n_stop, NULL);
    if (at >= 0) return at;
    *safe -= mt_text_match_tail(o->text.p, o->text.len, p->stop, p->n_stop);
    return -1;
}

/* Hands the text's first `upto` bytes to the sink; the text keeps the rest. */
static int send_text(gen_out *o, size_t upto) {
    if (upto == 0) return OUT_OK;
    int c = o->sink->text ? o->sink->text(o->sink->ctx, o->text.p, upto) : 0;
    mt_text_buf_drop(&o->text, upto);
    if (!c) return OUT_OK;
    o->cancel = c;
    return OUT_CANCEL;
}

/* Where the splitter's pieces go: the reasoning to the sink, the answer into the text. */
static int split_out(void *ctx, bool reasoning, const char *s, size_t n) {
    gen_out *o = ctx;
    if (reasoning) {
        int c = o->sink->reasoning ? o->sink->reasoning(o->sink->ctx, s, n) : 0;
        if (c) o->cancel = c;
        return c ? -1 : 0;
    }
    if (mt_text_buf_add(&o->text, s, n)) return 0;
    o->oom = true;
    return -1;
}

static bool split_on(const gen_out *o) {
    return o->p->reasoning && o->p->reasoning->on;
}

/* Adds n bytes of generated text (through the splitter when the reply is split). */
static int add_text(gen_out *o, const char *s, int64_t n) {
    if (n <= 0) return OUT_OK;
    if (!split_on(o)) return mt_text_buf_add(&o->text, s, (size_t)n) ? OUT_OK : OUT_OOM;
    int rc = mt_reasoning_split_push(&o->split, s, (size_t)n, split_out, o);
    return rc == 0 ? OUT_OK : rc == -1 && !o->oom ? OUT_CANCEL : OUT_OOM;
}

/* A generated token into the text. A marker's control token goes to the splitter as its
 * code, after the bytes the detokenizer held (a character cut by a control token cannot
 * complete). */
static int add_token(gen_out *o, int32_t id) {
    char piece[1024];
    const int code = split_on(o) ? mt_reasoning_code(o->p->reasoning, id) : 0;
    int64_t nb = code ? mt_detok_flush(&o->dt, piece, sizeof piece)
                      : mt_detok_push(&o->dt, id, piece, sizeof piece);
    int rc = add_text(o, piece, nb);
    if (!rc && code) {
        const char c[2] = {'\xff', (char)code};
        rc = add_text(o, c, 2);
    }
    return rc;
}

/* The output is over: what the detokenizer and the splitter held back goes in, then out,
 * up to a stop string it may complete. Returns OUT_* and whether a stop string was found. */
static int finish_text(gen_out *o, bool *stopped) {
    char piece[1024];
    int64_t nb = mt_detok_flush(&o->dt, piece, sizeof piece);
    int rc = add_text(o, piece, nb);
    if (!rc && split_on(o)) {
        int s = mt_reasoning_split_finish(&o->split, split_out, o);
        rc = s == 0 ? OUT_OK : s == -1 && !o->oom ? OUT_CANCEL : OUT_OOM;
    }
    if (rc) return rc;
    size_t safe;
    long at = find_stop(o, &safe);
    *stopped = at >= 0;
    return send_text(o, at >= 0 ? (size_t)at : o->text.len);
}

/* ---- the loop --------------------------------------------------------------------------- */

static int failed(mt_gen_result *r, mt_gen_failure why) {
    r->finish = MT_GEN_FAILED;
    r->failure = why;
    return -1;
}

/* A step's OUT_* result into *r: true when the generation is over. */
static bool out_ends(const gen_out *o, int rc, mt_gen_result *r) {
    if (rc == OUT_CANCEL) {
        r->finish = MT_GEN_CANCELLED;
        r->cancel = o->cancel;
    } else if (rc == OUT_OOM) {
        mt_error_set(&r->err, "out of memory for the generated text");
        failed(r, MT_GEN_FAIL_MEMORY);
    }
    return rc != OUT_OK;
}

/* Evaluates the prompt, ubatch tokens at a time. */
static int eval_prompt(const mt_gen_backend *b, void *slot, const mt_gen_params *p, float *logits,
                       mt_gen_result *r) {
    const int32_t ub = p->ubatch > 0 ? p->ubatch : MT_GEN_UBATCH_DEFAULT;
    for (int32_t off = 0; off < p->n_prompt; off += ub) {
        const int32_t n = p->n_prompt - off < ub ? p->n_prompt - off : ub;
        if (b->eval(slot, p->prompt + off, n, logits, &r->err)) return -1;
        r->evaluated += n;
    }
    return 0;
}

/* Speculative decoding's state between steps (generate.h): the last pass evaluated in[0]
 * (the token sampled then) and in[1..n_guess] (the drafter's guesses) at positions p0..;
 * the logits being sampled from are row `at` of rows. */
typedef struct spec_state {
    const mt_gen_drafter *d;
    int32_t *hist; /* the prompt and every token sampled so far */
    int32_t n_hist;
    float *rows; /* (1 + d->k, n_vocab) the last pass's logits */
    int32_t in[1 + MT_GEN_MAX_DRAFT], n_guess, at;
    int32_t seq; /* tokens in the slot's sequence */
} spec_state;

/* After token id was sampled from the current row: moves on to the next row of the pass
 * when id was the next guess, else rewinds past the guesses that were wrong and evaluates
 * [id, new guesses] (at most `room` guesses). Returns the row to sample from next, or NULL
 * with r->err. */
static const float *spec_step(const mt_gen_backend *b, void *slot, spec_state *st, int32_t id,
                              int32_t room, mt_gen_result *r) {
    st->hist[st->n_hist++] = id;
    const size_t V = (size_t)b->n_vocab;
    if (st->at < st->n_guess && id == st->in[st->at + 1]) {
        r->accepted++;
        return st->rows + (size_t)++st->at * V;
    }
    if (st->at < st->n_guess) { /* rows after `at` followed a wrong guess */
        st->seq -= st->n_guess - st->at;
        if (b->rewind(slot, st->seq, &r->err)) return NULL;
    }
    int32_t k = st->d->k < room ? st->d->k : room, n = 0;
    if (k > 0 && (n = st->d->draft(st->d->ctx, st->hist, st->n_hist, k, st->in + 1, &r->err)) < 0)
        return NULL;
    if (n > k) n = k; /* a drafter's excess is ignored */
    for (int32_t i = 1; i <= n; i++)
        if (st->in[i] < 0 || st->in[i] >= b->n_vocab) {
            mt_error_set(&r->err, "the drafter guessed token %d, outside the vocabulary [0, %d)",
                         st->in[i], b->n_vocab);
            return NULL;
        }
    st->in[0] = id;
    st->n_guess = n;
    st->at = 0;
    if ((n ? b->eval_all : b->eval)(slot, st->in, 1 + n, st->rows, &r->err)) return NULL;
    st->seq += 1 + n;
    r->evaluated += 1 + n;
    r->passes++;
    r->drafted += n;
    return st->rows;
}

int mt_generate(const mt_gen_backend *b, void *slot, const mt_vocab *vocab, const mt_gen_params *p,
                const mt_gen_sink *sink, mt_gen_result *r) {
    memset(r, 0, sizeof *r);
    r->finish = MT_GEN_LENGTH;
    r->prompt_tokens = p->n_prompt;
    if (p->n_prompt <= 0) {
        mt_error_set(&r->err, "nothing to evaluate: the prompt has no tokens");
        return failed(r, MT_GEN_FAIL_PROMPT);
    }
    if (b->n_vocab <= 0) {
        mt_error_set(&r->err, "the model gives no logits (%d per token)", b->n_vocab);
        return failed(r, MT_GEN_FAIL_BEGIN);
    }
    const int32_t max_tokens = p->max_tokens > 0 ? p->max_tokens : 0;
    gen_out o = {.p = p, .sink = sink};
    spec_state st = {
        .d = p->draft && p->draft->draft && p->draft->k >= 1 && b->eval_all && b->rewind ? p->draft
                                                                                         : NULL};
    const int32_t k_max = st.d ? (st.d->k < MT_GEN_MAX_DRAFT ? st.d->k : MT_GEN_MAX_DRAFT) : 0;
    float *logits = malloc((size_t)(1 + k_max) * (size_t)b->n_vocab * sizeof *logits);
    mt_sampler *smp = mt_sampler_new(&p->sp, b->n_vocab);
    if (st.d) {
        st.rows = logits;
        st.seq = p->n_prompt;
        st.hist = malloc(((size_t)p->n_prompt + (size_t)max_tokens) * sizeof *st.hist);
        if (st.hist) memcpy(st.hist, p->prompt, (size_t)p->n_prompt * sizeof *st.hist);
        st.n_hist = p->n_prompt;
    }
    if (!logits || !smp || (st.d && !st.hist)) {
        mt_error_set(&r->err, "out of memory for a request");
        failed(r, MT_GEN_FAIL_MEMORY);
        goto done;
    }
    const int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx : p->n_prompt + max_tokens;
    const double t0 = mt_mono_ms_frac();
    if (b->begin(slot, n_ctx, &r->err)) {
        failed(r, MT_GEN_FAIL_BEGIN);
        goto done;
    }
    r->begun = true;
    const double t1 = mt_mono_ms_frac();
    r->begin_ms = t1 - t0;
    for (int32_t i = 0; i < p->n_prompt; i++) mt_sampler_accept(smp, p->prompt[i]);
    if (eval_prompt(b, slot, p, logits, r)) {
        failed(r, MT_GEN_FAIL_PROMPT);
        goto done;
    }
    const double t2 = mt_mono_ms_frac();
    r->prompt_ms = t2 - t1;
    mt_detok_init(&o.dt, vocab, false);
    if (split_on(&o)) mt_reasoning_split_init(&o.split, p->reasoning);
    const float *row = logits; /* what the next token is sampled from */
    while (r->completion_tokens < max_tokens) {
        int32_t id = mt_sampler_sample(smp, row);
        r->completion_tokens++;
        mt_sampler_accept(smp, id);
        int c = sink->token ? sink->token(sink->ctx, id) : 0;
        if (c) {
            r->finish = MT_GEN_CANCELLED;
            r->cancel = c;
            goto timed;
        }
        if ((!p->ignore_eog && mt_vocab_is_eog(vocab, id)) || id == p->end_token) {
            r->finish = MT_GEN_END_TOKEN;
            break;
        }
        if (out_ends(&o, add_token(&o, id), r)) goto timed;
        size_t safe;
        long at = find_stop(&o, &safe);
        if (at >= 0) {
            r->finish = MT_GEN_STOP_STRING;
            out_ends(&o, send_text(&o, (size_t)at), r);
            goto timed;
        }
        if (out_ends(&o, send_text(&o, safe), r)) goto timed;
        if (r->completion_tokens == max_tokens) break;
        if (st.d) {
            /* guesses fit the tokens still to come and the context */
            int32_t room = max_tokens - r->completion_tokens - 1;
            if (room > n_ctx - st.seq - 1) room = n_ctx - st.seq - 1;
            if (room > k_max) room = k_max;
            if (!(row = spec_step(b, slot, &st, id, room, r))) {
                failed(r, MT_GEN_FAIL_STEP);
                goto timed;
            }
            continue;
        }
        if (b->eval(slot, &id, 1, logits, &r->err)) {
            failed(r, MT_GEN_FAIL_STEP);
            goto timed;
        }
        r->evaluated++;
        r->passes++;
    }
    bool stopped = false; /* a stop string in what was held back */
    const int rc = finish_text(&o, &stopped);
    if (stopped) r->finish = MT_GEN_STOP_STRING;
    out_ends(&o, rc, r);
timed:
    r->gen_ms = mt_mono_ms_frac() - t2;
done:
    if (split_on(&o)) mt_reasoning_split_free(&o.split);
    mt_text_buf_free(&o.text);
    free(logits);
    free(st.hist);
    mt_sampler_free(smp);
    return r->finish == MT_GEN_FAILED ? -1 : 0;
}

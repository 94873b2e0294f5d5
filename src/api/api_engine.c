/* api_engine.c - runs the API's generation requests (api_engine.h): a
 * bounded queue, one worker thread per slot, and the token loop that every
 * backend shares: evaluate the prompt, sample, stop at an end token, a stop
 * string or max_tokens, and hand out text that is final.
 *
 * Stop strings: text that might still become a stop string is held back
 * until the next token decides; a stop string found cuts the text before it
 * and ends the request, so clients never see any part of it.
 *
 * A thinking model's reply goes through a splitter (mt_reasoning.h) first:
 * its reasoning goes to the sink as it comes, its answer into the text that
 * stop strings are looked for in. Stop strings end the answer only, as the
 * hosted DeepSeek and Kimi APIs and vLLM do: a stop string that the
 * reasoning happens to hold does not cut the reply before it has begun. */
#include "api_engine.h"
#include "moontail/tokenizer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
    api_gen_params p;
    api_gen_sink sink;
} job;

struct api_engine {
    api_backend *b;
    const mt_vocab *vocab; /* the backend model's tokenizer (borrowed) */
    int n_slots, cap;      /* workers; requests that may wait while every worker is busy */
    pthread_t *threads;
    void **slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *queue; /* ring of n_slots + cap jobs not yet taken by a worker */
    int head, n_queued, n_running;
    bool stopping;
};

void api_gen_params_free(api_gen_params *p) {
    free(p->prompt);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

/* ---- the token loop ------------------------------------------------------------------------ */

/* Generated text and how much of it was handed out. */
typedef struct textbuf {
    char *p;
    size_t len, cap, sent;
} textbuf;

static bool text_add(textbuf *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = 2 * (t->len + n + 1) + 256;
        char *p = realloc(t->p, cap);
        if (!p) return false;
        t->p = p, t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = 0;
    return true;
}

/* Looks for a stop string in the text not yet sent (sent text never holds
 * the start of one: see below). Returns where the first one starts, or -1;
 * then *safe receives how far text may be sent: up to the longest tail that
 * is the beginning of some stop string, which the next token may complete. */
static long find_stop(const api_gen_params *p, const textbuf *t, size_t *safe) {
    *safe = t->len;
    if (t->len == t->sent) return -1; /* nothing new (t->p may still be NULL) */
    long best = -1;
    for (int i = 0; i < p->n_stop; i++) {
        const char *hit = memmem(t->p + t->sent, t->len - t->sent, p->stop[i], strlen(p->stop[i]));
        if (hit && (best < 0 || hit - t->p < best)) best = hit - t->p;
    }
    if (best >= 0) return best;
    size_t keep = 0; /* bytes at the end that could begin a stop string */
    for (int i = 0; i < p->n_stop; i++) {
        size_t sl = strlen(p->stop[i]);
        if (sl == 0) continue;
        for (size_t k = sl - 1; k > keep; k--) {
            if (k <= t->len - t->sent && memcmp(t->p + t->len - k, p->stop[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    *safe = t->len - keep;
    return -1;
}

/* Hands text [sent, upto) to the sink; false when the client cancelled. */
static bool send_text(const api_gen_sink *sink, textbuf *t, size_t upto) {
    if (upto <= t->sent) return true;
    int rc = sink->text(sink->ctx, t->p + t->sent, upto - t->sent);
    t->sent = upto;
    return rc == 0;
}

/* Where the splitter's pieces go: the reasoning to the sink, the answer into the text. */
typedef struct split_ctx {
    const api_gen_sink *sink;
    textbuf *t;
    bool oom;
} split_ctx;

static int split_out(void *ctx, bool reasoning, const char *s, size_t n) {
    split_ctx *c = ctx;
    if (reasoning) return c->sink->reasoning ? c->sink->reasoning(c->sink->ctx, s, n) : 0;
    if (text_add(c->t, s, n)) return 0;
    c->oom = true;
    return -1;
}

/* Adds n bytes of generated text (through the splitter when the reply is split). Returns
 * 0, -1 when the client went away, -2 when out of memory. */
static int add_text(const api_gen_params *p, mt_reasoning_split *sp, split_ctx *sc, const char *s,
                    int64_t n) {
    if (n <= 0) return 0;
    if (!p->reasoning.on) return text_add(sc->t, s, (size_t)n) ? 0 : -2;
    const int rc = mt_reasoning_split_push(sp, s, (size_t)n, split_out, sc);
    return rc == -1 && sc->oom ? -2 : rc;
}

/* A generated token into the text. A marker's control token goes to the splitter as its
 * code, after the bytes the detokenizer held (a character cut by a control token cannot
 * complete). */
static int add_token(const api_gen_params *p, mt_detok *dt, mt_reasoning_split *sp, split_ctx *sc,
                     int32_t id) {
    char piece[1024];
    const int code = p->reasoning.on ? mt_reasoning_code(&p->reasoning, id) : 0;
    int64_t nb =
        code ? mt_detok_flush(dt, piece, sizeof piece) : mt_detok_push(dt, id, piece, sizeof piece);
    int rc = add_text(p, sp, sc, piece, nb);
    if (!rc && code) {
        const char c[2] = {'\xff', (char)code};
        rc = add_text(p, sp, sc, c, 2);
    }
    return rc;
}

static void fail(api_gen_result *r, int status, const char *fmt, const char *detail) {
    r->error_status = status;
    snprintf(r->error, sizeof r->error, fmt, detail);
}

/* Runs one request to its end: the text goes to the sink, the outcome to
 * *out. Returns the tokens the backend evaluated, or -1 when the sequence
 * did not begin (then there is nothing for the backend's end()). */
static int64_t run_job(api_engine *e, void *slot, job *j, api_gen_result *out) {
    const api_gen_params *p = &j->p;
    const api_backend *b = e->b;
    const int32_t n_vocab = b->n_vocab;
    api_gen_result r = {.finish_reason = "length", .prompt_tokens = p->n_prompt};
    mt_error err = {{0}};
    textbuf t = {0};
    mt_reasoning_split split = {0};
    split_ctx sc = {&j->sink, &t, false};
    int rc;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    mt_sampler *smp = mt_sampler_new(&p->sp, n_vocab);
    int64_t evaluated = 0;
    bool begun = false;
    if (!logits || !smp) {
        fail(&r, 500, "%s", "out of memory for a request");
        goto done;
    }
    if (b->begin(slot, p->n_prompt + p->max_tokens, &err)) {
        fail(&r, b->fail_status, "the model could not start the request: %s", err.msg);
        goto done;
    }
    begun = true;
    for (int32_t i = 0; i < p->n_prompt; i++) mt_sampler_accept(smp, p->prompt[i]);
    if (b->eval(slot, p->prompt, p->n_prompt, logits, &err)) {
        fail(&r, b->fail_status, "the model failed on the prompt: %s", err.msg);
        goto done;
    }
    evaluated += p->n_prompt;
    mt_detok dt;
    mt_detok_init(&dt, e->vocab, false);
    char piece[1024];
    bool stopped = false;
    if (p->reasoning.on) mt_reasoning_split_init(&split, &p->reasoning);
    while (r.completion_tokens < p->max_tokens) {
        if (__atomic_load_n(&e->stopping, __ATOMIC_RELAXED)) {
            fail(&r, 503, "%s", "the server is stopping");
            goto done;
        }
        int32_t id = mt_sampler_sample(smp, logits);
        r.completion_tokens++;
        mt_sampler_accept(smp, id);
        if (mt_vocab_is_eog(e->vocab, id) || id == p->end_token) {
            r.finish_reason = "stop";
            break;
        }
        if ((rc = add_token(p, &dt, &split, &sc, id))) {
            if (rc == -1) goto cancelled;
            fail(&r, 500, "%s", "out of memory for the generated text");
            goto done;
        }
        size_t safe = t.len;
        long at = p->n_stop ? find_stop(p, &t, &safe) : -1;
        if (at >= 0) {
            r.finish_reason = "stop";
            stopped = true;
            if (!send_text(&j->sink, &t, (size_t)at)) goto cancelled;
            break;
        }
        if (!send_text(&j->sink, &t, safe)) goto cancelled;
        if (r.completion_tokens == p->max_tokens) break;
        if (b->eval(slot, &id, 1, logits, &err)) {
            fail(&r, b->fail_status, "the model failed while generating: %s", err.msg);
            goto done;
        }
        evaluated++;
    }
    if (!stopped) { /* what the detokenizer holds back, and any held-back stop prefix */
        int64_t nb = mt_detok_flush(&dt, piece, sizeof piece);
        rc = add_text(p, &split, &sc, piece, nb);
        if (!rc && p->reasoning.on) {
            rc = mt_reasoning_split_finish(&split, split_out, &sc);
            if (rc == -1 && sc.oom) rc = -2;
        }
        if (rc) {
            if (rc == -1) goto cancelled;
            fail(&r, 500, "%s", "out of memory for the generated text");
            goto done;
        }
        size_t safe = t.len;
        long at = p->n_stop ? find_stop(p, &t, &safe) : -1;
        if (at >= 0) r.finish_reason = "stop";
        if (!send_text(&j->sink, &t, at >= 0 ? (size_t)at : t.len)) goto cancelled;
    }
    goto done;
cancelled:
    fail(&r, 499, "%s", "the client went away");
done:
    *out = r;
    mt_reasoning_split_free(&split);
    free(t.p);
    free(logits);
    mt_sampler_free(smp);
    return begun ? evaluated : -1;
}

/* ---- the queue and the workers ------------------------------------------------------------ */

typedef struct worker_arg {
    api_engine *e;
    int index;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    api_engine *e = wa->e;
    const int index = wa->index;
    free(wa);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->n_queued == 0) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stopping) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        job j = e->queue[e->head];
        e->head = (e->head + 1) % (e->n_slots + e->cap);
        e->n_queued--;
        e->n_running++;
        pthread_mutex_unlock(&e->mu);
        mt_error err = {{0}};
        api_gen_result r = {.finish_reason = "length"};
        int64_t evaluated = -1;
        if (!e->slots[index] && !(e->slots[index] = e->b->slot_open(e->b, index, &err))) {
            r.error_status = 500;
            snprintf(r.error, sizeof r.error, "cannot set up a worker: %s", err.msg);
        } else {
            evaluated = run_job(e, e->slots[index], &j, &r);
        }
        api_gen_params_free(&j.p);
        /* the slot counts as free before the client hears back, so that a
         * client's next request finds room (it waits in the ring until this
         * worker has also finished end() below) */
        pthread_mutex_lock(&e->mu);
        e->n_running--;
        pthread_mutex_unlock(&e->mu);
        j.sink.done(j.sink.ctx, &r);
        if (evaluated >= 0) e->b->end(e->slots[index], evaluated); /* e.g. usage to the registry */
    }
    return NULL;
}

api_engine *api_engine_start(api_backend *b, const mt_vocab *vocab, int slots, int queue,
                             mt_error *err) {
    if (slots < 1 || queue < 0) {
        mt_error_set(err, "the engine needs at least one slot and a queue length >= 0");
        return NULL;
    }
    api_engine *e = calloc(1, sizeof *e);
    if (!e) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    e->b = b;
    e->vocab = vocab;
    e->n_slots = slots;
    e->cap = queue;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->queue = calloc((size_t)(slots + queue), sizeof *e->queue);
    e->threads = calloc((size_t)slots, sizeof *e->threads);
    e->slots = calloc((size_t)slots, sizeof *e->slots);
    if (!e->queue || !e->threads || !e->slots) {
        mt_error_set(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < slots; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            mt_error_set(err, "out of memory");
            e->n_slots = i;
            goto fail;
        }
        *wa = (worker_arg){e, i};
        if (pthread_create(&e->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            mt_error_set(err, "cannot start worker thread %d", i);
            e->n_slots = i;
            goto fail;
        }
    }
    return e;
fail:
    api_engine_stop(e);
    return NULL;
}

int api_engine_submit(api_engine *e, api_gen_params *p, const api_gen_sink *sink, int *running,
                      int *queued) {
    pthread_mutex_lock(&e->mu);
    /* jobs that idle workers are about to take do not count as waiting */
    const int idle = e->n_slots - e->n_running;
    const bool room = !e->stopping && e->n_queued < idle + e->cap;
    if (running) *running = e->n_running;
    if (queued) *queued = e->n_queued;
    if (!room) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    e->queue[(e->head + e->n_queued) % (e->n_slots + e->cap)] = (job){*p, *sink};
    e->n_queued++;
    memset(p, 0, sizeof *p);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void api_engine_stop(api_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    __atomic_store_n(&e->stopping, true, __ATOMIC_RELAXED); /* run_job reads it unlocked */
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->n_slots; i++) pthread_join(e->threads[i], NULL);
    /* what still waits gets its answer */
    const int ring = e->n_slots + e->cap;
    while (e->n_queued > 0) {
        job *j = &e->queue[e->head];
        api_gen_result r = {.finish_reason = "length", .error_status = 503};
        snprintf(r.error, sizeof r.error, "the server is stopping");
        j->sink.done(j->sink.ctx, &r);
        api_gen_params_free(&j->p);
        e->head = (e->head + 1) % ring;
        e->n_queued--;
    }
    for (int i = 0; e->slots && i < e->n_slots; i++)
        if (e->slots[i]) e->b->slot_close(e->b, e->slots[i]);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->queue);
    free(e->threads);
    free(e->slots);
    free(e);
}

/* api_engine.c - runs the API's generation requests (api_engine.h): a
 * bounded queue and one worker thread per slot, each running its requests
 * through the generation loop (generate.h) and turning the outcome into an
 * HTTP status and an OpenAI finish_reason. */
#include "api_engine.h"

#include "moontail/draft.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
    api_gen_params p;
    api_gen_sink sink;
} job;

struct api_engine {
    mt_gen_backend *b;
    const mt_vocab *vocab; /* the backend model's tokenizer (borrowed) */
    int n_slots, cap;      /* workers; requests that may wait while every worker is busy */
    int first_index;       /* the backend's index of slot 0 (slot_open) */
    pthread_t *threads;
    void **slots;
    int32_t draft_k;           /* api_engine_set_draft */
    mt_gen_drafter **drafters; /* (n_slots) a slot's n-gram drafter, made at its first job */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *queue; /* ring of n_slots + cap jobs not yet taken by a worker */
    int head, n_queued, n_running;
    bool stopping;
};

void api_gen_params_free(api_gen_params *p) {
    free(p->prompt);
    for (int i = 0; i < MT_GEN_MAX_STOP; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

/* ---- one request -------------------------------------------------------------------------- */

/* Why the loop was cancelled: the client went away, or the server stops. */
enum { CANCEL_CLIENT_GONE = 1, CANCEL_STOPPING = 2 };

typedef struct job_run {
    api_engine *e;
    job *j;
} job_run;

static int job_text(void *ctx, const char *s, size_t n) {
    job_run *jr = ctx;
    return jr->j->sink.text(jr->j->sink.ctx, s, n) ? CANCEL_CLIENT_GONE : 0;
}

static int job_reasoning(void *ctx, const char *s, size_t n) {
    job_run *jr = ctx;
    const api_gen_sink *sink = &jr->j->sink;
    return sink->reasoning && sink->reasoning(sink->ctx, s, n) ? CANCEL_CLIENT_GONE : 0;
}

static int job_token(void *ctx, int32_t id) {
    (void)id;
    job_run *jr = ctx;
    return __atomic_load_n(&jr->e->stopping, __ATOMIC_RELAXED) ? CANCEL_STOPPING : 0;
}

static void fail(api_gen_result *r, int status, const char *fmt, const char *detail) {
    r->error_status = status;
    snprintf(r->error, sizeof r->error, fmt, detail);
}

/* Runs one request to its end: the text goes to the sink, the outcome to
 * *out. Returns the tokens the backend evaluated, or -1 when the sequence
 * did not begin (then there is nothing for the backend's end()). */
static int64_t run_job(api_engine *e, void *slot, const mt_gen_drafter *draft, job *j,
                       api_gen_result *out) {
    const api_gen_params *p = &j->p;
    const int fail_status = e->b->retry_may_succeed ? 503 : 500;
    mt_gen_params gp = p->gen;
    gp.prompt = p->prompt;
    gp.stop = (const char *const *)p->stop;
    gp.reasoning = &p->reasoning;
    if (e->b->eval_all && e->b->rewind) gp.draft = draft;
    job_run jr = {e, j};
    const mt_gen_sink sink = {job_text, job_reasoning, job_token, &jr};
    mt_gen_result g;
    double ms0 = 0, ms1 = 0;
    int f0 = e->b->failovers ? e->b->failovers(slot, &ms0) : 0;
    mt_generate(e->b, slot, e->vocab, &gp, &sink, &g);
    int f1 = e->b->failovers ? e->b->failovers(slot, &ms1) : 0;
    api_gen_result r = {.finish_reason = g.finish == MT_GEN_LENGTH ? "length" : "stop",
                        .prompt_tokens = g.prompt_tokens,
                        .completion_tokens = g.completion_tokens,
                        .failovers = f1 - f0,
                        .drafted = g.drafted,
                        .accepted = g.accepted,
                        .recovery_ms = ms1 - ms0};
    if (g.finish == MT_GEN_CANCELLED && g.cancel == CANCEL_STOPPING)
        fail(&r, 503, "%s", "the server is stopping");
    else if (g.finish == MT_GEN_CANCELLED)
        fail(&r, 499, "%s", "the client went away");
    else if (g.failure == MT_GEN_FAIL_MEMORY)
        fail(&r, 500, "%s", g.err.msg);
    else if (g.failure == MT_GEN_FAIL_BEGIN)
        fail(&r, fail_status, "the model could not start the request: %s", g.err.msg);
    else if (g.failure == MT_GEN_FAIL_PROMPT)
        fail(&r, fail_status, "the model failed on the prompt: %s", g.err.msg);
    else if (g.failure == MT_GEN_FAIL_STEP)
        fail(&r, fail_status, "the model failed while generating: %s", g.err.msg);
    *out = r;
    return g.begun ? g.evaluated : -1;
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
        if (!e->slots[index] &&
            !(e->slots[index] = e->b->slot_open(e->b, e->first_index + index, &err))) {
            r.error_status = 500;
            snprintf(r.error, sizeof r.error, "cannot set up a worker: %s", err.msg);
        } else {
            if (e->draft_k > 0 && !e->drafters[index])
                e->drafters[index] = mt_draft_ngram_new(e->draft_k, &err); /* NULL: plainly */
            evaluated = run_job(e, e->slots[index], e->drafters[index], &j, &r);
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

api_engine *api_engine_start(mt_gen_backend *b, const mt_vocab *vocab, int slots, int queue,
                             mt_error *err) {
    return api_engine_start_at(b, vocab, 0, slots, queue, err);
}

api_engine *api_engine_start_at(mt_gen_backend *b, const mt_vocab *vocab, int first_index,
                                int slots, int queue, mt_error *err) {
    if (slots < 1 || queue < 0 || first_index < 0) {
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
    e->first_index = first_index;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->queue = calloc((size_t)(slots + queue), sizeof *e->queue);
    e->threads = calloc((size_t)slots, sizeof *e->threads);
    e->slots = calloc((size_t)slots, sizeof *e->slots);
    e->drafters = calloc((size_t)slots, sizeof *e->drafters);
    if (!e->queue || !e->threads || !e->slots || !e->drafters) {
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

void api_engine_set_draft(api_engine *e, int32_t k) {
    pthread_mutex_lock(&e->mu);
    e->draft_k = k > 0 ? k : 0;
    pthread_mutex_unlock(&e->mu);
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

void api_engine_stopping(api_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    __atomic_store_n(&e->stopping, true, __ATOMIC_RELAXED); /* run_job reads it unlocked */
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void api_engine_stop(api_engine *e) {
    if (!e) return;
    api_engine_stopping(e);
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
    for (int i = 0; e->drafters && i < e->n_slots; i++) mt_gen_drafter_free(e->drafters[i]);
    free(e->drafters);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->queue);
    free(e->threads);
    free(e->slots);
    free(e);
}

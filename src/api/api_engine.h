/* api_engine.h - the queue of the HTTP API's generation requests in front of
 * the generation loop (generate.h): a backend computes (a model in this
 * process, or a cell or swarm through its registry), the engine's workers
 * run requests on it with mt_generate. The HTTP layer sees only
 * api_engine_submit() and the callbacks of api_gen_sink; it does not care
 * which backend computes.
 *
 * Concurrency: the engine has `slots` worker threads; each takes a request
 * from the queue and runs it to the end in a slot of its own (its own KV
 * cache, or its own route). Requests beyond the slots wait in a queue of
 * bounded length; a full queue refuses new requests at once (503). */
#ifndef MOONTAIL_API_ENGINE_H
#define MOONTAIL_API_ENGINE_H

#include "moontail/error.h"
#include "moontail/generate.h"
#include "moontail/reasoning.h"
#include "moontail/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- generation requests ------------------------------------------------------------------ */

/* A request: the loop's parameters and the buffers they use, which the request owns (taken by
 * api_engine_submit). gen.prompt, gen.stop and gen.reasoning are left NULL: the engine points
 * them at the fields below when the request runs (a request is copied into and out of the
 * queue, so a pointer into itself would not survive). */
typedef struct api_gen_params {
    mt_gen_params gen;
    int32_t *prompt;             /* gen.n_prompt ids */
    char *stop[MT_GEN_MAX_STOP]; /* gen.n_stop strings */
    /* a thinking model's reply: reasoning goes to the sink's reasoning(), the answer to
     * text(); stop strings apply to the answer only. Unused when reasoning.on is false. */
    mt_reasoning reasoning;
} api_gen_params;

typedef struct api_gen_result {
    const char *finish_reason; /* "stop" (end token or stop string) or "length" */
    int32_t prompt_tokens, completion_tokens;
    int error_status; /* 0, or the HTTP status of a failure (then error says why) */
    char error[640];
    int failovers;             /* new routes this request took after node failures (a cell's) */
    double recovery_ms;        /* their time, failure to logits on the new route, in total */
    int64_t drafted, accepted; /* speculative decoding: guesses checked and taken (0: none) */
} api_gen_result;

/* Where a request's output goes. text() gets the generated text as it
 * becomes final (whole UTF-8 characters, never a piece of a stop string);
 * it returns -1 to cancel (the client went away). done() is called exactly
 * once, last, from a worker (or from api_engine_stop for a queued request).
 * reasoning() (may be NULL: the reasoning is dropped) gets a thinking model's
 * reasoning the same way, before the answer's text. */
typedef struct api_gen_sink {
    int (*text)(void *ctx, const char *s, size_t n);
    void (*done)(void *ctx, const api_gen_result *r);
    void *ctx;
    int (*reasoning)(void *ctx, const char *s, size_t n);
} api_gen_sink;

typedef struct api_engine api_engine;

/* Starts `slots` workers (>= 1) with room for `queue` waiting requests.
 * vocab (the backend model's, for detokenizing and end tokens) is borrowed
 * and must outlive the engine. */
api_engine *api_engine_start(mt_gen_backend *b, const mt_vocab *vocab, int slots, int queue,
                             mt_error *err);
/* The same with the slots numbered first_index.. for the backend (slot_open's index): a
 * second engine on one backend (serve's batch slots) must not reuse the first one's numbers,
 * since a backend may give index 0 a connection it already holds. */
api_engine *api_engine_start_at(mt_gen_backend *b, const mt_vocab *vocab, int first_index,
                                int slots, int queue, mt_error *err);
/* Speculative decoding in every slot from now on: the n-gram drafter with k guesses a
 * pass (draft.h; 0: off). Call before the first request. A backend that cannot go back
 * inside a pass (eval_all / rewind NULL) decodes plainly. */
void api_engine_set_draft(api_engine *e, int32_t k);
/* Queues a request. Returns 0 (p's buffers are taken, done() will be called),
 * or -1 when the queue is full or the engine stops (nothing is taken or
 * called; *running and *queued say how busy it is). */
int api_engine_submit(api_engine *e, api_gen_params *p, const api_gen_sink *sink, int *running,
                      int *queued);
/* Refuses new requests and tells running ones to stop at their next token, without
 * waiting: the engine stays valid (api_engine_submit returns -1) until api_engine_stop. */
void api_engine_stopping(api_engine *e);
/* Cancels queued requests (done() with 503), lets running ones stop at their
 * next token, joins the workers, closes the slots. The backend stays. */
void api_engine_stop(api_engine *e);

/* Frees the parameters' buffers (for a request that was not submitted). */
void api_gen_params_free(api_gen_params *p);

#endif

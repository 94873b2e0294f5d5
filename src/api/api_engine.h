/* api_engine.h - where the HTTP API's text comes from: a backend that turns
 * tokens into logits (a model in this process, or a cell or swarm through
 * its registry), and an engine that runs generation requests on it with a
 * bounded queue. The HTTP layer sees only api_engine_submit() and the
 * callbacks of api_gen_sink; it does not care which backend computes.
 *
 * Concurrency: the engine has `slots` worker threads; each takes a request
 * from the queue and runs it to the end in a session of its own (its own KV
 * cache, or its own route). Requests beyond the slots wait in a queue of
 * bounded length; a full queue refuses new requests at once (503). */
#ifndef MOONTAIL_API_ENGINE_H
#define MOONTAIL_API_ENGINE_H

#include "moontail/error.h"
#include "moontail/model.h"
#include "moontail/reasoning.h"
#include "moontail/requester.h"
#include "moontail/sampler.h"
#include "moontail/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- backends ----------------------------------------------------------------------------- */

typedef struct api_backend api_backend;

/* A backend computes; the engine runs the token loop. A slot is a worker's
 * own state (a KV cache, or a requester with its route); the engine calls a
 * slot's functions from that worker's thread only. */
struct api_backend {
    const char *kind; /* "local" or "registry" */
    /* holds the tokenizer and metadata (for a registry: the head shard); valid
     * only until the first request, since a registry route may be replaced */
    const mt_model *model;
    int32_t n_vocab; /* logits per token */
    int32_t max_ctx; /* most positions one request may use */
    int fail_status; /* HTTP status of a failed computation (500 local, 503 registry) */
    void *(*slot_open)(api_backend *b, int index, mt_error *err);
    void (*slot_close)(api_backend *b, void *slot);
    /* a new sequence of up to n_ctx positions */
    int (*begin)(void *slot, int32_t n_ctx, mt_error *err);
    /* n tokens after the sequence so far; logits gets the last one's n_vocab floats */
    int (*eval)(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err);
    /* the sequence is over; `evaluated` tokens went through the model */
    void (*end)(void *slot, int64_t evaluated);
    void (*destroy)(api_backend *b);
    void *impl;
};

/* A model file computed in this process. All slots share one thread pool of
 * `threads` threads (<= 0: all CPUs), so the model computes one evaluation
 * at a time: requests take turns token by token (first come, first served),
 * each with its own KV cache. ubatch: prompt tokens per evaluation (<= 0: 512). */
api_backend *api_backend_local(const char *model_path, int threads, int ubatch, mt_kv_type kv_type,
                               mt_error *err);

/* A registry's cell or swarm: every slot has its own mt_requester (its own
 * route, failover and replay); the first is opened here (so the head shard
 * and tokenizer are known), the others when their slot first works. */
api_backend *api_backend_registry(const mt_requester_config *cfg, mt_error *err);

/* ---- generation requests ------------------------------------------------------------------ */

enum { API_MAX_STOP = 4 };

typedef struct api_gen_params {
    int32_t *prompt; /* n_prompt ids; taken by api_engine_submit */
    int32_t n_prompt;
    int32_t max_tokens;
    mt_sampler_params sp;
    char *stop[API_MAX_STOP]; /* NUL-terminated, non-empty; taken */
    int n_stop;
    int32_t end_token; /* another token that ends generation (a chat turn's end), or -1 */
    /* a thinking model's reply: reasoning goes to the sink's reasoning(), the answer to
     * text(); stop strings apply to the answer only. Unused when reasoning.on is false. */
    mt_reasoning reasoning;
} api_gen_params;

typedef struct api_gen_result {
    const char *finish_reason; /* "stop" (end token or stop string) or "length" */
    int32_t prompt_tokens, completion_tokens;
    int error_status; /* 0, or the HTTP status of a failure (then error says why) */
    char error[640];
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
api_engine *api_engine_start(api_backend *b, const mt_vocab *vocab, int slots, int queue,
                             mt_error *err);
/* Queues a request. Returns 0 (p's buffers are taken, done() will be called),
 * or -1 when the queue is full or the engine stops (nothing is taken or
 * called; *running and *queued say how busy it is). */
int api_engine_submit(api_engine *e, api_gen_params *p, const api_gen_sink *sink, int *running,
                      int *queued);
/* Cancels queued requests (done() with 503), lets running ones stop at their
 * next token, joins the workers, closes the slots. The backend stays. */
void api_engine_stop(api_engine *e);

/* Frees the parameters' buffers (for a request that was not submitted). */
void api_gen_params_free(api_gen_params *p);

#endif

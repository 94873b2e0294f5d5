/* generate.h - the one generation loop: a prompt's token ids in, text out.
 *
 * `moontail run`, `prompt`, `demo`, the chat shell and `serve` all generate
 * through mt_generate. They differ only in what computes the logits (a
 * backend: a model in this process, a cell or swarm through its registry,
 * a fixed route of nodes) and where the text goes (a sink).
 *
 * The loop evaluates the prompt (in micro-batches of `ubatch` tokens, each
 * one evaluation), then at each step samples a token (sampler.h), turns it
 * into whole UTF-8 characters and evaluates it for the next step. It stops at
 *   - an end-of-generation token of the vocabulary (unless ignore_eog) or the
 *     extra end_token (a chat turn's end): counted, but no text;
 *   - a stop string: the text ends before it. Text that might still become a
 *     stop string is held back until the next token decides, so a sink never
 *     sees any part of one;
 *   - max_tokens;
 *   - a sink callback returning nonzero (cancelled: nothing more is handed out).
 * With a drafter (mt_gen_drafter, draft.h) and a backend that can rewind, decoding is
 * speculative and exact: after sampling a token the loop asks for up to k guesses of the
 * tokens after it, evaluates [token, guess 1..k] in one pass (eval_all: every row's
 * logits) and samples from the rows in order exactly as plain decoding samples from its
 * single steps (the same sampler calls, the same end/stop/max_tokens checks), going on
 * while each sample equals the next guess; at the first one that differs the slot rewinds
 * to the tokens accepted. Since a (k+1)-token pass gives the floats of k+1 single steps
 * (docs/design.md invariant 1), the tokens are those of plain decoding, greedy or seeded.
 * A thinking model's reply goes through a splitter (reasoning.h) first: its
 * reasoning goes to the sink as it comes, its answer is the text that stop
 * strings are looked for in. Stop strings end the answer only, as the hosted
 * DeepSeek and Kimi APIs and vLLM do: a stop string that the reasoning
 * happens to hold does not cut the reply before it has begun. */
#ifndef MOONTAIL_GENERATE_H
#define MOONTAIL_GENERATE_H

#include "moontail/error.h"
#include "moontail/model.h"
#include "moontail/reasoning.h"
#include "moontail/sampler.h"
#include "moontail/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- backends: what computes ------------------------------------------------------------- */

typedef struct mt_gen_backend mt_gen_backend;

/* A backend hands out slots; a slot runs one sequence at a time (its own KV cache, or its
 * own route). A slot's functions are called from one thread at a time; different slots
 * may work at once from different threads. */
struct mt_gen_backend {
    const char *kind; /* "local", "registry" or "route" */
    /* holds the tokenizer and metadata (for a registry: the head shard); valid only until
     * the first sequence begins, since a registry route may be replaced */
    const mt_model *model;
    int32_t n_vocab;        /* logits per token */
    int32_t max_ctx;        /* most positions one sequence may use */
    bool retry_may_succeed; /* a failure may pass on a retry (nodes lost): the API's 503 */
    /* > 0: slots opened with an index from this one on are background slots (serve's batch
     * work); the local backend runs their evaluations only when no other slot waits. 0: none */
    int background_slots_from;
    void *(*slot_open)(mt_gen_backend *b, int index, mt_error *err);
    void (*slot_close)(mt_gen_backend *b, void *slot);
    /* a new sequence of up to n_ctx positions */
    int (*begin)(void *slot, int32_t n_ctx, mt_error *err);
    /* n tokens after the sequence so far; logits gets the last one's n_vocab floats */
    int (*eval)(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err);
    /* speculative decoding (NULL: the backend cannot; then drafts are not used):
     * n tokens after the sequence so far, logits gets every one's row (n, n_vocab), and the
     * slot keeps what it needs to go back inside this pass */
    int (*eval_all)(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err);
    /* the sequence goes back to its first n_past tokens: n_past inside the last eval_all's
     * pass (after its first token, up to its end) */
    int (*rewind)(void *slot, int32_t n_past, mt_error *err);
    /* the sequence is over; `evaluated` tokens went through the model */
    void (*end)(void *slot, int64_t evaluated);
    void (*destroy)(mt_gen_backend *b);
    void *impl;
    /* may be NULL: the slot's failovers so far (new routes after a failure) and the time
     * they took in total, failure to logits on the new route (a registry's slots) */
    int (*failovers)(void *slot, double *recovery_ms);
};

/* A model computed in this process (generate_local.c). The backend takes the model (and
 * frees it, also when it fails). Every slot keeps its own KV cache of kv_type, allocated at
 * begin() for exactly the positions asked; all slots share one pool of `threads` threads
 * (<= 0: all CPUs), so evaluations take turns on the model in arrival order: slots
 * interleave evaluation by evaluation. Results do not depend on the turns or on how a
 * prompt is cut into evaluations (docs/design.md invariant 1). A shard is refused (name: the
 * file, for the message). model NULL (a load that failed) returns NULL, err untouched. */
mt_gen_backend *mt_gen_backend_local(mt_model *model, const char *name, int threads,
                                     mt_kv_type kv_type, mt_error *err);
/* A local slot's KV cache while its sequence is begun, else NULL; the pool's threads. */
const mt_kv_cache *mt_gen_local_cache(const void *slot);
int mt_gen_local_threads(const mt_gen_backend *b);

/* ---- the loop ------------------------------------------------------------------------------ */

/* Prompt tokens per evaluation when a caller gives none: a long prompt goes in pieces, so a
 * local slot takes a turn on the model per piece rather than holding up the others for the
 * whole prompt, and no evaluation needs activations for thousands of tokens at once. The loop
 * is the one place a prompt is cut; a route (route.h) cuts again only what it evaluates on its
 * own, the whole history replayed after a node is lost, by its own ubatch, which the front ends
 * set from the same option (512 too when none is given). */
enum { MT_GEN_UBATCH_DEFAULT = 512 };

/* The most stop strings a request may give (OpenAI's limit; `run --stop` and the API's "stop"
 * alike). */
enum { MT_GEN_MAX_STOP = 4 };

/* Guesses of the next tokens for speculative decoding (draft.h makes the n-gram and the
 * draft-model ones; a test may give its own). A drafter is used by one generation at a
 * time. */
typedef struct mt_gen_drafter {
    /* up to k guesses (k >= 1) of the tokens after hist[0, n_hist) (the prompt and every
     * token sampled so far) into out; returns how many (0: no guess), or -1 with err */
    int32_t (*draft)(void *ctx, const int32_t *hist, int32_t n_hist, int32_t k, int32_t *out,
                     mt_error *err);
    void (*free)(void *ctx); /* mt_gen_drafter_free calls it (NULL: nothing to free) */
    void *ctx;
    int32_t k; /* guesses per pass, 1..MT_GEN_MAX_DRAFT */
} mt_gen_drafter;

/* The most guesses per pass (--draft-k). */
enum { MT_GEN_MAX_DRAFT = 32 };

typedef struct mt_gen_params {
    const int32_t *prompt; /* n_prompt ids (at least one) */
    int32_t n_prompt;
    int32_t max_tokens; /* the most tokens to generate */
    int32_t n_ctx;      /* positions the sequence reserves (<= 0: n_prompt + max_tokens) */
    int32_t ubatch;     /* prompt tokens per evaluation (<= 0: MT_GEN_UBATCH_DEFAULT) */
    mt_sampler_params sp;
    const char *const *stop; /* n_stop (<= MT_GEN_MAX_STOP) stop strings, NUL-terminated, not
                                empty */
    int n_stop;
    int32_t end_token; /* another token that ends generation (a chat turn's end), or -1 */
    bool ignore_eog;   /* the vocabulary's end-of-generation tokens do not end it */
    const mt_reasoning *reasoning; /* split the reply into reasoning and answer (NULL or
                                      !on: the whole reply is text) */
    const mt_gen_drafter *draft;   /* speculative decoding with these guesses (NULL, or a
                                      backend without eval_all: plain decoding) */
} mt_gen_params;

/* Where the output goes. Each callback returns 0 to go on, or any other value to cancel
 * (kept in mt_gen_result.cancel). */
typedef struct mt_gen_sink {
    /* the text as it becomes final: whole UTF-8 characters, never a piece of a stop string */
    int (*text)(void *ctx, const char *s, size_t n);
    /* a thinking model's reasoning the same way, before the answer's text (NULL: dropped) */
    int (*reasoning)(void *ctx, const char *s, size_t n);
    /* every sampled token, end tokens included, before its text (NULL: none) */
    int (*token)(void *ctx, int32_t id);
    void *ctx;
} mt_gen_sink;

typedef enum mt_gen_finish {
    MT_GEN_LENGTH,      /* max_tokens */
    MT_GEN_END_TOKEN,   /* an end-of-generation token or end_token */
    MT_GEN_STOP_STRING, /* a stop string */
    MT_GEN_CANCELLED,   /* a sink callback said so */
    MT_GEN_FAILED,      /* see failure and err */
} mt_gen_finish;

typedef enum mt_gen_failure {
    MT_GEN_FAIL_NONE,
    MT_GEN_FAIL_MEMORY, /* out of memory (or sampling parameters the sampler refuses) */
    MT_GEN_FAIL_BEGIN,  /* the backend could not begin the sequence */
    MT_GEN_FAIL_PROMPT, /* the backend failed on the prompt */
    MT_GEN_FAIL_STEP,   /* the backend failed on a generated token */
} mt_gen_failure;

typedef struct mt_gen_result {
    mt_gen_finish finish;
    mt_gen_failure failure;
    int cancel; /* the value the cancelling callback returned */
    int32_t prompt_tokens, completion_tokens;
    /* the sequence began: the caller ends it with b->end(slot, evaluated) once it has
     * handed out the result (a registry backend reports usage there) */
    bool begun;
    int64_t evaluated;                  /* tokens the backend evaluated */
    double begin_ms, prompt_ms, gen_ms; /* begin(), the prompt, the steps after it */
    /* speculative decoding: evaluations after the prompt, guesses evaluated, guesses that
     * were the sampled token (plain decoding: passes = completion_tokens - 1, no guesses) */
    int64_t passes, drafted, accepted;
    mt_error err; /* why it failed (the backend's words) */
} mt_gen_result;

/* Generates on a slot of b: begins a sequence, evaluates, samples, hands the output to
 * sink, and fills *r. vocab (the backend model's) detokenizes and knows the end tokens.
 * Returns 0, or -1 when it failed (r->finish MT_GEN_FAILED). */
int mt_generate(const mt_gen_backend *b, void *slot, const mt_vocab *vocab, const mt_gen_params *p,
                const mt_gen_sink *sink, mt_gen_result *r);

/* "length", "end", "stop", "cancelled" or "failed". */
const char *mt_gen_finish_name(mt_gen_finish f);

#endif

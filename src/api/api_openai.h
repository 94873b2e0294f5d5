/* api_openai.h - the OpenAI wire format of `moontail serve`: request bodies
 * of /v1/completions and /v1/chat/completions parsed and checked field by
 * field, errors in OpenAI's shape, and answers shaped as OpenAI's (a whole
 * JSON object, or server-sent events of chunks ending in "data: [DONE]").
 * docs/api.md lists what is supported. */
#ifndef MOONTAIL_API_OPENAI_H
#define MOONTAIL_API_OPENAI_H

#include "api_engine.h"
#include "moontail/chat_format.h"
#include "moontail/http.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- errors ------------------------------------------------------------------------------- */

/* {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct api_error {
    int status;
    char message[720];
    const char *type; /* "invalid_request_error", "rate_limit_error", "server_error", ... */
    char param[64];   /* the field at fault; "" = null */
    const char *code; /* NULL = null */
} api_error;

/* Fills e; returns -1. */
int api_fail(api_error *e, int status, const char *type, const char *param, const char *code,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A new {"error": {...}} object. */
json_t *api_error_json(const api_error *e);
/* e as the answer (with a Retry-After header for 429 and 503 when retry_after > 0). */
void api_error_respond(const api_error *e, int retry_after, mt_http_response *resp);
/* The error body for errors the HTTP server answers by itself (413, ...). */
json_t *api_error_body(int status, const char *message);
/* A JSON string of n bytes; bytes that are not UTF-8 become '?' (jansson refuses invalid
 * UTF-8, and both error messages and model text may hold some). */
json_t *api_text_json(const char *p, size_t n);

/* ---- requests ----------------------------------------------------------------------------- */

typedef enum api_kind { API_COMPLETIONS, API_CHAT } api_kind;

typedef struct api_request {
    api_kind kind;
    json_t *root;       /* the parsed body; strings below may point into it */
    const char *model;  /* as asked */
    const char *prompt; /* completions: prompt_len bytes */
    size_t prompt_len;
    mt_chat_message *messages; /* chat */
    int n_messages;
    char **owned;       /* per message: a joined copy of its text parts, or NULL */
    int64_t max_tokens; /* -1: not given */
    mt_sampler_params sp;
    char *stop[MT_GEN_MAX_STOP]; /* heap copies */
    int n_stop;
    bool stream, include_usage;
    /* chat: chat_template_kwargs, the template variables asked for (an object whose size,
     * names and known values were checked; points into root), or NULL */
    const json_t *chat_kwargs;
} api_request;

/* Parses a request body and checks every field against OpenAI's rules and
 * what this server supports, and the model against model_name. Returns 0,
 * or -1 with e filled (400, the field in e->param). */
int api_request_parse(api_kind kind, const char *body, size_t len, const char *model_name,
                      api_request *rq, api_error *e);
void api_request_free(api_request *rq);

/* ---- answers ------------------------------------------------------------------------------ */

typedef struct api_reply api_reply;

/* prefix followed by 24 random letters and digits (142 bits: unguessable), NUL-terminated in
 * cap bytes: the ids of answers, batches, files and batch results. */
void api_random_id(char *out, size_t cap, const char *prefix);

/* Called once a request is over, before its answer is finished (usage
 * accounting, logging). */
typedef void (*api_reply_done_fn)(void *ctx, const api_gen_result *r);

/* The answer to one request, written to the stream st (a reference is
 * taken): whole JSON, or server-sent events when stream. */
api_reply *api_reply_new(api_kind kind, const char *model, bool stream, bool include_usage,
                         mt_http_stream *st, api_reply_done_fn on_done, void *done_ctx);
/* Where a collected answer goes: the HTTP status and the JSON body (taken), called once from
 * the engine's worker. */
typedef void (*api_reply_collect_fn)(void *ctx, int status, json_t *body);
/* A whole (never streamed) answer handed to collect instead of written to a client: batch
 * work (api_batch.h). on_done (may be NULL) as for api_reply_new. */
api_reply *api_reply_new_collect(api_kind kind, const char *model, api_reply_collect_fn collect,
                                 void *collect_ctx, api_reply_done_fn on_done, void *done_ctx);
/* The engine's view of the reply: text() writes chunks or collects the text,
 * done() finishes the answer and frees the reply. */
api_gen_sink api_reply_sink(api_reply *r);
/* Frees a reply that was never submitted (its stream reference too). */
void api_reply_free(api_reply *r);
/* A chat reply of a model that thinks: the message carries reasoning_content (null when
 * there was none) and the stream reasoning_content deltas. */
void api_reply_set_reasoning(api_reply *r, bool on);

#endif

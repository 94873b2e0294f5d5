/* api_server.c - `moontail serve` (api.h): the HTTP routes of the
 * OpenAI-compatible API, authentication, rate limits, and the hand-over of
 * a checked request to the engine (api_engine.h).
 *
 * A request is checked whole on the HTTP thread (key, rate limit, body,
 * fields, model, tokens, context) and answered there when anything is
 * wrong; only a valid request reaches the engine's queue. Its answer then
 * comes through an HTTP stream (http.h) that the engine's worker writes, so
 * no HTTP thread waits for the model. */
#include "moontail/api.h"
#include "api_engine.h"
#include "api_batches.h"
#include "api_batch.h"
#include "api_keys.h"
#include "api_openai.h"
#include "moontail/chat_format.h"
#include "moontail/chat_template.h"
#include "moontail/clock.h"
#include "moontail/http.h"
#include "moontail/log.h"
#include "moontail/progress.h"
#include "moontail/requester.h"
#include "moontail/transport.h"
#include "moontail/compat.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mt_api_server {
    mt_gen_backend *backend;
    api_engine *engine;       /* interactive requests */
    api_engine *batch_engine; /* batch requests: slots of their own, behind the interactive */
    int batch_parallel;       /* its slots */
    api_batches *batches;     /* /v1/files and /v1/batches, or NULL (no --batch-dir) */
    size_t max_body;          /* bodies of requests other than uploads */
    size_t max_upload;        /* the body of an authenticated POST /v1/files (the file + form) */
    mt_vocab *vocab;          /* tokenizing on the HTTP threads (thread-safe) */
    api_keys keys;
    mt_http_server *http;
    char url[200];
    char *model_name;
    mt_chat_template *tmpl; /* the model's chat template (Jinja, or a built-in family) */
    mt_chat_format chat;    /* the family it resembles: reasoning split, fallback */
    int32_t chat_end;       /* the token that ends an assistant turn, or -1 */
    int32_t max_ctx;
    int32_t ubatch; /* prompt tokens per evaluation (<= 0: the loop's default) */
    int chat_max_tokens;
    json_int_t started;
    mt_log_source log; /* "serve: ..." lines */
};

/* ---- authentication ----------------------------------------------------------------------- */

/* The caller's key, or NULL with a 401 in resp. */
static api_key *authenticate(mt_api_server *s, const mt_http_request *req, mt_http_response *resp) {
    const char *token = mt_http_bearer(req);
    api_key *key = api_keys_find(&s->keys, token);
    if (key) return key;
    api_error e;
    if (!token)
        api_fail(&e, 401, "invalid_request_error", NULL, "missing_api_key",
                 "You didn't provide an API key. Send it in an Authorization header using Bearer"
                 " auth (Authorization: Bearer YOUR_KEY); the server's operator gives out keys");
    else
        api_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                 "Incorrect API key provided: %.4s...; ask the server's operator for a valid"
                 " key",
                 token);
    api_error_respond(&e, 0, resp);
    return NULL;
}

/* ---- generation --------------------------------------------------------------------------- */

/* What a finished request reports back (usage counts, the log line). */
typedef struct req_note {
    mt_api_server *s;
    api_key *key;
    api_kind kind;
    bool stream;
    double t0;
    bool batch; /* a batch's line: its log lines are DEBUG (a batch has thousands) */
} req_note;

static void request_done(void *ctx, const api_gen_result *r) {
    req_note *n = ctx;
    if (!r->error_status)
        api_keys_count_tokens(&n->s->keys, n->key, r->prompt_tokens, r->completion_tokens);
    const char *what = n->batch ? (n->kind == API_CHAT ? "batch chat" : "batch completion")
                                : (n->kind == API_CHAT ? "chat" : "completion");
    if (n->batch && !r->error_status)
        mt_log_as(&n->s->log, MT_LOG_DEBUG, "%s %s: %d prompt + %d completion tokens, %s (%.0f ms)",
                  n->key->name, what, r->prompt_tokens, r->completion_tokens, r->finish_reason,
                  (mt_mono_s() - n->t0) * 1e3);
    else if (r->error_status)
        mt_log_as(&n->s->log, r->error_status >= 500 ? MT_LOG_WARN : MT_LOG_INFO,
                  "%s %s%s: %d %s (%.0f ms)", n->key->name, what, n->stream ? " stream" : "",
                  r->error_status, r->error, (mt_mono_s() - n->t0) * 1e3);
    else if (r->drafted > 0)
        mt_log_as(&n->s->log, MT_LOG_INFO,
                  "%s %s%s: %d prompt + %d completion tokens, %s (%.0f ms; %lld of %lld guesses"
                  " taken)",
                  n->key->name, what, n->stream ? " stream" : "", r->prompt_tokens,
                  r->completion_tokens, r->finish_reason, (mt_mono_s() - n->t0) * 1e3,
                  (long long)r->accepted, (long long)r->drafted);
    else
        mt_log_as(&n->s->log, MT_LOG_INFO,
                  "%s %s%s: %d prompt + %d completion tokens, %s (%.0f ms)", n->key->name, what,
                  n->stream ? " stream" : "", r->prompt_tokens, r->completion_tokens,
                  r->finish_reason, (mt_mono_s() - n->t0) * 1e3);
    free(n);
}

/* A chat request's prompt through the model's chat template; a conversation the
 * template refuses is the client's error. */
static int64_t chat_ids(mt_api_server *s, const api_request *rq, int32_t **ids, api_error *e) {
    json_t *msgs = mt_chat_template_messages_json(rq->messages, rq->n_messages,
                                                  json_object_get(rq->root, "messages"));
    if (!msgs) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    mt_chat_template_input in = {
        .messages = msgs, .kwargs = rq->chat_kwargs, .add_generation_prompt = true};
    mt_chat_template_error te;
    int64_t n = mt_chat_template_tokenize(s->tmpl, &in, ids, &te);
    json_decref(msgs);
    if (n < 0 && te.refused)
        return api_fail(e, 400, "invalid_request_error", "messages", NULL, "%s", te.err.msg);
    if (n < 0)
        return api_fail(e, 500, "server_error", NULL, NULL, "The prompt could not be made: %s",
                        te.err.msg);
    return n;
}

/* The request's prompt as token ids (completions: like `moontail run -p`;
 * chat: through the chat template). */
static int64_t prompt_ids(mt_api_server *s, const api_request *rq, int32_t **ids, api_error *e) {
    mt_error err = {{0}};
    if (rq->kind == API_CHAT) {
        int64_t n = chat_ids(s, rq, ids, e);
        if (n == 0)
            return api_fail(e, 400, "invalid_request_error", "messages", NULL,
                            "The chat template made an empty prompt");
        return n;
    }
    int64_t n = mt_tokenize(s->vocab, rq->prompt, rq->prompt_len, true, true, ids, &err);
    if (n < 0)
        return api_fail(e, 400, "invalid_request_error",
                        rq->kind == API_CHAT ? "messages" : "prompt", NULL,
                        "The prompt could not be tokenized: %s", err.msg);
    if (n == 0)
        return api_fail(e, 400, "invalid_request_error", "prompt", NULL,
                        "The prompt is empty and this model adds no BOS token; give some text");
    return n;
}

/* Checks a request body (fields, model, tokens, context) and makes the engine's parameters
 * of it: p on success (the caller submits or frees it), rq parsed (the caller frees it in
 * any case). Returns 0, or -1 with e filled. */
static int prepare(mt_api_server *s, api_kind kind, const char *body, size_t len, api_request *rq,
                   api_gen_params *p, api_error *e) {
    memset(p, 0, sizeof *p);
    int32_t *ids = NULL;
    if (api_request_parse(kind, body, len, s->model_name, rq, e)) return -1;
    int64_t n_prompt = prompt_ids(s, rq, &ids, e);
    if (n_prompt < 0) {
        free(ids);
        return -1;
    }
    const char *in = kind == API_CHAT ? "messages" : "prompt";
    int64_t max_tokens = rq->max_tokens;
    if (max_tokens < 0) { /* not given */
        max_tokens = kind == API_CHAT ? s->chat_max_tokens : 16;
        if (kind == API_CHAT && n_prompt < s->max_ctx && max_tokens > s->max_ctx - n_prompt)
            max_tokens = s->max_ctx - n_prompt;
    }
    if (n_prompt + max_tokens > s->max_ctx) {
        free(ids);
        return api_fail(e, 400, "invalid_request_error", rq->max_tokens < 0 ? in : "max_tokens",
                        "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, you"
                        " requested %lld tokens (%lld in the %s, %lld for the completion)."
                        " Please reduce the length of the %s or the completion",
                        s->max_ctx, (long long)(n_prompt + max_tokens), (long long)n_prompt, in,
                        (long long)max_tokens, in);
    }
    p->prompt = ids;
    p->gen = (mt_gen_params){.n_prompt = (int32_t)n_prompt,
                             .max_tokens = (int32_t)max_tokens,
                             .ubatch = s->ubatch,
                             .sp = rq->sp,
                             .n_stop = rq->n_stop,
                             .end_token = kind == API_CHAT ? s->chat_end : -1};
    /* a thinking model's chat reply is split into reasoning and answer */
    if (kind == API_CHAT)
        mt_chat_reasoning(s->chat, s->vocab, p->prompt, p->gen.n_prompt, &p->reasoning);
    for (int i = 0; i < rq->n_stop; i++) {
        p->stop[i] = rq->stop[i];
        rq->stop[i] = NULL;
    }
    rq->n_stop = 0;
    return 0;
}

static void generate(mt_api_server *s, api_kind kind, const mt_http_request *req,
                     mt_http_response *resp) {
    const double t0 = mt_mono_s();
    const char *what = kind == API_CHAT ? "chat" : "completion";
    api_key *key = authenticate(s, req, resp);
    if (!key) {
        mt_log_as(&s->log, MT_LOG_WARN, "%s: 401 (%s API key)", what,
                  mt_http_bearer(req) ? "unknown" : "no");
        return;
    }
    api_error e;
    int wait = api_keys_take(&s->keys, key, t0);
    if (wait > 0) {
        api_fail(&e, 429, "requests", NULL, "rate_limit_exceeded",
                 "Rate limit reached for key '%s': %g requests per minute. Try again in %d s",
                 key->name, s->keys.rate_per_min, wait);
        api_error_respond(&e, wait, resp);
        mt_log_as(&s->log, MT_LOG_INFO, "%s %s: 429 rate limit (retry in %d s)", key->name, what,
                  wait);
        return;
    }
    api_request rq;
    api_gen_params p = {0};
    api_reply *reply = NULL;
    req_note *note = NULL;
    mt_http_stream *st = NULL;
    if (prepare(s, kind, req->body, req->body_len, &rq, &p, &e)) goto fail;
    if (!(note = malloc(sizeof *note)) || !(st = mt_http_stream_new()) ||
        !(reply = api_reply_new(kind, s->model_name, rq.stream, rq.include_usage, st, request_done,
                                note))) {
        api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    *note = (req_note){s, key, kind, rq.stream, t0, false};
    api_reply_set_reasoning(reply, p.reasoning.on);
    api_gen_sink sink = api_reply_sink(reply);
    int running = 0, queued = 0;
    if (api_engine_submit(s->engine, &p, &sink, &running, &queued)) {
        api_fail(&e, 503, "server_error", NULL, "server_busy",
                 "The server is busy: %d requests are running and %d waiting, the most it"
                 " holds; try again shortly",
                 running, queued);
        api_error_respond(&e, 1, resp);
        mt_log_as(&s->log, MT_LOG_WARN, "%s %s: 503 busy (%d running, %d waiting)", key->name, what,
                  running, queued);
        goto cleanup;
    }
    api_keys_count_request(&s->keys, key);
    resp->stream = st; /* the worker answers through it (the reply holds a reference) */
    api_request_free(&rq);
    return;
fail:
    api_error_respond(&e, 0, resp);
    mt_log_as(&s->log, e.status >= 500 ? MT_LOG_WARN : MT_LOG_INFO, "%s %s: %d %s", key->name, what,
              e.status, e.message);
cleanup:
    if (reply) {
        api_reply_free(reply);
    }
    free(note);
    mt_http_stream_release(st);
    api_gen_params_free(&p);
    api_request_free(&rq);
}

/* ---- batch work --------------------------------------------------------------------------- */

/* One batch request (an api_batch_submit_fn), accounted to its owner's key as an interactive
 * request is: it takes one from the key's rate limit (a line whose turn has not come waits:
 * -1, the runner tries again shortly), counts in its requests once accepted and its tokens
 * once finished (GET /v1/usage). The body is checked as a POST of its kind would be; a
 * refused one is answered at once through collect (its 4xx and error body). Returns 0
 * (collect is or will be called once), or -1 when the batch slots have no room or stop, or
 * the key must wait. */
static int submit_batch(void *server, const char *owner, api_kind kind, const char *body,
                        size_t len, api_reply_collect_fn collect, void *ctx) {
    mt_api_server *s = server;
    const double t0 = mt_mono_s();
    api_request rq = {0};
    api_gen_params p = {0};
    api_error e;
    api_reply *reply = NULL;
    req_note *note = NULL;
    api_key *key = owner ? api_keys_named(&s->keys, owner) : api_keys_find(&s->keys, NULL);
    if (!key) {
        api_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                 "The API key '%.64s' that made this batch is no longer one this server"
                 " accepts; ask its operator",
                 owner ? owner : "anonymous");
        collect(ctx, e.status, api_error_json(&e));
        return 0;
    }
    if (api_keys_take_waiting(&s->keys, key, t0) > 0) return -1; /* its turn comes later */
    if (prepare(s, kind, body, len, &rq, &p, &e)) goto fail;
    if (rq.stream) {
        api_fail(&e, 400, "invalid_request_error", "stream", "unsupported_parameter",
                 "'stream': true is not supported in a batch; a batch's answers are whole"
                 " objects in its output file");
        goto fail;
    }
    if (!(note = malloc(sizeof *note)) ||
        !(reply = api_reply_new_collect(kind, s->model_name, collect, ctx, request_done, note))) {
        api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    *note = (req_note){s, key, kind, false, t0, true};
    api_reply_set_reasoning(reply, p.reasoning.on);
    api_gen_sink sink = api_reply_sink(reply);
    if (api_engine_submit(s->batch_engine, &p, &sink, NULL, NULL)) {
        api_reply_free(reply);
        free(note);
        api_gen_params_free(&p);
        api_request_free(&rq);
        return -1;
    }
    api_keys_count_request(&s->keys, key);
    api_request_free(&rq);
    return 0;
fail:
    free(note);
    api_gen_params_free(&p);
    api_request_free(&rq);
    mt_log_as(&s->log, e.status >= 500 ? MT_LOG_WARN : MT_LOG_DEBUG, "%s batch %s: %d %s",
              key->name, kind == API_CHAT ? "chat" : "completion", e.status, e.message);
    collect(ctx, e.status, api_error_json(&e));
    return 0;
}

static void run_progress(void *ctx, const api_batch_stats *st) {
    const mt_api_batch_config *c = ctx;
    c->progress(c->ctx, (long long)st->done, (long long)st->total, (long long)st->failed,
                (long long)st->completion_tokens, st->seconds);
}

int mt_api_batch_run(mt_api_server *s, const mt_api_batch_config *c, mt_error *err) {
    api_batch *b = api_batch_open(c->state_dir, c->input, NULL, NULL, 0, err);
    if (!b) return -1;
    if (c->progress) {
        api_batch_stats st = api_batch_get_stats(b);
        c->progress(c->ctx, (long long)st.done, (long long)st.total, (long long)st.failed, 0, 0);
    }
    int rc =
        api_batch_run(b, submit_batch, s, NULL, c->parallel > 0 ? c->parallel : s->batch_parallel,
                      c->stop, c->progress ? run_progress : NULL, (void *)c, err);
    if (rc == 0 && api_batch_write(b, c->output, API_BATCH_ALL, err) < 0) rc = -1;
    api_batch_close(b);
    return rc;
}

/* ---- the other endpoints ------------------------------------------------------------------ */

static json_t *model_json(const mt_api_server *s) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", s->model_name, "object", "model", "created",
                     s->started, "owned_by", "moontail");
}

static void list_models(mt_api_server *s, const mt_http_request *req, mt_http_response *resp) {
    if (!authenticate(s, req, resp)) return;
    resp->json = json_pack("{s:s, s:[o]}", "object", "list", "data", model_json(s));
}

static void get_model(mt_api_server *s, const mt_http_request *req, mt_http_response *resp) {
    if (!authenticate(s, req, resp)) return;
    const char *id = req->path + strlen("/v1/models/");
    if (strcmp(id, s->model_name) == 0) {
        resp->json = model_json(s);
        return;
    }
    api_error e;
    api_fail(&e, 404, "invalid_request_error", "model", "model_not_found",
             "The model '%.200s' does not exist on this server; it serves '%s'", id, s->model_name);
    api_error_respond(&e, 0, resp);
}

static void usage(mt_api_server *s, const mt_http_request *req, mt_http_response *resp) {
    api_key *key = authenticate(s, req, resp);
    if (key) resp->json = api_keys_usage_json(&s->keys, key, mt_mono_s());
}

/* ---- routing ------------------------------------------------------------------------------ */

static void handle(void *ctx, const mt_http_request *req, mt_http_response *resp) {
    mt_api_server *s = ctx;
    const char *path = req->path, *m = req->method;
    const bool get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
    const bool post = strcmp(m, "POST") == 0;
    const char *allow = NULL;
    if (strcmp(path, "/v1/chat/completions") == 0 || strcmp(path, "/v1/completions") == 0) {
        if (post) {
            generate(s, path[4] == 'c' && path[5] == 'h' ? API_CHAT : API_COMPLETIONS, req, resp);
            return;
        }
        allow = "POST";
    } else if (strcmp(path, "/v1/models") == 0) {
        if (get) return list_models(s, req, resp);
        allow = "GET";
    } else if (strncmp(path, "/v1/models/", 11) == 0 && path[11]) {
        if (get) return get_model(s, req, resp);
        allow = "GET";
    } else if (strcmp(path, "/v1/usage") == 0) {
        if (get) return usage(s, req, resp);
        allow = "GET";
    } else if (strcmp(path, "/health") == 0) {
        if (get) {
            resp->json = json_pack("{s:s}", "status", "ok");
            return;
        }
        allow = "GET";
    } else if (api_batches_path(path)) {
        if (!s->batches) {
            api_error e;
            api_fail(&e, 404, "invalid_request_error", NULL, "unknown_url",
                     "Batches are off on this server: its operator starts it with --batch-dir"
                     " DIR to take files and batches (see docs/api.md, \"Batches\")");
            return api_error_respond(&e, 0, resp);
        }
        api_key *key = authenticate(s, req, resp);
        if (key) api_batches_handle(s->batches, key->name, req, resp);
        return;
    }
    api_error e;
    if (allow) {
        api_fail(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                 "Method %.16s is not allowed on %.200s; use %s", m, path, allow);
        api_error_respond(&e, 0, resp);
        resp->headers = json_pack("{s:s}", "Allow", allow);
        return;
    }
    api_fail(&e, 404, "invalid_request_error", NULL, "unknown_url",
             "Unknown request URL: %.16s %.200s. This server answers GET /v1/models, POST"
             " /v1/completions, POST /v1/chat/completions and GET /v1/usage (see docs/api.md)",
             m, path);
    api_error_respond(&e, 0, resp);
}

/* Whether handle() asks this request for a key: it routes it to an endpoint that
 * authenticates (not /health, an unknown URL, or a method the endpoint does not take). */
static bool needs_key(const mt_api_server *s, const char *m, const char *path) {
    const bool get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
    if (strcmp(path, "/v1/chat/completions") == 0 || strcmp(path, "/v1/completions") == 0)
        return strcmp(m, "POST") == 0;
    if (strcmp(path, "/v1/models") == 0 || strcmp(path, "/v1/usage") == 0 ||
        (strncmp(path, "/v1/models/", 11) == 0 && path[11]))
        return get;
    return s->batches && api_batches_path(path);
}

/* The HTTP server's admit hook: runs when a request's headers are in, before its body is
 * read. A request that needs a key and has none that is valid is answered 401 at once, so
 * its body is never read; an authenticated upload (POST /v1/files) may send up to
 * max_upload bytes, every other request max_body. */
static size_t admit(void *ctx, const mt_http_request *req, mt_http_response *resp) {
    mt_api_server *s = ctx;
    if (!needs_key(s, req->method, req->path)) return s->max_body;
    if (!authenticate(s, req, resp)) {
        mt_log_as(&s->log, MT_LOG_WARN, "%.16s %.200s: 401 (%s API key)", req->method, req->path,
                  mt_http_bearer(req) ? "unknown" : "no");
        return 0;
    }
    if (s->batches && strcmp(req->method, "POST") == 0 && strcmp(req->path, "/v1/files") == 0)
        return s->max_upload;
    return s->max_body;
}

/* ---- start and stop ----------------------------------------------------------------------- */

/* The file name without directories and extension. */
static char *stem(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *dot = strrchr(b, '.');
    size_t n = dot && dot != b ? (size_t)(dot - b) : strlen(b);
    return mt_strndup(b, n);
}

static int check_config(const mt_api_config *c, mt_error *err) {
    if (!c->model_path == !c->registry)
        return mt_error_set(err, "give either a model file (--model FILE) or a registry"
                                 " (--registry URL --token-file FILE)");
    if (!c->api_keys && !c->no_auth)
        return mt_error_set(err, "no API keys: give --api-keys FILE (one key per line), or"
                                 " --no-auth to serve without keys on a loopback address");
    if (c->api_keys && c->no_auth)
        return mt_error_set(err, "give either --api-keys FILE or --no-auth, not both");
    const char *listen = c->listen ? c->listen : "127.0.0.1:8080";
    if (c->no_auth && !mt_addr_loopback(listen))
        return mt_error_set(err,
                            "--no-auth is only allowed on a loopback address (127.0.0.1,"
                            " ::1), not %s; give --api-keys FILE to serve others",
                            listen);
    if (c->rate_per_min < 0) return mt_error_set(err, "the rate limit must be positive");
    if (c->model_name && (!c->model_name[0] || strlen(c->model_name) > 200))
        return mt_error_set(err, "--model-name must have 1 to 200 characters");
    return 0;
}

static void template_log(void *ctx, const char *msg) {
    mt_api_server *s = ctx;
    mt_log_as(&s->log, MT_LOG_WARN, "%s", msg);
}

static int log_chat_template(mt_api_server *s, mt_error *err) {
    char *tmpl = gguf_get_string(s->backend->model->gguf, "tokenizer.chat_template", NULL);
    bool known = false;
    mt_chat_detect(tmpl, &known);
    s->tmpl = mt_chat_template_new(tmpl, s->vocab, template_log, s);
    if (!s->tmpl) {
        free(tmpl);
        return mt_error_set(err, "out of memory for the chat template");
    }
    s->chat = mt_chat_template_family(s->tmpl);
    s->chat_end = mt_chat_template_end_token(s->tmpl);
    const char *thinks = mt_chat_thinks(s->chat) ? "; chat replies carry the model's reasoning"
                                                   " in reasoning_content"
                                                 : "";
    if (mt_chat_template_is_jinja(s->tmpl))
        mt_log_as(&s->log, MT_LOG_INFO,
                  "chat template: the model's own (tokenizer.chat_template, run as Jinja%s%s)%s",
                  known ? "; " : "", known ? mt_chat_format_name(s->chat) : "", thinks);
    else if (known)
        mt_log_as(&s->log, MT_LOG_INFO,
                  "chat template: %s (recognised in the model's tokenizer.chat_template)%s",
                  mt_chat_format_name(s->chat), thinks);
    else if (tmpl)
        mt_log_as(&s->log, MT_LOG_WARN,
                  "the model's chat template is of no family this server knows; chat uses ChatML"
                  " (<|im_start|>role ... <|im_end|>)");
    else
        mt_log_as(&s->log, MT_LOG_WARN,
                  "the model has no chat template (tokenizer.chat_template); chat uses ChatML"
                  " (<|im_start|>role ... <|im_end|>)");
    if (s->chat_end < 0 && !known)
        mt_log_as(&s->log, MT_LOG_WARN,
                  "no token ends an assistant turn of this template (<|im_end|>): chat turns end"
                  " only at the model's end-of-generation tokens");
    free(tmpl);
    return 0;
}

mt_api_server *mt_api_server_start(const mt_api_config *c, mt_error *err) {
    if (check_config(c, err)) return NULL;
    if (sodium_init() < 0) {
        mt_error_set(err, "libsodium failed to initialise");
        return NULL;
    }
    mt_api_server *s = calloc(1, sizeof *s);
    if (!s) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    mt_log_source_init(&s->log, "serve", NULL, c->quiet);
    s->started = (json_int_t)time(NULL);
    s->chat_max_tokens = c->chat_max_tokens > 0 ? c->chat_max_tokens : 1024;
    s->ubatch = c->ubatch;
    if (api_keys_load(&s->keys, c->api_keys, c->rate_per_min, err)) goto fail;
    if (c->model_path) {
        mt_progress_preload(c->model_path, stderr);
        s->backend = mt_gen_backend_local(mt_model_load(c->model_path, err), c->model_path,
                                          c->threads, c->kv_type, err);
    } else {
        mt_requester_config rc = {.registry = c->registry,
                                  .token = c->token,
                                  .key_path = c->key_path ? c->key_path : "requester.key",
                                  .cache_dir = c->cache_dir ? c->cache_dir : "moontail-cache",
                                  .wire = c->wire,
                                  .spot_check = c->spot_check,
                                  .chain = c->chain,
                                  .threads = c->threads,
                                  .ubatch = c->ubatch,
                                  .kv_type = c->kv_type,
                                  .quiet = c->quiet};
        s->backend = mt_requester_backend(&rc, "moontail serve", err);
    }
    if (!s->backend) goto fail;
    if (!(s->vocab = mt_vocab_load(s->backend->model->gguf, err))) goto fail;
    s->max_ctx = c->ctx > 0 ? c->ctx : s->backend->max_ctx;
    if (c->model_name) {
        s->model_name = strdup(c->model_name);
    } else if (c->model_path) {
        s->model_name = stem(c->model_path);
    } else {
        s->model_name = gguf_get_string(s->backend->model->gguf, "general.name", NULL);
        if (!s->model_name) s->model_name = strdup("moontail");
    }
    if (!s->model_name) {
        mt_error_set(err, "out of memory");
        goto fail;
    }
    if (log_chat_template(s, err)) goto fail;
    int parallel = c->parallel > 0 ? c->parallel : 4, queue = c->queue >= 0 ? c->queue : 16;
    if (!(s->engine = api_engine_start(s->backend, s->vocab, parallel, queue, err))) goto fail;
    api_engine_set_draft(s->engine, c->draft_k);
    const int batch_parallel = s->batch_parallel = c->batch_parallel > 0 ? c->batch_parallel : 16;
    /* behind the interactive slots (local model: they compute only when no interactive request
     * waits); no queue: the batch runner keeps at most batch_parallel requests in flight */
    s->backend->background_slots_from = parallel;
    if (!(s->batch_engine =
              api_engine_start_at(s->backend, s->vocab, parallel, batch_parallel, 0, err)))
        goto fail;
    api_engine_set_draft(s->batch_engine, c->draft_k);
    if (c->no_http) return s;
    s->max_body = s->max_upload = c->max_body ? c->max_body : 1 << 20;
    if (c->batch_dir) {
        const size_t max_file = c->max_file ? c->max_file : (size_t)100 << 20;
        if (!(s->batches = api_batches_start(c->batch_dir, (int64_t)max_file, submit_batch, s,
                                             batch_parallel, &s->log, err)))
            goto fail;
        if (s->max_upload < max_file + (64 << 10))
            s->max_upload = max_file + (64 << 10); /* + the form around it */
    }
    mt_http_server_config hc = {.addr = c->listen ? c->listen : "127.0.0.1:8080",
                                .threads = 4,
                                .max_body = s->max_body,
                                .admit = admit,
                                .handler = handle,
                                .ctx = s,
                                .error_body = api_error_body,
                                .limits = c->limits};
    if (!(s->http = mt_http_server_start_cfg(&hc, err))) goto fail;
    snprintf(s->url, sizeof s->url, "http://%s", mt_http_server_addr(s->http));
    mt_log_as(&s->log, MT_LOG_INFO,
              "model '%s' (%s backend, context %d), %d requests at once, %d may wait, %s, %s",
              s->model_name, s->backend->kind, s->max_ctx, parallel, queue,
              s->keys.open ? "no API keys (loopback only)" : "API keys required",
              s->keys.rate_per_min > 0 ? "rate limit per key" : "no rate limit");
    return s;
fail:
    mt_api_server_stop(s);
    return NULL;
}

const char *mt_api_server_url(const mt_api_server *s) {
    return s->url;
}

void mt_api_server_stop(mt_api_server *s) {
    if (!s) return;
    mt_http_server_stop(s->http);         /* no new requests; open streams are cut */
    api_batches_stopping(s->batches);     /* what the batch slots cut now runs again at restart */
    api_engine_stopping(s->batch_engine); /* running requests end at their next token */
    api_batches_stop(s->batches);         /* its runner may still submit: refused, not freed */
    api_engine_stop(s->batch_engine);
    api_engine_stop(s->engine);
    mt_chat_template_free(s->tmpl);
    mt_vocab_free(s->vocab);
    if (s->backend) s->backend->destroy(s->backend);
    api_keys_free(&s->keys);
    free(s->model_name);
    free(s);
}

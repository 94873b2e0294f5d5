/* api_reply.c - answers in OpenAI's shape (api_openai.h): one JSON object,
 * or server-sent events of chunks ending in "data: [DONE]", written as the
 * generation loop hands over text. */
#include "api_openai.h"
#include "moontail/text_buf.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct api_reply {
    api_kind kind;
    char id[48];
    json_int_t created;
    char *model;
    bool stream, include_usage;
    bool begun; /* the event stream's head (and the chat role chunk) went out */
    mt_http_stream *st;
    mt_text_buf text;  /* the whole text, when not streaming */
    bool reasoning;    /* a thinking model's chat reply: reasoning_content too */
    mt_text_buf rtext; /* the whole reasoning, when not streaming */
    api_reply_done_fn on_done;
    void *done_ctx;
    api_reply_collect_fn collect; /* instead of st: the answer goes here (batch work) */
    void *collect_ctx;
};

void api_random_id(char *out, size_t cap, const char *prefix) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (; n < cap - 1 && n < strlen(prefix) + 24; n++)
        out[n] = alnum[randombytes_uniform(sizeof alnum - 1)];
    out[n] = 0;
}

api_reply *api_reply_new(api_kind kind, const char *model, bool stream, bool include_usage,
                         mt_http_stream *st, api_reply_done_fn on_done, void *done_ctx) {
    api_reply *r = calloc(1, sizeof *r);
    if (!r || !(r->model = strdup(model))) {
        free(r);
        return NULL;
    }
    r->kind = kind;
    api_random_id(r->id, sizeof r->id, kind == API_CHAT ? "chatcmpl-" : "cmpl-");
    r->created = (json_int_t)time(NULL);
    r->stream = stream;
    r->include_usage = include_usage;
    r->st = st ? mt_http_stream_ref(st) : NULL;
    r->on_done = on_done;
    r->done_ctx = done_ctx;
    return r;
}

api_reply *api_reply_new_collect(api_kind kind, const char *model, api_reply_collect_fn collect,
                                 void *collect_ctx, api_reply_done_fn on_done, void *done_ctx) {
    api_reply *r = api_reply_new(kind, model, false, false, NULL, on_done, done_ctx);
    if (r) {
        r->collect = collect;
        r->collect_ctx = collect_ctx;
    }
    return r;
}

void api_reply_free(api_reply *r) {
    if (!r) return;
    if (r->st) mt_http_stream_release(r->st);
    free(r->model);
    mt_text_buf_free(&r->text);
    mt_text_buf_free(&r->rtext);
    free(r);
}

void api_reply_set_reasoning(api_reply *r, bool on) {
    r->reasoning = on && r->kind == API_CHAT;
}

/* OpenAI's three counts; after a node failure also "x_moontail": the new routes taken and
 * how long recovering took, so a client can see why the answer was slow. */
static json_t *usage_json(const api_gen_result *g) {
    json_t *u = json_pack("{s:i, s:i, s:i}", "prompt_tokens", (int)g->prompt_tokens,
                          "completion_tokens", (int)g->completion_tokens, "total_tokens",
                          (int)(g->prompt_tokens + g->completion_tokens));
    if (g->failovers > 0)
        json_object_set_new(u, "x_moontail",
                            json_pack("{s:i, s:f}", "failovers", g->failovers, "recovery_ms",
                                      (double)(int64_t)(g->recovery_ms + 0.5)));
    return u;
}

/* The fields every answer and chunk starts with. */
static json_t *envelope(const api_reply *r, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object", object, "created", r->created,
                     "model", r->model);
}

/* One choice of a chunk: the text piece (or a delta) and a finish reason. */
static json_t *chunk(const api_reply *r, json_t *delta_or_text, const char *finish) {
    json_t *c = envelope(r, r->kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0,
                               r->kind == API_CHAT ? "delta" : "text", delta_or_text, "logprobs",
                               "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(c, "choices", json_pack("[o]", choice));
    if (r->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* Writes "data: JSON\n\n"; -1 when the client is gone. */
static int send_event(api_reply *r, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return -1;
    size_t n = strlen(s);
    char *ev = malloc(n + 9);
    int rc = -1;
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, s, n);
        memcpy(ev + 6 + n, "\n\n", 2);
        rc = mt_http_stream_write(r->st, ev, n + 8);
    }
    free(ev);
    free(s);
    return rc;
}

/* The event stream's head, and for chat the first chunk that names the role. */
static int begin_events(api_reply *r) {
    if (r->begun) return 0;
    r->begun = true;
    json_t *h = json_pack("{s:s, s:s}", "Cache-Control", "no-cache", "X-Accel-Buffering", "no");
    if (mt_http_stream_begin(r->st, 200, "text/event-stream; charset=utf-8", h)) return -1;
    if (r->kind != API_CHAT) return 0;
    return send_event(r,
                      chunk(r, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
}

static int reply_text(void *ctx, const char *s, size_t n) {
    api_reply *r = ctx;
    if (!r->stream) {
        if (!mt_text_buf_add(&r->text, s, n)) return -1;
        return r->st && mt_http_stream_gone(r->st) ? -1 : 0;
    }
    if (begin_events(r)) return -1;
    json_t *piece = api_text_json(s, n);
    return send_event(
        r, chunk(r, r->kind == API_CHAT ? json_pack("{s:o}", "content", piece) : piece, NULL));
}

/* A thinking model's reasoning: collected, or streamed as reasoning_content deltas. */
static int reply_reasoning(void *ctx, const char *s, size_t n) {
    api_reply *r = ctx;
    if (!r->reasoning) return 0;
    if (!r->stream) {
        if (!mt_text_buf_add(&r->rtext, s, n)) return -1;
        return r->st && mt_http_stream_gone(r->st) ? -1 : 0;
    }
    if (begin_events(r)) return -1;
    return send_event(r,
                      chunk(r, json_pack("{s:o}", "reasoning_content", api_text_json(s, n)), NULL));
}

/* The whole answer: to the client's stream, or to the collector (which takes resp's json). */
static void deliver(api_reply *r, mt_http_response *resp) {
    if (r->collect) {
        r->collect(r->collect_ctx, resp->status, resp->json);
        json_decref(resp->headers);
        free(resp->text);
    } else {
        mt_http_stream_reply(r->st, resp);
    }
}

static void reply_done(void *ctx, const api_gen_result *g) {
    api_reply *r = ctx;
    if (r->on_done) r->on_done(r->done_ctx, g);
    if (g->error_status) {
        api_error e;
        api_fail(&e, g->error_status == 499 ? 500 : g->error_status,
                 g->error_status >= 500 ? "server_error" : "invalid_request_error", NULL,
                 g->error_status == 503 ? "backend_unavailable" : NULL, "%s", g->error);
        if (r->begun) { /* too late for a status: an error event ends the stream */
            send_event(r, api_error_json(&e));
            mt_http_stream_end(r->st);
        } else {
            mt_http_response resp = {0};
            api_error_respond(&e, e.status == 503 ? 1 : 0, &resp);
            deliver(r, &resp);
        }
    } else if (r->stream) {
        begin_events(r);
        send_event(
            r, chunk(r, r->kind == API_CHAT ? json_object() : json_string(""), g->finish_reason));
        if (r->include_usage) {
            json_t *u =
                envelope(r, r->kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
            json_object_set_new(u, "choices", json_array());
            json_object_set_new(u, "usage", usage_json(g));
            send_event(r, u);
        }
        mt_http_stream_write(r->st, "data: [DONE]\n\n", 14);
        mt_http_stream_end(r->st);
    } else {
        json_t *o = envelope(r, r->kind == API_CHAT ? "chat.completion" : "text_completion");
        json_t *text = api_text_json(r->text.p ? r->text.p : "", r->text.len);
        json_t *choice = r->kind == API_CHAT
                             ? json_pack("{s:i, s:{s:s, s:o, s:n}, s:n, s:s}", "index", 0,
                                         "message", "role", "assistant", "content", text, "refusal",
                                         "logprobs", "finish_reason", g->finish_reason)
                             : json_pack("{s:s, s:i, s:n, s:s}", "text", "", "index", 0, "logprobs",
                                         "finish_reason", g->finish_reason);
        if (r->kind != API_CHAT) json_object_set_new(choice, "text", text);
        if (r->reasoning)
            json_object_set_new(json_object_get(choice, "message"), "reasoning_content",
                                r->rtext.p ? api_text_json(r->rtext.p, r->rtext.len) : json_null());
        json_object_set_new(o, "choices", json_pack("[o]", choice));
        json_object_set_new(o, "usage", usage_json(g));
        mt_http_response resp = {.status = 200, .json = o};
        deliver(r, &resp);
    }
    api_reply_free(r);
}

api_gen_sink api_reply_sink(api_reply *r) {
    return (api_gen_sink){
        .text = reply_text, .done = reply_done, .ctx = r, .reasoning = reply_reasoning};
}

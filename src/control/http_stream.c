/* http_stream.c - answers that a producer thread writes after the handler
 * returned (http.h "streams"): a whole reply that is ready later, or a body
 * of unknown length sent as it is written (server-sent events).
 *
 * How it works with libmicrohttpd: the connection waiting for a stream is
 * suspended, so no server thread blocks on it. The producer's calls put the
 * news in the stream under its lock and resume the connection; libmicrohttpd
 * then calls the access handler again (answer not queued yet) or the content
 * reader (body), which takes what is there or suspends the connection again.
 * A connection is suspended and resumed only under the stream's lock, and
 * only the server's threads suspend it, so every resume follows a suspend.
 *
 * References: the handler's reference passes to the connection; a body
 * response holds one more while libmicrohttpd keeps it; producers hold the
 * others. When only the server's references are left and no answer came,
 * the producer dropped the request: the client gets a 500 (or a cut body). */
#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STREAM_MAX_PENDING = 8 << 20 }; /* unsent body bytes before writes fail */

/* References held by the server side (the connection and a body response). */
static int server_refs(const mt_http_stream *st) {
    return (st->attached ? 1 : 0) + (st->body_queued ? 1 : 0);
}

/* ---- producer side ---------------------------------------------------------------------- */

mt_http_stream *mt_http_stream_new(void) {
    mt_http_stream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->mu, NULL);
    st->refs = 1;
    return st;
}

mt_http_stream *mt_http_stream_ref(mt_http_stream *st) {
    pthread_mutex_lock(&st->mu);
    st->refs++;
    pthread_mutex_unlock(&st->mu);
    return st;
}

static void stream_free(mt_http_stream *st) {
    json_decref(st->reply.json);
    json_decref(st->reply.headers);
    free(st->reply.text);
    json_decref(st->headers);
    free(st->buf);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* Resumes the waiting connection, if one waits. Under st->mu. */
static void wake(mt_http_stream *st) {
    if (st->suspended && st->conn) {
        st->suspended = false;
        MHD_resume_connection(st->conn);
    }
}

/* Whether no producer holds a reference any more. Under st->mu. */
static bool abandoned(const mt_http_stream *st) {
    return st->refs <= server_refs(st);
}

void mt_http_stream_release(mt_http_stream *st) {
    if (!st) return;
    pthread_mutex_lock(&st->mu);
    int left = --st->refs;
    if (left > 0 && abandoned(st)) wake(st); /* the connection answers 500 or cuts the body */
    pthread_mutex_unlock(&st->mu);
    if (left == 0) stream_free(st);
}

static void response_clear(mt_http_response *r) {
    json_decref(r->json);
    json_decref(r->headers);
    free(r->text);
    free(r->file);
    if (r->stream) mt_http_stream_release(r->stream);
    memset(r, 0, sizeof *r);
}

int mt_http_stream_reply(mt_http_stream *st, mt_http_response *resp) {
    if (resp->file || resp->stream) {
        response_clear(resp);
        return -1;
    }
    pthread_mutex_lock(&st->mu);
    int rc = -1;
    if (st->state == HTTP_STREAM_PENDING) {
        st->reply = *resp;
        memset(resp, 0, sizeof *resp);
        st->state = HTTP_STREAM_REPLY;
        wake(st);
        rc = 0;
    }
    pthread_mutex_unlock(&st->mu);
    response_clear(resp);
    return rc;
}

int mt_http_stream_begin(mt_http_stream *st, int status, const char *content_type,
                         json_t *headers) {
    pthread_mutex_lock(&st->mu);
    int rc = -1;
    if (st->state == HTTP_STREAM_PENDING) {
        st->state = HTTP_STREAM_BODY;
        st->status = status;
        snprintf(st->content_type, sizeof st->content_type, "%s",
                 content_type ? content_type : "application/octet-stream");
        st->headers = headers;
        headers = NULL;
        wake(st);
        rc = 0;
    }
    pthread_mutex_unlock(&st->mu);
    json_decref(headers);
    return rc;
}

int mt_http_stream_write(mt_http_stream *st, const void *data, size_t len) {
    pthread_mutex_lock(&st->mu);
    int rc = -1;
    if (st->state == HTTP_STREAM_BODY && !st->gone && !st->ended) {
        if (st->off == st->len) st->off = st->len = 0;
        if (st->len - st->off + len > STREAM_MAX_PENDING) {
            st->gone = true; /* the client does not read what it asked for */
        } else {
            if (st->len + len > st->cap && st->off > 0) {
                /* move the unsent bytes to the front before growing */
                memmove(st->buf, st->buf + st->off, st->len - st->off);
                st->len -= st->off;
                st->off = 0;
            }
            if (st->len + len > st->cap) {
                size_t cap = 2 * (st->len + len) + 1024;
                char *b = realloc(st->buf, cap);
                if (b) st->buf = b, st->cap = cap;
            }
            if (st->len + len <= st->cap) {
                memcpy(st->buf + st->len, data, len);
                st->len += len;
                rc = 0;
                wake(st);
            }
        }
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

void mt_http_stream_end(mt_http_stream *st) {
    pthread_mutex_lock(&st->mu);
    st->ended = true;
    wake(st);
    pthread_mutex_unlock(&st->mu);
}

bool mt_http_stream_gone(mt_http_stream *st) {
    pthread_mutex_lock(&st->mu);
    bool g = st->gone;
    pthread_mutex_unlock(&st->mu);
    return g;
}

/* ---- server side ------------------------------------------------------------------------ */

/* libmicrohttpd asks for more body: hand over what is written, or park. */
static ssize_t body_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    mt_http_stream *st = cls;
    pthread_mutex_lock(&st->mu);
    ssize_t n;
    if (st->len > st->off) {
        size_t k = st->len - st->off < max ? st->len - st->off : max;
        memcpy(buf, st->buf + st->off, k);
        st->off += k;
        n = (ssize_t)k;
    } else if (st->ended) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (st->gone || abandoned(st) || !st->conn) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        st->suspended = true;
        MHD_suspend_connection(st->conn);
        n = 0;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

/* The body response is destroyed: it lets go of its reference. */
static void body_free(void *cls) {
    mt_http_stream *st = cls;
    pthread_mutex_lock(&st->mu);
    st->body_queued = false;
    st->gone = true;
    int left = --st->refs;
    pthread_mutex_unlock(&st->mu);
    if (left == 0) stream_free(st);
}

static void add_headers(struct MHD_Response *r, json_t *headers) {
    const char *k;
    json_t *v;
    json_object_foreach(headers, k, v) {
        if (json_is_string(v)) MHD_add_response_header(r, k, json_string_value(v));
    }
}

enum MHD_Result http_stream_serve(struct MHD_Connection *c, mt_http_stream *st,
                                  json_t *(*error_body)(int, const char *)) {
    pthread_mutex_lock(&st->mu);
    if (!st->attached) { /* first call: the handler's reference is now the connection's */
        st->attached = true;
        st->conn = c;
    }
    mt_http_response r = {0};
    if (st->state == HTTP_STREAM_REPLY) {
        r = st->reply;
        memset(&st->reply, 0, sizeof st->reply);
        pthread_mutex_unlock(&st->mu);
        return http_send_response(c, &r, error_body);
    }
    if (st->state == HTTP_STREAM_PENDING) {
        if (!st->gone && !abandoned(st)) {
            st->suspended = true;
            MHD_suspend_connection(c);
            pthread_mutex_unlock(&st->mu);
            return MHD_YES;
        }
        bool gone = st->gone;
        pthread_mutex_unlock(&st->mu);
        r.status = gone ? 503 : 500;
        const char *msg = gone ? "the server is stopping" : "the request was dropped unanswered";
        r.json = error_body ? error_body(r.status, msg) : json_pack("{s:s}", "error", msg);
        return http_send_response(c, &r, error_body);
    }
    /* HTTP_STREAM_BODY: send the head now, the body as it comes */
    int status = st->status;
    st->body_queued = true;
    st->refs++;
    json_t *headers = st->headers;
    st->headers = NULL;
    char type[sizeof st->content_type];
    memcpy(type, st->content_type, sizeof type);
    pthread_mutex_unlock(&st->mu);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, body_reader, st, body_free);
    if (!resp) {
        body_free(st);
        json_decref(headers);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    add_headers(resp, headers);
    json_decref(headers);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ok;
}

void http_stream_detach(mt_http_stream *st) {
    pthread_mutex_lock(&st->mu);
    st->attached = false;
    st->suspended = false;
    st->conn = NULL;
    st->gone = true;
    int left = --st->refs;
    pthread_mutex_unlock(&st->mu);
    if (left == 0) stream_free(st);
}

void http_stream_abort(mt_http_stream *st) {
    pthread_mutex_lock(&st->mu);
    st->gone = true;
    wake(st);
    pthread_mutex_unlock(&st->mu);
}

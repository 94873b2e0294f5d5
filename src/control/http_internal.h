/* http_internal.h - what the HTTP server (http_server.c), its streams
 * (http_stream.c) and its responses (http_response.c) share: the stream
 * object, the calls through which the server parks a connection on a stream
 * and wakes it up again, and the ways a response is sent. */
#ifndef MOONTAIL_HTTP_INTERNAL_H
#define MOONTAIL_HTTP_INTERNAL_H

#include "moontail/http.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum http_stream_state {
    HTTP_STREAM_PENDING, /* no answer yet */
    HTTP_STREAM_REPLY,   /* a whole answer waits in reply */
    HTTP_STREAM_BODY,    /* status and headers known, body bytes flow through buf */
} http_stream_state;

struct mt_http_stream {
    pthread_mutex_t mu;
    int refs;
    http_stream_state state;
    bool attached;               /* a connection holds a reference (from mt_http_response.stream) */
    bool suspended;              /* that connection is suspended until this stream has news */
    bool gone;                   /* the client went away or the server stops */
    bool ended;                  /* mt_http_stream_end was called */
    bool body_queued;            /* a body response (holding a reference) exists */
    struct MHD_Connection *conn; /* while attached */
    mt_http_response reply;      /* HTTP_STREAM_REPLY */
    int status;                  /* HTTP_STREAM_BODY: */
    char content_type[128];
    json_t *headers;
    char *buf; /* (cap) bytes; [off, len) not yet handed to the server */
    size_t off, len, cap;
    mt_http_stream *prev, *next; /* the server's list of attached streams */
};

/* Sends a handler's (or a stream's) whole response on c; takes its json,
 * text, file and headers. */
enum MHD_Result http_send_response(struct MHD_Connection *c, mt_http_response *resp,
                                   json_t *(*error_body)(int, const char *));

/* 429 with Retry-After: the client's address or token has `limit` requests in flight. */
enum MHD_Result http_queue_busy(struct MHD_Connection *c, int limit,
                                json_t *(*error_body)(int, const char *));
/* 413: the body of method url is over max_body bytes (announced, or sent). */
enum MHD_Result http_queue_too_big(struct MHD_Connection *c, const char *method, const char *url,
                                   size_t max_body, json_t *(*error_body)(int, const char *));
/* Decimal digits at *p (advanced past them; no sign, no spaces), saturating
 * at UINT64_MAX. False when there are none. */
bool http_digits(const char **p, uint64_t *v);

/* Called from the access handler when a request's answer is the stream st
 * (the first time after the handler, and again after every resume): sends
 * what is ready, or suspends c until the producer has news. */
enum MHD_Result http_stream_serve(struct MHD_Connection *c, mt_http_stream *st,
                                  json_t *(*error_body)(int, const char *));

/* The request is over (completed or closed): the connection lets go. */
void http_stream_detach(mt_http_stream *st);

/* The server stops: writes fail from now on and a suspended connection is
 * resumed (libmicrohttpd must not be stopped while connections are suspended). */
void http_stream_abort(mt_http_stream *st);

#endif

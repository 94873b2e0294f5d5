/* http.h - small HTTP pieces the control plane is built from: a server
 * (libmicrohttpd) that hands each request to one handler function, and a
 * client (libcurl) for JSON calls and ranged downloads.
 *
 * Server: requests are read whole (bodies up to max_body bytes, or what
 * the admit hook allows that request; larger ones get 413), then the
 * handler fills a response: a JSON value, text, or a file slice (Range:
 * bytes=a-b is honoured for files, with 206/416), or a stream that another
 * thread answers later (below). The handler runs on one of the server's
 * threads; it must be thread-safe and should not block. */
#ifndef MOONTAIL_HTTP_H
#define MOONTAIL_HTTP_H

#include "moontail/error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- server ---------------------------------------------------------------------------- */

typedef struct mt_http_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* without the query string */
    const char *body;   /* NUL-terminated (may hold NULs before body_len) */
    size_t body_len;
    void *conn; /* for mt_http_header / mt_http_query */
    /* Without a connection (conn NULL: a handler driven in-process, as
     * fuzz/fuzz_registry.c does): headers and query arguments as
     * name, value, ..., NULL (either may be NULL: none). */
    const char *const *headers;
    const char *const *query;
} mt_http_request;

/* A request header or query argument (NULL when absent). */
const char *mt_http_header(const mt_http_request *req, const char *name);
const char *mt_http_query(const mt_http_request *req, const char *name);
/* The token of "Authorization: Bearer TOKEN", or NULL. */
const char *mt_http_bearer(const mt_http_request *req);

typedef struct mt_http_stream mt_http_stream;

typedef struct mt_http_response {
    int status;
    json_t *json; /* taken (decref'd by the server) */
    char *text;   /* taken (free'd); with content_type */
    const char *content_type;
    char *file;             /* taken: serve this file (Range honoured) */
    json_t *headers;        /* taken, optional: {"Header-Name": "value", ...} added to the answer */
    mt_http_stream *stream; /* taken: the answer comes later from a producer (see below) */
} mt_http_response;

typedef void (*mt_http_handler)(void *ctx, const mt_http_request *req, mt_http_response *resp);

typedef struct mt_http_server mt_http_server;

/* What one client may take of a server, and what it holds back for the
 * addresses it trusts (a registry reserves its nodes' addresses: their
 * heartbeats get in while the public endpoints are saturated). Zero fields
 * take the defaults in parentheses. */
typedef struct mt_http_limits {
    int max_conns;            /* connections from addresses not reserved (1024) */
    int reserved_conns;       /* further ones, only for reserved addresses (512) */
    int max_conns_per_addr;   /* open at once from one address, reserved or not (64) */
    int header_timeout_s;     /* a request's headers must be in within this (10) */
    int body_timeout_s;       /* and its body within this after them (30) */
    int max_inflight_per_key; /* requests at once from one address, and per bearer token;
                                 more get 429 (64) */
} mt_http_limits;

typedef struct mt_http_server_config {
    const char *addr; /* "host:port"; port 0 picks one; loopback unless told otherwise */
    int threads;      /* worker threads (<= 0: 4) */
    size_t max_body;  /* larger request bodies get 413 (0: 1 MiB) */
    mt_http_handler handler;
    void *ctx;
    /* optional: called with ctx once a request's headers are in, before a byte of its body
     * is read (req->body is "" then). Returns the most body bytes this request may send (0:
     * max_body), so that one path (an authenticated upload) may take more than the others;
     * or answers the request at once by filling resp (status and json): its body is then
     * never read (an unauthenticated request to a path that needs a key). A body larger
     * than what it allows gets 413, before it is read when its Content-Length says so. */
    size_t (*admit)(void *ctx, const mt_http_request *req, mt_http_response *resp);
    /* optional: the JSON body of the errors the server answers by itself (413
     * body too large, 500 for a stream dropped unanswered), for APIs whose errors
     * have another shape than {"error": message}. Returns a new reference. */
    json_t *(*error_body)(int status, const char *message);
    mt_http_limits limits;
    /* optional: called (on a server thread, with no lock held) when the server
     * turns a client away because it is full, so that the owner can tell its
     * own overload from the silence of its clients */
    void (*on_overload)(void *ctx);
    /* optional TLS: with both, the server speaks HTTPS only (and plain HTTP
     * requests to it get no answer). PEM text of the certificate (its chain
     * after it) and of its unencrypted private key (tls_cert.h makes or loads
     * them); copied. */
    const char *tls_cert_pem, *tls_key_pem;
} mt_http_server_config;

/* What the limits did so far, and what the server holds now. */
typedef struct mt_http_stats {
    int conns, reserved_conns; /* open now: public, and from reserved addresses */
    int peak_conns;            /* most open at once (both kinds) */
    uint64_t accepted;         /* connections taken */
    uint64_t refused_full;     /* turned away: max_conns (or reserved_conns) reached */
    uint64_t refused_per_addr; /* turned away: max_conns_per_addr reached */
    uint64_t refused_inflight; /* requests answered 429: max_inflight_per_key reached */
    uint64_t closed_headers;   /* closed: headers not in within header_timeout_s */
    uint64_t closed_body;      /* closed: body not in within body_timeout_s */
    uint64_t refused_unread;   /* answered from their headers alone, no byte of the body read:
                                  the admit hook's refusals and announced bodies too large */
    uint64_t body_bytes;       /* request body bytes read and kept, in all */
} mt_http_stats;

mt_http_server *mt_http_server_start_cfg(const mt_http_server_config *c, mt_error *err);
/* The same with the default error shape. */
mt_http_server *mt_http_server_start(const char *addr, int threads, size_t max_body,
                                     mt_http_handler handler, void *ctx, mt_error *err);
void mt_http_server_stop(mt_http_server *s);
/* "host:port" as bound. */
const char *mt_http_server_addr(const mt_http_server *s);
void mt_http_server_stats(mt_http_server *s, mt_http_stats *out);
/* The address this request came from is trusted for the next `seconds`:
 * its connections come out of reserved_conns (max_conns_per_addr still holds).
 * Call it once the request proved who it is (a node's token). */
void mt_http_reserve_client(const mt_http_request *req, int seconds);

/* Sets resp to {"error": message} with status. */
void mt_http_error(mt_http_response *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- answers written later: streams ---------------------------------------------------- */

/* A handler that cannot answer at once (it waits for a computation on
 * another thread) creates a stream, gives a reference to the producer
 * (mt_http_stream_ref) and puts its own in resp->stream. The server then
 * parks the connection (libmicrohttpd suspends it: no server thread waits)
 * until the producer either
 *   - answers whole: mt_http_stream_reply(), like a handler's response; or
 *   - starts a body sent as it is written: mt_http_stream_begin(), then any
 *     number of mt_http_stream_write(), then mt_http_stream_end(). The body
 *     goes out with chunked transfer encoding as soon as it is written, which
 *     is what server-sent events (text/event-stream) need.
 * A producer that releases its last reference without answering gets the
 * client a 500 (or, after begin, a body cut short). When the client goes
 * away or the server stops, writes fail and mt_http_stream_gone() turns true,
 * so a producer can stop its work early. Every function is thread-safe. */

/* A new stream holding one reference. */
mt_http_stream *mt_http_stream_new(void);
mt_http_stream *mt_http_stream_ref(mt_http_stream *st);
void mt_http_stream_release(mt_http_stream *st);

/* The whole answer (json/text/headers of resp are taken; file and stream
 * are not allowed). Returns 0, or -1 when the stream was already answered
 * or begun. */
int mt_http_stream_reply(mt_http_stream *st, mt_http_response *resp);
/* Starts a body of unknown length with this status, content type and
 * optional headers (taken). Returns 0, or -1 as for reply. */
int mt_http_stream_begin(mt_http_stream *st, int status, const char *content_type, json_t *headers);
/* Queues len bytes of body. Returns 0, or -1 when the client is gone, the
 * server stops, or more than 8 MiB wait unsent (a client that does not read). */
int mt_http_stream_write(mt_http_stream *st, const void *data, size_t len);
/* The body is complete. */
void mt_http_stream_end(mt_http_stream *st);
/* The client went away or the server is stopping. */
bool mt_http_stream_gone(mt_http_stream *st);

/* ---- client ---------------------------------------------------------------------------- */

/* method + url with an optional JSON body and bearer token. Returns the
 * HTTP status (and *out = the decoded JSON body, or NULL when the body is
 * not JSON), or -1 when no answer came (err says why: refused, timeout...,
 * in words that say what to check). For status >= 400 with {"error": ...},
 * err also receives that message; an answer that is not a registry's (a
 * 404 without {"error": ...}, a page instead of JSON) gets one saying so. */
int mt_http_json(const char *method, const char *url, const char *token, const json_t *body,
                 int timeout_ms, json_t **out, mt_error *err);

/* Whether url is a registry's base URL as a person gives it (what names the
 * option, e.g. "--registry"): http:// or https://, a host, and no path (a
 * trailing "/" is fine). 0, or -1 with err saying what to give instead. */
int mt_http_check_base_url(const char *url, const char *what, mt_error *err);

/* GET url bytes [from, from + len) into buf (exactly len bytes, or an error). */
int mt_http_get_range(const char *url, uint64_t from, size_t len, void *buf, int timeout_ms,
                      mt_error *err);

/* How every https:// URL of this process is trusted (set it before the first
 * call, while one thread runs; http:// URLs are unaffected):
 *   - pin "sha256//BASE64" (tls_cert.h): the server's public key must be the
 *     pinned one; its certificate chain and host name are not checked (the
 *     registry's self-signed certificate). A mismatch is an error naming
 *     the server and what to do;
 *   - no pin: the certificate must chain to a trusted CA - the system's, or
 *     those of ca_file (PEM) - and name the host.
 * Either may be NULL. 0, or -1 for a malformed pin or a ca_file that cannot
 * be read. */
int mt_http_client_tls(const char *pin, const char *ca_file, mt_error *err);

/* Connects to the https:// url without checking its certificate and sets
 * *pem (heap) to the certificate the server presented: for a first contact
 * that pins it (trust on first use), after a person compared its pin. 0, or
 * -1 with err. */
int mt_http_peer_cert(const char *url, int timeout_ms, char **pem, mt_error *err);

#endif

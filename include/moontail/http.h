/* http.h - small HTTP pieces the control plane is built from: a server
 * (libmicrohttpd) that hands each request to one handler function, and a
 * client (libcurl) for JSON calls and ranged downloads.
 *
 * Server: requests are read whole (bodies up to max_body bytes, larger ones
 * get 413), then the handler fills a response: a JSON value, text, or a
 * file slice (Range: bytes=a-b is honoured for files, with 206/416). The
 * handler runs on one of the server's threads; it must be thread-safe. */
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
} mt_http_request;

/* A request header or query argument (NULL when absent). */
const char *mt_http_header(const mt_http_request *req, const char *name);
const char *mt_http_query(const mt_http_request *req, const char *name);
/* The token of "Authorization: Bearer TOKEN", or NULL. */
const char *mt_http_bearer(const mt_http_request *req);

typedef struct mt_http_response {
    int status;
    json_t *json; /* taken (decref'd by the server) */
    char *text;   /* taken (free'd); with content_type */
    const char *content_type;
    char *file; /* taken: serve this file (Range honoured) */
} mt_http_response;

typedef void (*mt_http_handler)(void *ctx, const mt_http_request *req, mt_http_response *resp);

typedef struct mt_http_server mt_http_server;

/* Listens on addr ("host:port", port 0 picks one; loopback unless told
 * otherwise) with `threads` worker threads (<= 0: 4). */
mt_http_server *mt_http_server_start(const char *addr, int threads, size_t max_body,
                                     mt_http_handler handler, void *ctx, mt_error *err);
void mt_http_server_stop(mt_http_server *s);
/* "host:port" as bound. */
const char *mt_http_server_addr(const mt_http_server *s);

/* Sets resp to {"error": message} with status. */
void mt_http_error(mt_http_response *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- client ---------------------------------------------------------------------------- */

/* method + url with an optional JSON body and bearer token. Returns the
 * HTTP status (and *out = the decoded JSON body, or NULL when the body is
 * not JSON), or -1 when no answer came (err says why: refused, timeout...).
 * For status >= 400 with {"error": ...}, err also receives that message. */
int mt_http_json(const char *method, const char *url, const char *token, const json_t *body,
                 int timeout_ms, json_t **out, mt_error *err);

/* GET url bytes [from, from + len) into buf (exactly len bytes, or an error). */
int mt_http_get_range(const char *url, uint64_t from, size_t len, void *buf, int timeout_ms,
                      mt_error *err);

#endif

/* http_guard.h - what the HTTP server (http_server.c) uses to survive slow
 * and abusive clients (http_guard.c): it decides which connections to take
 * (per address, in all, with room kept for reserved addresses), closes the
 * ones whose headers or body do not arrive in time, and counts requests in
 * flight per address and per token. */
#ifndef MOONTAIL_HTTP_GUARD_H
#define MOONTAIL_HTTP_GUARD_H

#include "moontail/http.h"

#include <microhttpd.h>
#include <stdbool.h>

typedef struct http_guard http_guard;

/* A guard with these limits (zero fields: defaults); on_overload(ctx) is
 * called when a connection is turned away because the server is full.
 * Starts the thread that enforces the deadlines. */
http_guard *http_guard_new(const mt_http_limits *limits, void (*on_overload)(void *), void *ctx,
                           mt_error *err);
void http_guard_free(http_guard *g);
/* The connection limit to give libmicrohttpd (public + reserved). */
unsigned http_guard_mhd_limit(const http_guard *g);

/* libmicrohttpd's accept policy (cls = the guard). */
enum MHD_Result http_guard_accept(void *cls, const struct sockaddr *addr, socklen_t len);
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls = the guard). */
void http_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe);

/* A request's headers are in: its body has body_timeout_s from now. Takes a
 * place in flight on its address's count and, with a bearer token, on the
 * token's too, in *slot; false when either has max_inflight_per_key
 * already (answer 429). *slot is NULL when nothing was taken (refused
 * included), and http_guard_request_done gives nothing back for it. */
bool http_guard_headers_in(http_guard *g, struct MHD_Connection *c, const char *bearer,
                           void **slot);
/* Its body is in: no deadline while the handler (or a stream) answers. */
void http_guard_body_in(struct MHD_Connection *c);
/* The request is over: its place in flight is given back, and the
 * connection waits for another request's headers (header_timeout_s). */
void http_guard_request_done(http_guard *g, struct MHD_Connection *c, void *slot);

int http_guard_inflight_limit(const http_guard *g);
void http_guard_stats(http_guard *g, mt_http_stats *out);
void http_guard_reserve(struct MHD_Connection *c, int seconds);

#endif

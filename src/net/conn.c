/* conn.c - the connection object of the transport: runs the handshake, then
 * sends and receives whole encrypted frames with per-wait timeouts. Any
 * failure other than an idle receive timeout breaks the connection for good
 * (the socket is shut down so the peer and any other thread notice) and keeps
 * the first reason for the log. API and wire format: transport.h. */
#include "moontail/transport.h"
#include "net_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- life cycle ----------------------------------------------------------- */

static mt_conn *conn_new(mt_sock fd, int timeout_ms, bool is_client, mt_error *err) {
    if (fd == MT_SOCK_NONE) {
        mt_error_set(err, "no socket: the connection was not made");
        return NULL;
    }
    if (net_sodium_init(err)) {
        mt_sock_close(fd);
        return NULL;
    }
    mt_conn *c = calloc(1, sizeof *c);
    if (!c) {
        mt_error_set(err, "out of memory for a connection");
        mt_sock_close(fd);
        return NULL;
    }
    c->fd = fd;
    c->timeout_ms = timeout_ms;
    c->max_payload = MT_CONN_DEFAULT_MAX_PAYLOAD;
    c->is_client = is_client;
    pthread_mutex_init(&c->lock, NULL);
    mt_sock_nodelay(fd); /* frames are whole messages: do not wait to coalesce them */
    return c;
}

static mt_conn *conn_finish(mt_conn *c, int rc, mt_error *err) {
    if (rc == 0) return c;
    mt_error_prefix(err, "handshake");
    mt_conn_close(c);
    return NULL;
}

mt_conn *mt_conn_client(mt_sock fd, const mt_keys *me, const uint8_t *pinned_pk, int timeout_ms,
                        mt_error *err) {
    mt_conn *c = conn_new(fd, timeout_ms, true, err);
    return c ? conn_finish(c, net_handshake_client(c, me, pinned_pk, err), err) : NULL;
}

mt_conn *mt_conn_server(mt_sock fd, const mt_keys *me, const mt_keys_authorized *authorized,
                        int timeout_ms, mt_error *err) {
    mt_conn *c = conn_new(fd, timeout_ms, false, err);
    return c ? conn_finish(c, net_handshake_server(c, me, authorized, err), err) : NULL;
}

void mt_conn_close(mt_conn *c) {
    if (!c) return;
    mt_sock_shutdown(c->fd, MT_SHUT_RDWR);
    mt_sock_close(c->fd);
    pthread_mutex_destroy(&c->lock);
    sodium_memzero(c, sizeof *c);
    free(c);
}

/* ---- state ------------------------------------------------------------------ */

/* Marks c broken (first reason wins) and shuts the socket down so a thread
 * blocked on the other direction, and the peer, find out. Returns -1. */
static int conn_break(mt_conn *c, mt_error *err) {
    pthread_mutex_lock(&c->lock);
    if (!c->broken) {
        c->broken = true;
        snprintf(c->reason, sizeof c->reason, "%s", err ? err->msg : "connection failed");
        mt_sock_shutdown(c->fd, MT_SHUT_RDWR);
    }
    pthread_mutex_unlock(&c->lock);
    return -1;
}

/* -1 with the first reason if c is already broken. */
static int conn_check(mt_conn *c, mt_error *err) {
    pthread_mutex_lock(&c->lock);
    int rc = c->broken ? mt_error_set(err, "connection already closed: %s", c->reason) : 0;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

bool mt_conn_is_open(mt_conn *c) {
    pthread_mutex_lock(&c->lock);
    bool open = !c->broken;
    pthread_mutex_unlock(&c->lock);
    return open;
}

bool mt_conn_peer_closed(mt_conn *c) {
    mt_pollfd p = {.fd = c->fd, .events = MT_POLLIN | MT_POLLRDHUP};
    bool gone = mt_poll(&p, 1, 0) > 0; /* readable, hung up or an error (a failed poll, e.g.
                                        EINTR, says nothing about the peer) */
    if (gone) {
        mt_error e = {{0}};
        mt_error_set(&e, "the peer closed the connection (or sent an unexpected reply)");
        conn_break(c, &e);
    }
    return gone || !mt_conn_is_open(c);
}

const char *mt_conn_reason(mt_conn *c) {
    pthread_mutex_lock(&c->lock);
    const char *r = c->broken ? c->reason : "";
    pthread_mutex_unlock(&c->lock);
    return r;
}

const char *mt_conn_peer_name(const mt_conn *c) {
    return c->peer_name;
}
const uint8_t *mt_conn_peer_key(const mt_conn *c) {
    return c->peer_pk;
}
const mt_cert *mt_conn_peer_cert(const mt_conn *c) {
    return c->peer_has_cert ? &c->peer_cert : NULL;
}
const char *mt_conn_peer_cert_note(const mt_conn *c) {
    return c->peer_cert_note;
}
void mt_conn_set_timeout(mt_conn *c, int timeout_ms) {
    c->timeout_ms = timeout_ms;
}

int mt_conn_set_max_payload(mt_conn *c, size_t max_payload, mt_error *err) {
    if (max_payload > MT_CONN_MAX_PAYLOAD_LIMIT)
        return mt_error_set(err,
                            "a frame payload limit of %zu bytes is more than a frame header "
                            "can describe (at most %zu)",
                            max_payload, MT_CONN_MAX_PAYLOAD_LIMIT);
    c->max_payload = max_payload;
    return 0;
}

/* ---- frames ------------------------------------------------------------------- */

int mt_conn_send(mt_conn *c, const void *buf, size_t len, mt_error *err) {
    char lim[32];
    if (conn_check(c, err)) return -1;
    if (len > c->max_payload)
        return mt_error_set(err, "payload of %zu bytes exceeds the %s frame limit; nothing sent",
                            len, net_size_str(c->max_payload, lim, sizeof lim));
    if (c->tx.counter == UINT64_MAX) {
        mt_error_set(err, "2^64 frames sent: the nonce counter is exhausted; reconnect");
        return conn_break(c, err);
    }
    size_t flen = 0;
    uint8_t *frame = net_frame_seal(&c->tx, buf, len, &flen);
    if (!frame)
        return mt_error_set(err, "out of memory for a frame of %zu bytes; nothing sent", len);
    int rc = net_write_full(c->fd, frame, flen, (net_wait){c->timeout_ms, -1}, err);
    free(frame);
    if (rc != NET_OK) {
        mt_error_prefix(err, "sending to %s", c->peer_name);
        return conn_break(c, err);
    }
    return 0;
}

int mt_conn_recv(mt_conn *c, void **buf, size_t *len, mt_error *err) {
    *buf = NULL;
    *len = 0;
    if (conn_check(c, err)) return -1;
    bool mid = false;
    int rc = net_frame_recv(c->fd, &c->rx, 0, c->max_payload, (net_wait){c->timeout_ms, -1}, buf,
                            len, &mid, err);
    if (rc == NET_OK) return 0;
    if (rc == NET_EOF) {
        mt_error_set(err, "%s closed the connection", c->peer_name);
        conn_break(c, err);
        return 1;
    }
    if (rc == NET_TIMEOUT && !mid) {
        mt_error_set(err, "no frame from %s within %d ms", c->peer_name, c->timeout_ms);
        return -1; /* idle, not broken: the caller may wait again */
    }
    mt_error_prefix(err, "receiving from %s", c->peer_name);
    return conn_break(c, err);
}

/* relay_splice.c - a pair of sockets copied to each other through two
 * bounded buffers (relay_internal.h), used by the relay and by the node's
 * side of it, plus the socket helpers both use. Half-closes travel through
 * (a side's EOF becomes a write shutdown of the other once its buffer is
 * written); any socket error ends the pair. */
#include "relay_internal.h"
#include "moontail/clock.h"
#include "moontail/relay.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int wait_fd(mt_sock fd, short ev, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - mt_mono_ms();
        if (left <= 0) return -1;
        mt_pollfd p = {.fd = fd, .events = ev};
        int r = mt_poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        return 0;
    }
}

int relay_read_full(mt_sock fd, void *buf, size_t n, int timeout_ms) {
    int64_t deadline = mt_mono_ms() + timeout_ms;
    size_t got = 0;
    while (got < n) {
        if (wait_fd(fd, MT_POLLIN, deadline)) return -1;
        ssize_t r = mt_sock_recv(fd, (uint8_t *)buf + got, n - got);
        if (r == 0) return -1;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

int relay_write_full(mt_sock fd, const void *buf, size_t n, int timeout_ms) {
    int64_t deadline = mt_mono_ms() + timeout_ms;
    size_t put = 0;
    while (put < n) {
        if (wait_fd(fd, MT_POLLOUT, deadline)) return -1;
        ssize_t r = mt_sock_send(fd, (const uint8_t *)buf + put, n - put);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return -1;
        }
        put += (size_t)r;
    }
    return 0;
}

bool relay_addr_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 3 || n > 127) return false;
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1] || strlen(colon + 1) > 5) return false;
    long port = 0;
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        port = port * 10 + (*p - '0');
    }
    if (port < 1 || port > 65535) return false;
    if (s[0] == '[') { /* [IPv6] */
        if (colon[-1] != ']' || colon - s < 3) return false;
        for (const char *p = s + 1; p < colon - 1; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
                  (*p >= 'A' && *p <= 'F') || *p == ':' || *p == '.'))
                return false;
        return true;
    }
    for (const char *p = s; p < colon; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              *p == '.' || *p == '-' || *p == '_'))
            return false;
    return true;
}

/* ---- proofs ------------------------------------------------------------------------------ */

void mt_relay_token_key(const char *token, uint8_t key[32]) {
    crypto_generichash(key, 32, (const uint8_t *)token, strlen(token), NULL, 0);
}

void mt_relay_proof(const uint8_t key[32], const uint8_t challenge[MT_RELAY_CHALLENGE_BYTES],
                    int64_t node_id, uint8_t proof[32]) {
    uint8_t msg[18 + MT_RELAY_CHALLENGE_BYTES + 8];
    memcpy(msg, "MTR1 relay control", 18);
    memcpy(msg + 18, challenge, MT_RELAY_CHALLENGE_BYTES);
    for (int i = 0; i < 8; i++)
        msg[18 + MT_RELAY_CHALLENGE_BYTES + i] = (uint8_t)((uint64_t)node_id >> (8 * i));
    crypto_generichash(proof, 32, msg, sizeof msg, key, 32);
}

/* ---- pipes ------------------------------------------------------------------------------- */

int relay_pipe_init(relay_pipe *p, mt_sock a, mt_sock b, size_t cap, int64_t now_ms) {
    memset(p, 0, sizeof *p);
    p->fd[0] = a;
    p->fd[1] = b;
    p->cap = cap;
    p->start_ms = now_ms;
    p->buf[0] = malloc(cap);
    p->buf[1] = malloc(cap);
    p->last_ms = now_ms;
    if (!p->buf[0] || !p->buf[1]) {
        free(p->buf[0]);
        free(p->buf[1]);
        p->buf[0] = p->buf[1] = NULL;
        return -1;
    }
    mt_sock_set_nonblock(a, true);
    mt_sock_set_nonblock(b, true);
    return 0;
}

void relay_pipe_poll(const relay_pipe *p, mt_pollfd pf[2]) {
    short ev[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (!p->eof[i] && p->len[i] < p->cap) ev[i] |= MT_POLLIN;
        if (p->len[i] > p->off[i]) ev[1 - i] |= MT_POLLOUT;
    }
    for (int i = 0; i < 2; i++) {
        pf[i].fd = ev[i] ? p->fd[i] : MT_SOCK_NONE;
        pf[i].events = ev[i];
        pf[i].revents = 0;
    }
}

int relay_pipe_step(relay_pipe *p, const mt_pollfd pf[2], int64_t now_ms) {
    for (int i = 0; i < 2; i++) {
        int j = 1 - i;
        if ((pf[i].revents & (MT_POLLIN | MT_POLLHUP | MT_POLLERR)) && !p->eof[i] &&
            p->len[i] < p->cap) {
            if (p->off[i] == p->len[i]) p->off[i] = p->len[i] = 0;
            ssize_t r = mt_sock_recv(p->fd[i], p->buf[i] + p->len[i], p->cap - p->len[i]);
            if (r > 0) {
                p->len[i] += (size_t)r;
                p->moved[i] += (uint64_t)r;
                p->last_ms = now_ms;
            } else if (r == 0) {
                p->eof[i] = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return 1;
            }
        }
        if (p->len[i] > p->off[i]) { /* non-blocking: EAGAIN just waits for POLLOUT */
            ssize_t w = mt_sock_send(p->fd[j], p->buf[i] + p->off[i], p->len[i] - p->off[i]);
            if (w > 0) {
                p->off[i] += (size_t)w;
                p->last_ms = now_ms;
                if (p->off[i] == p->len[i]) p->off[i] = p->len[i] = 0;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return 1;
            }
        }
        if (p->eof[i] && p->off[i] == p->len[i] && !p->shut[i]) {
            mt_sock_shutdown(p->fd[j], MT_SHUT_WR);
            p->shut[i] = true;
        }
    }
    return p->shut[0] && p->shut[1];
}

void relay_pipe_close(relay_pipe *p) {
    for (int i = 0; i < 2; i++) {
        if (p->fd[i] != MT_SOCK_NONE) mt_sock_close(p->fd[i]);
        p->fd[i] = MT_SOCK_NONE;
        free(p->buf[i]);
        p->buf[i] = NULL;
    }
}

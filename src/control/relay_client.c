/* relay_client.c - the node's side of the registry's relay (relay.h): one
 * thread keeps the control connection (reconnecting with backoff), answers
 * PINGs, and copies relayed connections to this node's own data-plane server
 * on loopback (relay_splice.c). Each OPEN is served by a short-lived thread
 * that connects back to the relay with the cookie and to the local server
 * (blocking, with timeouts) and hands the two sockets to the main thread, so
 * a slow or flooded relay port never stalls the control connection. Every
 * message from the relay is checked; one that does not fit the protocol ends
 * the control connection, which is then made again. */
#include "moontail/relay.h"
#include "moontail/bg_thread.h"
#include "moontail/clock.h"
#include "moontail/log.h"
#include "moontail/transport.h"
#include "relay_hello.h"
#include "relay_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    CONNECT_MS = 5000, /* connect + hello + welcome */
    OPEN_MS = 3000,    /* each connect of a data connection */
    DEAD_MS = 30000,   /* silence from the relay that ends the control connection */
    IDLE_MS = 600000,  /* a relayed connection idle this long is closed */
    BUF_BYTES = 64 << 10,
    MAX_BACKOFF_MS = 30000,
};

struct mt_relay_client {
    mt_relay_client_config cfg;
    char *relay, *local;
    mt_log_source log; /* "relay: node NAME: ..." lines */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int64_t node_id;
    char token[160];
    char addr[160];       /* public address, "" while not connected */
    char last_error[400]; /* why the last attempt failed */
    mt_bg_thread bg; /* the control connection's thread; woken: the stop, or an open finished */
    int64_t last_note_ms;
    /* opens in progress and finished ones the main thread has not taken yet */
    int inflight, n_ready;
    mt_sock (*ready)[2]; /* (relay socket, local socket), max_conns entries */
    uint64_t session;    /* the control connection opens belong to (stale ones are closed) */
};

typedef struct open_job {
    mt_relay_client *c;
    uint8_t cookie[MT_RELAY_COOKIE_BYTES];
    uint64_t session;
} open_job;

static bool stopping(mt_relay_client *c) {
    return mt_bg_thread_stopping(&c->bg);
}

static void set_addr(mt_relay_client *c, const char *addr, const char *error) {
    pthread_mutex_lock(&c->lock);
    bool changed = strcmp(c->addr, addr) != 0;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    if (error) snprintf(c->last_error, sizeof c->last_error, "%s", error);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (changed && c->cfg.on_change) c->cfg.on_change(c->cfg.ctx);
}

/* Closes the finished opens nobody will take (caller holds c->lock). */
static void drop_ready(mt_relay_client *c) {
    for (int i = 0; i < c->n_ready; i++)
        mt_sock_close(c->ready[i][0]), mt_sock_close(c->ready[i][1]);
    c->n_ready = 0;
}

/* Printable ASCII of what the relay said, for the log. */
static void printable(char *out, size_t size, const uint8_t *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < size; i++)
        out[k++] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '?';
    out[k] = 0;
}

/* ---- the control connection ------------------------------------------------------------ */

/* Reads the relay hello from fd; 0 or -1 with why. */
static int read_relay_hello(mt_relay_client *c, mt_sock fd, uint8_t challenge[32], char *why,
                            size_t wsize) {
    uint8_t h[MT_RELAY_HELLO_BYTES];
    if (relay_read_full(fd, h, sizeof h, CONNECT_MS)) {
        snprintf(why, wsize, "the relay at %s sent no hello within %d s (is it a MoonTail relay?)",
                 c->relay, CONNECT_MS / 1000);
        return -1;
    }
    if (!relay_hello_server_read(h, challenge)) {
        snprintf(why, wsize,
                 "%s answered with bytes that are not a relay hello of version %d; check the"
                 " registry's relay address and that both run the same MoonTail",
                 c->relay, MT_RELAY_VERSION);
        return -1;
    }
    return 0;
}

/* Connects, proves the node, reads WELCOME. The socket, or MT_SOCK_NONE with why. */
static mt_sock connect_control(mt_relay_client *c, char *pub, size_t psize, char *why,
                               size_t wsize) {
    mt_error err = {{0}};
    mt_sock fd = mt_connect_tcp(c->relay, CONNECT_MS, &err);
    if (fd == MT_SOCK_NONE) {
        snprintf(why, wsize, "cannot reach the relay: %.300s", err.msg);
        return MT_SOCK_NONE;
    }
    uint8_t challenge[32], hello[MT_RELAY_CONTROL_BYTES], proof[32];
    if (read_relay_hello(c, fd, challenge, why, wsize)) {
        mt_sock_close(fd);
        return -1;
    }
    pthread_mutex_lock(&c->lock);
    int64_t id = c->node_id;
    uint8_t key[32];
    mt_relay_token_key(c->token, key);
    pthread_mutex_unlock(&c->lock);
    mt_relay_proof(key, challenge, id, proof);
    relay_hello_control_write(hello, id, proof);
    uint8_t m[2 + 255];
    if (relay_write_full(fd, hello, sizeof hello, CONNECT_MS) ||
        relay_read_full(fd, m, 2, CONNECT_MS) || relay_read_full(fd, m + 2, m[1], CONNECT_MS)) {
        snprintf(why, wsize, "the relay at %s closed or went silent during the hello", c->relay);
        mt_sock_close(fd);
        return -1;
    }
    char text[260];
    printable(text, sizeof text, m + 2, m[1]);
    if (m[0] == MT_RELAY_MSG_REFUSED) {
        snprintf(why, wsize, "the relay refused this node: %s", text);
        mt_sock_close(fd);
        return -1;
    }
    if (m[0] != MT_RELAY_MSG_WELCOME || m[1] == 0 || m[1] > 127 || !relay_addr_ok(text)) {
        snprintf(why, wsize,
                 "the relay answered the hello with message type %u length %u, not a WELCOME"
                 " with a HOST:PORT",
                 m[0], m[1]);
        mt_sock_close(fd);
        return -1;
    }
    snprintf(pub, psize, "%.127s", text); /* checked: 1..127 bytes */
    mt_sock_set_nonblock(fd, true);
    return fd;
}

/* A data connection for cookie (*rfd) and a connection to the local server
 * (*lfd); 0, or -1 with why. */
static int open_data(mt_relay_client *c, const uint8_t *cookie, mt_sock *rfd, mt_sock *lfd,
                     char *why, size_t wsize) {
    mt_error err = {{0}};
    mt_sock fd = mt_connect_tcp(c->relay, OPEN_MS, &err);
    if (fd == MT_SOCK_NONE) {
        snprintf(why, wsize, "data connection to the relay: %.300s", err.msg);
        return -1;
    }
    uint8_t challenge[32], hello[MT_RELAY_DATA_BYTES];
    relay_hello_data_write(hello, cookie);
    if (read_relay_hello(c, fd, challenge, why, wsize) ||
        relay_write_full(fd, hello, sizeof hello, OPEN_MS)) {
        if (!why[0]) snprintf(why, wsize, "data connection: the relay closed during the hello");
        mt_sock_close(fd);
        return -1;
    }
    /* if this node's server is down the peer is closed at once instead of waiting */
    *lfd = mt_connect_tcp(c->local, OPEN_MS, &err);
    if (*lfd == MT_SOCK_NONE) {
        snprintf(why, wsize, "this node's own server %s: %.200s", c->local, err.msg);
        mt_sock_close(fd);
        return -1;
    }
    *rfd = fd;
    return 0;
}

static void *open_main(void *arg) {
    open_job *j = arg;
    mt_relay_client *c = j->c;
    char why[400] = "";
    mt_sock rfd = MT_SOCK_NONE, lfd = MT_SOCK_NONE;
    int rc = open_data(c, j->cookie, &rfd, &lfd, why, sizeof why);
    pthread_mutex_lock(&c->lock);
    bool take =
        rc == 0 && !stopping(c) && j->session == c->session && c->n_ready < c->cfg.max_conns;
    if (take) {
        c->ready[c->n_ready][0] = rfd;
        c->ready[c->n_ready][1] = lfd;
        c->n_ready++;
    } else if (rc == 0) {
        mt_sock_close(rfd);
        mt_sock_close(lfd);
    }
    bool note = rc != 0 && mt_mono_ms() - c->last_note_ms > 5000;
    if (note) c->last_note_ms = mt_mono_ms();
    pthread_mutex_unlock(&c->lock);
    if (note) mt_log_as(&c->log, MT_LOG_WARN, "%s", why);
    mt_bg_thread_wake(&c->bg);
    /* last: once inflight is 0, mt_relay_client_stop may free c */
    pthread_mutex_lock(&c->lock);
    c->inflight--;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    free(j);
    return NULL;
}

/* Starts a thread for an OPEN, unless n pairs plus opens in progress reach max_conns. */
static void start_open(mt_relay_client *c, const uint8_t *cookie, int n) {
    pthread_mutex_lock(&c->lock);
    bool full = n + c->inflight + c->n_ready >= c->cfg.max_conns;
    int64_t now = mt_mono_ms();
    bool note = full && now - c->last_note_ms > 5000;
    if (note) c->last_note_ms = now;
    open_job *j = full ? NULL : malloc(sizeof *j);
    if (j) {
        j->c = c;
        memcpy(j->cookie, cookie, MT_RELAY_COOKIE_BYTES);
        j->session = c->session;
        c->inflight++;
    }
    pthread_mutex_unlock(&c->lock);
    if (note)
        mt_log_as(&c->log, MT_LOG_WARN,
                  "the relay asks for more than %d connections at once; ignoring the rest",
                  c->cfg.max_conns);
    if (!j) return;
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, open_main, j) != 0) {
        pthread_mutex_lock(&c->lock);
        c->inflight--;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        free(j);
    }
    pthread_attr_destroy(&at);
}

/* One message from the relay (already checked to be complete); n = pairs
 * relayed now. 0, or -1 with why. */
static int on_message(mt_relay_client *c, mt_sock ctl, const uint8_t *m, int n, char *why,
                      size_t wsize) {
    switch (m[0]) {
    case MT_RELAY_MSG_PING: {
        uint8_t pong[2] = {MT_RELAY_MSG_PONG, 0};
        if (relay_write_full(ctl, pong, 2, CONNECT_MS) == 0) return 0;
        snprintf(why, wsize, "could not answer the relay's PING");
        return -1;
    }
    case MT_RELAY_MSG_OPEN:
        start_open(c, m + 2, n);
        return 0;
    case MT_RELAY_MSG_REFUSED: {
        char text[260];
        printable(text, sizeof text, m + 2, m[1]);
        snprintf(why, wsize, "the relay closed this node's connection: %s", text);
        return -1;
    }
    default:
        snprintf(why, wsize, "the relay sent message type %u, which it may not send now", m[0]);
        return -1;
    }
}

/* Valid (type, length) of a message from the relay. */
static bool header_ok(uint8_t type, uint8_t len) {
    return (type == MT_RELAY_MSG_PING && len == 0) ||
           (type == MT_RELAY_MSG_OPEN && len == MT_RELAY_COOKIE_BYTES) ||
           (type == MT_RELAY_MSG_REFUSED && len > 0);
}

/* Runs the control connection until it ends; why says how. */
static void serve(mt_relay_client *c, mt_sock ctl, char *why, size_t wsize) {
    int max = c->cfg.max_conns;
    relay_pipe *pairs = calloc((size_t)max, sizeof *pairs);
    mt_pollfd *pf = calloc(2 + 2 * (size_t)max, sizeof *pf);
    uint8_t in[2 + 255];
    size_t in_len = 0;
    int n = 0;
    int64_t last_rx = mt_mono_ms();
    pthread_mutex_lock(&c->lock);
    c->session++; /* opens of an earlier control connection are closed when they finish */
    drop_ready(c);
    pthread_mutex_unlock(&c->lock);
    if (!pairs || !pf) snprintf(why, wsize, "out of memory");
    while (pairs && pf) {
        if (stopping(c)) {
            snprintf(why, wsize, "the node is stopping");
            break;
        }
        pf[0] = (mt_pollfd){.fd = mt_bg_thread_wake_fd(&c->bg), .events = MT_POLLIN};
        pf[1] = (mt_pollfd){.fd = ctl, .events = MT_POLLIN};
        for (int i = 0; i < n; i++) relay_pipe_poll(&pairs[i], pf + 2 + 2 * i);
        int np = n;
        int rc = mt_poll(pf, 2 + 2 * (size_t)np, 1000);
        int64_t now = mt_mono_ms();
        if (rc < 0 && errno != EINTR) {
            snprintf(why, wsize, "poll: %s", mt_sock_strerror(errno));
            break;
        }
        if (rc > 0 && pf[0].revents) { /* finished opens become relayed pairs */
            mt_bg_thread_clear(&c->bg);
            pthread_mutex_lock(&c->lock);
            for (int i = 0; i < c->n_ready; i++) {
                mt_sock *fds = c->ready[i];
                if (n < max && relay_pipe_init(&pairs[n], fds[0], fds[1], BUF_BYTES, now) == 0)
                    n++;
                else
                    mt_sock_close(fds[0]), mt_sock_close(fds[1]);
            }
            c->n_ready = 0;
            pthread_mutex_unlock(&c->lock);
        }
        if (rc > 0 && (pf[1].revents & (MT_POLLIN | MT_POLLHUP | MT_POLLERR))) {
            ssize_t got = mt_sock_recv(ctl, in + in_len, sizeof in - in_len);
            if (got == 0 ||
                (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                snprintf(why, wsize, "the relay closed the control connection");
                break;
            }
            if (got > 0) {
                in_len += (size_t)got;
                last_rx = now;
            }
            bool bad = false;
            while (in_len >= 2 && !bad) {
                if (!header_ok(in[0], in[1])) {
                    snprintf(why, wsize,
                             "the relay sent a message of type %u and length %u, which the"
                             " protocol does not have",
                             in[0], in[1]);
                    bad = true;
                    break;
                }
                size_t whole = 2 + (size_t)in[1];
                if (in_len < whole) break;
                if (on_message(c, ctl, in, n, why, wsize)) bad = true;
                memmove(in, in + whole, in_len - whole);
                in_len -= whole;
            }
            if (bad) break;
        }
        for (int i = 0; i < np; i++) {
            mt_pollfd *q = pf + 2 + 2 * i;
            if (((q[0].revents | q[1].revents) && relay_pipe_step(&pairs[i], q, now)) ||
                now - pairs[i].last_ms > IDLE_MS) {
                relay_pipe_close(&pairs[i]); /* its fds are MT_SOCK_NONE now: removed below */
            }
        }
        int k = 0;
        for (int i = 0; i < n; i++)
            if (pairs[i].fd[0] != MT_SOCK_NONE) pairs[k++] = pairs[i];
        n = k;
        if (now - last_rx > DEAD_MS) {
            snprintf(why, wsize, "no word from the relay for %d s", DEAD_MS / 1000);
            break;
        }
    }
    for (int i = 0; pairs && i < n; i++) relay_pipe_close(&pairs[i]);
    free(pairs);
    free(pf);
    mt_sock_close(ctl);
    pthread_mutex_lock(&c->lock);
    c->session++;
    drop_ready(c);
    pthread_mutex_unlock(&c->lock);
}

static void *client_main(void *arg) {
    mt_relay_client *c = arg;
    int backoff = 1000, failures = 0;
    while (!stopping(c)) {
        char why[400] = "", pub[160] = "";
        mt_sock fd = connect_control(c, pub, sizeof pub, why, sizeof why);
        if (fd == MT_SOCK_NONE) {
            set_addr(c, "", why);
            if (failures++ % 10 == 0)
                mt_log_as(&c->log, MT_LOG_WARN, "%s; trying again in %d s", why, backoff / 1000);
            mt_bg_thread_sleep_full(&c->bg, backoff); /* an open finishing does not end it */
            backoff = backoff * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : backoff * 2;
            continue;
        }
        failures = 0;
        backoff = 1000;
        mt_log_as(&c->log, MT_LOG_INFO, "connected to %s; peers reach this node at %s", c->relay,
                  pub);
        set_addr(c, pub, "");
        serve(c, fd, why, sizeof why);
        set_addr(c, "", why);
        if (!stopping(c)) {
            mt_log_as(&c->log, MT_LOG_WARN, "%s; connecting again", why);
            mt_bg_thread_sleep_full(&c->bg, 1000);
        }
    }
    return NULL;
}

/* ---- API -------------------------------------------------------------------------------- */

mt_relay_client *mt_relay_client_start(const mt_relay_client_config *cfg, mt_error *err) {
    if (!cfg->relay || !cfg->local || !cfg->token || cfg->node_id <= 0) {
        mt_error_set(err, "relay client: the relay address, local address, node id and token"
                          " are required");
        return NULL;
    }
    if (!relay_addr_ok(cfg->relay)) {
        mt_error_set(err, "relay address '%s' is not HOST:PORT", cfg->relay);
        return NULL;
    }
    mt_relay_client *c = calloc(1, sizeof *c);
    if (!c) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    if (c->cfg.max_conns <= 0) c->cfg.max_conns = 256;
    c->relay = strdup(cfg->relay);
    c->local = strdup(cfg->local);
    mt_log_source_init(&c->log, "relay", cfg->log_name ? cfg->log_name : "node", cfg->quiet);
    c->node_id = cfg->node_id;
    snprintf(c->token, sizeof c->token, "%s", cfg->token);
    pthread_mutex_init(&c->lock, NULL);
    mt_cond_init_mono(&c->cond);
    c->ready = calloc((size_t)c->cfg.max_conns, sizeof *c->ready);
    if (mt_bg_thread_init(&c->bg, err)) {
        mt_error_prefix(err, "relay client");
        mt_relay_client_stop(c);
        return NULL;
    }
    if (!c->relay || !c->local || !c->ready) {
        mt_error_set(err, "relay client: out of memory");
        mt_relay_client_stop(c);
        return NULL;
    }
    if (mt_bg_thread_start(&c->bg, client_main, c, err)) {
        mt_error_prefix(err, "relay client");
        mt_relay_client_stop(c);
        return NULL;
    }
    return c;
}

void mt_relay_client_stop(mt_relay_client *c) {
    if (!c) return;
    mt_bg_thread_stop(&c->bg);
    pthread_mutex_lock(&c->lock);
    pthread_cond_broadcast(&c->cond); /* a wait for the address ends */
    /* opens in progress end within their timeouts */
    while (c->inflight > 0) pthread_cond_wait(&c->cond, &c->lock);
    drop_ready(c);
    pthread_mutex_unlock(&c->lock);
    free(c->ready);
    mt_bg_thread_destroy(&c->bg);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c->relay);
    free(c->local);
    free(c);
}

void mt_relay_client_set_auth(mt_relay_client *c, int64_t node_id, const char *token) {
    pthread_mutex_lock(&c->lock);
    c->node_id = node_id;
    snprintf(c->token, sizeof c->token, "%s", token);
    pthread_mutex_unlock(&c->lock);
}

void mt_relay_client_addr(mt_relay_client *c, char *out, size_t size) {
    pthread_mutex_lock(&c->lock);
    snprintf(out, size, "%s", c->addr);
    pthread_mutex_unlock(&c->lock);
}

int mt_relay_client_wait(mt_relay_client *c, int timeout_ms, char *out, size_t size,
                         mt_error *err) {
    struct timespec ts = mt_mono_after_ms(timeout_ms);
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    while (!c->addr[0] && !stopping(c) && rc == 0) rc = mt_cond_wait_until(&c->cond, &c->lock, &ts);
    snprintf(out, size, "%s", c->addr);
    if (!c->addr[0])
        mt_error_set(err, "no public address from the relay at %s within %d s%s%s", c->relay,
                     timeout_ms / 1000, c->last_error[0] ? ": " : "", c->last_error);
    int ok = c->addr[0] ? 0 : -1;
    pthread_mutex_unlock(&c->lock);
    return ok;
}

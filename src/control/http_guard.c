/* http_guard.c - the HTTP server's defence against slow and abusive clients
 * (http_guard.h). libmicrohttpd asks it whether to take each connection:
 * an address may hold max_conns_per_addr of them, and all addresses that
 * are not reserved together max_conns; reserved addresses (a registry's
 * nodes) have reserved_conns of their own, so their heartbeats get in while
 * the public side is full. A thread closes (shutdown) every connection whose
 * request headers are not in within header_timeout_s, or whose body is not
 * in within body_timeout_s after them: a client that trickles a byte at a
 * time cannot hold a connection longer than that. Requests in flight are
 * counted per address, and also per bearer token (by its hash) when they
 * carry one: either count at its limit refuses the request. */
#include "http_guard.h"
#include "moontail/bg_thread.h"
#include "moontail/clock.h"
#include "moontail/sysinfo.h"
#include "moontail/sock.h"

#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BUCKETS 1024
#define GUARD_KEY_MAX 20
/* connections shut for newcomers (evict_for) stay open until libmicrohttpd closes them */
#define EVICT_SLACK 64

/* An address (its open connections, whether it is reserved) or a token;
 * either way its requests in flight. */
typedef struct guard_key {
    struct guard_key *next; /* in its bucket */
    uint8_t key[GUARD_KEY_MAX];
    uint8_t len;
    int conns, inflight;
    int64_t reserved_until; /* monotonic ms */
} guard_key;

/* A request's places in flight: on its address's count, and on its token's when it has one. */
typedef struct guard_slot {
    guard_key *addr, *token;
} guard_slot;

typedef enum conn_phase {
    PHASE_HEADERS, /* waiting for a request's headers (the first, or the next one) */
    PHASE_BODY,    /* headers in, body coming */
    PHASE_ANSWER,  /* the request is whole: the handler or a stream answers it */
} conn_phase;

typedef struct guard_conn {
    struct guard_conn *prev, *next;
    http_guard *g;
    mt_sock fd;
    guard_key *addr;
    bool reserved; /* counted in reserved_conns */
    bool shut;     /* shut down by a deadline: libmicrohttpd will close it */
    conn_phase phase;
    int64_t since; /* monotonic ms the phase began */
} guard_conn;

struct http_guard {
    mt_http_limits lim;
    void (*on_overload)(void *);
    void *ctx;
    pthread_mutex_t mu;
    mt_bg_thread deadlines; /* closes connections past their deadline, 4 times a second */
    guard_key *buckets[GUARD_BUCKETS];
    guard_conn *conns;
    int public_conns, reserved_conns, peak;
    uint64_t accepted, refused_full, refused_per_addr, refused_inflight, closed_headers,
        closed_body;
};

/* The key of an address: its family and bytes (the port is not part of it). */
static bool addr_key(const struct sockaddr *sa, uint8_t key[GUARD_KEY_MAX], uint8_t *len) {
    if (!sa) return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        key[0] = 4;
        memcpy(key + 1, &in->sin_addr, 4);
        *len = 5;
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in = (const void *)sa;
        key[0] = 6;
        memcpy(key + 1, &in->sin6_addr, 16);
        *len = 17;
        return true;
    }
    return false;
}

static unsigned bucket_of(const uint8_t *key, uint8_t len) {
    uint32_t h = 2166136261u;
    for (uint8_t i = 0; i < len; i++) h = (h ^ key[i]) * 16777619u;
    return h % GUARD_BUCKETS;
}

/* The entry for key (made when `make`; NULL when absent or out of memory). */
static guard_key *find(http_guard *g, const uint8_t *key, uint8_t len, bool make) {
    unsigned b = bucket_of(key, len);
    for (guard_key *e = g->buckets[b]; e; e = e->next)
        if (e->len == len && memcmp(e->key, key, len) == 0) return e;
    if (!make) return NULL;
    guard_key *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    memcpy(e->key, key, len);
    e->len = len;
    e->next = g->buckets[b];
    g->buckets[b] = e;
    return e;
}

/* Drops e when nothing refers to it any more. */
static void release_key(http_guard *g, guard_key *e, int64_t now) {
    if (e->conns > 0 || e->inflight > 0 || e->reserved_until > now) return;
    guard_key **p = &g->buckets[bucket_of(e->key, e->len)];
    while (*p && *p != e) p = &(*p)->next;
    if (*p) *p = e->next;
    free(e);
}

static void *deadline_thread(void *arg) {
    http_guard *g = arg;
    int64_t purged = mt_mono_ms();
    while (!mt_bg_thread_stopping(&g->deadlines)) {
        pthread_mutex_lock(&g->mu);
        int64_t now = mt_mono_ms();
        int64_t hdr = (int64_t)g->lim.header_timeout_s * 1000,
                body = (int64_t)g->lim.body_timeout_s * 1000;
        for (guard_conn *c = g->conns; c; c = c->next) {
            if (c->shut || c->phase == PHASE_ANSWER) continue;
            bool late = c->phase == PHASE_HEADERS ? now - c->since > hdr : now - c->since > body;
            if (!late) continue;
            /* libmicrohttpd sees the end of the stream and closes the connection itself
             * (it calls the CLOSED notification, which takes this lock, before close(),
             * so the descriptor is still this connection's) */
            mt_sock_shutdown(c->fd, MT_SHUT_RDWR);
            c->shut = true;
            if (c->phase == PHASE_HEADERS)
                g->closed_headers++;
            else
                g->closed_body++;
        }
        if (now - purged > 10000) { /* reservations that ran out */
            purged = now;
            for (int b = 0; b < GUARD_BUCKETS; b++)
                for (guard_key *e = g->buckets[b], *next; e; e = next) {
                    next = e->next;
                    release_key(g, e, now);
                }
        }
        pthread_mutex_unlock(&g->mu);
        mt_bg_thread_sleep(&g->deadlines, 250);
    }
    return NULL;
}

/* Room for every connection the limits allow: the soft limit on open files
 * is raised towards the hard one, and the limits shrink to what fits (a
 * third of it reserved); they never grow past what was set. */
static void fit_open_files(mt_http_limits *l) {
    const int64_t spare = 256; /* the process's other files: database, model, sockets */
    int64_t want = (int64_t)l->max_conns + (int64_t)l->reserved_conns + EVICT_SLACK + spare;
    int64_t have = mt_sys_open_files(want);
    if (have >= want) return;
    int64_t room = have > spare + 32 ? have - spare : 32;
    int64_t reserved = room / 3 > 16 ? room / 3 : 16;
    if (reserved < (int64_t)l->reserved_conns) l->reserved_conns = (int)reserved;
    /* the public side may use what the reserved one leaves, when that was set lower */
    int64_t left = room - (int64_t)l->reserved_conns, max = left > 16 ? left : 16;
    if (max < (int64_t)l->max_conns) l->max_conns = (int)max;
}

http_guard *http_guard_new(const mt_http_limits *limits, void (*on_overload)(void *), void *ctx,
                           mt_error *err) {
    http_guard *g = calloc(1, sizeof *g);
    if (!g) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    mt_http_limits l = limits ? *limits : (mt_http_limits){0};
    if (l.max_conns <= 0) l.max_conns = 1024;
    if (l.reserved_conns <= 0) l.reserved_conns = 512;
    if (l.max_conns_per_addr <= 0) l.max_conns_per_addr = 64;
    if (l.header_timeout_s <= 0) l.header_timeout_s = 10;
    if (l.body_timeout_s <= 0) l.body_timeout_s = 30;
    if (l.max_inflight_per_key <= 0) l.max_inflight_per_key = 64;
    fit_open_files(&l);
    g->lim = l;
    g->on_overload = on_overload;
    g->ctx = ctx;
    pthread_mutex_init(&g->mu, NULL);
    g->deadlines.wake = MT_WAKE_NONE; /* http_guard_free may run before the init */
    if (mt_bg_thread_init(&g->deadlines, err) != 0 ||
        mt_bg_thread_start(&g->deadlines, deadline_thread, g, err) != 0) {
        mt_error_prefix(err,
                        "HTTP server: cannot start the thread that enforces request deadlines");
        http_guard_free(g);
        return NULL;
    }
    return g;
}

void http_guard_free(http_guard *g) {
    if (!g) return;
    mt_bg_thread_stop(&g->deadlines);
    mt_bg_thread_destroy(&g->deadlines);
    for (int b = 0; b < GUARD_BUCKETS; b++)
        for (guard_key *e = g->buckets[b], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    for (guard_conn *c = g->conns, *next; c; c = next) { /* none once libmicrohttpd stopped */
        next = c->next;
        free(c);
    }
    pthread_mutex_destroy(&g->mu);
    free(g);
}

unsigned http_guard_mhd_limit(const http_guard *g) {
    return (unsigned)(g->lim.max_conns + g->lim.reserved_conns + EVICT_SLACK);
}

int http_guard_inflight_limit(const http_guard *g) {
    return g->lim.max_inflight_per_key;
}

/* The public side is full and an address holding `have` connections asks for
 * one more: the newest connection still waiting for its first request's
 * headers, of the address that holds the most connections (more than `have`
 * + 1), is shut, so that one address filling the server with half-sent
 * requests cannot keep out an address that holds fewer. True when one was. */
static bool evict_for(http_guard *g, int have) {
    guard_conn *victim = NULL;
    for (guard_conn *c = g->conns; c; c = c->next) {
        if (c->reserved || c->shut || c->phase != PHASE_HEADERS || c->addr->conns <= have + 1)
            continue;
        if (!victim || c->addr->conns > victim->addr->conns) victim = c;
    }
    if (!victim) return false;
    mt_sock_shutdown(victim->fd, MT_SHUT_RDWR);
    victim->shut = true;
    g->closed_headers++;
    return true;
}

enum MHD_Result http_guard_accept(void *cls, const struct sockaddr *sa, socklen_t len) {
    (void)len;
    http_guard *g = cls;
    uint8_t key[GUARD_KEY_MAX], kl;
    if (!addr_key(sa, key, &kl)) return MHD_YES; /* not an IP address: nothing to count */
    pthread_mutex_lock(&g->mu);
    guard_key *e = find(g, key, kl, false);
    bool full = false, ok;
    /* reserved addresses too: one of them must not take every reserved connection */
    if (e && e->conns >= g->lim.max_conns_per_addr) {
        ok = false;
        g->refused_per_addr++;
    } else if (e && e->reserved_until > mt_mono_ms()) {
        ok = g->reserved_conns < g->lim.reserved_conns;
        full = !ok;
    } else {
        ok = g->public_conns < g->lim.max_conns || evict_for(g, e ? e->conns : 0);
        full = g->public_conns >= g->lim.max_conns;
    }
    if (full && !ok) g->refused_full++;
    pthread_mutex_unlock(&g->mu);
    if (full && g->on_overload) g->on_overload(g->ctx);
    return ok ? MHD_YES : MHD_NO;
}

static void conn_started(http_guard *g, struct MHD_Connection *c, void **socket_context) {
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD),
                                   *ad = MHD_get_connection_info(
                                       c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    uint8_t key[GUARD_KEY_MAX], kl;
    if (!fd || !ad || !addr_key(ad->client_addr, key, &kl)) return;
    guard_conn *gc = calloc(1, sizeof *gc);
    if (!gc) return;
    gc->g = g;
    gc->fd = (mt_sock)fd->connect_fd;
    pthread_mutex_lock(&g->mu);
    int64_t now = mt_mono_ms();
    gc->addr = find(g, key, kl, true);
    if (!gc->addr) {
        pthread_mutex_unlock(&g->mu);
        free(gc);
        return;
    }
    gc->addr->conns++;
    gc->reserved = gc->addr->reserved_until > now;
    if (gc->reserved)
        g->reserved_conns++;
    else
        g->public_conns++;
    if (g->public_conns + g->reserved_conns > g->peak)
        g->peak = g->public_conns + g->reserved_conns;
    g->accepted++;
    gc->phase = PHASE_HEADERS;
    gc->since = now;
    gc->next = g->conns;
    if (g->conns) g->conns->prev = gc;
    g->conns = gc;
    pthread_mutex_unlock(&g->mu);
    *socket_context = gc;
}

static void conn_closed(http_guard *g, guard_conn *gc) {
    pthread_mutex_lock(&g->mu);
    if (gc->prev)
        gc->prev->next = gc->next;
    else
        g->conns = gc->next;
    if (gc->next) gc->next->prev = gc->prev;
    if (gc->reserved)
        g->reserved_conns--;
    else
        g->public_conns--;
    gc->addr->conns--;
    release_key(g, gc->addr, mt_mono_ms());
    pthread_mutex_unlock(&g->mu);
    free(gc);
}

void http_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe) {
    http_guard *g = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = NULL;
        conn_started(g, c, socket_context);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        conn_closed(g, *socket_context);
        *socket_context = NULL;
    }
}

static guard_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

static void set_phase(guard_conn *gc, conn_phase p) {
    gc->phase = p;
    gc->since = mt_mono_ms();
}

bool http_guard_headers_in(http_guard *g, struct MHD_Connection *c, const char *bearer,
                           void **slot) {
    *slot = NULL;
    guard_conn *gc = conn_of(c);
    uint8_t key[GUARD_KEY_MAX], kl = 0;
    if (bearer && *bearer) { /* a hash: the table never holds a token */
        key[0] = 't';
        crypto_generichash(key + 1, 16, (const unsigned char *)bearer, strlen(bearer), NULL, 0);
        kl = 17;
    }
    guard_slot *s = malloc(sizeof *s);
    pthread_mutex_lock(&g->mu);
    if (gc) set_phase(gc, PHASE_BODY);
    /* the address counts whatever the token: tokens are not checked here, so a client
     * sending a new one with every request would otherwise never be counted at all */
    guard_key *addr = gc ? gc->addr : NULL, *token = kl ? find(g, key, kl, true) : NULL;
    int limit = g->lim.max_inflight_per_key;
    bool ok = !(addr && addr->inflight >= limit) && !(token && token->inflight >= limit);
    if (!ok) g->refused_inflight++;
    if (ok && s && (addr || token)) {
        if (addr) addr->inflight++;
        if (token) token->inflight++;
        *s = (guard_slot){addr, token};
        *slot = s;
        s = NULL;
    } else if (token) { /* refused (or no memory for the slot: then not counted) */
        release_key(g, token, mt_mono_ms());
    }
    pthread_mutex_unlock(&g->mu);
    free(s);
    return ok;
}

void http_guard_body_in(struct MHD_Connection *c) {
    guard_conn *gc = conn_of(c);
    if (!gc) return;
    pthread_mutex_lock(&gc->g->mu);
    set_phase(gc, PHASE_ANSWER);
    pthread_mutex_unlock(&gc->g->mu);
}

void http_guard_request_done(http_guard *g, struct MHD_Connection *c, void *slot) {
    guard_conn *gc = c ? conn_of(c) : NULL;
    guard_slot *s = slot;
    pthread_mutex_lock(&g->mu);
    if (s) {
        int64_t now = mt_mono_ms();
        guard_key *held[2] = {s->addr, s->token};
        for (int i = 0; i < 2; i++)
            if (held[i]) {
                held[i]->inflight--;
                release_key(g, held[i], now);
            }
    }
    if (gc) set_phase(gc, PHASE_HEADERS);
    pthread_mutex_unlock(&g->mu);
    free(s);
}

void http_guard_reserve(struct MHD_Connection *c, int seconds) {
    guard_conn *gc = conn_of(c);
    if (!gc || seconds <= 0) return;
    pthread_mutex_lock(&gc->g->mu);
    int64_t until = mt_mono_ms() + (int64_t)seconds * 1000;
    if (gc->addr->reserved_until < until) gc->addr->reserved_until = until;
    pthread_mutex_unlock(&gc->g->mu);
}

void http_guard_stats(http_guard *g, mt_http_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = (mt_http_stats){.conns = g->public_conns,
                           .reserved_conns = g->reserved_conns,
                           .peak_conns = g->peak,
                           .accepted = g->accepted,
                           .refused_full = g->refused_full,
                           .refused_per_addr = g->refused_per_addr,
                           .refused_inflight = g->refused_inflight,
                           .closed_headers = g->closed_headers,
                           .closed_body = g->closed_body};
    pthread_mutex_unlock(&g->mu);
}

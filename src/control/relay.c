/* relay.c - the registry's relay (relay.h): one thread and one poll() loop
 * over the relay port, the nodes' control connections, their public ports,
 * peers waiting for their node, and relayed pairs of sockets.
 *
 * Every byte a client sends before it is relayed is checked against the
 * protocol in relay.h (the hellos by relay_hello.c); whatever does not fit
 * closes that one connection.
 * Everything is bounded: hellos in progress, connections per node, bytes
 * buffered per connection, and the time each stage may take. What a relayed
 * pair carries is copied, never read (relay_splice.c). */
#include "moontail/relay.h"
#include "moontail/bg_thread.h"
#include "moontail/clock.h"
#include "moontail/log.h"
#include "moontail/transport.h"
#include "relay_hello.h"
#include "relay_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
    MAX_HELLOS = 256,     /* connections in their hello at once (then the oldest is closed) */
    SILENT_MS = 1000,     /* a relayed peer that sent nothing for this long may be evicted */
    HELLO_MS = 5000,      /* time to send a hello */
    OPEN_MS = 10000,      /* time for a node to open the data connection a peer waits for */
    PING_MS = 10000,      /* relay -> node PING interval */
    DEAD_MS = 30000,      /* a node silent this long is dropped */
    OUT_BYTES = 4096,     /* control bytes queued for a node */
    HISTORY = 1024,       /* remembered (node, port) pairs, to give a node its port back */
    MAX_NODES_ANY = 4096, /* nodes at once without a port range */
    ACCEPTS_PER_ROUND = 64,
};

typedef struct hello_conn {
    int fd;
    uint8_t challenge[MT_RELAY_CHALLENGE_BYTES];
    uint8_t buf[MT_RELAY_CONTROL_BYTES];
    size_t have;
    int64_t deadline;
    char peer[64];
} hello_conn;

typedef struct relay_node {
    int64_t id;
    uint64_t serial; /* unique per control connection; waits and pairs name their node by it */
    int ctl, pub, port;
    uint8_t out[OUT_BYTES];
    size_t out_len;
    uint8_t in[2];
    size_t in_len;
    int64_t last_rx, last_ping;
    int conns; /* waiting + relayed */
    bool dead;
} relay_node;

typedef struct waiting {
    int fd;
    uint64_t node;
    uint8_t cookie[MT_RELAY_COOKIE_BYTES];
    int64_t deadline;
} waiting;

typedef struct relayed {
    relay_pipe p;
    uint64_t node;
    bool done;
} relayed;

struct mt_relay {
    mt_relay_config cfg;
    char bind_host[128];   /* the host of --relay-listen: public ports listen there too */
    char public_host[128]; /* what nodes and peers are told */
    char addr[192];        /* public_host:relay port */
    int lfd;
    mt_bg_thread bg;      /* the relay's thread */
    mt_log_source log;    /* "relay: ..." lines */
    pthread_mutex_t lock; /* stats */
    mt_relay_stats stats;

    hello_conn hellos[MAX_HELLOS];
    int n_hellos;
    relay_node **nodes;
    int n_nodes, cap_nodes, max_nodes;
    waiting *waits;
    int n_waits, cap_waits;
    relayed **pairs;
    int n_pairs, cap_pairs;
    struct {
        int64_t id;
        int port;
    } hist[HISTORY];
    int hist_next, cursor;
    uint64_t next_serial, refused;
    int64_t last_note_ms;
    uint64_t notes_skipped;
};

/* A refused connection: counted, and logged at most once a second (hostile
 * clients must not be able to flood the log). */
static void refuse(mt_relay *r, int fd, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(mt_relay *r, int fd, const char *fmt, ...) {
    if (fd >= 0) close(fd);
    r->refused++;
    int64_t now = mt_mono_ms();
    if (now - r->last_note_ms < 1000) {
        r->notes_skipped++;
        return;
    }
    r->last_note_ms = now;
    if (r->cfg.quiet) return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->notes_skipped)
        mt_log_as(&r->log, MT_LOG_WARN, "%s (and %llu more refusals not shown)", msg,
                  (unsigned long long)r->notes_skipped);
    else
        mt_log_as(&r->log, MT_LOG_WARN, "%s", msg);
    r->notes_skipped = 0;
}

static void peer_name(int fd, char *out, size_t size) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    snprintf(out, size, "%s:%d", ip, port);
}

static int accept_one(int lfd) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static relay_node *node_by_serial(mt_relay *r, uint64_t serial) {
    for (int i = 0; i < r->n_nodes; i++)
        if (r->nodes[i]->serial == serial && !r->nodes[i]->dead) return r->nodes[i];
    return NULL;
}

/* Ends a node's control connection and frees its port at once (its waiting
 * and relayed connections go in the next sweep). */
static void node_drop(mt_relay *r, relay_node *n, const char *why) {
    if (n->dead) return;
    n->dead = true;
    if (n->ctl >= 0) close(n->ctl);
    if (n->pub >= 0) close(n->pub);
    n->ctl = n->pub = -1;
    mt_log_as(&r->log, MT_LOG_INFO, "node %lld gone (%s); port %d freed", (long long)n->id, why,
              n->port);
}

/* Queues a control message; false when the node is not reading (dropped). */
static bool node_send(mt_relay *r, relay_node *n, uint8_t type, const void *body, size_t len) {
    if (n->dead) return false;
    if (n->out_len + 2 + len > OUT_BYTES) {
        node_drop(r, n, "it does not read its control connection");
        return false;
    }
    n->out[n->out_len++] = type;
    n->out[n->out_len++] = (uint8_t)len;
    if (len) memcpy(n->out + n->out_len, body, len);
    n->out_len += len;
    return true;
}

static void history_put(mt_relay *r, int64_t id, int port) {
    for (int i = 0; i < HISTORY; i++)
        if (r->hist[i].id == id) {
            r->hist[i].port = port;
            return;
        }
    r->hist[r->hist_next].id = id;
    r->hist[r->hist_next].port = port;
    r->hist_next = (r->hist_next + 1) % HISTORY;
}

static int history_port(const mt_relay *r, int64_t id) {
    for (int i = 0; i < HISTORY; i++)
        if (r->hist[i].id == id) return r->hist[i].port;
    return 0;
}

static bool port_in_use(const mt_relay *r, int port) {
    for (int i = 0; i < r->n_nodes; i++)
        if (!r->nodes[i]->dead && r->nodes[i]->port == port) return true;
    return false;
}

static bool port_remembered_for_other(const mt_relay *r, int port, int64_t id) {
    for (int i = 0; i < HISTORY; i++)
        if (r->hist[i].port == port && r->hist[i].id != id && r->hist[i].id != 0) return true;
    return false;
}

static int try_bind(mt_relay *r, int port) {
    char a[160];
    snprintf(a, sizeof a, "%s:%d", r->bind_host, port);
    int fd = mt_listen_tcp(a, NULL);
    if (fd >= 0) mt_sock_set_nonblock(fd, true);
    return fd;
}

/* A listening socket for node id: its last port if free, else a port of the
 * range no other node had lately, else any port of the range (or any free
 * port without a range). -1 when none. */
static int bind_public(mt_relay *r, int64_t id, int *port) {
    int fd, last = history_port(r, id);
    bool range = r->cfg.port_lo > 0;
    if (last && !port_in_use(r, last) &&
        (!range || (last >= r->cfg.port_lo && last <= r->cfg.port_hi)) &&
        (fd = try_bind(r, last)) >= 0) {
        *port = last;
        return fd;
    }
    if (!range) {
        fd = try_bind(r, 0);
        *port = fd >= 0 ? mt_listen_port(fd) : 0;
        return fd;
    }
    int size = r->cfg.port_hi - r->cfg.port_lo + 1;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < size; k++) {
            int p = r->cfg.port_lo + (r->cursor + k) % size;
            if (port_in_use(r, p) || (pass == 0 && port_remembered_for_other(r, p, id))) continue;
            if ((fd = try_bind(r, p)) >= 0) {
                r->cursor = (p - r->cfg.port_lo + 1) % size;
                *port = p;
                return fd;
            }
        }
    return -1;
}

static void refuse_node(mt_relay *r, int fd, int64_t id, const char *why) {
    uint8_t msg[2 + 255];
    size_t n = strlen(why) > 255 ? 255 : strlen(why);
    msg[0] = MT_RELAY_MSG_REFUSED;
    msg[1] = (uint8_t)n;
    memcpy(msg + 2, why, n);
    (void)!send(fd, msg, 2 + n, MSG_NOSIGNAL | MSG_DONTWAIT); /* best effort, then close */
    refuse(r, fd, "refused node %lld: %s", (long long)id, why);
}

static void control_hello(mt_relay *r, hello_conn *h, const relay_hello *hello) {
    int fd = h->fd;
    h->fd = -1;
    int64_t id = hello->node_id;
    char why[256] = "the registry does not accept this node";
    if (!r->cfg.auth ||
        r->cfg.auth(r->cfg.auth_ctx, id, h->challenge, hello->proof, why, sizeof why))
        return refuse_node(r, fd, id, why);
    for (int i = 0; i < r->n_nodes; i++) /* a node that reconnects replaces its old connection */
        if (r->nodes[i]->id == id && !r->nodes[i]->dead)
            node_drop(r, r->nodes[i], "it connected again");
    int live = 0;
    for (int i = 0; i < r->n_nodes; i++) live += !r->nodes[i]->dead;
    if (live >= r->max_nodes)
        return refuse_node(r, fd, id,
                           "the relay has no free public port; try again later, or ask the "
                           "registry's operator for a wider --relay-ports range");
    int port = 0, pub = bind_public(r, id, &port);
    if (pub < 0)
        return refuse_node(r, fd, id,
                           "the relay could not open a public port (all in use or not "
                           "bindable); try again later or ask the registry's operator");
    if (r->n_nodes == r->cap_nodes) {
        int cap = r->cap_nodes ? 2 * r->cap_nodes : 16;
        relay_node **nn = realloc(r->nodes, (size_t)cap * sizeof *nn);
        if (nn) r->nodes = nn, r->cap_nodes = cap;
    }
    relay_node *n = r->n_nodes < r->cap_nodes ? calloc(1, sizeof *n) : NULL;
    if (!n) {
        close(pub);
        return refuse_node(r, fd, id, "the relay is out of memory");
    }
    n->id = id;
    n->serial = ++r->next_serial;
    n->ctl = fd;
    n->pub = pub;
    n->port = port;
    n->last_rx = n->last_ping = mt_mono_ms();
    r->nodes[r->n_nodes++] = n;
    history_put(r, id, port);
    char pa[192];
    snprintf(pa, sizeof pa, "%s:%d", r->public_host, port);
    node_send(r, n, MT_RELAY_MSG_WELCOME, pa, strlen(pa));
    mt_log_as(&r->log, MT_LOG_INFO, "node %lld connected from %s; public address %s", (long long)id,
              h->peer, pa);
}

static bool add_pair(mt_relay *r, int peer_fd, int node_fd, uint64_t node) {
    if (r->n_pairs == r->cap_pairs) {
        int cap = r->cap_pairs ? 2 * r->cap_pairs : 16;
        relayed **np = realloc(r->pairs, (size_t)cap * sizeof *np);
        if (!np) return false;
        r->pairs = np;
        r->cap_pairs = cap;
    }
    relayed *x = calloc(1, sizeof *x);
    if (!x) return false;
    if (relay_pipe_init(&x->p, peer_fd, node_fd, r->cfg.buffer_bytes, mt_mono_ms())) {
        free(x);
        return false;
    }
    x->node = node;
    r->pairs[r->n_pairs++] = x;
    return true;
}

static void data_hello(mt_relay *r, hello_conn *h, const relay_hello *hello) {
    int fd = h->fd;
    h->fd = -1;
    for (int i = 0; i < r->n_waits; i++) {
        waiting *w = &r->waits[i];
        if (w->fd < 0 || sodium_memcmp(w->cookie, hello->cookie, MT_RELAY_COOKIE_BYTES) != 0)
            continue;
        int peer = w->fd;
        w->fd = -1; /* swept */
        if (!add_pair(r, peer, fd, w->node)) {
            close(peer);
            relay_node *n = node_by_serial(r, w->node);
            if (n) n->conns--;
            refuse(r, fd, "out of memory for a relayed connection");
        }
        return;
    }
    refuse(r, fd, "data connection from %s with a cookie nobody waits for (late or forged)",
           h->peer);
}

/* New bytes of a hello: checked as they arrive (relay_hello.c). Exactly the
 * hello is read, never a byte of what follows it. */
static void hello_read(mt_relay *r, hello_conn *h) {
    relay_hello hello;
    /* a bug, as an answered hello is not read again: the connection goes, the relay stays */
    if (relay_hello_parse(h->buf, h->have, &hello) != RELAY_HELLO_MORE ||
        hello.need > sizeof h->buf) {
        refuse(r, h->fd, "%s: internal error reading its hello after %zu bytes", h->peer, h->have);
        h->fd = -1;
        return;
    }
    ssize_t n = recv(h->fd, h->buf + h->have, hello.need - h->have, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {
        refuse(r, h->fd, "%s closed after %zu bytes of its hello", h->peer, h->have);
        h->fd = -1;
        return;
    }
    h->have += (size_t)n;
    switch (relay_hello_parse(h->buf, h->have, &hello)) {
    case RELAY_HELLO_MORE:
        return;
    case RELAY_HELLO_CONTROL:
        return control_hello(r, h, &hello);
    case RELAY_HELLO_DATA:
        return data_hello(r, h, &hello);
    case RELAY_HELLO_REFUSED:
        if (hello.reply)
            refuse_node(r, h->fd, 0, hello.why);
        else
            refuse(r, h->fd, "%s sent %s", h->peer, hello.why);
        h->fd = -1;
        return;
    }
}

static void accept_hellos(mt_relay *r) {
    for (int k = 0; k < ACCEPTS_PER_ROUND; k++) {
        int fd = accept_one(r->lfd);
        if (fd < 0) return;
        /* full: the oldest hello makes room, so a flood of idle connections cannot keep
         * nodes from connecting (a real hello takes one round trip) */
        hello_conn *h = NULL;
        if (r->n_hellos >= MAX_HELLOS) {
            /* a slot freed this round if there is one, else the oldest */
            for (int i = 0; i < r->n_hellos && !(h && h->fd < 0); i++)
                if (r->hellos[i].fd < 0 || !h || r->hellos[i].deadline < h->deadline)
                    h = &r->hellos[i];
            if (h->fd >= 0)
                refuse(r, h->fd, "%d connections in their hello: closed the oldest (%s)",
                       MAX_HELLOS, h->peer);
        } else {
            h = &r->hellos[r->n_hellos++];
        }
        memset(h, 0, sizeof *h);
        h->fd = fd;
        h->deadline = mt_mono_ms() + HELLO_MS;
        peer_name(fd, h->peer, sizeof h->peer);
        uint8_t hello[MT_RELAY_HELLO_BYTES];
        randombytes_buf(h->challenge, sizeof h->challenge);
        relay_hello_server_write(hello, h->challenge);
        if (send(fd, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof hello) {
            refuse(r, fd, "could not send the relay hello to %s", h->peer);
            h->fd = -1;
        }
    }
}

/* At a node's limit: the oldest relayed connection whose peer has sent nothing
 * for SILENT_MS (a real peer starts with the data plane's hello at once), so
 * idle connections cannot lock real peers out. False when there is none. */
static bool evict_silent(mt_relay *r, relay_node *n, int64_t now) {
    relayed *old = NULL;
    for (int i = 0; i < r->n_pairs; i++) {
        relayed *x = r->pairs[i];
        if (x->node == n->serial && !x->done && x->p.moved[0] == 0 &&
            now - x->p.start_ms >= SILENT_MS && (!old || x->p.start_ms < old->p.start_ms))
            old = x;
    }
    if (!old) return false;
    old->done = true; /* closed in this round's sweep */
    relay_pipe_close(&old->p);
    n->conns--;
    old->node = 0; /* already uncounted */
    refuse(r, -1, "node %lld is at its %d connections: closed one whose peer sent nothing",
           (long long)n->id, r->cfg.max_conns);
    return true;
}

/* A peer on a node's public port: it waits while the node opens a data connection. */
static void accept_peers(mt_relay *r, relay_node *n) {
    for (int k = 0; k < ACCEPTS_PER_ROUND && !n->dead; k++) {
        int fd = accept_one(n->pub);
        if (fd < 0) return;
        if (n->conns >= r->cfg.max_conns && !evict_silent(r, n, mt_mono_ms())) {
            refuse(r, fd,
                   "node %lld has %d relayed connections already (the limit); closed a new"
                   " one",
                   (long long)n->id, n->conns);
            continue;
        }
        if (r->n_waits == r->cap_waits) {
            int cap = r->cap_waits ? 2 * r->cap_waits : 16;
            waiting *nw = realloc(r->waits, (size_t)cap * sizeof *nw);
            if (!nw) {
                refuse(r, fd, "out of memory for a waiting connection");
                continue;
            }
            r->waits = nw;
            r->cap_waits = cap;
        }
        waiting *w = &r->waits[r->n_waits];
        w->fd = fd;
        w->node = n->serial;
        w->deadline = mt_mono_ms() + OPEN_MS;
        randombytes_buf(w->cookie, sizeof w->cookie);
        if (!node_send(r, n, MT_RELAY_MSG_OPEN, w->cookie, sizeof w->cookie)) {
            close(fd);
            return;
        }
        r->n_waits++;
        n->conns++;
    }
}

/* Control bytes from a node: nothing but PONGs. */
static void node_read(mt_relay *r, relay_node *n) {
    uint8_t b[64];
    ssize_t got = recv(n->ctl, b, sizeof b, 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (got <= 0)
        return node_drop(
            r, n, got == 0 ? "it closed its control connection" : "its control connection failed");
    n->last_rx = mt_mono_ms();
    for (ssize_t i = 0; i < got; i++) {
        n->in[n->in_len++] = b[i];
        if (n->in_len < 2) continue;
        if (n->in[0] != MT_RELAY_MSG_PONG || n->in[1] != 0) {
            char why[128];
            snprintf(why, sizeof why,
                     "it sent control message type %u length %u, which a node may not send",
                     n->in[0], n->in[1]);
            return node_drop(r, n, why);
        }
        n->in_len = 0;
    }
}

static void node_flush(mt_relay *r, relay_node *n) {
    if (!n->out_len || n->dead) return;
    ssize_t w = send(n->ctl, n->out, n->out_len, MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            node_drop(r, n, "its control connection failed");
        return;
    }
    memmove(n->out, n->out + w, n->out_len - (size_t)w);
    n->out_len -= (size_t)w;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static void timers(mt_relay *r, int64_t now) {
    for (int i = 0; i < r->n_hellos; i++)
        if (r->hellos[i].fd >= 0 && now >= r->hellos[i].deadline) {
            refuse(r, r->hellos[i].fd, "%s sent no complete hello within %d s", r->hellos[i].peer,
                   HELLO_MS / 1000);
            r->hellos[i].fd = -1;
        }
    for (int i = 0; i < r->n_waits; i++) {
        waiting *w = &r->waits[i];
        relay_node *n = w->fd >= 0 ? node_by_serial(r, w->node) : NULL;
        if (w->fd >= 0 && (!n || now >= w->deadline)) {
            if (n) {
                n->conns--;
                refuse(r, w->fd, "node %lld did not open a data connection within %d s",
                       (long long)n->id, OPEN_MS / 1000);
            } else {
                close(w->fd);
            }
            w->fd = -1;
        }
    }
    for (int i = 0; i < r->n_pairs; i++) {
        relayed *x = r->pairs[i];
        relay_node *n = node_by_serial(r, x->node);
        if (!x->done && (!n || now - x->p.last_ms >= r->cfg.idle_ms)) x->done = true;
    }
    for (int i = 0; i < r->n_nodes; i++) {
        relay_node *n = r->nodes[i];
        if (n->dead) continue;
        if (now - n->last_rx >= DEAD_MS)
            node_drop(r, n, "no word from it for 30 s");
        else if (now - n->last_ping >= PING_MS && node_send(r, n, MT_RELAY_MSG_PING, NULL, 0))
            n->last_ping = now;
    }
}

/* Removes what was closed this round. */
static void sweep(mt_relay *r) {
    int k = 0;
    for (int i = 0; i < r->n_hellos; i++)
        if (r->hellos[i].fd >= 0) r->hellos[k++] = r->hellos[i];
    r->n_hellos = k;
    k = 0;
    for (int i = 0; i < r->n_waits; i++)
        if (r->waits[i].fd >= 0) r->waits[k++] = r->waits[i];
    r->n_waits = k;
    k = 0;
    for (int i = 0; i < r->n_pairs; i++) {
        relayed *x = r->pairs[i];
        if (!x->done) {
            r->pairs[k++] = x;
            continue;
        }
        relay_node *n = node_by_serial(r, x->node);
        if (n) n->conns--;
        relay_pipe_close(&x->p);
        free(x);
    }
    r->n_pairs = k;
    k = 0;
    for (int i = 0; i < r->n_nodes; i++) {
        if (!r->nodes[i]->dead) {
            r->nodes[k++] = r->nodes[i];
            continue;
        }
        free(r->nodes[i]);
    }
    r->n_nodes = k;
}

static void *relay_main(void *arg) {
    mt_relay *r = arg;
    struct pollfd *pf = NULL;
    size_t pf_cap = 0;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        bool stop = mt_bg_thread_stopping(&r->bg);
        r->stats = (mt_relay_stats){.nodes = r->n_nodes,
                                    .waiting = r->n_waits,
                                    .relayed = r->n_pairs,
                                    .hellos = r->n_hellos,
                                    .refused = r->refused};
        pthread_mutex_unlock(&r->lock);
        if (stop) break;
        size_t need = 2 + (size_t)r->n_hellos + 2 * (size_t)r->n_nodes + 2 * (size_t)r->n_pairs;
        if (need > pf_cap) {
            struct pollfd *np = realloc(pf, need * sizeof *np);
            if (!np) {
                mt_sleep_ms(100);
                continue;
            }
            pf = np;
            pf_cap = need;
        }
        size_t k = 0;
        pf[k++] = (struct pollfd){.fd = mt_bg_thread_wake_fd(&r->bg), .events = POLLIN};
        pf[k++] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
        int nh = r->n_hellos, nn = r->n_nodes, np = r->n_pairs;
        for (int i = 0; i < nh; i++)
            pf[k++] = (struct pollfd){.fd = r->hellos[i].fd, .events = POLLIN};
        for (int i = 0; i < nn; i++) {
            relay_node *n = r->nodes[i];
            pf[k++] = (struct pollfd){.fd = n->ctl,
                                      .events = (short)(POLLIN | (n->out_len ? POLLOUT : 0))};
            pf[k++] = (struct pollfd){.fd = n->pub, .events = POLLIN};
        }
        for (int i = 0; i < np; i++) {
            relay_pipe_poll(&r->pairs[i]->p, pf + k);
            k += 2;
        }
        int rc = poll(pf, k, 1000);
        if (rc < 0 && errno != EINTR) {
            mt_log_as(&r->log, MT_LOG_ERROR, "poll failed: %s", strerror(errno));
            mt_sleep_ms(100);
        }
        if (rc > 0) {
            if (pf[0].revents) mt_bg_thread_clear(&r->bg);
            if (pf[1].revents & POLLIN) accept_hellos(r);
            size_t at = 2;
            for (int i = 0; i < nh; i++, at++)
                if (pf[at].revents && r->hellos[i].fd >= 0) hello_read(r, &r->hellos[i]);
            for (int i = 0; i < nn; i++, at += 2) {
                relay_node *n = r->nodes[i];
                if (pf[at].revents & (POLLIN | POLLHUP | POLLERR)) node_read(r, n);
                if (pf[at].revents & POLLOUT) node_flush(r, n);
                if (pf[at + 1].revents & POLLIN) accept_peers(r, n);
            }
            int64_t now = mt_mono_ms();
            for (int i = 0; i < np; i++, at += 2)
                if ((pf[at].revents || pf[at + 1].revents) && !r->pairs[i]->done &&
                    relay_pipe_step(&r->pairs[i]->p, pf + at, now))
                    r->pairs[i]->done = true;
        }
        for (int i = 0; i < r->n_nodes; i++) node_flush(r, r->nodes[i]); /* OPENs just queued */
        timers(r, mt_mono_ms());
        sweep(r);
    }
    free(pf);
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

mt_relay *mt_relay_start(const mt_relay_config *cfg, mt_error *err) {
    if (!cfg->listen || !cfg->auth) {
        mt_error_set(err, "relay: a listen address and an authenticator are required");
        return NULL;
    }
    if (cfg->port_lo < 0 || cfg->port_hi > 65535 || cfg->port_lo > cfg->port_hi ||
        (cfg->port_lo == 0) != (cfg->port_hi == 0)) {
        mt_error_set(err, "relay: public port range %d-%d is not LO-HI within 1..65535",
                     cfg->port_lo, cfg->port_hi);
        return NULL;
    }
    mt_relay *r = calloc(1, sizeof *r);
    if (!r) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    r->cfg = *cfg;
    r->lfd = -1;
    mt_log_source_init(&r->log, "relay", NULL, cfg->quiet);
    if (mt_bg_thread_init(&r->bg, err)) {
        mt_error_prefix(err, "relay");
        free(r);
        return NULL;
    }
    if (r->cfg.max_conns <= 0) r->cfg.max_conns = 64;
    if (r->cfg.buffer_bytes == 0) r->cfg.buffer_bytes = 64 << 10;
    if (r->cfg.idle_ms <= 0) r->cfg.idle_ms = 600000;
    r->max_nodes = cfg->port_lo ? cfg->port_hi - cfg->port_lo + 1 : MAX_NODES_ANY;
    pthread_mutex_init(&r->lock, NULL);
    const char *colon = strrchr(cfg->listen, ':');
    if (!colon || (size_t)(colon - cfg->listen) >= sizeof r->bind_host) {
        mt_error_set(err, "--relay-listen %s: expected HOST:PORT, e.g. 0.0.0.0:8471", cfg->listen);
        goto fail;
    }
    snprintf(r->bind_host, sizeof r->bind_host, "%.*s", (int)(colon - cfg->listen), cfg->listen);
    if (!r->bind_host[0]) snprintf(r->bind_host, sizeof r->bind_host, "127.0.0.1");
    bool wildcard = strcmp(r->bind_host, "0.0.0.0") == 0 || strcmp(r->bind_host, "[::]") == 0;
    if (cfg->public_host && cfg->public_host[0]) {
        snprintf(r->public_host, sizeof r->public_host, "%s", cfg->public_host);
    } else if (wildcard) {
        mt_error_set(err,
                     "--relay-listen %s listens on every interface, so the relay cannot tell"
                     " nodes and peers which name reaches it; add --relay-host NAME (this"
                     " machine's public name or address)",
                     cfg->listen);
        goto fail;
    } else {
        snprintf(r->public_host, sizeof r->public_host, "%s", r->bind_host);
    }
    char probe[192]; /* the WELCOME carries at most 127 bytes of HOST:PORT */
    snprintf(probe, sizeof probe, "%s:65535", r->public_host);
    if (!relay_addr_ok(probe)) {
        mt_error_set(err,
                     "--relay-host '%s' is not a host name or IP address of at most 121"
                     " characters",
                     r->public_host);
        goto fail;
    }
    r->lfd = mt_listen_tcp(cfg->listen, err);
    if (r->lfd < 0) {
        mt_error_prefix(err, "relay");
        goto fail;
    }
    mt_sock_set_nonblock(r->lfd, true);
    snprintf(r->addr, sizeof r->addr, "%s:%d", r->public_host, mt_listen_port(r->lfd));
    if (mt_bg_thread_start(&r->bg, relay_main, r, err)) {
        mt_error_prefix(err, "relay");
        goto fail;
    }
    return r;
fail:
    mt_relay_stop(r);
    return NULL;
}

void mt_relay_stop(mt_relay *r) {
    if (!r) return;
    mt_bg_thread_stop(&r->bg);
    for (int i = 0; i < r->n_hellos; i++)
        if (r->hellos[i].fd >= 0) close(r->hellos[i].fd);
    for (int i = 0; i < r->n_waits; i++)
        if (r->waits[i].fd >= 0) close(r->waits[i].fd);
    for (int i = 0; i < r->n_pairs; i++) {
        relay_pipe_close(&r->pairs[i]->p);
        free(r->pairs[i]);
    }
    for (int i = 0; i < r->n_nodes; i++) {
        if (r->nodes[i]->ctl >= 0) close(r->nodes[i]->ctl);
        if (r->nodes[i]->pub >= 0) close(r->nodes[i]->pub);
        free(r->nodes[i]);
    }
    free(r->nodes);
    free(r->waits);
    free(r->pairs);
    if (r->lfd >= 0) close(r->lfd);
    mt_bg_thread_destroy(&r->bg);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

const char *mt_relay_addr(const mt_relay *r) {
    return r->addr;
}

void mt_relay_get_stats(mt_relay *r, mt_relay_stats *out) {
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    pthread_mutex_unlock(&r->lock);
}

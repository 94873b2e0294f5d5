/* delay_relay.c - a TCP relay that delays every chunk by a fixed time, precise
 * enough for sub-millisecond delays: the stand-in for `tc qdisc ... netem
 * delay` where the kernel has no netem (bench/netns.sh puts one in front of
 * every node). tests/lib/latency_relay.mjs does the same for the tests, but
 * node.js timers have about 1 ms granularity.
 *
 *   bench_delay_relay --listen HOST:PORT --target HOST:PORT [options]
 *     --delay MS       delay of every chunk, each direction (default 0; e.g. 0.1)
 *     --spin US        wake this long before a chunk is due and busy-wait the
 *                      rest (default 0: sleep until due; the kernel's wake-up
 *                      latency, printed per connection, is then the error)
 *     --buffer BYTES   bytes queued per direction before reading pauses
 *                      (default 1 MiB; bounded buffering, backpressure beyond)
 *     --realtime       run SCHED_FIFO (priority 10, needs root): forwarding is not
 *                      held up by busy CPUs, as the kernel's netem is not
 *     --max-conns N    connections open at once; more are refused (default 256)
 *     --lifetime S     exit after S seconds whatever happens (default 600)
 *
 * Each connection gets one thread per direction. A thread reads what arrives
 * (stamping it with CLOCK_MONOTONIC as it is read) and forwards each chunk,
 * in order, no earlier than its stamp + delay, waiting in ppoll() with a
 * nanosecond deadline (timer slack set to 1 ns) so that it goes on reading
 * while chunks wait. End of stream is passed on (half-close) after the data
 * before it; an error on either side closes both. Like netem on a link, the
 * delay applies to each chunk, not to whole messages.
 *
 * Prints "listening on HOST:PORT" on stdout once listening (PORT 0 picks a
 * free port); one line per closed connection on stderr with its bytes and how
 * late chunks were forwarded (median and 99th percentile past their due
 * time). Exits 0 on SIGTERM or SIGINT or at the end of its lifetime, 1 on a
 * listen error, 2 on a bad command line. */
#include "tcp_serve.h"

#include "moontail/transport.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- options and shared state --------------------------------------------------------- */

enum {
    MAX_CHUNKS = 4096,   /* chunks queued per direction (reading pauses beyond) */
    LATE_BUCKETS = 1000, /* lateness histogram: 1 us buckets, the last one is ">= 999 us" */
};

static struct {
    const char *listen, *target;
    int64_t delay_ns, spin_ns;
    size_t buffer;
    int max_conns;
    double lifetime_s;
    bool realtime;
} opt = {NULL, NULL, 0, 0, 1 << 20, 256, 600, false};

static atomic_int n_open;
static atomic_int n_conns;

/* ---- one direction ---------------------------------------------------------------------- */

typedef struct chunk {
    size_t off, len; /* where in the ring; a chunk never wraps */
    int64_t due;     /* CLOCK_MONOTONIC ns */
} chunk;

typedef struct conn conn;

typedef struct pipe_dir {
    conn *c;
    int src, dst;
    uint8_t *ring; /* (opt.buffer) bytes */
    size_t rpos, wpos, used;
    chunk q[MAX_CHUNKS]; /* FIFO of queued chunks */
    int q_head, q_len;
    uint64_t bytes, chunks;
    uint32_t late[LATE_BUCKETS]; /* forwarded chunks by microseconds past due */
} pipe_dir;

struct conn {
    int id;
    int fd_client, fd_target;
    atomic_int alive; /* directions still running */
    pipe_dir up, down;
};

/* Contiguous free bytes at wpos (a read never wraps around the ring's end). */
static size_t ring_free(const pipe_dir *p) {
    if (p->used == opt.buffer) return 0;
    if (p->wpos >= p->rpos) return opt.buffer - p->wpos;
    return p->rpos - p->wpos;
}

/* Writes all of buf to fd; 0 or -1. */
static int write_all(int fd, const uint8_t *buf, size_t n) {
    while (n) {
        ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        buf += k, n -= (size_t)k;
    }
    return 0;
}

/* Reads what is waiting on p->src into the ring as one chunk. 1 read, 0 end of
 * stream, -1 error. */
static int read_chunk(pipe_dir *p) {
    if (p->used == 0) p->rpos = p->wpos = 0; /* keep reads large */
    size_t room = ring_free(p);
    ssize_t k = read(p->src, p->ring + p->wpos, room);
    if (k < 0) return errno == EINTR || errno == EAGAIN ? 1 : -1;
    if (k == 0) return 0;
    int64_t t = bench_mono_ns();
    chunk *ch = &p->q[(p->q_head + p->q_len++) % MAX_CHUNKS];
    *ch = (chunk){p->wpos, (size_t)k, t + opt.delay_ns};
    p->used += (size_t)k;
    p->wpos += (size_t)k;
    if (p->wpos == opt.buffer) p->wpos = 0;
    return 1;
}

/* Forwards the oldest chunk; 0 or -1. */
static int send_chunk(pipe_dir *p) {
    chunk *ch = &p->q[p->q_head];
    int64_t late_us = (bench_mono_ns() - ch->due) / 1000;
    if (late_us < 0) late_us = 0;
    if (late_us > LATE_BUCKETS - 1) late_us = LATE_BUCKETS - 1;
    p->late[late_us]++;
    if (write_all(p->dst, p->ring + ch->off, ch->len)) return -1;
    p->bytes += ch->len;
    p->chunks++;
    p->used -= ch->len;
    p->rpos = ch->off + ch->len;
    if (p->rpos == opt.buffer) p->rpos = 0;
    p->q_head = (p->q_head + 1) % MAX_CHUNKS;
    p->q_len--;
    return 0;
}

/* The lateness below which a fraction q of the forwarded chunks were sent, us. */
static int late_quantile(const pipe_dir *p, double q) {
    if (!p->chunks) return 0;
    uint64_t want = (uint64_t)(q * (double)p->chunks), seen = 0;
    for (int i = 0; i < LATE_BUCKETS; i++)
        if ((seen += p->late[i]) > want) return i;
    return LATE_BUCKETS - 1;
}

static void conn_done(conn *c) {
    if (atomic_fetch_sub(&c->alive, 1) != 1) return;
    close(c->fd_client);
    close(c->fd_target);
    pipe_dir *u = &c->up, *d = &c->down;
    fprintf(stderr,
            "delay_relay: connection %d closed: %llu bytes up, %llu down, %llu chunks; late by"
            " median %d us, p99 %d us (up), %d us, %d us (down)\n",
            c->id, (unsigned long long)u->bytes, (unsigned long long)d->bytes,
            (unsigned long long)(u->chunks + d->chunks), late_quantile(u, 0.5),
            late_quantile(u, 0.99), late_quantile(d, 0.5), late_quantile(d, 0.99));
    free(u->ring);
    free(d->ring);
    free(c);
    atomic_fetch_sub(&n_open, 1);
}

/* One direction, src -> dst: read whenever data arrives (and there is room),
 * forward each chunk when it is due. */
static void *pipe_main(void *arg) {
    pipe_dir *p = arg;
    bool eof = false, failed = false;
    int64_t eof_due = 0;
    for (;;) {
        int64_t now = bench_mono_ns();
        if (p->q_len && p->q[p->q_head].due <= now) {
            if (send_chunk(p)) {
                failed = true;
                break;
            }
            continue;
        }
        if (eof && !p->q_len) {
            if (eof_due <= now) break;
        }
        int64_t due = p->q_len ? p->q[p->q_head].due : eof ? eof_due : -1;
        bool can_read = !eof && p->q_len < MAX_CHUNKS && ring_free(p) > 0;
        struct pollfd pf = {.fd = p->src, .events = POLLIN};
        int r;
        if (due >= 0 && due - now <= opt.spin_ns) {
            r = can_read ? poll(&pf, 1, 0) : 0; /* spinning: only look */
        } else {
            int64_t wait = due >= 0 ? due - now - opt.spin_ns : 0;
            struct timespec ts = {(time_t)(wait / 1000000000), (long)(wait % 1000000000)};
            if (!can_read && due < 0) { /* cannot happen: a full queue has a due chunk */
                failed = true;
                break;
            }
            r = ppoll(can_read ? &pf : NULL, can_read ? 1 : 0, due >= 0 ? &ts : NULL, NULL);
        }
        if (r < 0 && errno != EINTR) {
            failed = true;
            break;
        }
        if (r > 0) {
            int k = read_chunk(p);
            if (k < 0) {
                failed = true;
                break;
            }
            if (k == 0) eof = true, eof_due = bench_mono_ns() + opt.delay_ns;
        }
    }
    if (failed) { /* wake the other direction: the connection is over */
        shutdown(p->c->fd_client, SHUT_RDWR);
        shutdown(p->c->fd_target, SHUT_RDWR);
    } else {
        shutdown(p->dst, SHUT_WR);
    }
    conn_done(p->c);
    return NULL;
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage(const char *msg) {
    fprintf(stderr,
            "delay_relay: %s\nusage: bench_delay_relay --listen HOST:PORT --target HOST:PORT"
            " [--delay MS] [--spin US] [--buffer BYTES] [--realtime] [--max-conns N]"
            " [--lifetime S]\n",
            msg);
    exit(2);
}

static double number(const char *what, const char *v, double lo, double hi) {
    char *end;
    if (!v) usage("an option lacks its value");
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s must be a number in [%g, %g], not \"%s\"", what, lo, hi, v);
        usage(msg);
    }
    return x;
}

static void start_conn(int fd, void *arg) {
    (void)arg;
    int id = atomic_fetch_add(&n_conns, 1) + 1;
    if (atomic_load(&n_open) >= opt.max_conns) {
        fprintf(stderr, "delay_relay: connection %d refused: %d open\n", id, opt.max_conns);
        close(fd);
        return;
    }
    mt_error err = {{0}};
    int t = mt_connect_tcp(opt.target, 5000, &err);
    if (t < 0) {
        fprintf(stderr, "delay_relay: connection %d: %s\n", id, err.msg);
        close(fd);
        return;
    }
    conn *c = calloc(1, sizeof *c);
    if (c) c->up.ring = malloc(opt.buffer), c->down.ring = malloc(opt.buffer);
    if (!c || !c->up.ring || !c->down.ring) {
        fprintf(stderr, "delay_relay: connection %d: out of memory\n", id);
        if (c) free(c->up.ring), free(c->down.ring), free(c);
        close(fd), close(t);
        return;
    }
    c->id = id;
    c->fd_client = fd, c->fd_target = t;
    c->up.c = c->down.c = c;
    c->up.src = fd, c->up.dst = t;
    c->down.src = t, c->down.dst = fd;
    atomic_store(&c->alive, 2);
    atomic_fetch_add(&n_open, 1);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 << 10);
    pthread_t th;
    if (pthread_create(&th, &a, pipe_main, &c->up) == 0) {
        if (pthread_create(&th, &a, pipe_main, &c->down) != 0) {
            shutdown(fd, SHUT_RDWR), shutdown(t, SHUT_RDWR);
            conn_done(c);
        }
    } else {
        close(fd), close(t);
        free(c->up.ring), free(c->down.ring), free(c);
        atomic_fetch_sub(&n_open, 1);
    }
    pthread_attr_destroy(&a);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) usage("a delaying TCP relay");
        if (strcmp(a, "--realtime") == 0) {
            opt.realtime = true;
            continue;
        }
        i++;
        if (strcmp(a, "--listen") == 0 && v)
            opt.listen = v;
        else if (strcmp(a, "--target") == 0 && v)
            opt.target = v;
        else if (strcmp(a, "--delay") == 0)
            opt.delay_ns = (int64_t)(number(a, v, 0, 60e3) * 1e6);
        else if (strcmp(a, "--spin") == 0)
            opt.spin_ns = (int64_t)(number(a, v, 0, 1e4) * 1e3);
        else if (strcmp(a, "--buffer") == 0)
            opt.buffer = (size_t)number(a, v, 4096, 1 << 30);
        else if (strcmp(a, "--max-conns") == 0)
            opt.max_conns = (int)number(a, v, 1, 1e5);
        else if (strcmp(a, "--lifetime") == 0)
            opt.lifetime_s = number(a, v, 0, 1e7);
        else {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown option or missing value: \"%s\"", a);
            usage(msg);
        }
    }
    if (!opt.listen || !opt.target) usage("--listen and --target are required");
    /* sleeps end when asked, not up to 50 us later (the default slack); threads inherit it */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct sched_param sp = {.sched_priority = 10};
    if (opt.realtime && sched_setscheduler(0, SCHED_FIFO, &sp))
        fprintf(stderr, "delay_relay: --realtime: %s; running at normal priority\n",
                strerror(errno));
    return bench_serve("delay_relay", opt.listen, opt.lifetime_s, start_conn, NULL);
}

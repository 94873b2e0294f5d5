/* pingpong.c - round-trip time of small (or large) TCP messages, to tell what
 * a delay relay (delay_relay.c) adds from what the network adds.
 *
 *   bench_pingpong --echo HOST:PORT [--lifetime S]
 *       an echo server: prints "listening on HOST:PORT", sends back every
 *       byte it receives, one thread per connection;
 *   bench_pingpong [--size BYTES] [--count N] LABEL=HOST:PORT ...
 *       connects to each target (an echo server, directly or through
 *       relays), then N times, each target in turn, sends a BYTES message and
 *       waits for all of it to come back. Prints the median, 10th and 90th
 *       percentile round trip per target and each median minus the first
 *       target's (put the direct path first). Defaults: 64 bytes, 2000 times,
 *       after 50 untimed round trips.
 * Exits 0, 1 on a network error, 2 on a bad command line. */
#include "tcp_serve.h"

#include "moontail/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { MAX_TARGETS = 16, WARM = 50 };

static void usage(const char *msg) {
    fprintf(stderr,
            "pingpong: %s\nusage: bench_pingpong --echo HOST:PORT [--lifetime S]\n"
            "       bench_pingpong [--size BYTES] [--count N] LABEL=HOST:PORT ...\n",
            msg);
    exit(2);
}

/* ---- echo server ------------------------------------------------------------------------ */

static void *echo_main(void *arg) {
    int fd = (int)(intptr_t)arg;
    enum { BUF = 256 << 10 };
    char *buf = malloc(BUF);
    while (buf) {
        ssize_t n = read(fd, buf, BUF);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t off = 0; off < n;) {
            ssize_t k = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) goto out;
            off += k;
        }
    }
out:
    free(buf);
    close(fd);
    return NULL;
}

static void echo_conn(int fd, void *arg) {
    (void)arg;
    pthread_t th;
    if (pthread_create(&th, NULL, echo_main, (void *)(intptr_t)fd) == 0)
        pthread_detach(th);
    else
        close(fd);
}

/* ---- client ----------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* One round trip of n bytes on fd; ns, or -1. */
static int64_t round_trip(int fd, uint8_t *out, uint8_t *in, size_t n) {
    int64_t t0 = bench_mono_ns();
    for (size_t off = 0; off < n;) {
        ssize_t k = send(fd, out + off, n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        off += (size_t)k;
    }
    for (size_t off = 0; off < n;) {
        ssize_t k = read(fd, in + off, n - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        off += (size_t)k;
    }
    return bench_mono_ns() - t0;
}

int main(int argc, char **argv) {
    const char *echo = NULL, *labels[MAX_TARGETS];
    double lifetime = 600;
    long size = 64, count = 2000;
    int n = 0, fds[MAX_TARGETS];
    char addrs[MAX_TARGETS][128];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) usage("TCP round trips");
        if (strcmp(a, "--echo") == 0 && v) {
            echo = v, i++;
        } else if (strcmp(a, "--lifetime") == 0 && v) {
            lifetime = strtod(v, &end), i++;
            if (*end || lifetime <= 0) usage("--lifetime takes seconds > 0");
        } else if (strcmp(a, "--size") == 0 && v) {
            size = strtol(v, &end, 10), i++;
            if (*end || size < 1 || size > (16 << 20)) usage("--size takes 1..16777216 bytes");
        } else if (strcmp(a, "--count") == 0 && v) {
            count = strtol(v, &end, 10), i++;
            if (*end || count < 1 || count > 10000000) usage("--count takes 1..10000000");
        } else if (a[0] != '-' && strchr(a, '=') && n < MAX_TARGETS) {
            const char *eq = strchr(a, '=');
            labels[n] = a;
            argv[i][eq - a] = '\0';
            snprintf(addrs[n++], sizeof addrs[0], "%s", eq + 1);
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown option, missing value or too many targets: \"%s\"",
                     a);
            usage(msg);
        }
    }
    if (echo) return bench_serve("pingpong", echo, lifetime, echo_conn, NULL);
    if (n == 0) usage("give --echo ADDR, or targets LABEL=HOST:PORT");

    mt_error err = {{0}};
    for (int t = 0; t < n; t++)
        if ((fds[t] = mt_connect_tcp(addrs[t], 5000, &err)) < 0) {
            fprintf(stderr, "pingpong: %s: %s\n", labels[t], err.msg);
            return 1;
        }
    uint8_t *out = malloc((size_t)size), *in = malloc((size_t)size);
    int64_t *ns = malloc((size_t)(n * count) * sizeof *ns);
    if (!out || !in || !ns) return 1;
    memset(out, 0x5a, (size_t)size);
    for (long r = -WARM; r < count; r++)
        for (int t = 0; t < n; t++) {
            int64_t d = round_trip(fds[t], out, in, (size_t)size);
            if (d < 0) {
                fprintf(stderr, "pingpong: %s: connection lost: %s\n", labels[t],
                        errno ? strerror(errno) : "closed");
                return 1;
            }
            if (r >= 0) ns[t * count + r] = d;
        }
    printf("%-20s %10s %8s %8s %12s   (%ld-byte messages, %ld round trips each, in turn)\n",
           "target", "median us", "p10", "p90", "vs first", size, count);
    double first = 0;
    for (int t = 0; t < n; t++) {
        int64_t *v = ns + t * count;
        qsort(v, (size_t)count, sizeof *v, cmp_i64);
        double med = (count % 2 ? v[count / 2] : (v[count / 2 - 1] + v[count / 2]) / 2) / 1e3;
        if (t == 0) first = med;
        printf("%-20s %10.1f %8.1f %8.1f %+12.1f\n", labels[t], med, v[count / 10] / 1e3,
               v[count * 9 / 10] / 1e3, med - first);
        close(fds[t]);
    }
    free(out), free(in), free(ns);
    return 0;
}

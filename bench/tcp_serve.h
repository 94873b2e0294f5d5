/* tcp_serve.h - the accept loop shared by the benchmark's helper servers
 * (delay_relay.c, pingpong.c): listen, announce the address the way the
 * nodes and tests/lib/latency_relay.mjs do, hand each connection over, stop
 * on SIGTERM, SIGINT or at the end of a lifetime. */
#ifndef MOONTAIL_BENCH_TCP_SERVE_H
#define MOONTAIL_BENCH_TCP_SERVE_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t bench_mono_ns(void);

/* Listens on addr ("HOST:PORT", port 0 picks one), prints "listening on
 * HOST:PORT" on stdout, then calls on_conn(fd, arg) for each accepted
 * connection (blocking socket with TCP_NODELAY; on_conn owns it) until
 * SIGTERM or SIGINT or lifetime_s seconds. Ignores SIGPIPE. Errors go to
 * stderr prefixed with prog. Returns 0 when stopped, 1 if it cannot listen. */
int bench_serve(const char *prog, const char *addr, double lifetime_s,
                void (*on_conn)(int fd, void *arg), void *arg);

#endif

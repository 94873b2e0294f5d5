/* tunnel.h - `moontail node --tunnel "COMMAND"`: supervises a tunnel program
 * (bore, ngrok, an `ssh -R` wrapper, ...) that makes this node's loopback
 * data-plane port reachable from the internet, and learns the public
 * address it prints.
 *
 * COMMAND runs under /bin/sh -c in its own process group, with {port} and
 * {host} replaced by the node's local data-plane port and host (127.0.0.1).
 * Its stdout and stderr are read line by line; the first line matching the
 * pattern gives the public address (the pattern's first capture group).
 * The default pattern takes a HOST:PORT standing on its own, optionally
 * written tcp://HOST:PORT, where HOST is a name with a dot, an IPv4 address,
 * "localhost" or an [IPv6] address, and PORT is not followed by '/' (so
 * "http://x.y:80/path" and "12:30:00" do not match); the node's own local
 * address is never taken. When the program exits it is started again after
 * a backoff (1 s, doubling to 60 s; back to 1 s after a run of 30 s or more),
 * and the address is learned anew. While it is down or has not printed an
 * address yet, the address is "". Stopping kills the whole process group
 * (SIGTERM, then SIGKILL after 3 s). */
#ifndef MOONTAIL_TUNNEL_H
#define MOONTAIL_TUNNEL_H

#include "moontail/error.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct mt_tunnel_config {
    const char *command;          /* run by /bin/sh -c after {port} / {host} substitution */
    const char *pattern;          /* PCRE2 with at least one capture group (NULL: the default) */
    const char *local_host;       /* what {host} becomes */
    int local_port;               /* what {port} becomes */
    void (*on_change)(void *ctx); /* the address changed (called without locks) */
    void *ctx;
    const char *log_name; /* prefix of log lines */
    bool quiet;
    int min_backoff_ms, max_backoff_ms, stable_ms; /* <= 0: 1000, 60000, 30000 */
} mt_tunnel_config;

typedef struct mt_tunnel mt_tunnel;

/* Checks the pattern (an error names what is wrong with it) and starts the
 * supervising thread, which starts the program at once. */
mt_tunnel *mt_tunnel_start(const mt_tunnel_config *cfg, mt_error *err);
/* Kills the program's process group and waits for it. */
void mt_tunnel_stop(mt_tunnel *t);
/* The public address now ("" while down). */
void mt_tunnel_addr(mt_tunnel *t, char *out, size_t size);
/* Waits up to timeout_ms for an address. 0, or -1 with err saying why (with
 * the program's last lines of output). */
int mt_tunnel_wait(mt_tunnel *t, int timeout_ms, char *out, size_t size, mt_error *err);
/* How many times the program has been started. */
int mt_tunnel_starts(mt_tunnel *t);

/* The command with {port} and {host} replaced (heap), or NULL with err. */
char *mt_tunnel_expand(const char *command, const char *host, int port, mt_error *err);

#endif

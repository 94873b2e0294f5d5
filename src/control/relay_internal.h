/* relay_internal.h - what the relay (relay.c) and its node side
 * (relay_client.c) share: a spliced pair of sockets that copies bytes both
 * ways through two bounded buffers, driven by poll(), and small socket
 * helpers. A pipe never looks at the bytes it copies. */
#ifndef MOONTAIL_RELAY_INTERNAL_H
#define MOONTAIL_RELAY_INTERNAL_H

#include "moontail/sock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Two sockets copied to each other. buf[i] holds bytes read from fd[i] that
 * are still to be written to fd[1 - i]. */
typedef struct relay_pipe {
    mt_sock fd[2];
    uint8_t *buf[2];
    size_t off[2], len[2], cap; /* buf[i][off, len) is pending */
    bool eof[2];                /* fd[i] sent its last byte */
    bool shut[2];               /* the direction i -> 1-i is finished (write side shut) */
    uint64_t moved[2];          /* bytes read from fd[i] so far */
    int64_t start_ms, last_ms;  /* when the pair was made; when a byte last moved */
} relay_pipe;

/* Takes fds a and b (made non-blocking); buffers of cap bytes each way.
 * Returns 0, or -1 (out of memory; the fds are not closed). */
int relay_pipe_init(relay_pipe *p, mt_sock a, mt_sock b, size_t cap, int64_t now_ms);
/* Fills two pollfd entries (fd MT_SOCK_NONE when nothing is wanted from a side, so a
 * hung-up socket does not wake poll while the other side drains). */
void relay_pipe_poll(const relay_pipe *p, mt_pollfd pf[2]);
/* Moves what it can after poll. Returns 0 to go on, 1 when both directions
 * are finished or a socket failed: then close it with relay_pipe_close. */
int relay_pipe_step(relay_pipe *p, const mt_pollfd pf[2], int64_t now_ms);
/* Closes both sockets (their fds become MT_SOCK_NONE) and frees the buffers. */
void relay_pipe_close(relay_pipe *p);

/* Reads exactly n bytes from a blocking or non-blocking fd within timeout_ms.
 * 0, or -1 (timeout, error or EOF). */
int relay_read_full(mt_sock fd, void *buf, size_t n, int timeout_ms);
/* Writes all n bytes within timeout_ms. 0 or -1. */
int relay_write_full(mt_sock fd, const void *buf, size_t n, int timeout_ms);
/* HOST:PORT with a plausible host (letters, digits, '.', '-', '_', or an
 * IPv6 address in brackets) and port 1..65535. */
bool relay_addr_ok(const char *s);

#endif

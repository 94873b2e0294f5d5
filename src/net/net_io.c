/* net_io.c - blocking "read exactly n bytes" / "write exactly n bytes" on a
 * socket with an idle limit and an absolute deadline, via poll(). The socket's
 * own blocking flag is not changed: mt_sock_recv/send never block, and a peer
 * that went away gives EPIPE instead of SIGPIPE (sock.h). */
#include "moontail/clock.h"
#include "net_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

const char *net_size_str(uint64_t bytes, char *buf, size_t size) {
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        snprintf(buf, size, "%llu MiB", (unsigned long long)(bytes >> 20));
    else if (bytes >= (1u << 10) && bytes % (1u << 10) == 0)
        snprintf(buf, size, "%llu KiB", (unsigned long long)(bytes >> 10));
    else
        snprintf(buf, size, "%llu bytes", (unsigned long long)bytes);
    return buf;
}

/* Waits until fd is ready for `events`. NET_OK, NET_TIMEOUT or NET_ERR. */
static int wait_ready(mt_sock fd, short events, net_wait w, mt_error *err) {
    for (;;) {
        int ms = w.idle_ms > 0 ? w.idle_ms : -1;
        if (w.deadline_ms >= 0) {
            int64_t left = w.deadline_ms - mt_mono_ms();
            if (left <= 0) return NET_TIMEOUT;
            if (ms < 0 || left < ms) ms = (int)left;
        }
        mt_pollfd p = {.fd = fd, .events = events};
        int r = mt_poll(&p, 1, ms);
        if (r > 0) return NET_OK; /* readable, writable, or an error the next call reports */
        if (r == 0) {
            if (w.deadline_ms >= 0 && mt_mono_ms() < w.deadline_ms && w.idle_ms <= 0) continue;
            return NET_TIMEOUT;
        }
        if (errno != EINTR) {
            mt_error_set(err, "poll on socket failed: %s", mt_sock_strerror(errno));
            return NET_ERR;
        }
    }
}

int net_read_full(mt_sock fd, void *buf, size_t n, net_wait w, size_t *got, mt_error *err) {
    size_t off = 0;
    int rc = NET_OK;
    while (off < n) {
        ssize_t r = mt_sock_recv(fd, (char *)buf + off, n - off);
        if (r > 0) {
            off += (size_t)r;
            continue;
        }
        if (r == 0) {
            rc = NET_EOF;
            break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            rc = wait_ready(fd, MT_POLLIN, w, err);
            if (rc == NET_OK) continue;
            if (rc == NET_TIMEOUT)
                mt_error_set(err,
                             "timed out waiting for data from the peer (%zu of %zu bytes "
                             "received)",
                             off, n);
            break;
        }
        if (errno == ECONNRESET) {
            rc = NET_EOF; /* a reset is a (rude) close */
            break;
        }
        mt_error_set(err, "cannot read from the socket: %s", mt_sock_strerror(errno));
        rc = NET_ERR;
        break;
    }
    if (got) *got = off;
    return rc;
}

int net_write_full(mt_sock fd, const void *buf, size_t n, net_wait w, mt_error *err) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = mt_sock_send(fd, (const char *)buf + off, n - off);
        if (r > 0) {
            off += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_ready(fd, MT_POLLOUT, w, err);
            if (rc == NET_OK) continue;
            if (rc == NET_TIMEOUT)
                mt_error_set(err,
                             "timed out waiting for the peer to accept more data (%zu of %zu "
                             "bytes sent)",
                             off, n);
            return rc;
        }
        if (r < 0 && (errno == EPIPE || errno == ECONNRESET))
            return mt_error_set(err, "the peer closed the connection (%zu of %zu bytes sent)", off,
                                n);
        return mt_error_set(err, "cannot write to the socket: %s",
                            r < 0 ? mt_sock_strerror(errno) : "0");
    }
    return NET_OK;
}

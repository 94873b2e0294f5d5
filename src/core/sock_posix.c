/* sock_posix.c - sock.h on POSIX: the socket calls as they are, and the wake
 * as an eventfd (Linux) or a pipe (elsewhere). */
#include "moontail/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

int mt_sock_init(void) {
    return 0;
}

mt_sock mt_sock_open(int family, int type, int protocol, bool nonblock) {
    return socket(family, type | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), protocol);
}

int mt_sock_bind_listen(mt_sock s, const struct sockaddr *a, socklen_t len) {
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->sa_family == AF_INET6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    /* the kernel's largest accept queue (net.core.somaxconn): a burst of connections (a
     * cell's nodes at once, a flood the relay must shed) waits there instead of having its
     * handshakes dropped and retried seconds later */
    if (bind(s, a, len) < 0 || listen(s, SOMAXCONN) < 0) return -1;
    return 0;
}

mt_sock mt_sock_accept(mt_sock l, struct sockaddr_storage *peer, socklen_t *len) {
    int fd = accept4(l, (struct sockaddr *)peer, len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

int mt_sock_connect(mt_sock s, const struct sockaddr *a, socklen_t len) {
    if (connect(s, a, len) == 0 || errno == EINPROGRESS) return 0;
    return -1;
}

int mt_sock_error(mt_sock s) {
    int e = 0;
    socklen_t el = sizeof e;
    if (getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) < 0) e = errno;
    return e;
}

int mt_sock_close(mt_sock s) {
    return close(s);
}

mt_sock mt_sock_dup(mt_sock s) {
    return fcntl(s, F_DUPFD_CLOEXEC, 1);
}

int mt_sock_shutdown(mt_sock s, int how) {
    return shutdown(s, how == MT_SHUT_WR ? SHUT_WR : SHUT_RDWR);
}

int mt_sock_set_nonblock(mt_sock s, bool on) {
    int fl = fcntl(s, F_GETFL);
    if (fl < 0) return -1;
    return fcntl(s, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

void mt_sock_nodelay(mt_sock s) {
    int one = 1; /* not TCP (a test's socket pair): ignored */
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

ssize_t mt_sock_recv(mt_sock s, void *buf, size_t n) {
    return recv(s, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

ssize_t mt_sock_send(mt_sock s, const void *buf, size_t n) {
    return send(s, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

int mt_sock_port(mt_sock s) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(s, (struct sockaddr *)&ss, &sl) < 0) return -1;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

int mt_poll(mt_pollfd *p, size_t n, int timeout_ms) {
    return poll(p, (nfds_t)n, timeout_ms); /* poll skips negative descriptors itself */
}

const char *mt_sock_strerror(int e) {
    return strerror(e);
}

int mt_wake_init(mt_wake *w) {
#ifdef __linux__
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    *w = (mt_wake){fd, fd};
    return fd < 0 ? -1 : 0;
#else
    int p[2];
    if (pipe(p) != 0) {
        *w = MT_WAKE_NONE;
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(p[i], F_SETFD, FD_CLOEXEC);
        fcntl(p[i], F_SETFL, fcntl(p[i], F_GETFL) | O_NONBLOCK);
    }
    *w = (mt_wake){p[0], p[1]};
    return 0;
#endif
}

void mt_wake_signal(mt_wake *w) {
    /* EAGAIN (the counter or pipe is full) leaves it readable, which is all a wake needs */
#ifdef __linux__
    uint64_t one = 1;
    if (w->wr >= 0) (void)!write(w->wr, &one, sizeof one);
#else
    if (w->wr >= 0) (void)!write(w->wr, "w", 1);
#endif
}

void mt_wake_clear(mt_wake *w) {
#ifdef __linux__
    uint64_t n;
    if (w->rd >= 0) (void)!read(w->rd, &n, sizeof n);
#else
    char buf[64];
    while (w->rd >= 0 && read(w->rd, buf, sizeof buf) > 0) {
    }
#endif
}

mt_sock mt_wake_sock(const mt_wake *w) {
    return w->rd;
}

bool mt_wake_ok(const mt_wake *w) {
    return w->rd >= 0;
}

void mt_wake_destroy(mt_wake *w) {
    if (w->rd >= 0) close(w->rd);
    if (w->wr >= 0 && w->wr != w->rd) close(w->wr);
    *w = MT_WAKE_NONE;
}

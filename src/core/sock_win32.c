/* sock_win32.c - sock.h on Windows: Winsock 2 started once per process,
 * sockets not inherited by child processes and kept non-blocking (recv and
 * send here must not block, and Winsock has no per-call MSG_DONTWAIT), its
 * error codes turned into errno values, exclusive port binding, WSAPoll, and
 * the wake as a loopback TCP pair (WSAPoll waits on sockets only). */
#include "moontail/sock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <windows.h>

_Static_assert(sizeof(mt_pollfd) == sizeof(WSAPOLLFD), "mt_pollfd is WSAPOLLFD");
_Static_assert(offsetof(mt_pollfd, events) == offsetof(WSAPOLLFD, events), "mt_pollfd.events");
_Static_assert(offsetof(mt_pollfd, revents) == offsetof(WSAPOLLFD, revents), "mt_pollfd.revents");
_Static_assert(MT_POLLIN == POLLIN && MT_POLLOUT == POLLOUT && MT_POLLERR == POLLERR &&
                   MT_POLLHUP == POLLHUP && MT_POLLNVAL == POLLNVAL,
               "MT_POLL* are Winsock's");

static pthread_once_t wsa_once = PTHREAD_ONCE_INIT;
static int wsa_rc = -1;

static void wsa_start(void) {
    WSADATA d;
    wsa_rc = WSAStartup(MAKEWORD(2, 2), &d) == 0 ? 0 : -1;
}

int mt_sock_init(void) {
    pthread_once(&wsa_once, wsa_start);
    if (wsa_rc) errno = ENOSYS;
    return wsa_rc;
}

static int errno_of(int w) {
    switch (w) {
    case WSAEWOULDBLOCK:
        return EAGAIN;
    case WSAEINPROGRESS:
    case WSAEALREADY:
        return EINPROGRESS;
    case WSAEINTR:
        return EINTR;
    case WSAECONNRESET:
    case WSAENETRESET:
        return ECONNRESET;
    case WSAECONNABORTED:
        return ECONNABORTED;
    case WSAECONNREFUSED:
        return ECONNREFUSED;
    case WSAETIMEDOUT:
        return ETIMEDOUT;
    case WSAEADDRINUSE:
        return EADDRINUSE;
    case WSAEADDRNOTAVAIL:
        return EADDRNOTAVAIL;
    case WSAENETUNREACH:
    case WSAENETDOWN:
        return ENETUNREACH;
    case WSAEHOSTUNREACH:
    case WSAEHOSTDOWN:
        return EHOSTUNREACH;
    case WSAENOTCONN:
        return ENOTCONN;
    case WSAESHUTDOWN:
        return EPIPE;
    case WSAEMFILE:
        return EMFILE;
    case WSAENOBUFS:
        return ENOBUFS;
    case WSAEACCES:
        return EACCES;
    case WSAENOTSOCK:
        return EBADF;
    case WSAEAFNOSUPPORT:
    case WSAEPFNOSUPPORT:
        return EAFNOSUPPORT;
    case WSAEMSGSIZE:
        return EMSGSIZE;
    default:
        return EINVAL;
    }
}

/* errno from the last Winsock error; returns -1 for the caller to return */
static int fail(void) {
    errno = errno_of(WSAGetLastError());
    return -1;
}

mt_sock mt_sock_open(int family, int type, int protocol, bool nonblock) {
    (void)nonblock; /* always: see the top of the file */
    if (mt_sock_init()) return MT_SOCK_NONE;
    SOCKET s = WSASocketW(family, type, protocol, NULL, 0, WSA_FLAG_NO_HANDLE_INHERIT);
    if (s == INVALID_SOCKET) {
        fail();
        return MT_SOCK_NONE;
    }
    u_long on = 1;
    ioctlsocket(s, FIONBIO, &on);
    return (mt_sock)s;
}

int mt_sock_bind_listen(mt_sock s, const struct sockaddr *a, socklen_t len) {
    BOOL one = TRUE;
    /* SO_REUSEADDR on Windows would let a second process take the port */
    setsockopt((SOCKET)s, SOL_SOCKET, SO_EXCLUSIVEADDRUSE, (const char *)&one, sizeof one);
    if (a->sa_family == AF_INET6) {
        DWORD v6only = 1;
        setsockopt((SOCKET)s, IPPROTO_IPV6, IPV6_V6ONLY, (const char *)&v6only, sizeof v6only);
    }
    if (bind((SOCKET)s, a, len) != 0 || listen((SOCKET)s, SOMAXCONN) != 0) return fail();
    return 0;
}

mt_sock mt_sock_accept(mt_sock l, struct sockaddr_storage *peer, socklen_t *len) {
    int n = (int)*len;
    SOCKET s = accept((SOCKET)l, (struct sockaddr *)peer, &n);
    if (s == INVALID_SOCKET) {
        fail();
        return MT_SOCK_NONE;
    }
    *len = (socklen_t)n;
    SetHandleInformation((HANDLE)s, HANDLE_FLAG_INHERIT, 0);
    u_long on = 1;
    ioctlsocket(s, FIONBIO, &on);
    return (mt_sock)s;
}

int mt_sock_connect(mt_sock s, const struct sockaddr *a, socklen_t len) {
    if (connect((SOCKET)s, a, len) == 0) return 0;
    int w = WSAGetLastError();
    if (w == WSAEWOULDBLOCK || w == WSAEINPROGRESS) return 0;
    errno = errno_of(w);
    return -1;
}

int mt_sock_error(mt_sock s) {
    int e = 0, el = sizeof e;
    if (getsockopt((SOCKET)s, SOL_SOCKET, SO_ERROR, (char *)&e, &el) != 0)
        return errno_of(WSAGetLastError());
    return e ? errno_of(e) : 0;
}

int mt_sock_close(mt_sock s) {
    return closesocket((SOCKET)s) == 0 ? 0 : fail();
}

mt_sock mt_sock_dup(mt_sock s) {
    WSAPROTOCOL_INFOW info;
    if (WSADuplicateSocketW((SOCKET)s, GetCurrentProcessId(), &info) != 0) {
        fail();
        return MT_SOCK_NONE;
    }
    SOCKET d = WSASocketW(FROM_PROTOCOL_INFO, FROM_PROTOCOL_INFO, FROM_PROTOCOL_INFO, &info, 0,
                          WSA_FLAG_NO_HANDLE_INHERIT);
    if (d == INVALID_SOCKET) {
        fail();
        return MT_SOCK_NONE;
    }
    return (mt_sock)d;
}

int mt_sock_shutdown(mt_sock s, int how) {
    return shutdown((SOCKET)s, how == MT_SHUT_WR ? SD_SEND : SD_BOTH) == 0 ? 0 : fail();
}

int mt_sock_set_nonblock(mt_sock s, bool on) {
    (void)s, (void)on; /* always non-blocking: see the top of the file */
    return 0;
}

void mt_sock_nodelay(mt_sock s) {
    BOOL one = TRUE;
    setsockopt((SOCKET)s, IPPROTO_TCP, TCP_NODELAY, (const char *)&one, sizeof one);
}

ssize_t mt_sock_recv(mt_sock s, void *buf, size_t n) {
    int r = recv((SOCKET)s, buf, n > INT_MAX ? INT_MAX : (int)n, 0);
    return r == SOCKET_ERROR ? fail() : r;
}

ssize_t mt_sock_send(mt_sock s, const void *buf, size_t n) {
    int r = send((SOCKET)s, buf, n > INT_MAX ? INT_MAX : (int)n, 0);
    return r == SOCKET_ERROR ? fail() : r;
}

int mt_sock_port(mt_sock s) {
    struct sockaddr_storage ss;
    int sl = sizeof ss;
    if (getsockname((SOCKET)s, (struct sockaddr *)&ss, &sl) != 0) return -1;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

int mt_poll(mt_pollfd *p, size_t n, int timeout_ms) {
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        p[i].revents = 0;
        any |= p[i].fd != MT_SOCK_NONE;
    }
    if (!any) { /* WSAPoll refuses an empty set: this is a sleep */
        if (timeout_ms != 0) Sleep(timeout_ms < 0 ? INFINITE : (DWORD)timeout_ms);
        return 0;
    }
    int r = WSAPoll((WSAPOLLFD *)p, (ULONG)n, timeout_ms);
    return r == SOCKET_ERROR ? fail() : r;
}

const char *mt_sock_strerror(int e) {
    switch (e) {
    case EADDRINUSE:
        return "Address already in use";
    case EADDRNOTAVAIL:
        return "Cannot assign requested address";
    case ECONNREFUSED:
        return "Connection refused";
    case ECONNRESET:
        return "Connection reset by peer";
    case ECONNABORTED:
        return "Software caused connection abort";
    case ETIMEDOUT:
        return "Connection timed out";
    case EINPROGRESS:
        return "Operation now in progress";
    case ENETUNREACH:
        return "Network is unreachable";
    case EHOSTUNREACH:
        return "No route to host";
    case ENOTCONN:
        return "Transport endpoint is not connected";
    case ENOBUFS:
        return "No buffer space available";
    case EAFNOSUPPORT:
        return "Address family not supported by protocol";
    case EMSGSIZE:
        return "Message too long";
    default:
        return strerror(e);
    }
}

int mt_wake_init(mt_wake *w) {
    *w = MT_WAKE_NONE;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    mt_sock l = mt_sock_open(AF_INET, SOCK_STREAM, 0, true);
    if (l == MT_SOCK_NONE) return -1;
    int len = sizeof a, rc = -1;
    mt_sock c = MT_SOCK_NONE, s = MT_SOCK_NONE;
    if (bind((SOCKET)l, (struct sockaddr *)&a, sizeof a) == 0 && listen((SOCKET)l, 1) == 0 &&
        getsockname((SOCKET)l, (struct sockaddr *)&a, &len) == 0 &&
        (c = mt_sock_open(AF_INET, SOCK_STREAM, 0, true)) != MT_SOCK_NONE &&
        mt_sock_connect(c, (struct sockaddr *)&a, sizeof a) == 0) {
        /* the connect completes in the backlog: wait for it (a loopback connect is at once) */
        mt_pollfd p = {.fd = l, .events = MT_POLLIN};
        if (mt_poll(&p, 1, 5000) == 1) {
            struct sockaddr_storage peer;
            socklen_t pl = sizeof peer;
            s = mt_sock_accept(l, &peer, &pl);
        }
        mt_pollfd q = {.fd = c, .events = MT_POLLOUT};
        if (s != MT_SOCK_NONE && mt_poll(&q, 1, 5000) == 1 && mt_sock_error(c) == 0) rc = 0;
    } else {
        fail();
    }
    mt_sock_close(l);
    if (rc) {
        if (c != MT_SOCK_NONE) mt_sock_close(c);
        if (s != MT_SOCK_NONE) mt_sock_close(s);
        if (errno == 0) errno = EMFILE;
        return -1;
    }
    mt_sock_nodelay(c);
    *w = (mt_wake){s, c};
    return 0;
}

void mt_wake_signal(mt_wake *w) {
    /* a full buffer (EAGAIN) is still readable at the other end: the wake is there */
    if (w->wr != MT_SOCK_NONE) send((SOCKET)w->wr, "w", 1, 0);
}

void mt_wake_clear(mt_wake *w) {
    char buf[256];
    while (w->rd != MT_SOCK_NONE && recv((SOCKET)w->rd, buf, sizeof buf, 0) > 0) {
    }
}

mt_sock mt_wake_sock(const mt_wake *w) {
    return w->rd;
}

bool mt_wake_ok(const mt_wake *w) {
    return w->rd != MT_SOCK_NONE;
}

void mt_wake_destroy(mt_wake *w) {
    if (w->rd != MT_SOCK_NONE) mt_sock_close(w->rd);
    if (w->wr != MT_SOCK_NONE) mt_sock_close(w->wr);
    *w = MT_WAKE_NONE;
}

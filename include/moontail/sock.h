/* sock.h - TCP sockets and the waits on them where POSIX and Windows differ:
 * a socket is an int descriptor on POSIX and a SOCKET handle on Windows,
 * Winsock reports errors through WSAGetLastError and needs starting, and it
 * polls sockets only. Every call here sets errno to a POSIX value on failure,
 * so callers test EAGAIN, ECONNRESET and the like on both. A wake (mt_wake)
 * is something a poll set can wait on beside sockets that another thread
 * makes readable: an eventfd on Linux, a loopback socket pair on Windows.
 * sock_posix.c and sock_win32.c. */
#ifndef MOONTAIL_SOCK_H
#define MOONTAIL_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <ws2tcpip.h>
typedef uintptr_t mt_sock; /* a SOCKET */
#define MT_SOCK_NONE ((mt_sock) ~(uintptr_t)0)
/* the layout of WSAPOLLFD */
typedef struct mt_pollfd {
    mt_sock fd;
    short events, revents;
} mt_pollfd;
#define MT_POLLIN    0x0300 /* POLLRDNORM | POLLRDBAND */
#define MT_POLLOUT   0x0010
#define MT_POLLERR   0x0001
#define MT_POLLHUP   0x0002
#define MT_POLLNVAL  0x0004
#define MT_POLLRDHUP 0 /* a hang-up reads as readable, then recv gives 0 */
#else
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
typedef int mt_sock;
#define MT_SOCK_NONE (-1)
typedef struct pollfd mt_pollfd;
#define MT_POLLIN    POLLIN
#define MT_POLLOUT   POLLOUT
#define MT_POLLERR   POLLERR
#define MT_POLLHUP   POLLHUP
#define MT_POLLNVAL  POLLNVAL
#ifdef POLLRDHUP
#define MT_POLLRDHUP POLLRDHUP
#else
#define MT_POLLRDHUP 0
#endif
#endif

enum { MT_SHUT_WR = 1, MT_SHUT_RDWR = 2 };

/* Starts the socket library once per process (Winsock; nothing on POSIX): 0,
 * or -1. Every call below that makes a socket calls it. */
int mt_sock_init(void);
/* A new socket (not inherited by child processes; non-blocking if asked),
 * or MT_SOCK_NONE with errno. */
mt_sock mt_sock_open(int family, int type, int protocol, bool nonblock);
/* Binds s to a and listens: the address reusable after a restart but never
 * bound twice at once (SO_EXCLUSIVEADDRUSE on Windows), IPv6 sockets IPv6 only. */
int mt_sock_bind_listen(mt_sock s, const struct sockaddr *a, socklen_t len);
/* The next connection on listening socket l: non-blocking on Windows, blocking
 * on POSIX (the transport never needs the flag: it waits in mt_poll and reads
 * and writes with mt_sock_recv/send, which do not block). MT_SOCK_NONE with
 * errno (EAGAIN: none waiting). */
mt_sock mt_sock_accept(mt_sock l, struct sockaddr_storage *peer, socklen_t *len);
/* Starts a connect on a non-blocking s: 0 (connected or in progress: wait for
 * MT_POLLOUT, then mt_sock_error) or -1 with errno. */
int mt_sock_connect(mt_sock s, const struct sockaddr *a, socklen_t len);
/* The error pending on s (SO_ERROR) as an errno value, 0 for none. */
int mt_sock_error(mt_sock s);
int mt_sock_close(mt_sock s);
/* A second handle on the same socket (never 0 on POSIX, where descriptor 0
 * may be a closed stdin's): shutting one down shuts the connection down for
 * both; each is closed on its own. MT_SOCK_NONE with errno. */
mt_sock mt_sock_dup(mt_sock s);
int mt_sock_shutdown(mt_sock s, int how);
int mt_sock_set_nonblock(mt_sock s, bool on);
void mt_sock_nodelay(mt_sock s);
/* recv and send that never block and never raise SIGPIPE: -1 with errno
 * EAGAIN when they would. */
ssize_t mt_sock_recv(mt_sock s, void *buf, size_t n);
ssize_t mt_sock_send(mt_sock s, const void *buf, size_t n);
/* The port s is bound to, or -1. */
int mt_sock_port(mt_sock s);
/* poll(2) over sockets and wakes: the number ready, 0 at the timeout (ms < 0:
 * none), -1 with errno. Entries whose fd is MT_SOCK_NONE are skipped. */
int mt_poll(mt_pollfd *p, size_t n, int timeout_ms);
/* strerror for errno values, socket ones included (Windows' C runtime knows
 * too few of them). */
const char *mt_sock_strerror(int e);

typedef struct mt_wake {
    mt_sock rd, wr; /* the same eventfd on Linux; the two ends of a loopback pair on Windows */
} mt_wake;

/* Makes w (0, or -1 with errno); until then, and after mt_wake_destroy, w is
 * MT_WAKE_NONE. */
#define MT_WAKE_NONE ((mt_wake){MT_SOCK_NONE, MT_SOCK_NONE})
int mt_wake_init(mt_wake *w);
/* Makes w readable (cheap, any thread; wakes coalesce). */
void mt_wake_signal(mt_wake *w);
/* Makes w unreadable again, consuming the wakes so far. */
void mt_wake_clear(mt_wake *w);
/* What a poll set waits on (MT_POLLIN) to see a wake. */
mt_sock mt_wake_sock(const mt_wake *w);
bool mt_wake_ok(const mt_wake *w);
void mt_wake_destroy(mt_wake *w);

#endif

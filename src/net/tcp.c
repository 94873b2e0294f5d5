/* tcp.c - TCP sockets for the transport: strict "host:port" parsing,
 * listening (loopback unless an address says otherwise), accepting and
 * connecting with timeouts. Encryption and authentication are conn.c's job. */
#include "moontail/clock.h"
#include "moontail/transport.h"
#include "net_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- addresses ------------------------------------------------------------- */

typedef struct net_addr {
    char host[256]; /* an IP address in text, or a host name (connect only) */
    char port[6];
    int family; /* AF_INET, AF_INET6, or AF_UNSPEC for a name */
} net_addr;

static bool all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return n > 0;
}

/* Splits and checks "host:port". listening: numeric hosts only, port 0 allowed. */
static int addr_parse(const char *addr, bool listening, net_addr *a, mt_error *err) {
    const char *what = listening ? "listen address" : "address";
    const char *eg = listening ? "e.g. 127.0.0.1:7000, [::1]:7000 or 0.0.0.0:7000"
                               : "e.g. 10.0.0.5:7000, node7.lan:7000 or [fd00::5]:7000";
    if (!addr || !*addr) return mt_error_set(err, "empty %s; give HOST:PORT, %s", what, eg);
    size_t len = strlen(addr);
    if (len > 300) return mt_error_set(err, "%s of %zu characters is too long", what, len);
    const char *host, *colon;
    size_t hl;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':')
            return mt_error_set(err, "%s '%s': expected '[IPv6]:PORT', %s", what, addr, eg);
        host = addr + 1;
        hl = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return mt_error_set(err, "%s '%s' has no port; give HOST:PORT, %s", what, addr, eg);
        if (memchr(addr, ':', (size_t)(colon - addr)))
            return mt_error_set(err, "%s '%s': put an IPv6 address in brackets, e.g. [::1]:7000",
                                what, addr);
        host = addr;
        hl = (size_t)(colon - addr);
    }
    /* port: 1-5 digits, no sign or spaces, no leading zero except "0" itself */
    const char *p = colon + 1;
    size_t pl = strlen(p);
    long port = all_digits(p, pl) && pl <= 5 && (pl == 1 || p[0] != '0') ? strtol(p, NULL, 10) : -1;
    if (port < (listening ? 0 : 1) || port > 65535)
        return mt_error_set(err, "%s '%s': port '%s' is not a number in [%d, 65535]", what, addr, p,
                            listening ? 0 : 1);
    snprintf(a->port, sizeof a->port, "%ld", port);

    struct in6_addr tmp6;
    struct in_addr tmp4;
    if (hl >= sizeof a->host) return mt_error_set(err, "%s '%s': host name too long", what, addr);
    memcpy(a->host, host, hl);
    a->host[hl] = 0;
    if (addr[0] == '[') {
        if (inet_pton(AF_INET6, a->host, &tmp6) != 1)
            return mt_error_set(err, "%s '%s': '%s' is not an IPv6 address", what, addr, a->host);
        a->family = AF_INET6;
        return 0;
    }
    if (hl == 0 || strcmp(a->host, "localhost") == 0) { /* ":7000" means loopback */
        snprintf(a->host, sizeof a->host, "127.0.0.1");
        a->family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET, a->host, &tmp4) == 1) {
        a->family = AF_INET;
        return 0;
    }
    bool digits_dots = true, name_ok = hl <= 253 && host[0] != '-' && host[0] != '.';
    for (size_t i = 0; i < hl; i++) {
        char ch = host[i];
        bool alnum =
            (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        if (!(ch >= '0' && ch <= '9') && ch != '.') digits_dots = false;
        if (!alnum && ch != '-' && ch != '.' && ch != '_') name_ok = false;
    }
    if (digits_dots)
        return mt_error_set(err, "%s '%s': '%s' is not a valid IPv4 address", what, addr, a->host);
    if (listening)
        return mt_error_set(err,
                            "listen address '%s': '%s' is not an IP address; listen on one of "
                            "this machine's addresses, %s",
                            addr, a->host, eg);
    if (!name_ok)
        return mt_error_set(err, "address '%s': '%s' is not a valid host name", addr, a->host);
    a->family = AF_UNSPEC;
    return 0;
}

/* "ip:port" or "[ip6]:port" of a socket address. */
static void addr_format(const struct sockaddr *sa, char *out, size_t size) {
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
        snprintf(out, size, "%s:%d", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
        snprintf(out, size, "[%s]:%d", ip, port);
    } else {
        snprintf(out, size, "(address family %d)", sa->sa_family);
    }
}

/* ---- listen / accept ------------------------------------------------------- */

bool mt_addr_loopback(const char *addr) {
    net_addr a;
    if (!addr || addr_parse(addr, true, &a, NULL)) return false;
    unsigned char ip[16];
    if (a.family == AF_INET) return inet_pton(AF_INET, a.host, ip) == 1 && ip[0] == 127;
    return a.family == AF_INET6 && inet_pton(AF_INET6, a.host, ip) == 1 &&
           IN6_IS_ADDR_LOOPBACK((struct in6_addr *)ip);
}

mt_sock mt_listen_tcp(const char *addr, mt_error *err) {
    net_addr a;
    if (addr_parse(addr, true, &a, err)) return MT_SOCK_NONE;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (a.family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)atoi(a.port));
        inet_pton(AF_INET, a.host, &s4->sin_addr);
        sl = sizeof *s4;
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)atoi(a.port));
        inet_pton(AF_INET6, a.host, &s6->sin6_addr);
        sl = sizeof *s6;
    }
    mt_sock fd = mt_sock_open(a.family, SOCK_STREAM, 0, false);
    if (fd == MT_SOCK_NONE) {
        mt_error_set(err, "listen on %s: cannot create a socket: %s", addr,
                     mt_sock_strerror(errno));
        return MT_SOCK_NONE;
    }
    if (mt_sock_bind_listen(fd, (struct sockaddr *)&ss, sl) != 0) {
        int e = errno;
        mt_sock_close(fd);
        mt_error_set(err, "listen on %s: %s%s", addr, mt_sock_strerror(e),
                     e == EADDRINUSE      ? " (another process holds this port; pick another)"
                     : e == EADDRNOTAVAIL ? " (no interface of this machine has that address)"
                                          : "");
        errno = e; /* callers tell a port in use from other failures */
        return MT_SOCK_NONE;
    }
    return fd;
}

int mt_listen_probe(const char *addr, mt_error *err) {
    net_addr a;
    if (addr_parse(addr, true, &a, err)) return -1;
    if (strcmp(a.port, "0") == 0) return 0;
    mt_sock fd = mt_listen_tcp(addr, err);
    if (fd != MT_SOCK_NONE) {
        mt_sock_close(fd);
        return 0;
    }
    return errno == EADDRINUSE ? 1 : -1;
}

int mt_listen_port(mt_sock fd) {
    return mt_sock_port(fd);
}

mt_sock mt_accept_tcp(mt_sock listen_fd, int timeout_ms, char *peer, size_t peer_size,
                      mt_error *err) {
    int64_t deadline = timeout_ms > 0 ? mt_mono_ms() + timeout_ms : -1;
    for (;;) {
        int ms = -1;
        if (deadline >= 0) {
            int64_t left = deadline - mt_mono_ms();
            if (left <= 0) {
                mt_error_set(err, "no connection within %d ms", timeout_ms);
                errno = ETIMEDOUT;
                return MT_SOCK_NONE;
            }
            ms = (int)left;
        }
        mt_pollfd p = {.fd = listen_fd, .events = MT_POLLIN};
        int r = mt_poll(&p, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            mt_error_set(err, "waiting for connections: poll: %s", mt_sock_strerror(errno));
            return MT_SOCK_NONE;
        }
        if (r == 0) continue; /* the deadline check above reports it */
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        mt_sock fd = mt_sock_accept(listen_fd, &ss, &sl);
        if (fd == MT_SOCK_NONE) {
            /* Another thread took it, or the client gave up before we got to it. */
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
                continue;
            int e = errno;
            mt_error_set(
                err, "accepting a connection: %s%s", mt_sock_strerror(e),
                e == EMFILE || e == ENFILE ? " (out of file descriptors; raise 'ulimit -n')" : "");
            errno = e;
            return MT_SOCK_NONE;
        }
        mt_sock_nodelay(fd);
        if (peer && peer_size) addr_format((struct sockaddr *)&ss, peer, peer_size);
        return fd;
    }
}

/* ---- connect ------------------------------------------------------------------ */

/* One connect attempt with a timeout; the socket or MT_SOCK_NONE with err. */
static mt_sock connect_one(const struct addrinfo *ai, int timeout_ms, const char *addr,
                           mt_error *err) {
    char where[INET6_ADDRSTRLEN + 16];
    addr_format(ai->ai_addr, where, sizeof where);
    mt_sock fd = mt_sock_open(ai->ai_family, ai->ai_socktype, ai->ai_protocol, true);
    if (fd == MT_SOCK_NONE) {
        mt_error_set(err, "connect to %s: cannot create a socket: %s", addr,
                     mt_sock_strerror(errno));
        return MT_SOCK_NONE;
    }
    int e = 0;
    if (mt_sock_connect(fd, ai->ai_addr, (socklen_t)ai->ai_addrlen) < 0) {
        e = errno;
    } else {
        int64_t deadline = timeout_ms > 0 ? mt_mono_ms() + timeout_ms : -1;
        for (;;) {
            int ms = deadline >= 0 ? (int)(deadline - mt_mono_ms()) : -1;
            if (deadline >= 0 && ms <= 0) {
                e = ETIMEDOUT;
                break;
            }
            mt_pollfd p = {.fd = fd, .events = MT_POLLOUT};
            int r = mt_poll(&p, 1, ms);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                e = errno;
                break;
            }
            if (r == 0) continue;
            e = mt_sock_error(fd);
            break;
        }
    }
    if (e) {
        mt_sock_close(fd);
        mt_error_set(err, "cannot connect to %s (%s): %s%s", addr, where, mt_sock_strerror(e),
                     e == ECONNREFUSED ? " (is the node running and listening there?)"
                     : e == ETIMEDOUT  ? " (no answer; check the address and firewalls)"
                                       : "");
        return MT_SOCK_NONE;
    }
    /* blocking again on POSIX: the transport waits in poll and never needs O_NONBLOCK */
    mt_sock_set_nonblock(fd, false);
    mt_sock_nodelay(fd);
    return fd;
}

mt_sock mt_connect_tcp(const char *addr, int timeout_ms, mt_error *err) {
    net_addr a;
    if (addr_parse(addr, false, &a, err)) return MT_SOCK_NONE;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = a.family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (a.family != AF_UNSPEC ? AI_NUMERICHOST : 0);
    if (mt_sock_init() != 0) {
        mt_error_set(err, "connect to %s: the socket library did not start", addr);
        return MT_SOCK_NONE;
    }
    int g = getaddrinfo(a.host, a.port, &hints, &res);
    if (g != 0) {
#ifdef EAI_SYSTEM
        const char *why = g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g);
#else
        const char *why = gai_strerror(g);
#endif
        mt_error_set(err, "cannot resolve '%s' in address '%s': %s", a.host, addr, why);
        return MT_SOCK_NONE;
    }
    mt_sock fd = MT_SOCK_NONE;
    for (const struct addrinfo *ai = res; ai && fd == MT_SOCK_NONE; ai = ai->ai_next)
        fd = connect_one(ai, timeout_ms, addr, err);
    freeaddrinfo(res);
    return fd;
}

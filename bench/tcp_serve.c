/* tcp_serve.c - the accept loop of the benchmark's helper servers (see
 * tcp_serve.h), on the transport's TCP helpers. */
#include "tcp_serve.h"

#include "moontail/transport.h"

#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stopping;

static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

int64_t bench_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int bench_serve(const char *prog, const char *addr, double lifetime_s,
                void (*on_conn)(int fd, void *arg), void *arg) {
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: waits end at once */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    mt_error err = {{0}};
    int lfd = mt_listen_tcp(addr, &err);
    if (lfd < 0) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof host);
        else
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof host);
    }
    printf(ss.ss_family == AF_INET6 ? "listening on [%s]:%d\n" : "listening on %s:%d\n", host,
           mt_listen_port(lfd));
    fflush(stdout);

    int64_t end = bench_mono_ns() + (int64_t)(lifetime_s * 1e9);
    while (!stopping) {
        if (bench_mono_ns() >= end) {
            fprintf(stderr, "%s: lifetime of %g s over, exiting\n", prog, lifetime_s);
            break;
        }
        int fd = mt_accept_tcp(lfd, 200, NULL, 0, &err);
        if (fd >= 0) {
            on_conn(fd, arg);
        } else if (fd == -1) { /* not a timeout: say so, do not spin */
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            usleep(100000);
        }
    }
    close(lfd);
    return 0;
}

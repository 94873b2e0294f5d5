/* fake_tunnel.c - a stand-in for a tunnel program (bore, ngrok, cloudflared)
 * for a Windows node under wine (tests/win/cell.sh), as tests/lib/fake_tunnel.sh
 * is for a Linux one. The node's --tunnel supervisor starts it through cmd.exe:
 *
 *   fake_tunnel NODE_PORT
 *
 * It listens on a new loopback port, forwards every connection to
 * 127.0.0.1:NODE_PORT, and prints "tunnel ready at 127.0.0.1:PORT" after
 * lines that must not be taken for an address (a timestamp, the node's own
 * address, a URL), like a real tunnel printing its public address. Each start
 * takes a new port, so a restart moves the address. Runs until killed. */
#include "moontail/sock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct conn {
    mt_sock s[2];       /* the client, the node */
    char buf[2][65536]; /* bytes read from s[i], not yet written to the other */
} conn;

/* Carries bytes both ways until one side ends or fails, then closes both.
 * Each direction has one buffer, read only when the last one went out. */
static void *carry(void *arg) {
    conn *c = arg;
    char(*buf)[65536] = c->buf;
    size_t len[2] = {0, 0}, off[2] = {0, 0};
    bool done = false;
    while (!done) {
        mt_pollfd pf[2];
        for (int i = 0; i < 2; i++) {
            pf[i].fd = c->s[i];
            pf[i].revents = 0;
            /* read from side i into buf[i] when it is empty; write buf[1-i] to side i */
            pf[i].events =
                (short)((len[i] == 0 ? MT_POLLIN : 0) | (off[1 - i] < len[1 - i] ? MT_POLLOUT : 0));
        }
        if (mt_poll(pf, 2, 60000) <= 0) break;
        for (int i = 0; i < 2 && !done; i++) {
            if (pf[i].revents & (MT_POLLERR | MT_POLLNVAL)) done = true;
            if (!done && (pf[i].revents & (MT_POLLIN | MT_POLLHUP)) && len[i] == 0) {
                ssize_t n = mt_sock_recv(c->s[i], buf[i], sizeof buf[i]);
                if (n > 0)
                    len[i] = (size_t)n, off[i] = 0;
                else if (n == 0 || errno != EAGAIN)
                    done = true;
            }
            if (!done && (pf[i].revents & MT_POLLOUT) && off[1 - i] < len[1 - i]) {
                ssize_t n = mt_sock_send(c->s[i], buf[1 - i] + off[1 - i], len[1 - i] - off[1 - i]);
                if (n > 0) {
                    off[1 - i] += (size_t)n;
                    if (off[1 - i] == len[1 - i]) len[1 - i] = off[1 - i] = 0;
                } else if (n < 0 && errno != EAGAIN) {
                    done = true;
                }
            }
        }
    }
    mt_sock_close(c->s[0]);
    mt_sock_close(c->s[1]);
    free(c);
    return NULL;
}

/* A non-blocking connection to 127.0.0.1:port, connected, or MT_SOCK_NONE. */
static mt_sock connect_node(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    mt_sock s = mt_sock_open(AF_INET, SOCK_STREAM, 0, true);
    if (s == MT_SOCK_NONE) return s;
    if (mt_sock_connect(s, (const struct sockaddr *)&a, sizeof a) == 0) {
        mt_pollfd pf = {.fd = s, .events = MT_POLLOUT};
        if (mt_poll(&pf, 1, 5000) == 1 && mt_sock_error(s) == 0) return s;
    }
    mt_sock_close(s);
    return MT_SOCK_NONE;
}

int main(int argc, char **argv) {
    char *end = NULL;
    long node_port = argc == 2 ? strtol(argv[1], &end, 10) : 0;
    if (argc != 2 || !end || *end || node_port < 1 || node_port > 65535) {
        fprintf(stderr, "usage: fake_tunnel NODE_PORT (1..65535)\n");
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    mt_sock l = mt_sock_open(AF_INET, SOCK_STREAM, 0, false);
    if (l == MT_SOCK_NONE || mt_sock_bind_listen(l, (const struct sockaddr *)&a, sizeof a)) {
        fprintf(stderr, "fake tunnel: cannot listen on 127.0.0.1: %s\n", mt_sock_strerror(errno));
        return 1;
    }
    printf("2024-05-01T10:20:30Z INF forwarding to 127.0.0.1:%ld\n", node_port);
    fprintf(stderr, "INF metrics at http://127.0.0.1:9/metrics\n");
    printf("tunnel ready at 127.0.0.1:%d\n", mt_sock_port(l));
    fflush(stdout);
    fflush(stderr);
    for (;;) {
        mt_pollfd pf = {.fd = l, .events = MT_POLLIN};
        if (mt_poll(&pf, 1, -1) < 0 && errno != EINTR) return 1;
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof peer;
        mt_sock c = mt_sock_accept(l, &peer, &peer_len);
        if (c == MT_SOCK_NONE) continue;
        mt_sock_set_nonblock(c, true);
        mt_sock n = connect_node((int)node_port);
        conn *k = n == MT_SOCK_NONE ? NULL : malloc(sizeof *k);
        pthread_t t;
        if (k) {
            k->s[0] = c, k->s[1] = n;
            if (pthread_create(&t, NULL, carry, k) == 0) {
                pthread_detach(t);
                continue;
            }
            free(k);
        }
        mt_sock_close(c);
        if (n != MT_SOCK_NONE) mt_sock_close(n);
    }
}

/* impair_link.c - a point-to-point IP link between two network namespaces
 * with a fixed delay and random packet loss, made in user space: the
 * stand-in for `tc qdisc ... netem delay D loss P` where the kernel has no
 * netem (tests/test_faults_netns.sh routes the requester over it). Unlike the
 * TCP relays (tests/lib/latency_relay.mjs, bench/delay_relay.c) it carries IP
 * packets, so a dropped packet is really lost and TCP retransmits it.
 *
 *   impair_link --ns-a NS --dev-a NAME --ns-b NS --dev-b NAME [options]
 *     --delay-ms D   delay of every packet, each direction (default 0)
 *     --loss P       fraction of packets dropped, each direction, 0..1 (default 0)
 *     --seed N       seed of the drop decisions (default 1)
 *     --lifetime S   exit after S seconds whatever happens (default 600)
 *
 * It creates TUN device NAME (IFF_TUN | IFF_NO_PI: bare IP packets) inside
 * each namespace (/var/run/netns/NS, as made by `ip netns add`; needs root),
 * then prints "impair_link: ready ..." on stdout; the caller gives the
 * devices addresses and routes (`ip -n NS addr add ... dev NAME`). Every
 * packet read from one device is dropped with probability P (a seeded
 * splitmix64 stream, so the same seed and the same packets give the same
 * drops) or written to the other device D ms after it was read; packets
 * keep their order. At most MAX_QUEUED packets wait per direction; beyond
 * that a packet is dropped and counted apart (a full queue, not the loss
 * rate). The devices vanish when the process exits. On SIGTERM or SIGINT, or
 * at the end of its lifetime, it prints per direction the packets carried
 * and dropped on stderr and exits 0; 1 when a device cannot be made, 2 on a
 * bad command line. */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* ---- options, queues --------------------------------------------------------------------- */

enum {
    MAX_QUEUED = 8192,  /* packets waiting per direction */
    MAX_PACKET = 65536, /* a read buffer; a TUN packet is at most the device MTU */
    NAME_MAX_LEN = 64,  /* namespace names */
};

typedef struct packet {
    int64_t due_ns; /* CLOCK_MONOTONIC time it is written to the other side */
    size_t len;
    uint8_t *data;
} packet;

/* One direction: packets read from `from`, written to `to` when due. */
typedef struct direction {
    const char *name; /* "A->B" */
    int from, to;
    packet q[MAX_QUEUED]; /* ring */
    int head, n;
    uint64_t read, carried, lost, overflow, write_errors;
} direction;

static volatile sig_atomic_t stop_requested;
static uint64_t rng_state;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* splitmix64: a small, well-mixed, seedable stream */
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 bits */
static double rng_uniform(void) {
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static void usage(void) {
    fprintf(stderr, "usage: impair_link --ns-a NS --dev-a NAME --ns-b NS --dev-b NAME"
                    " [--delay-ms D] [--loss P] [--seed N] [--lifetime S]\n");
}

/* A name that is safe as a file name under /var/run/netns and as an interface name. */
static int check_name(const char *what, const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n > max) {
        fprintf(stderr, "impair_link: %s '%s' must be 1 to %zu characters\n", what, s, max);
        return -1;
    }
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.') ||
            (p == s && *p == '.')) {
            fprintf(stderr,
                    "impair_link: %s '%s' may hold only letters, digits, '-', '_' and '.'"
                    " (not first)\n",
                    what, s);
            return -1;
        }
    return 0;
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "impair_link: %s %s: expected a number from %g to %g\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- devices ------------------------------------------------------------------------------- */

/* Opens TUN device `dev` inside namespace `ns` and comes back to namespace `home`. */
static int open_tun_in(const char *ns, const char *dev, int home) {
    char path[128];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
        fprintf(stderr, "impair_link: namespace %s: %s: %s (make it with `ip netns add %s`)\n", ns,
                path, strerror(errno), ns);
        return -1;
    }
    if (setns(nsfd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "impair_link: entering namespace %s: %s (run as root)\n", ns,
                strerror(errno));
        close(nsfd);
        return -1;
    }
    close(nsfd);
    /* the device belongs to the namespace this thread is in now */
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    int saved = errno;
    if (fd >= 0) {
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
        snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
        if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
            saved = errno;
            close(fd);
            fd = -1;
            fprintf(stderr, "impair_link: creating TUN device %s in namespace %s: %s\n", dev, ns,
                    strerror(saved));
        }
    } else {
        fprintf(stderr, "impair_link: /dev/net/tun: %s (no TUN support, or not root)\n",
                strerror(saved));
    }
    if (setns(home, CLONE_NEWNET) != 0) {
        fprintf(stderr, "impair_link: back to the first namespace: %s\n", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

/* ---- forwarding ---------------------------------------------------------------------------- */

/* Reads every packet waiting on d->from: each is lost, queued, or over the queue's bound. */
static void read_side(direction *d, double loss, int64_t delay_ns, uint8_t *buf) {
    for (;;) {
        ssize_t k = read(d->from, buf, MAX_PACKET);
        if (k <= 0) return; /* EAGAIN: nothing more now (errors: poll reports them) */
        int64_t t = now_ns();
        d->read++;
        if (loss > 0 && rng_uniform() < loss) {
            d->lost++;
            continue;
        }
        if (d->n == MAX_QUEUED) {
            d->overflow++;
            continue;
        }
        uint8_t *copy = malloc((size_t)k);
        if (!copy) {
            d->overflow++;
            continue;
        }
        memcpy(copy, buf, (size_t)k);
        packet *p = &d->q[(d->head + d->n) % MAX_QUEUED];
        *p = (packet){t + delay_ns, (size_t)k, copy};
        d->n++;
    }
}

/* Writes the packets that are due; returns ns until the next one is (-1: none waits). */
static int64_t write_due(direction *d) {
    int64_t t = now_ns();
    while (d->n > 0 && d->q[d->head].due_ns <= t) {
        packet *p = &d->q[d->head];
        /* a TUN write delivers or drops at once; a failure is a lost packet, counted */
        if (write(d->to, p->data, p->len) == (ssize_t)p->len)
            d->carried++;
        else
            d->write_errors++;
        free(p->data);
        d->head = (d->head + 1) % MAX_QUEUED;
        d->n--;
    }
    return d->n > 0 ? d->q[d->head].due_ns - t : -1;
}

static void report(const direction *d) {
    fprintf(stderr,
            "impair_link: %s: %llu packets read, %llu carried, %llu lost (%.1f%%), %llu over the"
            " queue bound, %llu write errors\n",
            d->name, (unsigned long long)d->read, (unsigned long long)d->carried,
            (unsigned long long)d->lost, d->read ? 100.0 * (double)d->lost / (double)d->read : 0.0,
            (unsigned long long)d->overflow, (unsigned long long)d->write_errors);
}

int main(int argc, char **argv) {
    const char *ns_a = NULL, *dev_a = NULL, *ns_b = NULL, *dev_b = NULL;
    double delay_ms = 0, loss = 0, lifetime_s = 600, seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "impair_link: %s needs a value\n", o);
            usage();
            return 2;
        }
        i++;
        if (strcmp(o, "--ns-a") == 0) {
            ns_a = v;
        } else if (strcmp(o, "--dev-a") == 0) {
            dev_a = v;
        } else if (strcmp(o, "--ns-b") == 0) {
            ns_b = v;
        } else if (strcmp(o, "--dev-b") == 0) {
            dev_b = v;
        } else if (strcmp(o, "--delay-ms") == 0) {
            if (parse_double(o, v, 0, 60000, &delay_ms)) return 2;
        } else if (strcmp(o, "--loss") == 0) {
            if (parse_double(o, v, 0, 1, &loss)) return 2;
        } else if (strcmp(o, "--seed") == 0) {
            if (parse_double(o, v, 0, 9007199254740992.0, &seed) ||
                seed != (double)(uint64_t)seed) {
                fprintf(stderr, "impair_link: --seed %s: expected a whole number\n", v);
                return 2;
            }
        } else if (strcmp(o, "--lifetime") == 0) {
            if (parse_double(o, v, 1, 86400, &lifetime_s)) return 2;
        } else {
            fprintf(stderr, "impair_link: unknown option %s\n", o);
            usage();
            return 2;
        }
    }
    if (!ns_a || !dev_a || !ns_b || !dev_b) {
        fprintf(stderr, "impair_link: --ns-a, --dev-a, --ns-b and --dev-b are required\n");
        usage();
        return 2;
    }
    if (check_name("namespace", ns_a, NAME_MAX_LEN) ||
        check_name("namespace", ns_b, NAME_MAX_LEN) || check_name("device", dev_a, IFNAMSIZ - 1) ||
        check_name("device", dev_b, IFNAMSIZ - 1))
        return 2;
    rng_state = (uint64_t)seed;

    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0) {
        fprintf(stderr, "impair_link: /proc/self/ns/net: %s\n", strerror(errno));
        return 1;
    }
    int fd_a = open_tun_in(ns_a, dev_a, home);
    int fd_b = fd_a >= 0 ? open_tun_in(ns_b, dev_b, home) : -1;
    close(home);
    if (fd_a < 0 || fd_b < 0) return 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: poll returns to see the flag */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("impair_link: ready: %s in %s <-> %s in %s, delay %g ms, loss %g, seed %.0f\n", dev_a,
           ns_a, dev_b, ns_b, delay_ms, loss, seed);
    fflush(stdout);

    static direction ab, ba; /* static: the rings are large */
    ab.name = "A->B", ab.from = fd_a, ab.to = fd_b;
    ba.name = "B->A", ba.from = fd_b, ba.to = fd_a;
    uint8_t *buf = malloc(MAX_PACKET);
    if (!buf) {
        fprintf(stderr, "impair_link: out of memory\n");
        return 1;
    }
    const int64_t delay_ns = (int64_t)(delay_ms * 1e6),
                  end = now_ns() + (int64_t)(lifetime_s * 1e9);
    int rc = 0;
    while (!stop_requested && now_ns() < end) {
        int64_t wait_ab = write_due(&ab), wait_ba = write_due(&ba);
        int64_t wait = 1000000000; /* at most 1 s between looks at the clock and the flag */
        if (wait_ab >= 0 && wait_ab < wait) wait = wait_ab;
        if (wait_ba >= 0 && wait_ba < wait) wait = wait_ba;
        struct timespec ts = {wait / 1000000000, wait % 1000000000};
        struct pollfd pf[2] = {{fd_a, POLLIN, 0}, {fd_b, POLLIN, 0}};
        int k = ppoll(pf, 2, &ts, NULL);
        if (k < 0 && errno != EINTR) {
            fprintf(stderr, "impair_link: poll: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (k > 0 && ((pf[0].revents | pf[1].revents) & (POLLERR | POLLHUP | POLLNVAL))) {
            fprintf(stderr, "impair_link: a TUN device failed (was its namespace deleted?)\n");
            break;
        }
        if (k > 0 && (pf[0].revents & POLLIN)) read_side(&ab, loss, delay_ns, buf);
        if (k > 0 && (pf[1].revents & POLLIN)) read_side(&ba, loss, delay_ns, buf);
    }
    report(&ab);
    report(&ba);
    free(buf);
    close(fd_a);
    close(fd_b);
    return rc;
}

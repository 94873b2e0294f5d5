/* test_bg_thread.c - the background-thread life cycle (bg_thread.h) and the
 * clocks it sleeps on (clock.h): a thread sleeping for an hour returns
 * because of the stop (not a timeout) and is joined; a wake ends a sleep
 * early and is not lost when made before the sleep; wakes coalesce; a sleep
 * without a wake lasts at least its time (measured with clock_gettime); a
 * thread polling a loopback socket beside the wake descriptor serves it and
 * ends on the stop; stopping a thread never started, or twice, is harmless.
 * The clocks agree with clock_gettime and time(2); a condition variable from
 * mt_cond_init_mono times out on the monotonic clock; sleeps last their time;
 * a timed join gives up on a busy thread and joins one that ends; calendar
 * time in UTC, on two fixed dates and against glibc's gmtime_r. No time limits: a stop that did not
 * wake its thread would hang the test (CTest's timeout). */
#include "check.h"
#include "moontail/bg_thread.h"
#include "moontail/clock.h"

#include "moontail/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

enum { HOUR_MS = 3600 * 1000 };

static double monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- the clocks ----------------------------------------------------------------------------- */

static void test_clocks(void) {
    double m0 = monotonic_ms();
    int64_t a = mt_mono_ms();
    double b = mt_mono_ms_frac(), c = mt_mono_s();
    double m1 = monotonic_ms();
    CHECK(a >= (int64_t)m0 && a <= (int64_t)m1, "mt_mono_ms %lld outside [%f, %f]", (long long)a,
          m0, m1);
    CHECK(b >= m0 && b <= m1, "mt_mono_ms_frac %f outside [%f, %f]", b, m0, m1);
    CHECK(c * 1e3 >= m0 - 1e-3 && c * 1e3 <= m1 + 1e-3, "mt_mono_s %f outside [%f, %f] ms", c, m0,
          m1);
    time_t t0 = time(NULL);
    int64_t w = mt_wall_ms();
    time_t t1 = time(NULL);
    CHECK(w >= (int64_t)t0 * 1000 && w < ((int64_t)t1 + 1) * 1000,
          "mt_wall_ms %lld outside the second(s) time(2) gave: %lld..%lld", (long long)w,
          (long long)t0, (long long)t1);
    m0 = monotonic_ms();
    struct timespec at = mt_mono_after_ms(1500);
    m1 = monotonic_ms();
    double at_ms = (double)at.tv_sec * 1e3 + at.tv_nsec / 1e6;
    CHECK(at.tv_nsec >= 0 && at.tv_nsec < 1000000000L && at_ms >= m0 + 1500 - 1e-3 &&
              at_ms <= m1 + 1500 + 1e-3,
          "mt_mono_after_ms(1500) = %f, not 1500 ms after [%f, %f]", at_ms, m0, m1);
}

/* A timed wait on a monotonic condition variable: with a deadline from
 * mt_mono_after_ms it times out after (not before) its 40 ms. Were the
 * variable measuring CLOCK_REALTIME, the monotonic deadline (seconds since
 * boot) would lie decades in the past and the wait would return at once. */
static void test_mono_cond(void) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    CHECK(mt_cond_init_mono(&cv) == 0, "mt_cond_init_mono");
    pthread_mutex_lock(&mu);
    double t0 = monotonic_ms();
    struct timespec at = mt_mono_after_ms(40);
    int rc = 0;
    while (rc == 0) rc = mt_cond_wait_until(&cv, &mu, &at); /* spurious wakes: wait again */
    double waited = monotonic_ms() - t0;
    pthread_mutex_unlock(&mu);
    CHECK(rc == ETIMEDOUT && waited >= 40 - 1e-3, "a 40 ms monotonic wait: rc %d after %.2f ms", rc,
          waited);
    pthread_cond_destroy(&cv);
}

static void *sleep_300(void *arg) {
    (void)arg;
    mt_sleep_ms(300);
    return NULL;
}

/* mt_sleep_ms lasts at least its time; mt_thread_join_ms gives up on a thread
 * still running (which stays joinable) and joins one that ends in time. */
static void test_sleep_join(void) {
    double t0 = monotonic_ms();
    mt_sleep_ms(30);
    double slept = monotonic_ms() - t0;
    CHECK(slept >= 30 - 1e-3, "mt_sleep_ms(30) returned after %.2f ms", slept);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, sleep_300, NULL) == 0, "pthread_create");
    t0 = monotonic_ms();
    int rc = mt_thread_join_ms(t, 20);
    double waited = monotonic_ms() - t0;
    CHECK(rc == ETIMEDOUT && waited >= 20 - 1e-3,
          "joining a thread busy for 300 ms within 20 ms: rc %d after %.2f ms", rc, waited);
    rc = mt_thread_join_ms(t, 60000);
    waited = monotonic_ms() - t0;
    CHECK(rc == 0 && waited >= 300 - 1e-3, "joining it within 60 s: rc %d after %.2f ms", rc,
          waited);
}

/* Calendar time: 951,782,400 s after the epoch is 2000-02-29 00:00:00 UTC (a
 * leap day of a century leap year), 253,402,300,799 is 9999-12-31 23:59:59. */
static void test_utc_tm(void) {
    struct tm tm;
    CHECK(mt_utc_tm((time_t)951782400, &tm) && tm.tm_year == 100 && tm.tm_mon == 1 &&
              tm.tm_mday == 29 && tm.tm_hour == 0 && tm.tm_min == 0 && tm.tm_sec == 0 &&
              tm.tm_wday == 2,
          "mt_utc_tm(951782400) = %d-%d-%d %d:%d:%d wday %d", tm.tm_year + 1900, tm.tm_mon + 1,
          tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, tm.tm_wday);
    CHECK(mt_utc_tm((time_t)253402300799LL, &tm) && tm.tm_year == 8099 && tm.tm_mon == 11 &&
              tm.tm_mday == 31 && tm.tm_hour == 23 && tm.tm_min == 59 && tm.tm_sec == 59,
          "mt_utc_tm(253402300799) = %d-%d-%d %d:%d:%d", tm.tm_year + 1900, tm.tm_mon + 1,
          tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
#ifdef __GLIBC__
    /* glibc's gmtime_r, an independent calendar, over the years 1 to 9999 */
    int differ = 0, n = 0;
    for (long long t = -62135596800LL; t <= 253402300799LL; t += 86400LL * 37 + 3601 + (t & 7777)) {
        struct tm a, b;
        time_t tt = (time_t)t;
        n++;
        differ += !gmtime_r(&tt, &a) || !mt_utc_tm(tt, &b) || a.tm_sec != b.tm_sec ||
                  a.tm_min != b.tm_min || a.tm_hour != b.tm_hour || a.tm_mday != b.tm_mday ||
                  a.tm_mon != b.tm_mon || a.tm_year != b.tm_year || a.tm_wday != b.tm_wday ||
                  a.tm_yday != b.tm_yday;
    }
    CHECK(differ == 0 && n > 90000, "mt_utc_tm differs from gmtime_r at %d of %d times", differ, n);
#endif
}

/* ---- sleeping threads ----------------------------------------------------------------------- */

typedef struct sleeper {
    mt_bg_thread bg;
    atomic_int phase;              /* 1: about to sleep the first time, 2: the second */
    mt_bg_wake first, second;      /* why each sleep ended */
    atomic_int sleeps, after_stop; /* sleeps made; loop turns seen stopping */
} sleeper;

/* Sleeps an hour (woken: sleeps another hour), then leaves. */
static void *sleeper_main(void *arg) {
    sleeper *s = arg;
    atomic_store(&s->phase, 1);
    s->first = mt_bg_thread_sleep(&s->bg, HOUR_MS);
    atomic_fetch_add(&s->sleeps, 1);
    if (s->first == MT_BG_WOKEN) {
        atomic_store(&s->phase, 2);
        s->second = mt_bg_thread_sleep(&s->bg, HOUR_MS);
        atomic_fetch_add(&s->sleeps, 1);
    }
    if (mt_bg_thread_stopping(&s->bg)) atomic_fetch_add(&s->after_stop, 1);
    return NULL;
}

static void wait_phase(sleeper *s, int phase) {
    while (atomic_load(&s->phase) < phase) mt_sleep_ms(1);
}

static void test_stop_wakes(void) {
    sleeper s = {0};
    mt_error err = {{0}};
    CHECK(mt_bg_thread_init(&s.bg, &err) == 0, "init: %s", err.msg);
    CHECK(!mt_bg_thread_stopping(&s.bg), "a new thread is not stopping");
    CHECK(mt_bg_thread_start(&s.bg, sleeper_main, &s, &err) == 0, "start: %s", err.msg);
    wait_phase(&s, 1);
    mt_bg_thread_stop(&s.bg); /* returns only once the thread is joined */
    CHECK(s.first == MT_BG_STOP, "an hour's sleep ended by %d, not by the stop (%d)", s.first,
          MT_BG_STOP);
    CHECK(atomic_load(&s.sleeps) == 1 && atomic_load(&s.after_stop) == 1,
          "the thread slept %d times and saw the stop %d times", atomic_load(&s.sleeps),
          atomic_load(&s.after_stop));
    CHECK(mt_bg_thread_stopping(&s.bg), "stopping after the stop");
    mt_bg_thread_stop(&s.bg); /* twice: nothing left to join */
    mt_bg_thread_destroy(&s.bg);
    mt_bg_thread_destroy(&s.bg);
}

static void test_wake_then_stop(void) {
    sleeper s = {0};
    mt_error err = {{0}};
    CHECK(mt_bg_thread_init(&s.bg, &err) == 0, "init: %s", err.msg);
    CHECK(mt_bg_thread_start(&s.bg, sleeper_main, &s, &err) == 0, "start: %s", err.msg);
    wait_phase(&s, 1);
    mt_bg_thread_wake(&s.bg); /* during the first sleep, or before it: either way it ends it */
    wait_phase(&s, 2);
    CHECK(s.first == MT_BG_WOKEN, "the first sleep ended by %d, not the wake", s.first);
    CHECK(!mt_bg_thread_stopping(&s.bg), "a wake is not a stop");
    mt_bg_thread_stop(&s.bg);
    CHECK(s.second == MT_BG_STOP, "the second sleep ended by %d, not the stop", s.second);
    CHECK(atomic_load(&s.sleeps) == 2, "%d sleeps, wanted 2", atomic_load(&s.sleeps));
    mt_bg_thread_destroy(&s.bg);
}

/* Sleeps in this thread: no thread needed to see the wakes kept. */
static void test_wakes_kept(void) {
    mt_bg_thread t;
    mt_error err = {{0}};
    CHECK(mt_bg_thread_init(&t, &err) == 0, "init: %s", err.msg);
    CHECK(mt_bg_thread_sleep(&t, 0) == MT_BG_TIMEOUT, "a sleep of 0 ms without a wake times out");
    mt_bg_thread_wake(&t);
    CHECK(mt_bg_thread_sleep(&t, HOUR_MS) == MT_BG_WOKEN, "a wake made before the sleep is kept");
    mt_bg_thread_wake(&t);
    mt_bg_thread_wake(&t);
    mt_bg_thread_wake(&t);
    CHECK(mt_bg_thread_sleep(&t, HOUR_MS) == MT_BG_WOKEN, "three wakes end one sleep");
    CHECK(mt_bg_thread_sleep(&t, 0) == MT_BG_TIMEOUT, "and were all taken by it");
    double t0 = monotonic_ms();
    mt_bg_wake w = mt_bg_thread_sleep(&t, 30);
    double slept = monotonic_ms() - t0;
    CHECK(w == MT_BG_TIMEOUT && slept >= 30, "a 30 ms sleep returned %d after %.2f ms", w, slept);
    mt_bg_thread_wake(&t);
    mt_pollfd p = {.fd = mt_bg_thread_wake_fd(&t), .events = MT_POLLIN};
    CHECK(mt_poll(&p, 1, 1000) == 1 && (p.revents & MT_POLLIN), "the wake descriptor is readable");
    mt_bg_thread_clear(&t);
    CHECK(mt_poll(&p, 1, 0) == 0, "and not once cleared");
    /* the stop, asked before the sleep: the sleep returns at once, whatever its length */
    mt_bg_thread_stop(&t); /* never started: nothing to join */
    CHECK(mt_bg_thread_sleep(&t, HOUR_MS) == MT_BG_STOP, "a sleep after the stop returns STOP");
    CHECK(mt_bg_thread_sleep(&t, HOUR_MS) == MT_BG_STOP, "every time");
    mt_bg_thread_destroy(&t);
}

/* ---- a thread polling a socket beside the wake descriptor ----------------------------------- */

typedef struct echo {
    mt_bg_thread bg;
    mt_sock fd;
    atomic_int served;
    bool ended_by_stop;
} echo;

/* One byte from s, waiting for it (the sockets may be non-blocking): 1, or 0. */
static int get_byte(mt_sock s, char *c) {
    mt_pollfd p = {.fd = s, .events = MT_POLLIN};
    return mt_poll(&p, 1, 10000) == 1 && mt_sock_recv(s, c, 1) == 1;
}

/* Echoes each byte +1 until stopped (the wake descriptor tells it). */
static void *echo_main(void *arg) {
    echo *e = arg;
    for (;;) {
        mt_pollfd p[2] = {{.fd = mt_bg_thread_wake_fd(&e->bg), .events = MT_POLLIN},
                          {.fd = e->fd, .events = MT_POLLIN}};
        if (mt_poll(p, 2, -1) < 0) continue;
        if (p[0].revents) {
            mt_bg_thread_clear(&e->bg);
            if (mt_bg_thread_stopping(&e->bg)) {
                e->ended_by_stop = true;
                return NULL;
            }
        }
        if (p[1].revents & MT_POLLIN) {
            char c;
            if (mt_sock_recv(e->fd, &c, 1) != 1) return NULL;
            c++;
            if (mt_sock_send(e->fd, &c, 1) == 1) atomic_fetch_add(&e->served, 1);
        }
    }
}

static void test_poller(void) {
    mt_error err0 = {{0}};
    mt_sock l = mt_listen_tcp("127.0.0.1:0", &err0), sv[2] = {MT_SOCK_NONE, MT_SOCK_NONE};
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", mt_listen_port(l));
    if (l != MT_SOCK_NONE) sv[0] = mt_connect_tcp(addr, 5000, &err0);
    if (sv[0] != MT_SOCK_NONE) sv[1] = mt_accept_tcp(l, 5000, NULL, 0, &err0);
    CHECK(sv[1] != MT_SOCK_NONE, "a loopback connection: %s", err0.msg);
    if (sv[1] == MT_SOCK_NONE) return;
    echo e = {.fd = sv[1]};
    mt_error err = {{0}};
    CHECK(mt_bg_thread_init(&e.bg, &err) == 0, "init: %s", err.msg);
    CHECK(mt_bg_thread_start(&e.bg, echo_main, &e, &err) == 0, "start: %s", err.msg);
    for (char c = 'a'; c < 'e'; c++) {
        char got = 0;
        CHECK(mt_sock_send(sv[0], &c, 1) == 1 && get_byte(sv[0], &got) && got == c + 1,
              "echo of '%c': '%c'", c, got);
    }
    mt_bg_thread_wake(&e.bg); /* a wake alone does not end it */
    char c = 'x', got = 0;
    CHECK(mt_sock_send(sv[0], &c, 1) == 1 && get_byte(sv[0], &got) && got == 'y',
          "still serving after a wake: '%c'", got);
    mt_bg_thread_stop(&e.bg);
    CHECK(e.ended_by_stop && atomic_load(&e.served) == 5,
          "the poller ended by the stop (%d) after serving %d bytes", e.ended_by_stop,
          atomic_load(&e.served));
    mt_bg_thread_destroy(&e.bg);
    mt_sock_close(sv[0]);
    mt_sock_close(sv[1]);
    mt_sock_close(l);
}

int main(void) {
    test_clocks();
    test_mono_cond();
    test_sleep_join();
    test_utc_tm();
    test_stop_wakes();
    test_wake_then_stop();
    test_wakes_kept();
    test_poller();
    return check_report("test_bg_thread");
}

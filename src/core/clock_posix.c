/* clock_posix.c - clock.h's waits, sleeps and calendar time on POSIX. */
#include "moontail/clock.h"

#include <errno.h>

int mt_cond_init_mono(pthread_cond_t *c) {
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc) return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

int mt_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *deadline) {
    return pthread_cond_timedwait(c, m, deadline);
}

int mt_thread_join_ms(pthread_t t, int64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* pthread_timedjoin_np measures only this clock */
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return pthread_timedjoin_np(t, NULL, &ts) == 0 ? 0 : ETIMEDOUT;
}

void mt_sleep_ms(int64_t ms) {
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

bool mt_local_tm(time_t t, struct tm *out) {
    return localtime_r(&t, out) != NULL;
}

void mt_clock_init(void) {}

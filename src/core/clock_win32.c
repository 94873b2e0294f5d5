/* clock_win32.c - clock.h's waits, sleeps and calendar time on Windows.
 * winpthreads refuses pthread_condattr_setclock(CLOCK_MONOTONIC) and takes
 * pthread_cond_timedwait's deadline on the wall clock, so a monotonic
 * deadline is turned into the time left and waited with the relative wait it
 * offers; the caller's loop sees ETIMEDOUT only once the deadline has passed
 * on the monotonic clock. */
#include "moontail/clock.h"

#include <errno.h>
#include <windows.h>

int mt_cond_init_mono(pthread_cond_t *c) {
    return pthread_cond_init(c, NULL);
}

int mt_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *deadline) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t left_ns = ((int64_t)deadline->tv_sec - (int64_t)now.tv_sec) * 1000000000LL +
                      (deadline->tv_nsec - now.tv_nsec);
    if (left_ns <= 0) return ETIMEDOUT;
    int64_t ms = (left_ns + 999999) / 1000000;
    struct timespec rel = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    int rc = pthread_cond_timedwait_relative_np(c, m, &rel);
    if (rc != ETIMEDOUT) return rc;
    clock_gettime(CLOCK_MONOTONIC, &now);
    bool passed = now.tv_sec > deadline->tv_sec ||
                  (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
    return passed ? ETIMEDOUT : 0; /* woke early: the caller's loop waits again */
}

int mt_thread_join_ms(pthread_t t, int64_t ms) {
    HANDLE h = pthread_gethandle(t);
    if (h && WaitForSingleObject(h, ms < 0 ? 0 : (DWORD)ms) != WAIT_OBJECT_0) return ETIMEDOUT;
    return pthread_join(t, NULL) == 0 ? 0 : ETIMEDOUT;
}

void mt_sleep_ms(int64_t ms) {
    if (ms > 0) Sleep((DWORD)ms);
}

bool mt_local_tm(time_t t, struct tm *out) {
    return localtime_s(out, &t) == 0;
}

void mt_clock_init(void) {
    timeBeginPeriod(1);
}

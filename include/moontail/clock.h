/* clock.h - the time helpers every layer shares: a monotonic clock (for
 * intervals and deadlines) in whole milliseconds, and with fractions in
 * milliseconds or seconds (for rates and timings); the wall clock in
 * milliseconds since the Unix epoch (for what is stored or shown); and
 * timed waits on the monotonic clock (a wall clock set back must not
 * stretch a wait); sleeps; calendar time. The waits, sleeps and calendar
 * calls differ between POSIX and Windows: clock_posix.c and clock_win32.c. */
#ifndef MOONTAIL_CLOCK_H
#define MOONTAIL_CLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (unaffected by changes to the wall clock). */
int64_t mt_mono_ms(void);
/* The same clock with the fraction of a millisecond kept. */
double mt_mono_ms_frac(void);
/* The same clock in seconds, with the fraction. */
double mt_mono_s(void);
/* Milliseconds since the Unix epoch on CLOCK_REALTIME (jumps when the clock is set). */
int64_t mt_wall_ms(void);
/* Initialises c for mt_cond_wait_until (0, or pthread_cond_init's error). */
int mt_cond_init_mono(pthread_cond_t *c);
/* CLOCK_MONOTONIC now + ms (ms >= 0): a deadline for mt_cond_wait_until. */
struct timespec mt_mono_after_ms(int64_t ms);
/* pthread_cond_timedwait on c (made by mt_cond_init_mono) until the
 * CLOCK_MONOTONIC time deadline: 0 when woken (perhaps spuriously), ETIMEDOUT
 * once the deadline has passed. Windows' pthreads measure no monotonic clock,
 * so there it waits for the time left, in whole milliseconds rounded up. */
int mt_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *deadline);
/* Joins t if it ends within ms: 0, or ETIMEDOUT (t is then still running and
 * still joinable). */
int mt_thread_join_ms(pthread_t t, int64_t ms);
/* Sleeps ms milliseconds (ms <= 0: returns at once). */
void mt_sleep_ms(int64_t ms);
/* The calendar time of t in UTC (computed here, the same everywhere: Windows'
 * own stops at the year 3000) / in the local time zone (the C library's);
 * false if t does not fit one. */
bool mt_utc_tm(time_t t, struct tm *out);
bool mt_local_tm(time_t t, struct tm *out);
/* Once, at the start of main: on Windows asks for a 1 ms timer resolution
 * (short waits would otherwise last 15.6 ms); nothing on POSIX. */
void mt_clock_init(void);

#endif

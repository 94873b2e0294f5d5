/* clock.h - the time helpers every layer shares: a monotonic clock (for
 * intervals and deadlines) in whole milliseconds, and with fractions in
 * milliseconds or seconds (for rates and timings); the wall clock in
 * milliseconds since the Unix epoch (for what is stored or shown); and
 * timed waits on the monotonic clock: a condition variable that measures it
 * and the absolute time, ms from now, its pthread_cond_timedwait takes (a
 * wall clock set back must not stretch a wait). */
#ifndef MOONTAIL_CLOCK_H
#define MOONTAIL_CLOCK_H

#include <pthread.h>
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
/* Initialises c to measure CLOCK_MONOTONIC in pthread_cond_timedwait (0, or
 * pthread_cond_init's error). */
int mt_cond_init_mono(pthread_cond_t *c);
/* CLOCK_MONOTONIC now + ms (ms >= 0), for pthread_cond_timedwait on a
 * condition variable from mt_cond_init_mono. */
struct timespec mt_mono_after_ms(int64_t ms);
/* CLOCK_REALTIME now + ms (ms >= 0), for the calls that measure only that
 * clock (pthread_timedjoin_np). */
struct timespec mt_realtime_after_ms(int64_t ms);

#endif

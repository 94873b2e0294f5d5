/* clock.h - the time helpers the threaded parts share: a monotonic clock in
 * milliseconds (for intervals and deadlines) and the absolute time, ms from
 * now, that pthread_cond_timedwait takes (it measures CLOCK_REALTIME). */
#ifndef MOONTAIL_CLOCK_H
#define MOONTAIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (unaffected by changes to the wall clock). */
int64_t mt_mono_ms(void);
/* CLOCK_REALTIME now + ms (ms >= 0), for pthread_cond_timedwait. */
struct timespec mt_realtime_after_ms(int64_t ms);

#endif

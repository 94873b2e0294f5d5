/* bg_thread.h - the life cycle of a background thread that runs until its
 * owner stops it (a node's heartbeats, the registry's placement turns, a
 * relay connection, a tunnel program's supervisor): start it, let it sleep
 * between turns, wake it early when there is news, and on stop wake it and
 * join it.
 *
 * Wakes go through an eventfd: a wake is never lost (one made while the
 * thread is busy ends its next sleep at once), sleeps measure
 * CLOCK_MONOTONIC, and a thread that also waits on sockets polls
 * mt_bg_thread_wake_fd beside them.
 *
 *   mt_bg_thread_init(&t, err);        before anything may wake it
 *   mt_bg_thread_start(&t, fn, arg, err);
 *   ... fn: while (!mt_bg_thread_stopping(&t)) { work; mt_bg_thread_sleep(&t, 1000); }
 *   mt_bg_thread_stop(&t);             sets the stop flag, wakes, joins
 *   mt_bg_thread_destroy(&t);          once nothing wakes it any more */
#ifndef MOONTAIL_BG_THREAD_H
#define MOONTAIL_BG_THREAD_H

#include "moontail/error.h"
#include "moontail/sock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct mt_bg_thread {
    pthread_t thread;
    bool started;     /* thread runs (joined by mt_bg_thread_stop) */
    atomic_bool stop; /* asked to stop */
    mt_wake wake;     /* readable after a wake or the stop; MT_WAKE_NONE before init */
} mt_bg_thread;

/* Why mt_bg_thread_sleep returned. */
typedef enum mt_bg_wake { MT_BG_TIMEOUT, MT_BG_WOKEN, MT_BG_STOP } mt_bg_wake;

/* Readies t (not started). -1 with a message when the system has no
 * descriptor left. */
int mt_bg_thread_init(mt_bg_thread *t, mt_error *err);
/* Runs fn(arg) on a new thread. -1 with a message (t stays ready to be
 * destroyed). */
int mt_bg_thread_start(mt_bg_thread *t, void *(*fn)(void *), void *arg, mt_error *err);
/* Whether the stop was asked for (any thread may ask). */
bool mt_bg_thread_stopping(mt_bg_thread *t);
/* Sleeps up to ms milliseconds: MT_BG_STOP as soon as the stop is asked for
 * (also when it was before the call), MT_BG_WOKEN at a wake (also one made
 * since the last sleep), else MT_BG_TIMEOUT. */
mt_bg_wake mt_bg_thread_sleep(mt_bg_thread *t, int64_t ms);
/* Sleeps the whole ms unless the stop is asked for (MT_BG_STOP, else
 * MT_BG_TIMEOUT): a wake meanwhile is used up and does not end it (a
 * back-off between tries, which news should not cut short). */
mt_bg_wake mt_bg_thread_sleep_full(mt_bg_thread *t, int64_t ms);
/* Ends the thread's current or next sleep early. Any thread; cheap. */
void mt_bg_thread_wake(mt_bg_thread *t);
/* The descriptor a thread polling sockets adds to its poll set (POLLIN):
 * readable after a wake or the stop; mt_bg_thread_clear consumes the wakes. */
mt_sock mt_bg_thread_wake_fd(const mt_bg_thread *t);
void mt_bg_thread_clear(mt_bg_thread *t);
/* Asks the thread to stop, wakes it and joins it (if it was started); not
 * from the thread itself. t may still be woken afterwards. */
void mt_bg_thread_stop(mt_bg_thread *t);
/* Releases t's descriptor; after mt_bg_thread_stop, once no one wakes it. */
void mt_bg_thread_destroy(mt_bg_thread *t);

#endif

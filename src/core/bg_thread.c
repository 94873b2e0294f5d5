/* bg_thread.c - a background thread's start, sleep, wake and stop
 * (bg_thread.h). The wakes are an mt_wake (sock.h): a wake makes it
 * readable, a sleep that sees it readable clears it; the stop flag is set
 * before the wake that announces it, so a woken sleeper always sees it. */
#include "moontail/bg_thread.h"
#include "moontail/clock.h"

#include <errno.h>
#include <string.h>

int mt_bg_thread_init(mt_bg_thread *t, mt_error *err) {
    memset(t, 0, sizeof *t);
    atomic_init(&t->stop, false);
    if (mt_wake_init(&t->wake) != 0)
        return mt_error_set(err, "cannot make the wake of a background thread: %s",
                            mt_sock_strerror(errno));
    return 0;
}

int mt_bg_thread_start(mt_bg_thread *t, void *(*fn)(void *), void *arg, mt_error *err) {
    if (!mt_wake_ok(&t->wake)) return mt_error_set(err, "a background thread without its wake");
    int rc = pthread_create(&t->thread, NULL, fn, arg);
    if (rc != 0) return mt_error_set(err, "cannot start a background thread: %s", strerror(rc));
    t->started = true;
    return 0;
}

bool mt_bg_thread_stopping(mt_bg_thread *t) {
    return atomic_load(&t->stop);
}

void mt_bg_thread_wake(mt_bg_thread *t) {
    mt_wake_signal(&t->wake);
}

mt_sock mt_bg_thread_wake_fd(const mt_bg_thread *t) {
    return mt_wake_sock(&t->wake);
}

void mt_bg_thread_clear(mt_bg_thread *t) {
    mt_wake_clear(&t->wake);
}

mt_bg_wake mt_bg_thread_sleep(mt_bg_thread *t, int64_t ms) {
    int64_t until = mt_mono_ms() + (ms > 0 ? ms : 0);
    for (;;) {
        if (mt_bg_thread_stopping(t)) return MT_BG_STOP;
        int64_t left = until - mt_mono_ms();
        mt_pollfd p = {.fd = mt_wake_sock(&t->wake), .events = MT_POLLIN};
        int rc = mt_poll(&p, 1, left <= 0 ? 0 : left > 1 << 30 ? 1 << 30 : (int)left);
        if (rc > 0) {
            mt_bg_thread_clear(t);
            return mt_bg_thread_stopping(t) ? MT_BG_STOP : MT_BG_WOKEN;
        }
        if (rc < 0 && errno != EINTR) return MT_BG_TIMEOUT; /* not a descriptor: no sleep */
        if (rc == 0 && left <= 0) return MT_BG_TIMEOUT;
    }
}

mt_bg_wake mt_bg_thread_sleep_full(mt_bg_thread *t, int64_t ms) {
    int64_t until = mt_mono_ms() + ms;
    mt_bg_wake w;
    while ((w = mt_bg_thread_sleep(t, until - mt_mono_ms())) == MT_BG_WOKEN) {
    }
    return w;
}

void mt_bg_thread_stop(mt_bg_thread *t) {
    atomic_store(&t->stop, true);
    mt_bg_thread_wake(t);
    if (t->started) pthread_join(t->thread, NULL);
    t->started = false;
}

void mt_bg_thread_destroy(mt_bg_thread *t) {
    mt_wake_destroy(&t->wake);
}

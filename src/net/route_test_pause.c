/* route_test_pause.c - a hook for the fault tests: with
 * MOONTAIL_TEST_PAUSE_AT_POSITION=N in the environment, the process stops
 * itself (SIGSTOP) the first time a session of one of its routes has
 * evaluated N positions (its n_past reaches N: position N - 1 counting from
 * 0), before it asks for the next one. A test waits for the stop, does its
 * damage (kills a node of the route, cuts a link), then continues the process
 * with SIGCONT, so "killed mid-generation" happens at a token the test chose
 * instead of after a sleep that a fast run may outlast. Once per process: the
 * replay after a failover passes position N again without stopping. */
#include "route_test_pause.h"
#include "moontail/log.h"
#include "moontail/proc.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* -1: not read yet; 0: off (unset, invalid, or already stopped once) */
static atomic_long pause_at = -1;

static long read_pause_position(void) {
    const char *s = getenv("MOONTAIL_TEST_PAUSE_AT_POSITION");
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v <= 0 || v > INT_MAX) {
        mt_log(MT_LOG_WARN, "route",
               "ignoring MOONTAIL_TEST_PAUSE_AT_POSITION='%s' (wanted a position >= 1)", s);
        return 0;
    }
    return v;
}

void route_test_pause(int32_t p_before, int32_t p_after) {
    long at = atomic_load(&pause_at);
    if (at < 0) {
        long v = read_pause_position();
        long expected = -1;
        at = atomic_compare_exchange_strong(&pause_at, &expected, v) ? v : expected;
    }
    if (at <= 0 || p_before >= at || p_after < at) return;
    long expected = at;
    if (!atomic_compare_exchange_strong(&pause_at, &expected, 0)) return; /* another thread won */
    mt_log(MT_LOG_INFO, "route",
           "stopped at position %ld for a test (MOONTAIL_TEST_PAUSE_AT_POSITION)", at);
    fflush(NULL); /* what the process printed so far, for the test to read while it is stopped */
    mt_test_freeze();
}

/* route_test_pause.h - the fault tests' pause hook of the route executor
 * (route_test_pause.c). */
#ifndef MOONTAIL_NET_ROUTE_TEST_PAUSE_H
#define MOONTAIL_NET_ROUTE_TEST_PAUSE_H

#include <stdint.h>

/* Called after a successful evaluation that took a session from p_before to
 * p_after positions; stops the process once when MOONTAIL_TEST_PAUSE_AT_POSITION
 * lies in (p_before, p_after]. */
void route_test_pause(int32_t p_before, int32_t p_after);

#endif

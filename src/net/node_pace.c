/* node_pace.c - decode pacing (include/moontail/node.h, "Step order"): the
 * rule that holds a step of prompt chunks back when a decoding session's
 * next token is due before the step would end, so that the token does not
 * wait behind the step. A node cannot cut a step short; it can choose not
 * to start one. Pure arithmetic on the times the worker measures, shared
 * with bench/cellsim's model of the node. */
#include "moontail/node.h"

void mt_node_pace_note(mt_node_pace_decode *p, double arrived_ms, bool decode) {
    if (!decode) {
        *p = (mt_node_pace_decode){0};
        return;
    }
    const double gap = arrived_ms - p->at_ms;
    p->period_ms = p->at_ms > 0 && gap > 0 && gap <= MT_NODE_PACE_MAX_PERIOD_MS ? gap : 0;
    p->at_ms = arrived_ms;
}

double mt_node_pace_hold(const mt_node_pace_decode *d, int n, double now_ms, double step_ms) {
    double until = 0;
    if (!(step_ms > 0)) return 0; /* nothing measured yet */
    for (int i = 0; i < n; i++) {
        const double period = d[i].period_ms;
        if (!(period > 0)) continue; /* one decode seen: no rhythm yet */
        const double due = d[i].at_ms + period;
        /* a late token is waited for a little (half its period, at most one step, at least
         * half a millisecond: its arrivals jitter as the steps it meets vary); later than
         * that it counts as stopped */
        double slack = 0.5 * period;
        if (slack > step_ms) slack = step_ms;
        if (slack < 0.5) slack = 0.5;
        const double end = due + slack;
        if (now_ms >= end || due >= now_ms + step_ms) continue; /* stopped, or after the step */
        if (until == 0 || end < until) until = end;
    }
    return until;
}

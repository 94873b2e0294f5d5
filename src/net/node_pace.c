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

double mt_node_pace_hold(const mt_node_pace_decode *d, int n, double now_ms, double step_ms,
                         double *due_ms) {
    double until = 0, first = 0;
    if (due_ms) *due_ms = 0;
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
        if (first == 0 || due < first) first = due;
    }
    if (due_ms) *due_ms = first;
    return until;
}

void mt_node_pace_measured(mt_node_pace_costs *c, bool prompt, double ms, double tokens) {
    double *m = prompt ? &c->prompt_ms : &c->decode_ms,
           *t = prompt ? &c->prompt_tok : &c->decode_tok;
    if (!(ms > 0) || !(tokens > 0)) return;
    if (*m > 0) { /* recent steps weigh most */
        *m = 0.75 * *m + 0.25 * ms;
        *t = 0.75 * *t + 0.25 * tokens;
    } else {
        *m = ms, *t = tokens;
    }
}

/* The line through the two kinds of step: ms = fixed + per_token x tokens. With one kind
 * only, or two too alike, the prompt steps' mean cost per token and no fixed part. false
 * when no prompt step is measured. */
static bool pace_line(const mt_node_pace_costs *c, double *fixed, double *per_token) {
    if (!(c->prompt_ms > 0) || !(c->prompt_tok > 0)) return false;
    *fixed = 0, *per_token = c->prompt_ms / c->prompt_tok;
    if (c->decode_ms > 0 && c->prompt_tok - c->decode_tok >= 1 && c->prompt_ms > c->decode_ms) {
        *per_token = (c->prompt_ms - c->decode_ms) / (c->prompt_tok - c->decode_tok);
        *fixed = c->decode_ms - *per_token * c->decode_tok;
        if (*fixed < 0) *fixed = 0;
    }
    return true;
}

double mt_node_pace_step_ms(const mt_node_pace_costs *c, double tokens) {
    double fixed, per_token;
    return pace_line(c, &fixed, &per_token) ? fixed + per_token * tokens : 0;
}

double mt_node_pace_plan(const mt_node_pace_costs *c, const mt_node_pace_decode *d, int n,
                         double now_ms, double decode_tokens, double planned, int *skips,
                         double *hold_until) {
    *hold_until = 0;
    const double step_ms = mt_node_pace_step_ms(c, planned);
    double due = 0;
    if (!(planned > 0) || !(step_ms > 0)) return planned;
    if (decode_tokens == 0) {
        const double hold = mt_node_pace_hold(d, n, now_ms, step_ms, &due);
        if (hold == 0) return planned;
        const int fit = mt_node_pace_fit(c, due - now_ms);
        if (fit >= 1) return fit < planned ? fit : planned; /* a smaller step ends in time */
        *hold_until = hold;
        return 0;
    }
    const double after = now_ms + mt_node_pace_step_ms(c, decode_tokens);
    if (*skips < MT_NODE_PACE_MAX_SKIPS && c->decode_ms > 0 &&
        mt_node_pace_hold(d, n, after, step_ms, &due) == 0) {
        (*skips)++; /* the prompts run in the gap after this step */
        return 0;
    }
    return planned;
}

int mt_node_pace_fit(const mt_node_pace_costs *c, double ms) {
    double fixed, per_token;
    if (!pace_line(c, &fixed, &per_token) || !(per_token > 0) || ms <= fixed) return 0;
    const double t = (ms - fixed) / per_token;
    return t >= 1 << 20 ? 1 << 20 : (int)t;
}

/* cellsim_requester.c - simulated requesters (src/net/route.c,
 * src/control/requester.c): one call at a time, to each stage of the route in
 * turn (route.c's default: `chain` is off), or (oneway) one pass to the first
 * stage whose chunks the stages forward and the last answers (issue 18 item 4,
 * as planned), the prompt in micro-batches of
 * `ubatch` tokens, the head on the requester's CPU after the last stage;
 * before a new session the old one is ended on every stage (one SESSION_END
 * round trip each). A failed call starts mt_requester_eval's loop: the session
 * ended on every stage still reachable, a new route from the registry that
 * avoids the failed node (250 ms between attempts, up to 20 s), a connection
 * to each stage, and the whole token history replayed from position 0; an
 * UNKNOWN_SESSION answer (an evicted session) is replayed within the route
 * once. */
#include "cellsim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requesters --------------------------------------------------------------------------- */

static void user_begin_request(sim *S, int u);
static void user_failover(sim *S, int u, int failed_node);
static void user_open(sim *S, int u, int then);
static void user_send_pass(sim *S, int u);
static void user_end_session(sim *S, int u, int then);

/* Whether the eval in flight is a speculative decode pass: a token and its guesses. */
static bool spec_pass(const cs_user *U) {
    return U->spec_guess > 0 && U->run_p0 > 0 && U->ev_end - U->run_p0 == 1 + U->spec_guess;
}

/* Oneway: the pass [mb_p0, mb_p0 + mb_n) to the first stage, with the route's other stages
 * as its hops; the stages forward it chunk by chunk and the last answers (cellsim_node.c).
 * The requester's call waits on every stage of the route: a stage killed during the pass
 * fails it (the chain's abort, or the AWAIT's timeout when it went silent). The AWAIT sent
 * to the last stage is not modelled (a small message, sent at once). */
static void user_send_pass(sim *S, int u) {
    cs_user *U = &S->users[u];
    const int e = sim_user_ep(S, u), m = sim_msg_new(S);
    if (m < 0) return;
    cs_msg *M = &S->msgs[m];
    M->type = M_STAGE_FWD;
    M->from = e;
    M->to = U->route[0];
    M->user = u;
    M->session = U->session;
    M->p0 = U->mb_p0;
    M->n = U->sent = U->mb_n;
    M->oneway = true;
    M->speculative = spec_pass(U);
    M->hop = 0;
    M->pass_end = U->mb_p0 + U->mb_n;
    cs_endpoint *c = &S->ep[e];
    c->call++;
    c->call_node = -1;
    c->call_t = S->now;
    M->call = c->call;
    U->phase = U_PASS;
    U->fail_hop = -1;
    for (int i = 0; i < U->n_route && U->fail_hop < 0; i++)
        if (!S->nodes[U->route[i]].alive) U->fail_hop = i;
    if (U->fail_hop >= 0)
        sim_push(S, S->cfg->failure.silent ? S->now + S->cfg->failure.call_timeout_ms : S->now,
                 EV_CALL_FAIL, e, c->call);
    sim_send(S, m);
}

/* The next request of this pass to stage U->stage: the tokens [sub, mb_n) of the pass, as
 * many as one message holds at that stage's width (remote.c sends the rest after the
 * reply). */
static void user_call_stage(sim *S, int u) {
    cs_user *U = &S->users[u];
    if (S->cfg->oneway) {
        user_send_pass(S, u);
        return;
    }
    int ni = U->route[U->stage], m = sim_msg_new(S);
    if (m < 0) return;
    const int32_t most = cs_wire_max_rows(
        CS_WIRE_STAGE_FORWARD, cs_cols_in(&S->cfg->shape, S->nodes[ni].a), S->cfg->lan.wire_bytes);
    const int32_t left = U->mb_n - U->sub;
    cs_msg *M = &S->msgs[m];
    M->type = M_STAGE_FWD;
    M->from = sim_user_ep(S, u);
    M->to = ni;
    M->user = u;
    M->session = U->session;
    M->p0 = U->mb_p0 + U->sub;
    M->n = U->sent = left < most ? left : most;
    M->speculative = spec_pass(U);
    sim_call_begin(S, sim_user_ep(S, u), ni, S->cfg->failure.call_timeout_ms);
    M->call = S->ep[sim_user_ep(S, u)].call;
    U->phase = U_PASS;
    sim_send(S, m);
}

/* route_run: the next micro-batch of [run_p0, ev_end), from the first stage. */
static void user_next_batch(sim *S, int u) {
    cs_user *U = &S->users[u];
    int32_t left = U->ev_end - U->mb_p0;
    U->mb_n = left < S->cfg->work.ubatch ? left : S->cfg->work.ubatch;
    if (S->cfg->oneway) { /* one message into the first stage (its later hops carry chunks) */
        const int32_t most = cs_wire_max_rows(CS_WIRE_STAGE_FORWARD,
                                              cs_cols_in(&S->cfg->shape, S->nodes[U->route[0]].a),
                                              S->cfg->lan.wire_bytes);
        if (U->mb_n > most) U->mb_n = most;
    }
    U->stage = 0;
    U->sub = 0;
    user_call_stage(S, u);
}

/* mt_route_eval of the tokens [from, to) (the session holds [0, from)). */
void cs_user_eval(sim *S, int u, int32_t from, int32_t to) {
    cs_user *U = &S->users[u];
    U->ev_end = to;
    U->run_p0 = U->mb_p0 = from;
    U->replayed = false;
    user_next_batch(S, u);
}

void cs_user_new_session(sim *S, int u) {
    cs_user *U = &S->users[u];
    U->session = sim_rand(&S->rng) | 1;
    U->have_session = true;
}

/* A token's logits are ready: sample it, count it, go on. */
static void user_token(sim *S, int u) {
    cs_user *U = &S->users[u];
    const cs_workload *w = &S->cfg->work;
    cs_result *R = S->res;
    if (U->failover) {
        U->failover = false;
        R->failovers++;
        if (U->affected) {
            double rec = S->now - S->cfg->failure.at_ms;
            S->rec_sum += rec, S->n_rec++;
            if (rec > R->recovery_ms_max) R->recovery_ms_max = rec;
        }
    }
    if (S->cfg->failure.at_ms >= 0 && S->now >= S->cfg->failure.at_ms && R->first_after_fail_ms < 0)
        R->first_after_fail_ms = S->now - S->cfg->failure.at_ms;
    if (U->generated > 0 && (w->burst || U->t_req >= w->warmup_ms) &&
        S->now - U->t_last > R->itl_max_ms)
        R->itl_max_ms = S->now - U->t_last;
    const int32_t gen = w->burst && u > 0 && w->others_gen > 0 ? w->others_gen : w->gen;
    /* a speculative pass's guesses are taken in order, each with chance spec_accept; the
     * tokens it gives are those taken and the one sampled after them */
    const int32_t g = U->spec_guess;
    int32_t gain = 1;
    while (gain <= g && sim_rand_unit(&S->rng) < S->cfg->spec_accept) gain++;
    if (gain > gen - U->generated) gain = gen - U->generated;
    if (w->burst && u == 0 && U->generated > 0) {
        if (!sim_grow((void **)&S->gaps0, &S->cap_gaps0, S->n_gaps0 + gain, sizeof *S->gaps0)) {
            sim_oom(S, "a gap");
            return;
        }
        S->gaps0[S->n_gaps0++] = S->now - U->t_last;
        for (int32_t i = 1; i < gain; i++) S->gaps0[S->n_gaps0++] = 0; /* at once */
    }
    U->generated += gain;
    if (U->generated == gain) U->t_first = S->now;
    U->t_last = S->now;
    S->t_last = S->now;
    bool counted = w->burst || (S->now >= w->warmup_ms && S->now < w->duration_ms);
    if (counted) R->tokens += gain;
    int b = (int)(S->now / R->bucket_ms);
    if (b >= 0 && b < R->n_timeline) R->timeline[b] += gain;
    if (U->generated < gen) {
        /* the next token sits after those taken (the rest of the pass is rewound) */
        const int32_t p = U->ev_end - g + gain - 1, left = gen - U->generated - 1;
        U->spec_guess = S->cfg->spec_k < left ? S->cfg->spec_k : left;
        cs_user_eval(S, u, p, p + 1 + U->spec_guess);
        return;
    }
    U->spec_guess = 0;
    /* the request is over */
    R->requests_done++;
    if (w->burst || U->t_req >= w->warmup_ms) {
        if (gen > 1 && U->t_last > U->t_first) { /* the decode rate */
            double tps = (gen - 1) / ((U->t_last - U->t_first) / 1e3);
            S->tps_sum += tps, S->n_tps++;
            if (R->user_tps_min == 0 || tps < R->user_tps_min) R->user_tps_min = tps;
            if (tps > R->user_tps_max) R->user_tps_max = tps;
        }
        S->ttft_sum += U->t_first - U->t_req, S->n_ttft++;
    }
    if (w->burst) {
        U->phase = U_DONE;
        return;
    }
    U->phase = U_SLEEP;
    U->then = -1; /* a new request */
    sim_push(S, S->now + w->think_ms, EV_USER, u, 0);
}

void cs_user_job_done(sim *S, int u) {
    cs_user *U = &S->users[u];
    if (U->phase != U_HEAD) return;
    user_token(S, u);
}

/* An answer to u's stage call (or the call failed: err E_BROKEN). */
void cs_user_stage_answer(sim *S, int u, int err) {
    cs_user *U = &S->users[u];
    if (S->cfg->oneway) /* the stage that failed, else the first (an error names it) */
        U->stage = U->fail_hop >= 0 && U->fail_hop < U->n_route ? U->fail_hop : 0;
    int ni = U->route[U->stage];
    sim_call_end(S, sim_user_ep(S, u));
    if (err == E_UNKNOWN_SESSION && U->mb_p0 > 0 && !U->replayed) {
        /* PASS_REPLAY: the whole history again from 0 on the same route (a second one in
         * the same eval is an error: "lost the session again during its replay") */
        S->res->replays++;
        U->replayed = true;
        U->run_p0 = U->mb_p0 = 0;
        user_next_batch(S, u);
        return;
    }
    if (err != E_NONE) { /* PASS_FAIL: the requester takes another route */
        user_failover(S, u, err == E_UNKNOWN_SESSION ? -1 : ni);
        return;
    }
    U->sub += U->sent;
    if (S->cfg->oneway) U->sub = U->mb_n, U->stage = U->n_route - 1; /* the last stage answered */
    if (U->sub < U->mb_n) { /* the rest of the pass to the same stage */
        user_call_stage(S, u);
        return;
    }
    U->sub = 0;
    if (++U->stage < U->n_route) {
        user_call_stage(S, u);
        return;
    }
    U->mb_p0 += U->mb_n;
    if (U->mb_p0 < U->ev_end) {
        user_next_batch(S, u);
        return;
    }
    U->phase = U_HEAD; /* the logits of the last token (of every row of a speculative pass) */
    sim_job_start(S, sim_user_ep(S, u), S->head_ms * (spec_pass(U) ? 1 + U->spec_guess : 1));
}

/* mt_requester_eval's retry loop: a call failed (failed_node: whose, or -1). */
static void user_failover(sim *S, int u, int failed_node) {
    cs_user *U = &S->users[u];
    const cs_failure *f = &S->cfg->failure;
    if (!U->failover) {
        U->failover = true;
        U->t_detect = S->now;
        U->attempts = 0;
        if (f->at_ms >= 0 && S->now >= f->at_ms && !U->affected) {
            U->affected = true;
            S->res->affected++;
            if (S->now - f->at_ms > S->res->detect_ms_max)
                S->res->detect_ms_max = S->now - f->at_ms;
        }
    } else {
        U->attempts++;
    }
    if (U->attempts >= MAX_ATTEMPTS || S->now - U->t_detect >= f->give_up_ms) {
        /* "no working route": the request fails; the user tries a new one later */
        S->res->requests_failed++;
        U->failover = false;
        U->have_route = false;
        U->have_session = false;
        U->phase = U_SLEEP;
        U->then = -1;
        sim_push(S, S->now + S->cfg->work.retry_after_ms, EV_USER, u, 0);
        return;
    }
    if (failed_node >= 0 && U->n_avoid < 256) U->avoid[U->n_avoid++] = S->nodes[failed_node].id;
    U->failed_node = failed_node;
    if (U->attempts > 0 && U->attempts % 8 == 0) U->n_avoid = 0;
    user_end_session(S, u, THEN_FAILOVER_OPEN); /* without a route: goes on at once */
}

/* The next SESSION_END of the old route (mt_route_session_end: each stage in turn). */
void cs_user_end_next(sim *S, int u) {
    cs_user *U = &S->users[u];
    while (U->stage < U->n_old && U->old_route[U->stage] == U->failed_node) U->stage++;
    if (U->stage >= U->n_old) {
        U->have_session = false;
        switch (U->then) {
        case THEN_EVAL:
            cs_user_new_session(S, u);
            cs_user_eval(S, u, 0, S->cfg->work.prompt);
            break;
        case THEN_OPEN:
            user_open(S, u, THEN_EVAL);
            break;
        case THEN_FAILOVER_OPEN:
            if (U->attempts > 0) {
                U->phase = U_SLEEP;
                U->then = THEN_FAILOVER_OPEN;
                sim_push(S, S->now + S->cfg->failure.retry_ms, EV_USER, u, 1);
            } else {
                user_open(S, u, THEN_REPLAY);
            }
            break;
        }
        return;
    }
    int ni = U->old_route[U->stage], m = sim_msg_new(S);
    if (m < 0) return;
    cs_msg *M = &S->msgs[m];
    M->type = M_SESSION_END;
    M->from = sim_user_ep(S, u);
    M->to = ni;
    M->user = u;
    M->session = U->old_session;
    sim_call_begin(S, sim_user_ep(S, u), ni, S->cfg->failure.call_timeout_ms);
    M->call = S->ep[sim_user_ep(S, u)].call;
    sim_send(S, m);
}

/* Ends the session on the current route (if any), then does `then`. */
static void user_end_session(sim *S, int u, int then) {
    cs_user *U = &S->users[u];
    U->phase = U_END;
    U->then = then;
    U->n_old = U->have_route && U->have_session ? U->n_route : 0;
    memcpy(U->old_route, U->route, (size_t)U->n_old * sizeof *U->route);
    U->old_session = U->session;
    U->stage = 0;
    if (then != THEN_FAILOVER_OPEN) U->failed_node = -1;
    cs_user_end_next(S, u);
}

/* Asks the registry for a route and connects to its stages (requester.c open_route). */
static void user_open(sim *S, int u, int then) {
    cs_user *U = &S->users[u];
    const cs_lan *lan = &S->cfg->lan;
    U->phase = U_OPEN;
    U->then = then;
    U->have_route = false;
    U->hint = sim_rand(&S->rng) >> 1;
    double t = lan->registry_ms;
    if (!cs_reg_choose_route(S, u)) { /* 503 "no route": another attempt */
        sim_push(S, S->now + t, EV_USER, u, 2);
        return;
    }
    for (int i = 0; i < U->n_route; i++) {
        const cs_node *n = &S->nodes[U->route[i]];
        if (!n->alive) { /* refused at once, or the connect timeout */
            t += S->cfg->failure.silent ? S->cfg->failure.connect_timeout_ms
                                        : 2 * lan->latency_us * 1e-3;
            U->failed_node = U->route[i];
            sim_push(S, S->now + t, EV_USER, u, 3);
            return;
        }
        t += lan->connect_ms;
    }
    sim_push(S, S->now + t, EV_USER, u, 4);
}

/* EV_USER: a wait of user u is over (b: 0 think/sleep, 1 retry sleep, 2 no route,
 * 3 a connect failed, 4 connected, 5 a staggered burst user starts). */
void cs_user_on_event(sim *S, int u, int64_t b) {
    cs_user *U = &S->users[u];
    const cs_workload *w = &S->cfg->work;
    if (b == 5) { /* a staggered burst user starts */
        cs_user_burst_start(S, u);
        return;
    }
    if (U->phase == U_SLEEP && U->then == -1) {
        if (w->burst || S->now >= w->duration_ms) {
            U->phase = U_DONE;
            return;
        }
        user_begin_request(S, u);
        return;
    }
    if (U->phase == U_SLEEP && U->then == THEN_FAILOVER_OPEN) {
        user_open(S, u, THEN_REPLAY);
        return;
    }
    if (U->phase != U_OPEN) return;
    if (b == 2 || b == 3) {
        int failed = b == 3 ? U->failed_node : -1;
        if (U->then == THEN_REPLAY) { /* within the failover loop: the next attempt */
            if (failed >= 0 && U->n_avoid < 256) U->avoid[U->n_avoid++] = S->nodes[failed].id;
            U->failed_node = -1;
            U->have_route = false;
            user_failover(S, u, -1);
            return;
        }
        /* mt_requester_open failed: the request fails; the user tries again later */
        S->res->requests_failed++;
        U->phase = U_SLEEP;
        U->then = -1;
        sim_push(S, S->now + w->retry_after_ms, EV_USER, u, 0);
        return;
    }
    U->have_route = true;
    cs_user_new_session(S, u);
    if (U->then == THEN_REPLAY)
        cs_user_eval(S, u, 0, U->ev_end); /* the whole history, from position 0 */
    else
        cs_user_eval(S, u, 0, w->prompt);
}

/* A burst user's one request, its route open (the validation's protocol). */
bool cs_user_burst_start(sim *S, int u) {
    cs_user *U = &S->users[u];
    U->hint = sim_rand(&S->rng) >> 1;
    if (!cs_reg_choose_route(S, u)) return false;
    U->have_route = true;
    cs_user_new_session(S, u);
    U->t_req = S->now;
    cs_user_eval(S, u, 0, S->cfg->work.prompt);
    return true;
}

static void user_begin_request(sim *S, int u) {
    cs_user *U = &S->users[u];
    const cs_workload *w = &S->cfg->work;
    U->t_req = S->now;
    U->generated = 0;
    U->spec_guess = 0;
    U->n_avoid = 0; /* mt_requester_begin: a new request trusts the registry again */
    U->failed_node = -1;
    if (!U->have_route || w->route_per_request) {
        if (U->have_route && U->have_session) /* the previous process ends its session */
            user_end_session(S, u, THEN_OPEN);
        else
            user_open(S, u, THEN_EVAL);
        return;
    }
    user_end_session(S, u, THEN_EVAL);
}

void cs_user_deliver(sim *S, int u, int m) {
    cs_user *U = &S->users[u];
    cs_msg *M = &S->msgs[m];
    int e = sim_user_ep(S, u);
    bool current = M->call == S->ep[e].call;
    int type = M->type, err = M->err, from = M->from;
    sim_msg_free(S, m);
    if (current && S->cfg->oneway && err != E_NONE) /* the stage that answered the error */
        for (int i = 0; i < U->n_route; i++)
            if (U->route[i] == from) U->fail_hop = i;
    if (!current) return;
    if (type == M_STAGE_REPLY && U->phase == U_PASS) {
        cs_user_stage_answer(S, u, err);
    } else if (type == M_END_REPLY && U->phase == U_END) {
        sim_call_end(S, e);
        U->stage++;
        cs_user_end_next(S, u);
    }
}

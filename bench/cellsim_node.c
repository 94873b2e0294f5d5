/* cellsim_node.c - a simulated node's worker (src/net/node_worker.c): each
 * step takes, in node.h's step order, the EXPERT_RUN requests and session
 * ends, then every waiting decode (a STAGE_FWD continuing a session, of at
 * most MT_NODE_DECODE_MAX_TOKENS tokens) whole, then prompts in arrival order
 * cut into chunks of at most prefill_chunk tokens until the step holds
 * step_tokens (at least one prompt token); a prompt not finished stays queued
 * in its place and blocks its session's later requests, and is answered when
 * whole. prefill_chunk 0 is the old node: every request whole, in arrival
 * order, up to max_batch_tokens. Sessions are limited by memory: each holds
 * its fixed state plus its positions (with those its prompt in progress will
 * write), and only when a request's bytes do not fit the node's budget are the
 * least recently used sessions evicted (never one named in this step or with
 * a prompt in progress); an explicit max_sessions also caps their count. A
 * continuing request whose session is gone gets UNKNOWN_SESSION. A stage with
 * partners runs each MoE layer's attention, then its own experts while the
 * partners run theirs (one EXPERT_RUN round trip per partner and layer); a
 * partner answers EXPERT_RUN the same way. In oneway mode a stage forwards
 * each chunk it computed to the next stage of the requester's route, and the
 * last stage answers the requester once the pass is whole, with its last row. */
#include "cellsim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DECODE_MAX_TOKENS = 16 }; /* MT_NODE_DECODE_MAX_TOKENS (node.h) */

/* ---- nodes ---------------------------------------------------------------------------------- */

/* Answers request message q (kept) with a new message of `type`. */
static void answer(sim *S, int q, int type, int err) {
    int m = sim_msg_new(S);
    if (m < 0) return;
    cs_msg *r = &S->msgs[m];
    const cs_msg *in = &S->msgs[q];
    *r = *in;
    r->type = type;
    r->from = in->to;
    r->to = in->from;
    r->err = err;
    sim_send(S, m);
}

static bool is_moe(const sim *S, int32_t l) {
    return l >= S->cfg->shape.n_dense && S->cfg->shape.n_expert > 0;
}

static int32_t held(const cs_node *n) {
    return n->ee - n->eb;
}

/* ---- sessions (node_worker.c, node_sessions.c) --------------------------------------------- */

static cs_session *session_find(sim *S, cs_node *n, int u, uint64_t id) {
    if (u >= 0 && u < S->n_users && n->user_slot[u] >= 0) {
        cs_session *s = &n->sessions[n->user_slot[u]];
        if (s->used && s->id == id) return s;
    }
    for (int i = 0; i < n->n_sess; i++)
        if (n->sessions[i].used && n->sessions[i].id == id) return &n->sessions[i];
    return NULL;
}

static void session_hold(cs_node *n, cs_session *s, double bytes) {
    n->kv_used += bytes - s->held;
    s->held = bytes;
}

static void session_drop(sim *S, cs_node *n, cs_session *s) {
    n->kv_used -= s->held;
    n->n_live--;
    int k = (int)(s - n->sessions);
    if (s->user >= 0 && s->user < S->n_users && n->user_slot[s->user] == k)
        n->user_slot[s->user] = -1;
    memset(s, 0, sizeof *s);
    s->busy = -1;
}

static void session_touch(cs_node *n, cs_session *s) {
    s->last_step = n->steps;
    s->touched = ++n->tick;
}

/* A new session's index (the array may move), -1 when out of memory. */
static int session_new(sim *S, cs_node *n, int u, uint64_t id) {
    int k = -1;
    for (int i = 0; i < n->n_sess && k < 0; i++) /* a free slot: the table stays compact */
        if (!n->sessions[i].used) k = i;
    if (k < 0) {
        if (!sim_grow((void **)&n->sessions, &n->cap_sess, n->n_sess + 1, sizeof *n->sessions)) {
            sim_oom(S, "sessions");
            return -1;
        }
        k = n->n_sess++;
    }
    cs_session *s = &n->sessions[k];
    *s = (cs_session){.used = true, .id = id, .user = u, .busy = -1};
    n->n_live++;
    if (u >= 0 && u < S->n_users) n->user_slot[u] = k;
    return k;
}

/* Evicts the least recently used session not named in this step and without a prompt in
 * progress (evict_oldest): false when there is none. */
static bool evict_oldest(sim *S, cs_node *n) {
    cs_session *lru = NULL;
    for (int i = 0; i < n->n_sess; i++) {
        cs_session *s = &n->sessions[i];
        if (!s->used || s->last_step == n->steps || s->busy >= 0) continue;
        if (!lru || s->touched < lru->touched) lru = s;
    }
    if (!lru) return false;
    session_drop(S, n, lru);
    S->res->evictions++;
    return true;
}

/* Bytes of a session holding `positions` (kv_fixed + positions x kv_per_position). */
static double session_need(const cs_node *n, double positions) {
    return n->kv_fixed + positions * n->kv_pos;
}

/* kv_make_room: s holds `positions` within the budget, evicting only while the bytes do not
 * fit; false when this step's sessions alone do not fit. */
static bool kv_make_room(sim *S, cs_node *n, cs_session *s, double positions) {
    const double need = session_need(n, positions);
    while (n->kv_used - s->held + need > n->kv_budget)
        if (!evict_oldest(S, n)) return false;
    session_hold(n, s, need);
    return true;
}

void cs_node_reset_sessions(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    n->n_sess = n->n_live = 0;
    n->kv_used = 0;
    for (int u = 0; u < S->n_users; u++) n->user_slot[u] = -1;
    double fixed = 0, pos = 0;
    if (n->b > n->a) cs_session_bytes(&S->cfg->shape, n->a, n->b, &fixed, &pos);
    n->kv_fixed = fixed, n->kv_pos = pos;
    const double cap = S->cfg->capacity_bytes;
    n->kv_budget = cap > 0 ? fmax(0, cap - n->bytes) : INFINITY; /* no limit offered */
}

static void node_start_step(sim *S, int ni);
static bool is_decode(const cs_msg *M);

/* The compute of the current phase of a stage's step. */
static void stage_phase(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    const cs_compute *c = &S->cfg->compute;
    const cs_shape *sh = &S->cfg->shape;
    /* a speculative pass's tokens each copy the node's KDA states (read and write) */
    const double snap_ms = c->ms_per_gb * 1e-9 * 2 * n->kv_fixed * n->spec_tok;
    if (n->n_partners == 0) { /* every layer at once */
        double ms = snap_ms;
        for (int32_t l = n->a; l < n->b; l++) ms += cs_layer_ms(c, sh, l, &n->st, held(n), true);
        n->cpu_busy = true;
        sim_job_start(S, ni, ms);
        return;
    }
    if (n->phase == 0) { /* the layer's attention (a dense layer: all of it) */
        n->cpu_busy = true;
        sim_job_start(S, ni,
                      cs_layer_ms(c, sh, n->layer, &n->st, 0, true) +
                          (n->layer == n->a ? snap_ms : 0));
        return;
    }
    /* phase 1: partners get their rows; the stage runs its own experts meanwhile */
    n->waiting = n->n_partners;
    S->ep[ni].call++;
    for (int k = 0; k < n->n_partners; k++) {
        int pi = n->partners[k], m = sim_msg_new(S);
        if (m < 0) return;
        cs_msg *M = &S->msgs[m];
        M->type = M_EXPERT_RUN;
        M->from = ni;
        M->to = pi;
        M->user = -1;
        M->layer = n->layer;
        M->n_tok = n->step_tok;
        M->rows = n->step_tok * sh->n_expert_used * held(&S->nodes[pi]) / sh->n_expert;
        M->call = S->ep[ni].call;
        sim_send(S, m);
        if (!S->nodes[pi].alive) /* a reset connection fails at once; silence at the timeout */
            sim_push(S, S->cfg->failure.silent ? S->now + S->cfg->failure.call_timeout_ms : S->now,
                     EV_CALL_FAIL, ni, S->ep[ni].call);
    }
    n->cpu_busy = true;
    sim_job_start(S, ni, fmax(0, cs_layer_ms(c, sh, n->layer, &n->st, held(n), false) - c->c0_ms));
}

/* An error answer to a STAGE_FWD: to its caller, or (oneway) to the requester (a stage
 * that fails a chunk tells the last stage, which answers the requester's AWAIT: modelled as
 * one message to the requester). */
static void answer_error(sim *S, int m, int err) {
    cs_msg *M = &S->msgs[m];
    if (!M->oneway) {
        answer(S, m, M_STAGE_REPLY, err);
        return;
    }
    int r = sim_msg_new(S);
    if (r < 0) return;
    M = &S->msgs[m];
    cs_msg *R = &S->msgs[r];
    *R = *M;
    R->type = M_STAGE_REPLY;
    R->from = M->to;
    R->to = sim_user_ep(S, M->user);
    R->err = err;
    sim_send(S, r);
}

/* Oneway: the chunk [p0, p0 + n) of request m is computed here: on to the next stage of the
 * route, or from the last stage, once the pass is whole, the last row to the requester. A
 * chunk of a pass its requester gave up (a failover) goes no further. */
static void oneway_chunk(sim *S, int ni, int m, int32_t p0, int32_t n) {
    const cs_msg *M = &S->msgs[m];
    const int u = M->user;
    const cs_user *U = &S->users[u];
    if (M->call != S->ep[sim_user_ep(S, u)].call || U->phase != U_PASS) return;
    const bool last = M->hop + 1 >= U->n_route;
    if (last && p0 + n < M->pass_end) return; /* parked until the pass is whole */
    int f = sim_msg_new(S);
    if (f < 0) return;
    M = &S->msgs[m];
    cs_msg *F = &S->msgs[f];
    *F = *M;
    F->from = ni;
    F->done = 0;
    F->finished = false;
    F->err = E_NONE;
    if (last) { /* LAST_ROW: the head's input of the pass's last token */
        F->type = M_STAGE_REPLY;
        F->to = sim_user_ep(S, u);
        F->p0 = M->pass_end - 1;
        F->n = 1;
    } else {
        F->type = M_STAGE_FWD;
        F->prompt = !is_decode(M); /* its chunks stay a prompt's downstream */
        F->hop = M->hop + 1;
        F->to = U->route[F->hop];
        F->p0 = p0;
        F->n = n;
    }
    sim_send(S, f);
}

/* The step is over: replies (or errors) for the requests finished, chunks forwarded (oneway),
 * then the next step. */
static void node_finish_step(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    for (int i = 0; i < n->n_step; i++) {
        const cs_item it = n->step[i];
        cs_msg *M = &S->msgs[it.m]; /* fetched again after each message sent (S->msgs moves) */
        if (M->type == M_EXPERT_RUN) {
            answer(S, it.m, M_EXPERT_REPLY, E_NONE);
            S->msgs[it.m].finished = true;
            continue;
        }
        cs_session *s = &n->sessions[it.sess];
        const int32_t p0 = M->p0 + it.first;
        if (n->step_failed) { /* positions from this chunk on are unsure */
            s->busy = -1;
            if (s->n_past > p0) s->n_past = p0;
            session_hold(n, s, session_need(n, s->n_past));
            answer_error(S, it.m, E_COMPUTE);
            S->msgs[it.m].finished = true;
            continue;
        }
        M->done += it.count;
        s->n_past = p0 + it.count;
        s->busy = M->done < M->n ? it.m : -1;
        if (s->busy < 0) session_hold(n, s, session_need(n, s->n_past));
        const bool oneway = M->oneway;
        if (oneway) oneway_chunk(S, ni, it.m, p0, it.count);
        if (s->busy >= 0) continue; /* more chunks in later steps */
        if (!oneway) answer(S, it.m, M_STAGE_REPLY, E_NONE);
        S->msgs[it.m].finished = true;
    }
    /* the finished requests leave the queue; the others keep their places */
    int kept = 0;
    for (int i = 0; i < n->q_n; i++)
        if (!S->msgs[n->queue[i]].finished) n->queue[kept++] = n->queue[i];
    n->q_n = kept;
    for (int i = 0; i < n->n_step; i++)
        if (S->msgs[n->step[i].m].finished) sim_msg_free(S, n->step[i].m);
    if (n->step_kind) /* node_worker.c: prompt chunks or decodes alone */
        mt_node_pace_measured(&n->pace_costs, n->step_kind == 1, S->now - n->step_start,
                              n->step_tok);
    S->steps++;
    S->step_tok_sum += n->step_tok;
    S->step_ms_sum += S->now - n->step_start;
    n->n_step = 0;
    n->busy = false;
    if (n->q_n) node_start_step(S, ni);
}

static void stage_next_layer(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    if (n->phase == 0 && is_moe(S, n->layer)) {
        n->phase = 1;
        stage_phase(S, ni);
        return;
    }
    n->phase = 0;
    if (++n->layer >= n->b) {
        node_finish_step(S, ni);
        return;
    }
    stage_phase(S, ni);
}

void cs_node_job_done(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    n->cpu_busy = false;
    if (n->role == MT_PLACE_PARTNER || n->n_partners == 0) {
        node_finish_step(S, ni);
        return;
    }
    if (n->phase == 1 && n->waiting > 0) return; /* the partners' answers close the layer */
    stage_next_layer(S, ni);
}

static bool is_decode(const cs_msg *M) {
    return !M->prompt && M->p0 > 0 && M->n <= DECODE_MAX_TOKENS;
}

/* ---- decode pacing (node_worker.c's pace_note and pace_gather) */

static void pace_note(cs_session *s, const cs_msg *M, bool decode) {
    mt_node_pace_note(&s->pace, M->arrived, decode);
}

/* The rhythms of the node's decoding sessions, into S->pace_due; their count (-1: out of
 * memory, the run stopped). */
static int pace_gather(sim *S, cs_node *n) {
    int k = 0;
    for (int i = 0; i < n->n_sess; i++) {
        const cs_session *s = &n->sessions[i];
        if (!s->used || !(s->pace.period_ms > 0) ||
            S->now - s->pace.at_ms > 2 * MT_NODE_PACE_MAX_PERIOD_MS)
            continue;
        if (!sim_grow((void **)&S->pace_due, &S->cap_pace, k + 1, sizeof *S->pace_due)) {
            sim_oom(S, "a step");
            return -1;
        }
        S->pace_due[k++] = s->pace;
    }
    return k;
}

void cs_node_wake(sim *S, int ni, int64_t seq) {
    cs_node *n = &S->nodes[ni];
    if (seq != n->hold_seq || n->busy || !n->alive || n->q_n == 0) return;
    node_start_step(S, ni);
}

/* Drops request m from the step's view of the queue (answered at once). */
static void drop_request(sim *S, int m) {
    S->msgs[m].finished = true;
}

/* stage_admit: the session of STAGE_FWD m at its first chunk. 0: *sess set; 1: wait for a
 * later step (every session named in this step); -1: answered with an ERROR. */
static int stage_admit(sim *S, cs_node *n, int m, int *sess) {
    const cs_msg *M = &S->msgs[m];
    cs_session *s = session_find(S, n, M->user, M->session);
    if (!s) {
        if (M->p0 != 0) {
            answer_error(S, m, E_UNKNOWN_SESSION);
            return -1;
        }
        if (S->cfg->max_sessions > 0 && n->n_live >= S->cfg->max_sessions && !evict_oldest(S, n))
            return 1;
        int k = session_new(S, n, M->user, M->session);
        if (k < 0) return -1;
        s = &n->sessions[k];
    }
    session_touch(n, s);
    if (!kv_make_room(S, n, s, (double)M->p0 + M->n)) { /* ERROR BUSY: the requester fails
                                                            over */
        answer_error(S, m, E_COMPUTE);
        return -1;
    }
    *sess = (int)(s - n->sessions);
    return 0;
}

/* stage_take: `count` more tokens of STAGE_FWD m into the step. 0: taken; 1: later; -1:
 * answered. */
static int stage_take(sim *S, int ni, int m, int32_t count) {
    cs_node *n = &S->nodes[ni];
    const cs_msg *M = &S->msgs[m];
    int sess = -1, rc = 0;
    if (M->done == 0) {
        rc = stage_admit(S, n, m, &sess);
    } else {
        cs_session *s = session_find(S, n, M->user, M->session);
        if (!s || s->busy != m) { /* cannot happen: a session with a prompt in progress stays */
            if (s) s->busy = -1;
            answer_error(S, m, E_COMPUTE);
            rc = -1;
        } else {
            sess = (int)(s - n->sessions);
        }
    }
    if (rc < 0) drop_request(S, m);
    if (rc) return rc;
    if (!sim_grow((void **)&n->step, &n->cap_step, n->n_step + 1, sizeof *n->step)) {
        sim_oom(S, "a step");
        return -1;
    }
    M = &S->msgs[m];
    n->step[n->n_step++] = (cs_item){m, sess, M->done, count};
    if (M->speculative) n->spec_tok += count;
    const cs_step one = cs_step_of(count, 1, (double)M->p0 + M->done); /* costed at its start */
    n->st.n_tok += count, n->st.n_seq += 1, n->st.attended += one.attended,
        n->st.ctx_rows += one.ctx_rows;
    return 0;
}

/* One step of node ni's worker over its queue (node_worker.c's worker_step). */
static void node_start_step(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    const cs_config *cfg = S->cfg;
    n->steps++;
    n->st = (cs_step){0};
    n->step_kind = 0;
    n->spec_tok = 0;
    n->n_step = 0;
    n->step_tok = 0;
    double rows = 0;
    const double max_tok = cfg->max_batch_tokens,
                 max_rows = max_tok * (cfg->shape.n_expert_used > 0 ? cfg->shape.n_expert_used : 1);
    if (!sim_grow((void **)&S->ready, &S->cap_ready, n->q_n, sizeof *S->ready)) {
        sim_oom(S, "a step");
        return;
    }
    /* job_ready: a session's first request waiting, when no other of it is in progress; every
     * session named is kept from eviction in this step */
    for (int i = 0; i < n->q_n; i++) {
        const cs_msg *M = &S->msgs[n->queue[i]];
        S->ready[i] = 1;
        if (M->type == M_EXPERT_RUN) continue;
        cs_session *s = session_find(S, n, M->user, M->session);
        if (s) session_touch(n, s);
        if (M->user >= 0 && M->user < S->n_users) {
            if (n->user_step[M->user] == n->steps) S->ready[i] = 0;
            n->user_step[M->user] = n->steps;
        }
        if (s && s->busy >= 0 && s->busy != n->queue[i]) S->ready[i] = 0;
    }
    /* 1. experts and session ends */
    for (int i = 0; i < n->q_n; i++) {
        const int m = n->queue[i];
        cs_msg *M = &S->msgs[m];
        if (!S->ready[i]) continue;
        if (M->type == M_SESSION_END) {
            cs_session *s = session_find(S, n, M->user, M->session);
            if (s) session_drop(S, n, s);
            answer(S, m, M_END_REPLY, E_NONE);
            drop_request(S, m);
        } else if (M->type == M_EXPERT_RUN && !(rows && rows + M->rows > max_rows)) {
            if (!sim_grow((void **)&n->step, &n->cap_step, n->n_step + 1, sizeof *n->step)) {
                sim_oom(S, "a step");
                return;
            }
            n->step[n->n_step++] = (cs_item){m, -1, 0, 0};
            rows += M->rows, n->step_tok += M->n_tok, n->layer = M->layer;
        }
    }
    if (cfg->prefill_chunk <= 0) { /* the old node: each request whole, in arrival order */
        for (int i = 0; i < n->q_n; i++) {
            const int m = n->queue[i];
            const cs_msg *M = &S->msgs[m];
            if (!S->ready[i] || M->finished || M->type != M_STAGE_FWD) continue;
            if (n->st.n_tok && n->st.n_tok + M->n > max_tok) continue;
            if (stage_take(S, ni, m, M->n) < 0 && S->failed) return;
        }
    } else {
        /* 2. every decode, whole */
        for (int i = 0; i < n->q_n; i++) {
            const int m = n->queue[i];
            const cs_msg *M = &S->msgs[m];
            if (!S->ready[i] || M->finished || M->type != M_STAGE_FWD || !is_decode(M)) continue;
            if (n->st.n_tok && n->st.n_tok + M->n > max_tok) continue;
            const int rc = stage_take(S, ni, m, M->n);
            if (rc == 0) pace_note(&n->sessions[n->step[n->n_step - 1].sess], &S->msgs[m], true);
            if (rc < 0 && S->failed) return;
        }
        const double decode_tok = n->st.n_tok;
        /* 3. chunks of prompts in arrival order, up to the step's budget */
        const double step_max = fmin(cfg->step_tokens, max_tok);
        double budget = fmax(1, step_max - n->st.n_tok);
        if (n->st.n_tok > 0)
            budget = fmin(budget, n->st.n_tok); /* node_worker.c: no more
                                                    prompt than decode tokens */
        /* decode pacing (node_worker.c): a prompt step alone takes only the tokens that end
         * before a decode due, or waits for it; no prompt tokens with decodes when the prompt
         * step fits after them */
        const bool was_holding = n->pace_hold_until > 0;
        n->pace_hold_until = 0;
        double planned = 0;
        for (int i = 0; i < n->q_n && planned < budget && !cfg->no_pacing; i++) {
            const cs_msg *M = &S->msgs[n->queue[i]];
            if (S->ready[i] && !M->finished && M->type == M_STAGE_FWD && !is_decode(M))
                planned += fmin(M->n - M->done, cfg->prefill_chunk);
        }
        planned = fmin(planned, budget);
        if (planned > 0) {
            const int n_due = pace_gather(S, n);
            if (n_due < 0) return;
            budget = fmin(budget,
                          mt_node_pace_plan(&n->pace_costs, S->pace_due, n_due, S->now, decode_tok,
                                            planned, &n->pace_skips, &n->pace_hold_until));
            if (n->pace_hold_until > 0) sim_push(S, n->pace_hold_until, EV_WAKE, ni, ++n->hold_seq);
        }
        if (n->pace_hold_until > 0 && !was_holding) S->paced_holds++;
        const double before = n->st.n_tok;
        for (int i = 0; i < n->q_n && budget > 0; i++) {
            const int m = n->queue[i];
            const cs_msg *M = &S->msgs[m];
            if (!S->ready[i] || M->finished || M->type != M_STAGE_FWD || is_decode(M)) continue;
            int32_t t = M->n - M->done;
            if (t > cfg->prefill_chunk) t = cfg->prefill_chunk;
            if (t > budget) t = (int32_t)budget;
            if (stage_take(S, ni, m, t) == 0) {
                pace_note(&n->sessions[n->step[n->n_step - 1].sess], &S->msgs[m], false);
                budget -= t;
            }
            if (S->failed) return;
        }
        const bool prompt_tok = n->st.n_tok > before;
        if (prompt_tok) n->pace_skips = 0;
        if (rows == 0 && prompt_tok != (decode_tok > 0)) n->step_kind = prompt_tok ? 1 : 2;
    }
    /* requests answered at once leave the queue */
    int kept = 0;
    for (int i = 0; i < n->q_n; i++) {
        const int m = n->queue[i];
        if (S->msgs[m].finished) {
            sim_msg_free(S, m);
            continue;
        }
        n->queue[kept++] = m;
    }
    n->q_n = kept;
    if (n->n_step == 0) {
        n->busy = false;
        return;
    }
    n->busy = true;
    n->step_start = S->now;
    n->step_failed = false;
    if (n->role == MT_PLACE_PARTNER) {
        n->cpu_busy = true;
        n->st = (cs_step){.n_tok = n->step_tok};
        sim_job_start(
            S, ni, cs_layer_ms(&S->cfg->compute, &S->cfg->shape, n->layer, &n->st, held(n), false));
        return;
    }
    n->step_tok = n->st.n_tok;
    n->layer = n->a;
    n->phase = 0;
    stage_phase(S, ni);
}

/* A stage hears from a partner (or learns that the call failed). */
void cs_node_partner_answer(sim *S, int ni, bool ok) {
    cs_node *n = &S->nodes[ni];
    if (!ok) n->step_failed = true;
    if (--n->waiting > 0 || n->cpu_busy) return;
    stage_next_layer(S, ni);
}

void cs_node_deliver(sim *S, int ni, int m) {
    cs_node *n = &S->nodes[ni];
    if (!n->alive) { /* its caller learns from the reset or its timeout (sim_call_begin,
                        cs_reg_on_fail) */
        sim_msg_free(S, m);
        return;
    }
    if (!sim_grow((void **)&n->queue, &n->q_cap, n->q_n + 1, sizeof *n->queue)) {
        sim_oom(S, "a queue");
        return;
    }
    n->queue[n->q_n++] = m;
    S->msgs[m].arrived = S->now;
    if (!n->busy) node_start_step(S, ni);
}

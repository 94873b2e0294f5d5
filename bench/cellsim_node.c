/* cellsim_node.c - a simulated node's worker (src/net/node_worker.c): each
 * step takes every waiting request (at most max_batch_tokens tokens; a
 * SESSION_END answered at once), admits sessions (a new one evicts the least
 * recently used when max_sessions are held; a continuing request whose
 * session is gone gets UNKNOWN_SESSION), computes all tokens as one batch and
 * replies. A stage with partners runs each MoE layer's attention, then its own
 * experts while the partners run theirs (one EXPERT_RUN round trip per partner
 * and layer); a partner answers EXPERT_RUN the same way. */
#include "cellsim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static cs_session *session_find(sim *S, cs_node *n, uint64_t id) {
    for (int i = 0; i < S->cfg->max_sessions; i++)
        if (n->sessions[i].used && n->sessions[i].id == id) return &n->sessions[i];
    return NULL;
}

/* A free slot, else the least recently used session not used in this step (evicted). */
static cs_session *session_slot(sim *S, cs_node *n) {
    cs_session *lru = NULL;
    for (int i = 0; i < S->cfg->max_sessions; i++) {
        cs_session *s = &n->sessions[i];
        if (!s->used) return s;
        if (s->last_step != n->steps && (!lru || s->last_step < lru->last_step)) lru = s;
    }
    if (lru) {
        memset(lru, 0, sizeof *lru);
        S->res->evictions++;
    }
    return lru;
}

static void node_start_step(sim *S, int ni);

/* The compute of the current phase of a stage's step. */
static void stage_phase(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    const cs_compute *c = &S->cfg->compute;
    const cs_shape *sh = &S->cfg->shape;
    if (n->n_partners == 0) { /* every layer at once */
        double ms = 0;
        for (int32_t l = n->a; l < n->b; l++) ms += cs_layer_ms(c, sh, l, &n->st, held(n), true);
        n->cpu_busy = true;
        sim_job_start(S, ni, ms);
        return;
    }
    if (n->phase == 0) { /* the layer's attention (a dense layer: all of it) */
        n->cpu_busy = true;
        sim_job_start(S, ni, cs_layer_ms(c, sh, n->layer, &n->st, 0, true));
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

/* The step is over: replies (or errors), then the next step. */
static void node_finish_step(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    for (int i = 0; i < n->n_step; i++) {
        int m = n->step[i];
        cs_msg *M = &S->msgs[m];
        if (M->type == M_EXPERT_RUN) {
            answer(S, m, M_EXPERT_REPLY, E_NONE);
        } else {
            answer(S, m, M_STAGE_REPLY, n->step_failed ? E_COMPUTE : E_NONE);
        }
        sim_msg_free(S, m);
    }
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

/* One step of node ni's worker over its queue (node_worker.c's worker_step). */
static void node_start_step(sim *S, int ni) {
    cs_node *n = &S->nodes[ni];
    n->steps++;
    int kept = 0;
    double tokens = 0, rows = 0;
    cs_step st = {0};
    const double max_tok = S->cfg->max_batch_tokens,
                 max_rows =
                     max_tok * (S->cfg->shape.n_expert_used > 0 ? S->cfg->shape.n_expert_used : 1);
    n->n_step = 0;
    n->step_tok = 0;
    for (int i = 0; i < n->q_n; i++) {
        int m = n->queue[i];
        cs_msg *M = &S->msgs[m];
        bool defer = false;
        if (M->type == M_SESSION_END) {
            cs_session *s = session_find(S, n, M->session);
            if (s) memset(s, 0, sizeof *s);
            answer(S, m, M_END_REPLY, E_NONE);
            sim_msg_free(S, m);
            continue;
        }
        if (M->type == M_STAGE_FWD) {
            if (tokens && tokens + M->n > max_tok) {
                defer = true;
                cs_session *s = session_find(S, n, M->session);
                if (s) s->last_step = n->steps;
            } else {
                cs_session *s = session_find(S, n, M->session);
                if (!s && M->p0 != 0) {
                    answer(S, m, M_STAGE_REPLY, E_UNKNOWN_SESSION);
                    sim_msg_free(S, m);
                    continue;
                }
                if (!s && !(s = session_slot(S, n))) {
                    defer = true;
                } else {
                    s->used = true;
                    s->id = M->session;
                    s->last_step = n->steps;
                }
            }
        } else if (M->type == M_EXPERT_RUN) {
            defer = rows && rows + M->rows > max_rows;
        }
        if (defer) {
            n->queue[kept++] = m;
            continue;
        }
        if (!sim_grow((void **)&n->step, &n->cap_step, n->n_step + 1, sizeof *n->step)) {
            sim_oom(S, "a step");
            return;
        }
        n->step[n->n_step++] = m;
        if (M->type == M_STAGE_FWD) {
            cs_step one = cs_step_of(M->n, 1, M->p0);
            tokens += M->n;
            st.n_seq += 1, st.attended += one.attended, st.ctx_rows += one.ctx_rows;
        }
        if (M->type == M_EXPERT_RUN) rows += M->rows, n->step_tok += M->n_tok, n->layer = M->layer;
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
    n->step_tok = tokens;
    st.n_tok = tokens;
    n->st = st;
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
    if (!n->busy) node_start_step(S, ni);
}

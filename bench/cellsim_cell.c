/* cellsim_cell.c - the simulated cell's event loop and the parts every
 * other file uses: messages on the LAN (cs_lan, cellsim.h) and CPUs. A compute
 * call takes cs_layer_ms at full speed; a machine's CPUs are shared evenly by
 * the threads of the jobs that run on it (processor sharing), within the share
 * other programs leave when one is measured (cs_config.share). That matters
 * only when nodes share a machine: the validation on this 2-core machine.
 * Nodes (cellsim_node.c), requesters (cellsim_requester.c) and the registry
 * with the failure (cellsim_registry.c) have files of their own.
 * Simplifications (docs/cellsim.md): expected values instead of random expert
 * choices; a stage whose partner is replaced keeps its sessions; registry
 * calls cost a fixed time; attention does not grow with the context. */
#include "cellsim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------- */

uint64_t sim_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sim_rand_unit(uint64_t *s) {
    return (double)(sim_rand(s) >> 11) * (1.0 / 9007199254740992.0);
}

void sim_oom(sim *S, const char *what) {
    if (!S->failed) S->failed = mt_error_set(S->err, "out of memory for %s", what);
}

void sim_push(sim *S, double t, int kind, int a, int64_t b) {
    if (cs_queue_push(&S->q, t, kind, a, b)) sim_oom(S, "events");
}

bool sim_grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

int sim_user_ep(const sim *S, int u) {
    return S->n_nodes + u;
}

int sim_msg_new(sim *S) {
    int m;
    if (S->free_msg >= 0) {
        m = S->free_msg;
        S->free_msg = S->msgs[m].next_free;
    } else {
        if (!sim_grow((void **)&S->msgs, &S->cap_msgs, S->n_msgs + 1, sizeof *S->msgs)) {
            sim_oom(S, "messages");
            return -1;
        }
        m = S->n_msgs++;
    }
    memset(&S->msgs[m], 0, sizeof S->msgs[m]);
    return m;
}

void sim_msg_free(sim *S, int m) {
    S->msgs[m].next_free = S->free_msg;
    S->free_msg = m;
}

/* Oneway forwards (issue 18 item 4, as planned): the origin block (origin key 32, pass id 8,
 * pass end 4) and per next hop its address length, a "host:port" of about 20 bytes, its key
 * and its layer range (1 + 20 + 32 + 4 + 4). */
enum { ONEWAY_ORIGIN_BYTES = 44, ONEWAY_HOP_BYTES = 61 };

/* A message's bytes: proto.h's encoding (cs_wire_bytes). Hidden states are as wide as
 * the stage's layers make them (cs_cols_in / cs_cols_out: the stream and the attention-
 * residual checkpoints), in the route's wire type; expert rows are the experts' width, in
 * f32 (node_partner.c). An error answer is an ERROR message of a short text. */
static double msg_bytes(const sim *S, const cs_msg *m) {
    const cs_shape *sh = &S->cfg->shape;
    const int w = S->cfg->lan.wire_bytes;
    if (m->err != E_NONE) return 12 + 8 + 64 + 20; /* ERROR: code, length, ~64 bytes of text */
    switch (m->type) {
    case M_STAGE_FWD: {
        double b = cs_wire_bytes(CS_WIRE_STAGE_FORWARD, m->n,
                                 (double)cs_cols_in(sh, S->nodes[m->to].a), w);
        if (m->oneway) /* the hops after this one and the origin block */
            b += ONEWAY_ORIGIN_BYTES +
                 ONEWAY_HOP_BYTES * (double)(S->users[m->user].n_route - 1 - m->hop);
        return b;
    }
    case M_STAGE_REPLY: {
        const cs_node *n = &S->nodes[m->from];
        return cs_wire_bytes(CS_WIRE_STAGE_REPLY, m->n, (double)cs_cols_out(sh, n->a, n->b), w);
    }
    case M_EXPERT_RUN:
        return cs_wire_bytes(CS_WIRE_EXPERT_RUN, m->rows, cs_expert_width(sh), 4);
    case M_EXPERT_REPLY:
        return cs_wire_bytes(CS_WIRE_EXPERT_REPLY, m->rows, cs_expert_width(sh), 4);
    case M_SESSION_END:
        return cs_wire_bytes(CS_WIRE_SESSION_END, 0, 0, w);
    default:
        return cs_wire_bytes(CS_WIRE_SESSION_END_REPLY, 0, 0, w);
    }
}

/* Sends message m now: overhead, then both links busy for bytes / bandwidth, then latency. */
void sim_send(sim *S, int m) {
    const cs_lan *lan = &S->cfg->lan;
    cs_msg *M = &S->msgs[m];
    cs_endpoint *src = &S->ep[S->ep[M->from].link], *dst = &S->ep[S->ep[M->to].link];
    double ser = msg_bytes(S, M) * 8.0 / (lan->gbps * 1e9) * 1e3;
    double tx = fmax(S->now + lan->overhead_us * 1e-3, src->tx_free);
    double rx = fmax(tx, dst->rx_free);
    src->tx_free = tx + ser;
    dst->rx_free = rx + ser;
    sim_push(S, rx + ser + lan->latency_us * 1e-3, EV_DELIVER, m, 0);
}

/* A call from endpoint e to node ni begins: what its caller waits for. When the node
 * is already dead the call fails at once (reset) or at the call timeout (silent). */
void sim_call_begin(sim *S, int e, int ni, double timeout_ms) {
    cs_endpoint *c = &S->ep[e];
    c->call++;
    c->call_node = ni;
    c->call_t = S->now;
    if (!S->nodes[ni].alive)
        sim_push(S, S->cfg->failure.silent ? S->now + timeout_ms : S->now, EV_CALL_FAIL, e,
                 c->call);
}

void sim_call_end(sim *S, int e) {
    S->ep[e].call++;
    S->ep[e].call_node = -1;
}

/* ---- CPUs: processor sharing --------------------------------------------------------------- */

static double job_threads(const sim *S, int e) {
    (void)e;
    return S->cfg->compute.threads > 0 ? S->cfg->compute.threads : 1;
}

/* The speed of each job on host h: its CPUs (a measured share when other programs compete
 * for them) divided evenly among the threads of the jobs that run. */
static double host_rate(const sim *S, const cs_host *h) {
    double demand = 0;
    for (int i = 0; i < h->n_jobs; i++) demand += job_threads(S, h->jobs[i]);
    if (demand <= 0) return 1.0;
    double cpus = h->cores;
    const int32_t n = S->cfg->n_share;
    if (S->cfg->shared_host && n > 0) { /* linear between whole thread counts */
        double k = fmin(demand, n), lo = floor(k), f = k - lo;
        double at_lo = lo >= 1 ? S->cfg->share[(int)lo - 1] : 0;
        cpus = f > 0 ? at_lo + f * (S->cfg->share[(int)lo] - at_lo) : at_lo;
        if (demand > n) cpus = S->cfg->share[n - 1];
    }
    return demand <= cpus ? 1.0 : cpus / demand;
}

static void host_advance(sim *S, cs_host *h) {
    double rate = host_rate(S, h), dt = S->now - h->last_t;
    if (dt > 0)
        for (int i = 0; i < h->n_jobs; i++) S->ep[h->jobs[i]].job_left -= dt * rate;
    h->last_t = S->now;
}

static void host_schedule(sim *S, int hi) {
    cs_host *h = &S->hosts[hi];
    h->version++;
    if (h->n_jobs == 0) return;
    double rate = host_rate(S, h), first = INFINITY;
    for (int i = 0; i < h->n_jobs; i++) first = fmin(first, S->ep[h->jobs[i]].job_left);
    sim_push(S, S->now + fmax(first, 0) / rate, EV_CPU, hi, h->version);
}

/* Starts a compute job of `ms` (at full speed) for endpoint e. */
void sim_job_start(sim *S, int e, double ms) {
    cs_host *h = &S->hosts[S->ep[e].host];
    host_advance(S, h);
    if (!sim_grow((void **)&h->jobs, &h->cap_jobs, h->n_jobs + 1, sizeof *h->jobs)) {
        sim_oom(S, "jobs");
        return;
    }
    h->jobs[h->n_jobs++] = e;
    S->cpu_work += ms * job_threads(S, e);
    S->ep[e].job_left = ms;
    S->ep[e].job_on = true;
    host_schedule(S, S->ep[e].host);
}

void sim_job_cancel(sim *S, int e) {
    if (!S->ep[e].job_on) return;
    cs_host *h = &S->hosts[S->ep[e].host];
    host_advance(S, h);
    for (int i = 0; i < h->n_jobs; i++)
        if (h->jobs[i] == e) {
            h->jobs[i] = h->jobs[--h->n_jobs];
            break;
        }
    S->ep[e].job_on = false;
    host_schedule(S, S->ep[e].host);
}

static void on_cpu(sim *S, int hi, int64_t version) {
    cs_host *h = &S->hosts[hi];
    if (version != h->version) return;
    host_advance(S, h);
    int *done = malloc((size_t)(h->n_jobs ? h->n_jobs : 1) * sizeof *done), n_done = 0;
    if (!done) {
        sim_oom(S, "jobs");
        return;
    }
    for (int i = 0; i < h->n_jobs;)               /* every job finished by now (within rounding) */
        if (S->ep[h->jobs[i]].job_left <= 1e-6) { /* 1 ns */
            done[n_done++] = h->jobs[i];
            S->ep[h->jobs[i]].job_on = false;
            h->jobs[i] = h->jobs[--h->n_jobs];
        } else {
            i++;
        }
    host_schedule(S, hi);
    for (int i = 0; i < n_done; i++)
        if (done[i] < S->n_nodes)
            cs_node_job_done(S, done[i]);
        else
            cs_user_job_done(S, done[i] - S->n_nodes);
    free(done);
}

/* ---- delivery ---------------------------------------------------------------------------- */

static void on_deliver(sim *S, int m) {
    cs_msg *M = &S->msgs[m];
    int to = M->to;
    if (to >= S->n_nodes) {
        cs_user_deliver(S, to - S->n_nodes, m);
        return;
    }
    if (M->type == M_EXPERT_REPLY) { /* a partner's answer to its stage */
        bool current = M->call == S->ep[to].call && S->nodes[to].alive;
        sim_msg_free(S, m);
        if (current && S->nodes[to].busy && S->nodes[to].waiting > 0)
            cs_node_partner_answer(S, to, true);
        return;
    }
    cs_node_deliver(S, to, m);
}

/* ---- the run -------------------------------------------------------------------------------- */

static int cmp_double(const void *pa, const void *pb) {
    const double x = *(const double *)pa, y = *(const double *)pb;
    return (x > y) - (x < y);
}

static void sim_free(sim *S) {
    for (int i = 0; S->nodes && i < S->n_nodes; i++) {
        free(S->nodes[i].queue);
        free(S->nodes[i].step);
        free(S->nodes[i].sessions);
        free(S->nodes[i].user_slot);
        free(S->nodes[i].user_step);
    }
    for (int i = 0; S->users && i < S->n_users; i++) {
        free(S->users[i].route);
        free(S->users[i].old_route);
        free(S->users[i].avoid);
    }
    for (int i = 0; S->hosts && i < S->n_hosts; i++) free(S->hosts[i].jobs);
    free(S->nodes), free(S->users), free(S->hosts), free(S->ep), free(S->msgs), free(S->ready);
    free(S->pace_due), free(S->gaps0);
    free(S->attn_b), free(S->exp_b), free(S->state_b), free(S->pos_b), free(S->pn), free(S->skip);
    if (S->have_plan) mt_place_plan_free(&S->plan);
    cs_queue_free(&S->q);
}

void cs_result_free(cs_result *r) {
    free(r->timeline);
    r->timeline = NULL;
}

int cs_simulate(const cs_config *cfg, cs_result *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    sim S0 = {0}, *S = &S0;
    S->cfg = cfg;
    S->err = err;
    S->res = out;
    S->free_msg = -1;
    S->fail_node = -1;
    S->rng = cfg->work.seed ? cfg->work.seed : 1;
    out->restored_ms = -1;
    out->first_after_fail_ms = -1;
    out->fail_at_ms = cfg->failure.at_ms;
    const cs_workload *w = &cfg->work;
    int rc = -1;
    if (w->users < 1 || w->prompt < 1 || w->gen < 1 || w->ubatch < 1 || cfg->max_sessions < 0 ||
        cfg->max_batch_tokens < 1 || cfg->step_tokens < 1 || cfg->prefill_chunk < 0 ||
        cfg->place_sessions < 0 || cfg->lan.gbps <= 0 || cfg->compute.threads < 1) {
        mt_error_set(err, "users, prompt, gen, ubatch, max_batch_tokens, step_tokens, the"
                          " bandwidth and threads must be positive; max_sessions,"
                          " prefill_chunk and place_sessions not negative");
        goto done;
    }
    if (cs_reg_setup(S)) goto done;
    S->n_users = w->users;
    int n_ep = S->n_nodes + S->n_users;
    S->n_hosts = cfg->shared_host ? 1 : n_ep;
    S->nodes = calloc((size_t)S->n_nodes, sizeof *S->nodes);
    S->users = calloc((size_t)S->n_users, sizeof *S->users);
    S->ep = calloc((size_t)n_ep, sizeof *S->ep);
    S->hosts = calloc((size_t)S->n_hosts, sizeof *S->hosts);
    S->skip = calloc((size_t)S->n_nodes + 257, sizeof *S->skip);
    if (!S->nodes || !S->users || !S->ep || !S->hosts || !S->skip) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    for (int h = 0; h < S->n_hosts; h++)
        S->hosts[h].cores = cfg->shared_host ? cfg->cores : cfg->compute.threads;
    for (int e = 0; e < n_ep; e++) {
        /* one requester process for every user (moontail serve): their heads share its
         * machine's CPUs and their messages its link */
        const bool served = cfg->one_requester && e >= S->n_nodes;
        S->ep[e].host = cfg->shared_host ? 0 : served ? S->n_nodes : e;
        S->ep[e].link = served ? S->n_nodes : e;
        S->ep[e].call_node = -1;
    }
    if (cfg->one_requester && !cfg->shared_host)
        S->hosts[S->n_nodes].cores =
            cfg->requester_cores > 0 ? cfg->requester_cores : cfg->compute.threads;
    for (int i = 0; i < S->n_nodes; i++) {
        cs_node *n = &S->nodes[i];
        n->id = i + 1;
        n->alive = n->serving = true;
        n->user_slot = malloc((size_t)S->n_users * sizeof *n->user_slot);
        n->user_step = calloc((size_t)S->n_users, sizeof *n->user_step);
        if (!n->user_slot || !n->user_step) {
            mt_error_set(err, "out of memory");
            goto done;
        }
    }
    if (S->have_plan) {
        cs_reg_apply_plan(S);
    } else {
        int32_t a = 0;
        for (int i = 0; i < S->n_nodes; i++) {
            cs_node *n = &S->nodes[i];
            n->role = MT_PLACE_STAGE;
            n->a = a;
            n->b = a += cfg->stage_layers[i];
            n->ee = cfg->shape.n_expert;
        }
    }
    for (int i = 0; i < S->n_nodes; i++) cs_node_reset_sessions(S, i);
    cs_reg_describe(S);
    for (int u = 0; u < S->n_users; u++) {
        cs_user *U = &S->users[u];
        U->route = malloc((size_t)S->n_nodes * sizeof *U->route);
        U->old_route = malloc((size_t)S->n_nodes * sizeof *U->old_route);
        U->avoid = malloc(256 * sizeof *U->avoid);
        U->failed_node = -1;
        if (!U->route || !U->old_route || !U->avoid) {
            mt_error_set(err, "out of memory");
            goto done;
        }
    }
    /* the requester's head: measured on the calibrated model, else from its size */
    S->head_ms = cfg->compute.head_ms > 0 ? cfg->compute.head_ms
                                          : cs_compute_ms(&cfg->compute, cs_head_macs(&cfg->shape),
                                                          cs_head_bytes(&cfg->shape));
    double end = w->burst ? INFINITY : w->duration_ms;
    out->bucket_ms = cfg->timeline_bucket_ms > 0 ? cfg->timeline_bucket_ms : 1000;
    out->n_timeline = w->burst ? 0 : (int32_t)ceil(w->duration_ms / out->bucket_ms);
    if (out->n_timeline && !(out->timeline = calloc((size_t)out->n_timeline, sizeof(double)))) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (cfg->failure.at_ms >= 0) {
        if (!S->have_plan) {
            mt_error_set(err, "a failure needs a placed cell (machines), not a given pipeline:"
                              " there is no other route to fail over to");
            goto done;
        }
        S->fail_node = cfg->failure.node > 0    ? (int)cfg->failure.node - 1
                       : cfg->failure.node == 0 ? cs_reg_middle_stage(S)
                                                : -1; /* resolved at the failure */
        if (cfg->failure.node >= 0 && (S->fail_node < 0 || S->fail_node >= S->n_nodes ||
                                       S->nodes[S->fail_node].role == MT_PLACE_SPARE ||
                                       S->nodes[S->fail_node].role == MT_PLACE_NONE)) {
            mt_error_set(err,
                         "the failure's node %lld holds no shard (ids 1..%d; 0: the middle"
                         " stage of pipeline 0)",
                         (long long)cfg->failure.node, S->n_nodes);
            goto done;
        }
        sim_push(S, cfg->failure.at_ms, EV_FAIL, 0, 0);
    }
    /* users: in a burst all start at 0 with their route open (the validation's protocol); else
     * each opens its route at a random time within the warm-up */
    for (int u = 0; u < S->n_users; u++) {
        cs_user *U = &S->users[u];
        if (w->burst && w->stagger_ms > 0 && u > 0) {
            U->phase = U_SLEEP;
            U->then = -1;
            sim_push(S, u * w->stagger_ms, EV_USER, u, 5);
        } else if (w->burst) {
            if (!cs_user_burst_start(S, u)) {
                mt_error_set(err, "no route for requester %d", u);
                goto done;
            }
        } else {
            U->phase = U_SLEEP;
            U->then = -1;
            sim_push(S, sim_rand_unit(&S->rng) * w->warmup_ms, EV_USER, u, 0);
        }
    }
    cs_event ev;
    while (!S->failed && cs_queue_pop(&S->q, &ev)) {
        if (ev.t > end) break;
        S->now = ev.t;
        out->sim_events++;
        switch (ev.kind) {
        case EV_DELIVER:
            on_deliver(S, ev.a);
            break;
        case EV_CPU:
            on_cpu(S, ev.a, ev.b);
            break;
        case EV_USER:
            cs_user_on_event(S, ev.a, ev.b);
            break;
        case EV_FAIL:
            cs_reg_on_fail(S);
            break;
        case EV_REG_DEAD:
            cs_reg_on_dead(S);
            break;
        case EV_READY:
            cs_reg_on_ready(S, ev.a);
            break;
        case EV_CALL_FAIL:
            cs_reg_on_call_fail(S, ev.a, ev.b);
            break;
        case EV_WAKE:
            cs_node_wake(S, ev.a, ev.b);
            break;
        }
    }
    if (S->failed) goto done;
    /* results */
    if (w->burst) {
        double t0 = INFINITY, t1 = 0;
        int64_t dec = 0;
        for (int u = 0; u < S->n_users; u++) {
            const cs_user *U = &S->users[u];
            const int32_t gen = u > 0 && w->others_gen > 0 ? w->others_gen : w->gen;
            if (U->generated < gen) out->requests_short++;
            if (gen < 2) continue; /* a prompt alone: no decode */
            t0 = fmin(t0, U->t_first);
            t1 = fmax(t1, U->t_last);
            dec += U->generated - 1;
        }
        out->agg_tps = t1 > t0 ? dec / ((t1 - t0) / 1e3) : 0;
        if (S->n_gaps0 > 0) { /* nearest rank, as cellsim_load */
            qsort(S->gaps0, (size_t)S->n_gaps0, sizeof *S->gaps0, cmp_double);
            int k = (int)(0.95 * S->n_gaps0 + 0.999999);
            out->gap0_p95_ms = S->gaps0[k < 1 ? 0 : k > S->n_gaps0 ? S->n_gaps0 - 1 : k - 1];
        }
    } else {
        out->agg_tps = out->tokens / ((w->duration_ms - w->warmup_ms) / 1e3);
    }
    out->user_tps = S->n_tps ? S->tps_sum / S->n_tps : 0;
    out->user_requests = S->n_tps;
    out->ttft_ms = S->n_ttft ? S->ttft_sum / S->n_ttft : 0;
    out->recovery_ms_mean = S->n_rec ? S->rec_sum / S->n_rec : -1;
    if (!S->n_rec) out->recovery_ms_max = -1; /* nobody hit recovered within its request */
    out->step_ms_mean = S->steps ? S->step_ms_sum / S->steps : 0;
    out->batch_mean = S->steps ? S->step_tok_sum / S->steps : 0;
    out->cpu_used = S->t_last > 0 ? S->cpu_work / S->t_last : 0;
    out->paced_holds = (int64_t)S->paced_holds;
    rc = 0;
done:
    sim_free(S);
    if (rc) cs_result_free(out);
    return rc;
}

void cs_config_defaults(cs_config *c) {
    memset(c, 0, sizeof *c);
    c->lan = (cs_lan){.latency_us = 50,
                      .gbps = 1.0,
                      .overhead_us = 350,
                      .connect_ms = 2,
                      .registry_ms = 5,
                      .wire_bytes = 4};
    c->failure = (cs_failure){.at_ms = -1,
                              .node = 0,
                              .silent = false,
                              .dead_after_ms = 5000,
                              .heartbeat_ms = 1000,
                              .call_timeout_ms = 30000,
                              .connect_timeout_ms = 5000,
                              .retry_ms = 250,
                              .give_up_ms = 20000,
                              .fetch_gbps = 1.0,
                              .load_ms = 2000};
    c->work = (cs_workload){.users = 1,
                            .prompt = 128,
                            .gen = 128,
                            .duration_ms = 3600e3,
                            .warmup_ms = 600e3,
                            .ubatch = 512,
                            .retry_after_ms = 10000,
                            .seed = 1};
    c->compute.threads = 1;
    c->replicas = 2;
    c->spares = 1;
    c->max_group = 8;
    c->cores = 2;
    c->max_sessions = 0; /* memory alone */
    c->max_batch_tokens = 4096;
    c->step_tokens = 32;
    c->prefill_chunk = 4;
    c->place_sessions = 64;
    c->timeline_bucket_ms = 1000;
}

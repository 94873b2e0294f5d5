/* cellsim_internal.h - what the files of the simulation share; not an
 * interface (cellsim.h is). cellsim_cell.c: helpers, messages on the LAN,
 * CPUs, delivery and the run; cellsim_node.c: a node's worker;
 * cellsim_requester.c: requesters and their failover; cellsim_registry.c:
 * placement, routes, the failure and the spare. Times in milliseconds. */
#ifndef MOONTAIL_BENCH_CELLSIM_INTERNAL_H
#define MOONTAIL_BENCH_CELLSIM_INTERNAL_H

#include "cellsim.h"
#include "moontail/node.h"
#include "moontail/placement.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { EV_DELIVER, EV_CPU, EV_USER, EV_FAIL, EV_REG_DEAD, EV_READY, EV_CALL_FAIL, EV_WAKE };
enum { M_STAGE_FWD, M_STAGE_REPLY, M_EXPERT_RUN, M_EXPERT_REPLY, M_SESSION_END, M_END_REPLY };
enum { E_NONE, E_UNKNOWN_SESSION, E_COMPUTE, E_BROKEN };
enum { MAX_PARTNERS = 64, MAX_ATTEMPTS = 32 };

typedef struct cs_msg {
    int type;
    int from, to; /* endpoints: nodes [0, n_nodes), then requesters */
    int user;
    uint64_t session;
    int32_t p0, n; /* STAGE_FWD: positions [p0, p0 + n) */
    int32_t layer; /* EXPERT_RUN */
    double rows;   /* EXPERT_RUN: rows sent */
    double n_tok;  /* EXPERT_RUN: the tokens of the stage's step */
    int64_t call;  /* the caller's call number (stale answers are dropped) */
    int err;
    int next_free;
    /* STAGE_FWD */
    int32_t done;     /* tokens computed so far (a prompt cut into chunks, node_worker.c) */
    bool finished;    /* answered at the end of this step: leaves the queue */
    bool oneway;      /* route mode oneway: a stage forwards each chunk to the next stage, the
                         last answers the requester with the last row (LAST_ROW) */
    int32_t hop;      /* oneway: the route index of the stage it goes to */
    int32_t pass_end; /* oneway: the position after the pass's last token */
    bool prompt;      /* MT_PROTO_FLAG_PROMPT: a chunk of a prompt, scheduled as one */
    bool speculative; /* MT_PROTO_FLAG_SPECULATIVE: a token and its guesses */
    double arrived;   /* when it reached the node's queue (decode pacing) */
} cs_msg;

typedef struct cs_endpoint {
    int host;
    int link;                /* the endpoint whose link it sends and receives on (itself, or
                                the one requester process's) */
    double tx_free, rx_free; /* its own link's */
    int64_t call;            /* the call in flight (requester, or stage calling its partners) */
    int call_node;           /* node it waits for, -1 */
    double call_t;           /* when it was sent */
    bool job_on;             /* a compute job runs */
    double job_left;         /* its remaining work, ms at full speed */
} cs_endpoint;

typedef struct cs_host {
    double cores;
    double last_t;
    int64_t version;
    int *jobs; /* endpoints with a running job */
    int n_jobs, cap_jobs;
} cs_host;

/* A node's session (node_sessions.c): its bytes are its fixed state plus the positions it
 * holds or its prompt in progress will write (kv_used); busy: the message whose chunks are
 * in progress (it blocks the session's later requests), -1. */
typedef struct cs_session {
    bool used;
    uint64_t id;
    int user;
    uint64_t last_step, touched; /* the step it was last named in; recency (LRU order) */
    int32_t n_past;
    double held;
    int busy;
    mt_node_pace_decode pace; /* decode pacing: its last decodes' arrivals */
} cs_session;

/* What a step does with one request: all of it, or a chunk of a STAGE_FWD. */
typedef struct cs_item {
    int m;
    int sess;             /* STAGE_FWD: the session's index */
    int32_t first, count; /* STAGE_FWD: tokens [first, first + count) of the request */
} cs_item;

typedef struct cs_node {
    int64_t id;
    bool alive, serving;
    mt_place_role role;
    int32_t pipeline, a, b, eb, ee;
    int partners[MAX_PARTNERS];
    int n_partners;
    double bytes; /* its shard */
    /* worker */
    int *queue, q_n, q_cap;
    bool busy;
    cs_item *step;
    int n_step, cap_step; /* the step's STAGE_FWD / EXPERT_RUN work */
    double step_tok, step_start;
    cs_step st;    /* the step's tokens, sessions and context (cs_layer_ms) */
    int32_t layer; /* stage with partners: the layer being computed */
    int phase;     /* 0: attention (or every layer at once), 1: own experts + partners */
    int waiting;   /* partner answers still due */
    bool cpu_busy, step_failed;
    /* sessions (limited by kv_budget bytes, and by max_sessions when given) */
    cs_session *sessions;
    int n_sess, cap_sess, n_live;
    int *user_slot;          /* per user: the index of its latest session here, -1 */
    uint64_t *user_step;     /* per user: the step that last saw one of its requests */
    double kv_budget;        /* offered memory minus the shard (node_sizing.c) */
    double kv_fixed, kv_pos; /* a session's fixed bytes, bytes per position */
    double kv_used;
    uint64_t tick;
    uint64_t steps;
    /* decode pacing (node_worker.c): the recent time of a step of prompt chunks alone and of
     * decodes alone, and the hold in progress (its EV_WAKE carries hold_seq) */
    mt_node_pace_costs pace_costs;
    double pace_hold_until;
    int pace_skips;
    double spec_tok; /* this step's tokens of speculative passes (KDA snapshots) */
    int step_kind;   /* this step: 1 prompt chunks alone, 2 decodes alone, 0 other */
    int64_t hold_seq;
} cs_node;

/* what a requester does now */
enum { U_IDLE, U_OPEN, U_PASS, U_HEAD, U_END, U_SLEEP, U_DONE };
/* what it does after the session end / the route open / the sleep */
enum { THEN_EVAL, THEN_OPEN, THEN_REPLAY, THEN_FAILOVER_OPEN };

typedef struct cs_user {
    int phase, then;
    int *route, n_route; /* node indices of its stages */
    bool have_route, have_session;
    int64_t *avoid;
    int n_avoid;
    uint64_t session, hint;
    /* the request */
    int32_t generated;
    double t_req, t_first, t_last;
    /* the eval in progress: tokens [0, ev_end) after it; this pass runs [mb_p0, mb_p0 + mb_n)
     * of the range [run_p0, ev_end) (route_run) */
    int32_t ev_end, run_p0, mb_p0, mb_n;
    int stage;          /* route index called now (pass, session end) */
    int fail_hop;       /* oneway: the route index of the failed stage */
    int32_t sub, sent;  /* tokens of this pass the stage has already had, and in the request
                           now: a pass wider than one message holds is sent as several
                           requests, one after the other */
    bool replayed;      /* PASS_REPLAY done once in this eval */
    int32_t spec_guess; /* guesses in the pass in flight (--spec-k), 0 */
    /* failover (requester.c) */
    bool failover;
    double t_detect;
    int attempts;
    int failed_node;       /* the node whose call failed, -1 */
    bool affected;         /* its call failed after the injected failure */
    int *old_route, n_old; /* the route whose session is being ended */
    uint64_t old_session;
} cs_user;

typedef struct sim {
    const cs_config *cfg;
    cs_queue q;
    double now;
    uint64_t rng;
    cs_msg *msgs;
    int n_msgs, cap_msgs, free_msg;
    cs_endpoint *ep;
    cs_host *hosts;
    int n_hosts;
    cs_node *nodes;
    int n_nodes;
    cs_user *users;
    int n_users;
    /* registry: the placement inputs, the plan, the nodes it skips */
    mt_place_model pm;
    uint64_t *attn_b, *exp_b;
    mt_place_node *pn;
    mt_place_params pp;
    mt_place_plan plan;
    bool have_plan;
    uint64_t *state_b, *pos_b; /* per layer: a session's fixed state, its bytes per position */
    double session_mem_max;    /* the most session memory a stage of the plan holds */
    int64_t *skip;
    int fail_node;
    double head_ms;
    cs_result *res;
    int *ready; /* a step's scratch */
    int cap_ready;
    mt_node_pace_decode *pace_due; /* a step's scratch: decoding sessions (mt_node_pace_hold) */
    int cap_pace;
    uint64_t paced_holds; /* prompt steps held for a decode due */
    double *gaps0;        /* burst: user 0's gaps between decode tokens */
    int n_gaps0, cap_gaps0;
    /* sums for the results */
    int64_t steps;
    double step_tok_sum, step_ms_sum;
    double cpu_work; /* ms of compute at full speed, times threads, started so far */
    double t_last;   /* the last token */
    double tps_sum, ttft_sum, rec_sum;
    int n_tps, n_ttft, n_rec;
    mt_error *err;
    int failed; /* an internal error stops the run */
} sim;

/* ---- cellsim_cell.c ------------------------------------------------------------------------ */

uint64_t sim_rand(uint64_t *s);
double sim_rand_unit(uint64_t *s);      /* uniform in [0, 1) */
void sim_oom(sim *S, const char *what); /* stops the run with "out of memory for WHAT" */
void sim_push(sim *S, double t, int kind, int a, int64_t b);
bool sim_grow(void **p, int *cap, int need, size_t elem); /* *p holds at least need elems */
int sim_user_ep(const sim *S, int u);                     /* requester u's endpoint */
int sim_msg_new(sim *S);
void sim_msg_free(sim *S, int m);
/* Sends message m now (cs_lan's model of the LAN). */
void sim_send(sim *S, int m);
/* Endpoint e waits for node ni from now on (a dead node fails the call: at once when it was
 * killed, at timeout_ms when it went silent); a call ends with sim_call_end. */
void sim_call_begin(sim *S, int e, int ni, double timeout_ms);
void sim_call_end(sim *S, int e);
/* A compute job of `ms` at full speed for endpoint e, on its machine's CPUs; its end calls
 * cs_node_job_done or cs_user_job_done. */
void sim_job_start(sim *S, int e, double ms);
void sim_job_cancel(sim *S, int e);

/* ---- cellsim_node.c ------------------------------------------------------------------------ */

void cs_node_deliver(sim *S, int ni, int m); /* a request reaches node ni */
void cs_node_job_done(sim *S, int ni);
void cs_node_wake(sim *S, int ni, int64_t seq); /* a held prompt step's wait is over */
/* A stage hears from a partner (ok), or learns that the call failed. */
void cs_node_partner_answer(sim *S, int ni, bool ok);
/* Node ni's memory: its budget and a session's bytes from its shard and layers; no
 * sessions (a new node, a restarted one, a spare that loaded a shard). */
void cs_node_reset_sessions(sim *S, int ni);

/* ---- cellsim_requester.c ------------------------------------------------------------------- */

void cs_user_new_session(sim *S, int u);
bool cs_user_burst_start(sim *S, int u); /* false: no route */
/* mt_route_eval of tokens [from, to) (the session holds [0, from)). */
void cs_user_eval(sim *S, int u, int32_t from, int32_t to);
void cs_user_deliver(sim *S, int u, int m);
void cs_user_job_done(sim *S, int u);
/* An answer to u's stage call: err E_NONE, E_UNKNOWN_SESSION, E_COMPUTE or E_BROKEN. */
void cs_user_stage_answer(sim *S, int u, int err);
void cs_user_end_next(sim *S, int u);            /* the next SESSION_END of the old route */
void cs_user_on_event(sim *S, int u, int64_t b); /* EV_USER */

/* ---- cellsim_registry.c -------------------------------------------------------------------- */

int cs_reg_setup(sim *S);       /* placement (or the given pipeline) */
void cs_reg_describe(sim *S);   /* the topology into the result */
void cs_reg_apply_plan(sim *S); /* nodes' roles, ranges and partners from the plan */
int cs_reg_middle_stage(const sim *S);
bool cs_reg_choose_route(sim *S, int u);               /* a route for requester u; false: none */
void cs_reg_on_fail(sim *S);                           /* EV_FAIL */
void cs_reg_on_call_fail(sim *S, int e, int64_t call); /* EV_CALL_FAIL */
void cs_reg_on_dead(sim *S);                           /* EV_REG_DEAD */
void cs_reg_on_ready(sim *S, int ni);                  /* EV_READY */

#endif

/* cellsim.h - bench/cellsim: a discrete-event simulation of a MoonTail cell
 * (docs/cellsim.md): machines holding pipeline stages as the registry places
 * them (src/control/placement_cell.c), requesters calling each stage in turn
 * (route.c's default mode) or sending a pass that the stages forward one way
 * (issue 18's plan), nodes stepping decodes first, then prompt chunks, with
 * sessions limited by memory (node_worker.c), stage groups calling their partners per MoE layer, a
 * LAN, and a node failure with the requester's failover (requester.c) and the registry's spare.
 *
 * Files: cellsim_events.c (the event queue), cellsim_compute.c (layer shapes,
 * bytes, MACs, session state, message sizes, the compute-time model and its
 * calibration from `moontail bench --layer-times`), cellsim_cell.c (the
 * simulation), cellsim_report.c (tables and JSON), cellsim.c (the command).
 * Times are in milliseconds. */
#ifndef MOONTAIL_BENCH_CELLSIM_H
#define MOONTAIL_BENCH_CELLSIM_H

#include "moontail/error.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- event queue (cellsim_events.c) ----------------------------------------------- */

/* An event: at time t, of a kind, about object a (and b: a version, a call
 * number, a message index). Equal times pop in the order they were pushed. */
typedef struct cs_event {
    double t;
    uint64_t seq;
    int32_t kind;
    int32_t a;
    int64_t b;
} cs_event;

typedef struct cs_queue {
    cs_event *v; /* binary min-heap on (t, seq) */
    int64_t n, cap;
    uint64_t next_seq;
} cs_queue;

int cs_queue_push(cs_queue *q, double t, int32_t kind, int32_t a, int64_t b);
bool cs_queue_pop(cs_queue *q, cs_event *out);
void cs_queue_free(cs_queue *q);

/* ---- model shape, bytes and MACs (cellsim_compute.c) ------------------------------- */

/* The architectures cellsim models, each the shape `moontail mkmodel --arch ...` writes. */
typedef enum cs_arch {
    CS_ARCH_DEEPSEEK2, /* every layer MLA; routed + shared experts at n_embd */
    CS_ARCH_KIMI_K3,   /* KDA and MLA layers, attention residuals, latent experts */
} cs_arch;

enum { CS_MAX_KIMI_LAYERS = 1024 };

/* A model's shape. deepseek2: MLA attention, routed + shared experts. kimi-k3
 * (docs/kimi-k3.md): each layer KDA (n_head heads of kda_head_dim, a causal
 * convolution of conv_kernel taps, a full-rank output gate) or MLA (mla[l];
 * deepseek2's with an optional output gate), attention-residual checkpoints
 * every res_block layers, routed experts at a latent width (ffn_routed_down /
 * ffn_routed_up in the layer's non-expert part), one situ FFN per dense layer.
 * Matrices are of `type` when their rows are a whole number of its blocks,
 * else Q8_0, else F32 (as the synthetic writer and llama.cpp's quantizer do);
 * kimi-k3's routed experts of expert_type the same way; routers, norms, convolutions,
 * biases and residual scores are F32. */
typedef struct cs_shape {
    cs_arch arch;
    int32_t n_layer, n_dense; /* layers, of which the first n_dense have a dense FFN */
    int32_t n_embd, n_vocab;
    int32_t n_head, q_lora, kv_lora, qk_nope, qk_rope, v_dim;
    int32_t n_ff; /* dense FFN width */
    int32_t n_expert, n_expert_used, n_expert_shared, n_ff_exp;
    int type;        /* mt_type of the matrices */
    int expert_type; /* kimi-k3: mt_type of the routed experts (< 0: type) */
    /* kimi-k3 */
    int32_t kda_head_dim, conv_kernel; /* KDA: n_head heads of kda_head_dim, K taps */
    int32_t res_block;                 /* attention residuals: a checkpoint every res_block
                                          layers (0, B, 2B, ...); 0 = none */
    int32_t latent;                    /* expert_latent_length; 0 = experts at n_embd */
    bool mla_gate;                     /* MLA layers have an output gate (attn_gate) */
    uint8_t mla[CS_MAX_KIMI_LAYERS];   /* layer l is MLA (1) or KDA (0) */
} cs_shape;

/* Per layer: bytes held and read, multiply-adds, and the per-session state.
 * "Weights" are what a step streams once whatever its batch; the rest grows
 * with the tokens or sessions of the step (cs_step). */
typedef struct cs_layer_cost {
    double attn_bytes;   /* non-expert part: norms, attention, router, shared expert or dense
                            FFN, latent projections, residual scores */
    double expert_bytes; /* one routed expert (0: dense layer) */
    double attn_macs;    /* per token, non-expert part's matrices */
    double expert_macs;  /* per token per routed expert */
    bool kda;            /* a KDA (linear attention) layer; else MLA */
    /* KDA: the recurrence and the convolution, per token (f32 work on the session's state,
     * not weights; does not grow with the context); the state is read and written once per
     * session and step (a step of one session's prompt keeps it in cache) */
    double state_macs;  /* per token */
    double state_bytes; /* held per session (fixed) */
    /* MLA: attention over the latent cache, per token and attended position; the cache row
     * of a position is read once per session and step */
    double ctx_macs;           /* per token per attended position */
    double bytes_per_position; /* held per session per position (f32 [c_kv ; k_pe]) */
} cs_layer_cost;

/* What one compute call of a node covers: tokens, sessions (one STAGE_FORWARD each), the
 * positions the tokens attend to (a token at position p attends p + 1) and the cache rows
 * the sessions read (each session's context after the step). */
typedef struct cs_step {
    double n_tok, n_seq, attended, ctx_rows;
} cs_step;

/* The step of n_seq sessions each computing n_tok / n_seq tokens from position p0. */
cs_step cs_step_of(double n_tok, double n_seq, double p0);

cs_layer_cost cs_layer_cost_of(const cs_shape *s, int32_t layer);
double cs_head_bytes(const cs_shape *s);
double cs_head_macs(const cs_shape *s);
double cs_model_bytes(const cs_shape *s);
/* The width of a routed expert's rows (EXPERT_RUN, EXPERT_REPLY): latent or n_embd. */
int32_t cs_expert_width(const cs_shape *s);
/* Session memory of layers [a, b) in bytes: the fixed part (KDA states) and per position
 * (MLA caches). */
void cs_session_bytes(const cs_shape *s, int32_t a, int32_t b, double *fixed, double *per_position);

/* ---- the wire (proto.h's format, version 2) ------------------------------------------ */

/* Attention-residual checkpoints banked by the layers before `layer`: ceil(layer / B). */
int32_t cs_banked(const cs_shape *s, int32_t layer);
/* Values per token of a STAGE_FORWARD into layer a: the stream and the checkpoints banked
 * before a; of the STAGE_REPLY to a forward of [a, end): the stream and those banked in
 * [a, end), or, when end is the last layer, the head's input (the stream mixed with every
 * checkpoint: n_embd). Both n_embd without attention residuals. */
int64_t cs_cols_in(const cs_shape *s, int32_t a);
int64_t cs_cols_out(const cs_shape *s, int32_t a, int32_t end);

typedef enum cs_wire_kind {
    CS_WIRE_STAGE_FORWARD,
    CS_WIRE_STAGE_REPLY,
    CS_WIRE_EXPERT_RUN,
    CS_WIRE_EXPERT_REPLY,
    CS_WIRE_SESSION_END,
    CS_WIRE_SESSION_END_REPLY,
} cs_wire_kind;

/* Bytes on the wire of one message carrying n rows of cols values of value_bytes (4: f32,
 * 2: bf16): the 12-byte header, the type's fixed fields (STAGE_FORWARD 25 + 4 per token,
 * EXPERT_RUN 13 + 4 per row, the replies 9) and 20 bytes of transport framing (the u32
 * length and the 16-byte tag). */
double cs_wire_bytes(cs_wire_kind kind, double n, double cols, int value_bytes);
/* The most rows one STAGE_FORWARD or EXPERT_RUN of cols values carries (proto.c's
 * mt_proto_max_rows: a 64 MiB payload, 65536 tokens or 1M rows); more are sent as
 * several requests, one after the other (remote.c). */
int32_t cs_wire_max_rows(cs_wire_kind kind, int64_t cols, int value_bytes);

/* ---- compute time (cellsim_compute.c) --------------------------------------------- */

enum { CS_MAX_POINTS = 64 };

/* One measured step: a layer computing n tokens, reading `bytes` of weights (and session
 * state) with `macs` multiply-adds against weights (and MLA caches) and `state_macs` in KDA
 * recurrences, in all, in ms. */
typedef struct cs_point {
    double n_tok, macs, bytes, ms;
    bool prefill;
    double state_macs;
} cs_point;

/* What a compute call does: multiply-adds against weights (and MLA caches), multiply-adds
 * of KDA recurrences, bytes read. */
typedef struct cs_work {
    double macs, state_macs, bytes;
} cs_work;

/* Time of one compute call (a layer's step, or a partner's experts):
 *   ms = c0_ms + ms_per_gmac * macs / 1e9 + ms_per_gstate * state_macs / 1e9
 *        + ms_per_gb * bytes / 1e9
 * fitted to `moontail bench --layer-times` points. The KDA recurrence has its own term: it
 * is f32 work on a session's state, token by token, far slower per multiply-add than the
 * quantized products. Which experts a batch of n tokens touches: the measured fraction of
 * a layer's experts at each batch size when touch_measured (the calibration model itself),
 * else the uniform expectation 1 - (1 - k/E)^n. */
typedef struct cs_compute {
    double c0_ms, ms_per_gmac, ms_per_gb, ms_per_gstate;
    int threads; /* compute threads the figures were measured with */
    bool touch_measured;
    int n_touch;
    double touch_n[CS_MAX_POINTS], touch_frac[CS_MAX_POINTS]; /* ascending n */
    double head_ms;                                           /* measured head, or 0: modelled */
    /* the fit's quality over its points (relative error) */
    double fit_rms_rel, fit_max_rel;
    int n_fit_points;
} cs_compute;

/* A calibration file: `moontail bench --layer-times --json` output. Fills
 * shape (the calibrated model's), its points, head_ms and, when touch is
 * non-NULL, the measured touched-expert fractions. */
typedef struct cs_calibration {
    cs_shape shape;
    double attn_bytes, expert_bytes; /* as the bench read them from the file */
    int threads;
    int32_t context; /* positions each decoding session held */
    int n_points;
    cs_point points[CS_MAX_POINTS];
    double touch_n[CS_MAX_POINTS], touch_frac[CS_MAX_POINTS];
    int n_touch;
    double head_ms;
} cs_calibration;

/* Which of the bench's times a point takes: the median wall time of its steps, the
 * fastest step (the least disturbed by other work), or the process's CPU time divided by
 * its threads (what the step takes on a machine of its own when it keeps every thread
 * busy: exact for one thread, a lower bound for more). */
typedef enum cs_time_kind { CS_TIME_WALL, CS_TIME_MIN, CS_TIME_CPU } cs_time_kind;

int cs_calibration_load(const char *path, cs_time_kind which, cs_calibration *out, mt_error *err);
/* Fits c0, ms/GMAC, ms/GMAC of KDA recurrences and ms/GB over the points of n calibrations
 * (weighted by 1/ms^2: relative errors). Coefficients are kept non-negative. */
int cs_compute_fit(const cs_calibration *cal, int n, cs_compute *out, mt_error *err);

/* Expected distinct experts of a layer's n_expert that n tokens touch. */
double cs_touched_fraction(const cs_compute *c, const cs_shape *s, double n_tok);
/* ms for one compute call. */
double cs_work_ms(const cs_compute *c, const cs_work *w);
/* ms for a call of weight multiply-adds and bytes only (the head). */
double cs_compute_ms(const cs_compute *c, double macs, double bytes);
/* The work of layer l for a step on a node holding `held` of its experts (held = n_expert:
 * the whole layer); attention says whether it runs the non-expert part too (weights, KDA
 * state, MLA cache). */
cs_work cs_layer_work(const cs_compute *c, const cs_shape *s, int32_t l, const cs_step *st,
                      int32_t held, bool attention);
/* ms of that work. */
double cs_layer_ms(const cs_compute *c, const cs_shape *s, int32_t l, const cs_step *st,
                   int32_t held, bool attention);

/* ---- the cell (cellsim_cell.c) ------------------------------------------------------ */

/* The network between machines (each machine has one full-duplex link to a
 * non-blocking switch). A message of B bytes from x to y takes
 *   overhead_us + B / bandwidth (x's sending side and y's receiving side are
 *   each busy for that long, first come first served) + latency_us. */
typedef struct cs_lan {
    double latency_us;  /* one way: wire and switch */
    double gbps;        /* each link, each direction */
    double overhead_us; /* per message: the data plane's own cost (encryption, system calls,
                           thread hand-offs and wake-ups) measured end to end */
    double connect_ms;  /* opening a data-plane connection (TCP, handshake, INFO) */
    double registry_ms; /* one HTTP call to the registry */
    int wire_bytes;     /* bytes per hidden-state element: 4 (f32) or 2 (bf16) */
} cs_lan;

typedef struct cs_failure {
    double at_ms; /* < 0: no failure */
    int64_t node; /* node id; 0: the stage holding the middle layer of pipeline 0; -1: the
                     stage holding the middle layer on requester 0's route */
    bool silent;  /* a cut link or a machine switched off (replies time out, connects time
                     out) instead of a killed process (connections reset at once) */
    double dead_after_ms, heartbeat_ms;                               /* registry */
    double call_timeout_ms, connect_timeout_ms, retry_ms, give_up_ms; /* requester */
    double fetch_gbps; /* a spare fetching the lost shard from its peers */
    double load_ms;    /* then opening it and starting its server */
} cs_failure;

typedef struct cs_workload {
    int32_t users;          /* concurrent requesters */
    int32_t prompt, gen;    /* tokens per request */
    bool burst;             /* every user starts one request at 0 (the validation's protocol);
                               else each repeats requests until duration_ms, starting at a random
                               time within the first request */
    bool route_per_request; /* a new route per request (`moontail prompt` per request); else
                               one route per user, kept across its requests (shell, serve) */
    double think_ms;        /* between a user's requests */
    double stagger_ms;      /* burst: user u starts at u x stagger_ms */
    int32_t others_gen;     /* burst: > 0: users 1.. ask for this many tokens (1: a prompt
                               alone), user 0 for gen (cellsim_load --others-gen) */
    double retry_after_ms;  /* after a request failed (no working route), before the next */
    double duration_ms, warmup_ms; /* steady mode: run length; tokens before warmup not counted */
    int32_t ubatch;                /* tokens per pass (requester's micro-batch) */
    uint64_t seed;
} cs_workload;

enum { CS_MAX_STAGES = 1024 };

typedef struct cs_config {
    cs_shape shape;
    cs_compute compute;
    cs_lan lan;
    cs_failure failure;
    cs_workload work;
    /* topology: machines placed by the registry's placement, or (n_stages > 0) one pipeline
     * of n_stages nodes with stage_layers[i] layers each */
    int32_t machines;
    double capacity_bytes; /* what each machine offers for shards */
    int32_t replicas, spares, max_group;
    int objective; /* mt_place_objective: how each pipeline is laid out (registry --objective) */
    double latency_goal_ms; /* placement's per-user goal (registry --latency-goal-ms); 0: none */
    int32_t n_stages;
    int32_t stage_layers[CS_MAX_STAGES];
    /* CPUs: every machine its own (threads cores used by a node), or all nodes and requesters on
     * one machine with `cores` CPUs shared evenly among the threads that want them */
    bool shared_host;
    double cores;
    /* every requester one process on one machine of requester_cores CPUs and one link, as
     * `moontail serve` runs its slots (else each user its own machine) */
    bool one_requester;
    double requester_cores; /* 0: the nodes' threads */
    /* shared host: the CPUs it gives 1, 2, ... n_share runnable threads of ours (the last for
     * more; one value: that many whatever the threads), when other programs use the rest
     * (measured: cellsim_load's cpu_capacity); none: cores */
    double share[16];
    int32_t n_share;
    int32_t max_sessions;      /* a node's cap on its sessions' count; 0: memory alone (its
                                  budget: the memory it offers minus its shard, node_sizing.c) */
    int32_t max_batch_tokens;  /* node.h default 4096 */
    int32_t step_tokens;       /* a step's tokens: every decode, then prompt chunks (node.h 32) */
    int32_t prefill_chunk;     /* a prompt's chunk (node.h 4); 0: the old node, each request
                                  whole in arrival order (FIFO up to max_batch_tokens) */
    bool no_pacing;            /* node.h no_pacing: no prompt step is held for a decode due */
    int32_t spec_k;            /* speculative decoding: guesses per decode pass (0: none) */
    double spec_accept;        /* ... the chance each guess is taken, in order (the first
                                  refused ends the pass's gain) */
    bool oneway;               /* route mode oneway (issue 18 item 4): the requester sends a
                                  pass to the first stage, each stage forwards each chunk it
                                  computes to the next, the last answers with the last row;
                                  else turn (route.c today: each stage in turn) */
    bool route_by_memory;      /* routes as the registry makes them: mt_place_route_choose
                                  with every stage's free session bytes (a draw weighted by
                                  each pipeline's fullest stage); else the hint's pipeline */
    int32_t place_sessions;    /* sessions placement reserves beside each shard (64) */
    int32_t session_ctx;       /* positions placement reserves per session (working memory); 0: a
                                  request's prompt + gen */
    double timeline_bucket_ms; /* tokens per bucket in the timeline */
} cs_config;

/* Defaults: node and requester defaults of the code (max_sessions 64, ubatch 512, call timeout
 * 30 s, connect timeout 5 s, retries 250 ms for up to 20 s), registry defaults (heartbeat 1 s,
 * dead after 5 s), 2 replicas, 1 spare, groups of up to 8, 1 GbE with 50 us latency. */
void cs_config_defaults(cs_config *c);

typedef struct cs_result {
    /* topology */
    int32_t pipelines, nodes_used, spares, groups, partners;
    int32_t stages_min, stages_max; /* stage groups per pipeline */
    char topology[512];             /* one line describing it */
    double session_mem_max;         /* bytes of sessions (max_sessions of session_ctx
                                       positions) the largest stage holds */
    /* throughput */
    double agg_tps;                              /* decoded tokens/s over the measured window */
    double user_tps, user_tps_min, user_tps_max; /* per request: decode tokens/s (mean, range) */
    int32_t user_requests; /* requests those figures come from (begun after the warm-up) */
    double ttft_ms;        /* mean time to first token */
    double itl_max_ms;     /* the longest wait between two tokens of a request measured */
    double gap0_p95_ms;    /* burst: user 0's gaps between its decode tokens, p95 (nearest
                              rank, as cellsim_load's first_gap_p95_ms) */
    int64_t paced_holds;   /* prompt steps held back for a decode due (decode pacing) */
    double step_ms_mean;   /* mean stage step */
    double batch_mean;     /* mean tokens per stage step */
    double cpu_used;       /* compute done / time to the last token, in CPUs (all machines) */
    int64_t tokens;        /* generated in the window */
    int32_t requests_done, requests_failed, requests_short; /* short: fewer tokens than asked */
    int64_t replays, failovers, evictions;
    /* failure */
    double fail_at_ms, detect_ms_max;         /* last affected requester's detection */
    double recovery_ms_mean, recovery_ms_max; /* failure -> next token, affected requesters */
    int32_t affected;                         /* requesters whose call failed */
    double restored_ms;                       /* spare serving (from the failure); < 0: never */
    double first_after_fail_ms; /* the cell's first token after the failure; < 0: none */
    double *timeline;           /* tokens per bucket (n_timeline), owned */
    int32_t n_timeline;
    double bucket_ms;
    double sim_events;
} cs_result;

/* Runs one simulation. Fails (err) on an impossible configuration: a model the
 * machines cannot hold, an unknown failure node. */
int cs_simulate(const cs_config *cfg, cs_result *out, mt_error *err);
void cs_result_free(cs_result *r);

/* One stage group of a placed cell and the hidden states it is sent and sends back. */
typedef struct cs_hop {
    int32_t pipeline, group, layer_begin, layer_end;
    int32_t partners;          /* nodes holding the rest of its layers' experts */
    int64_t cols_in, cols_out; /* values per token: STAGE_FORWARD, STAGE_REPLY */
} cs_hop;

/* Places the cell as cs_simulate does (cellsim_registry.c) and lists its stage groups,
 * pipeline after pipeline, each in layer order (*out: malloc'd). res, when not NULL, gets
 * the topology. */
int cs_plan_hops(const cs_config *cfg, cs_hop **out, int32_t *n, cs_result *res, mt_error *err);

/* ---- reports (cellsim_report.c) ---------------------------------------------------- */

#include <stdio.h>
void cs_print_compute(FILE *f, const cs_compute *c, const cs_shape *s);
void cs_print_timeline(FILE *f, const cs_result *r, double from_ms, double to_ms);

#endif

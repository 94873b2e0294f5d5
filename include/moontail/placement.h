/* placement.h - the control plane's placement engine: which node holds
 * which shard, and which nodes a request goes through.
 *
 * Pure computation: no I/O, no threads, no clocks, no randomness. The
 * registry calls mt_place_plan_make on every membership change with the
 * model's sizes and every node it knows (with what each node holds now), and
 * mt_place_route_choose when a requester asks for a route. The same inputs
 * always give the same plan and the same route.
 *
 * CELL mode (one LAN): `replicas` complete pipelines (or more, as many as
 * meet a latency goal: mt_place_params.latency_goal_ms). A pipeline is a
 * sequence of stage GROUPS covering layers [0, n_layer) in order; a group is
 * a STAGE node holding layers [a, b) with their attention parts and a
 * contiguous range of routed experts, plus 0..k PARTNER nodes holding the
 * other experts of the same layers (src/net/node_partner.c runs them). The
 * requester keeps the head; nothing places it.
 *
 * SWARM mode (volunteers): the requester keeps the head and the backbone
 * (every layer's attention part); EXPERTS nodes hold rectangles
 * layers [a, b) x experts [eb, ee), and every (MoE layer, expert) slice is
 * held by `replicas` distinct nodes (replica r = a set of rectangles tiling
 * every MoE slice once). Dense layers need nothing.
 *
 * Nodes beyond what the pipelines or replicas can use are SPAREs: they hold
 * nothing yet and take over the shard of a node that disappears.
 *
 * Time estimates: decode is memory bound, so a node reads every byte it
 * touches once per token. A layer touches its attention part and, on
 * average, n_expert_used experts spread evenly over all experts: a node
 * holding n of the n_expert experts of layers [a, b) touches
 * n_expert_used * n / n_expert one-expert bytes of each layer. Time =
 * bytes touched / (speed * bytes_per_ms). In a group, the stage runs
 * attention first and then the experts in parallel with its partners, each
 * MoE layer costing one partner round trip (partner_call_ms) when the group
 * has partners:
 *   group ms = attn bytes / (s_stage * bpm) + (partners ? n_moe_layers * call_ms : 0)
 *            + max over members (n_expert_used * n_i / n_expert * expert bytes / (s_i * bpm))
 * A pipeline is as fast as its slowest group. These are model estimates,
 * not measurements.
 *
 * Working memory: a node that holds attention parts (a cell STAGE) also
 * keeps every session's cache of those layers: a KDA layer a fixed
 * recurrent state, an MLA or GQA layer a row per context position
 * (mt_kv_layer_bytes). With the params' per-layer sizes it must have room
 * for its shard bytes + sessions x (fixed state + n_ctx x bytes per position)
 * of its layers, and every capacity decision (which layers a stage takes,
 * who fills a lost stage, which spares can take the largest shard) counts
 * both. Partners and swarm expert servers hold no attention and keep none.
 * Time estimates stay the bytes read per token: the weights. */
#ifndef MOONTAIL_PLACEMENT_H
#define MOONTAIL_PLACEMENT_H

#include "moontail/error.h"
#include "moontail/shard.h"

#include <stdbool.h>
#include <stdint.h>

/* mt_place_plan_make returns this when the plan is valid but has fewer
 * complete pipelines / replicas than asked (plan->reason says why). */
#define MT_PLACE_SHORT 1

typedef enum mt_place_mode { MT_PLACE_CELL, MT_PLACE_SWARM } mt_place_mode;

/* The numbers are stored in the registry's database: never renumber. */
typedef enum mt_place_role {
    MT_PLACE_NONE = 0,    /* holds nothing and is not part of the plan (unavailable) */
    MT_PLACE_STAGE = 1,   /* cell: attention + experts [eb, ee) of layers [a, b) */
    MT_PLACE_PARTNER = 2, /* cell: experts [eb, ee) of its stage's layers [a, b) */
    MT_PLACE_EXPERTS = 3, /* swarm: experts [eb, ee) of layers [a, b) */
    MT_PLACE_SPARE = 4,   /* holds nothing yet; takes over a lost node's shard */
} mt_place_role;

/* ---------------------------------------------------------------- inputs */

/* The model's sizes: the same numbers as mt_shard_layout. */
typedef struct mt_place_model {
    int32_t n_layer;
    int32_t n_expert;             /* routed experts per MoE layer; 0 for a dense model */
    int32_t n_expert_used;        /* experts each token uses (1..n_expert; 0 when dense) */
    const uint64_t *attn_bytes;   /* (n_layer) bytes of each layer's attention part (incl.
                                     norms, router, shared experts, dense FFN) */
    const uint64_t *expert_bytes; /* (n_layer) bytes of ONE routed expert; 0 = dense layer */
} mt_place_model;

/* The model's sizes from a shard layout (pointers into l, which must outlive
 * the result). */
mt_place_model mt_place_model_from_layout(const mt_shard_layout *l, int32_t n_expert_used);

/* One node's part of a plan. Ranges are half open; a spare's are empty. */
typedef struct mt_place_assign {
    int64_t node;       /* node id */
    mt_place_role role; /* STAGE, PARTNER, EXPERTS or SPARE */
    int32_t pipeline;   /* cell: pipeline (replica) index; swarm: replica index; spare: -1 */
    int32_t group;      /* cell: position of the stage group in its pipeline (0 = layer 0);
                           swarm: position of the rectangle in its replica; spare: -1 */
    int32_t layer_begin, layer_end;   /* layers [a, b) */
    bool attention;                   /* holds the layers' attention parts (STAGE only) */
    int32_t expert_begin, expert_end; /* routed experts [eb, ee) of every layer in [a, b) */
    int64_t paired_with;              /* PARTNER: its stage's node id; otherwise 0 */
    uint64_t bytes;                   /* shard tensor bytes (= mt_shard_spec_bytes) */
    double ms_per_token;              /* this node's own compute per token (see top) */
    uint64_t work_bytes;              /* working memory it must keep besides the shard:
                                         sessions x (fixed state + n_ctx x bytes per position)
                                         of its layers when it holds their attention (see top);
                                         0 otherwise */
} mt_place_assign;

typedef struct mt_place_node {
    int64_t id;              /* unique */
    uint64_t capacity;       /* bytes it can hold: shard, and working memory (see top) */
    double speed;            /* relative compute speed (memory bandwidth), > 0 */
    bool available;          /* false: paused, draining or dead; gets nothing */
    mt_place_assign current; /* what it holds now (role NONE or SPARE: nothing); the
                                registry keeps it from the previous plan so that plans
                                stay stable. current.node is ignored */
} mt_place_node;

/* What a cell plan lays each pipeline out for (the nodes per pipeline are the
 * same under all three; see mt_place_params.objective). The numbers are an
 * option's values: never renumber. */
typedef enum mt_place_objective {
    MT_PLACE_THROUGHPUT = 0, /* the slowest group as fast as possible (the default) */
    MT_PLACE_LATENCY = 1,    /* one token's trip through the pipeline as short as possible */
    MT_PLACE_BALANCED = 2,   /* the shortest trip whose slowest group stays within 1.25x
                                of THROUGHPUT's */
} mt_place_objective;

typedef struct mt_place_params {
    mt_place_mode mode;
    int32_t replicas;       /* complete pipelines (cell) / copies of every slice (swarm), >= 1 */
    int32_t spares;         /* hot spares to keep, >= 0 */
    int32_t max_group;      /* cell: most nodes in one stage group (stage + partners), >= 1 */
    double bytes_per_ms;    /* bytes a speed-1.0 node reads per millisecond, > 0 */
    double partner_call_ms; /* cell: one round trip stage -> partners, per MoE layer, >= 0 */
    /* Cell: how each pipeline's nodes are grouped. THROUGHPUT minimises the
     * slowest group (a pipeline serves one step per slowest-group time);
     * LATENCY minimises the sum over groups of (group time + hop_ms), one
     * token's trip, so it makes fewer, wider groups whose partners read a
     * layer's experts at once (expert parallelism); BALANCED does the same
     * with every group within 1.25x THROUGHPUT's slowest. Applies when a
     * pipeline is laid out anew; kept pipelines stay as they are. */
    mt_place_objective objective;
    double hop_ms; /* cell: one hop from group to group (message latency and the
                      activations on the wire), >= 0; LATENCY's and BALANCED's layouts
                      and every pipeline's trip_ms */
    /* Cell: a per-user latency goal, ms per token, 0..1e9 (0: none, the
     * default). With a goal, `replicas` is the FEWEST pipelines: a fresh plan
     * makes the most pipelines P >= replicas whose every trip (trip_ms: group
     * times + a hop each) is within the goal and that still leave `spares`
     * spares (more pipelines serve more users at once; fewer nodes each make
     * each trip longer), laid out for `objective`; when no P does, `replicas`
     * pipelines, and plan.goal_note says so. A kept plan keeps its pipelines
     * (also past `replicas`) and makes as many more of the free nodes as meet
     * the goal. Planning costs a plan per count tried (placement_goal.c). */
    double latency_goal_ms;

    /* Working memory of the nodes holding attention parts (see top). The
     * per-layer sizes are the model's (mt_kv_session_bytes); NULL = none, and
     * placement counts shard bytes only. */
    int32_t sessions;               /* sessions a node keeps at once, 0..2^20 */
    int32_t n_ctx;                  /* positions of each session's cache, 0..2^24 */
    const uint64_t *state_bytes;    /* (n_layer) fixed bytes one session keeps for the layer
                                       (KDA recurrent state), or NULL */
    const uint64_t *position_bytes; /* (n_layer) bytes one session keeps for the layer per
                                       context position (MLA latent, GQA K and V), or NULL */
} mt_place_params;

/* replicas 2; spares 1 (cell) or 0 (swarm); max_group 8; bytes_per_ms 1e7
 * (10 GB/s at speed 1.0); partner_call_ms 0.25 (a LAN round trip); sessions
 * 64 and n_ctx 4096, a node's defaults (`moontail node --max-sessions,
 * --ctx`: 64 and min(context_length, 4096)); no per-layer sizes; objective
 * THROUGHPUT, hop_ms 0.5 (a LAN message with 7168 f32 activations at 1 Gb/s); no
 * latency goal. */
mt_place_params mt_place_default_params(mt_place_mode mode);

/* ---------------------------------------------------------------- output */

/* One pipeline (cell) or replica (swarm) of a plan. */
typedef struct mt_place_pipeline {
    int32_t index;     /* the assignments' `pipeline` */
    int32_t n_groups;  /* cell: stage groups; swarm: rectangles */
    int32_t n_nodes;   /* nodes holding part of it */
    double slowest_ms; /* slowest group (cell) / expert server (swarm): its throughput limit */
    double average_ms; /* average over its groups (cell) / expert servers (swarm) */
    double latency_ms; /* one token through it: cell, the sum of its groups' times;
                          swarm, the sum over MoE layers of that layer's slowest holder */
    double trip_ms;    /* cell: latency_ms + n_groups x hop_ms, what the latency goal and
                          the LATENCY layout count; swarm: latency_ms */
} mt_place_pipeline;

typedef struct mt_place_plan {
    mt_place_mode mode;
    int32_t n_layer, n_expert;
    bool *moe_layer; /* (n_layer) layer has routed experts */

    int32_t n_assign;        /* every available node: pipeline members first (by pipeline,
                                group, stage before partners, expert_begin), then spares
                                (by id) */
    mt_place_assign *assign; /* (n_assign) */

    int32_t n_pipelines;          /* complete pipelines / replicas made */
    mt_place_pipeline *pipelines; /* (n_pipelines), by index */
    int32_t replicas_wanted;      /* params.replicas */
    int32_t *coverage;            /* cell: (n_layer) pipelines holding each layer;
                                     swarm: (n_layer, n_expert) holders of each slice,
                                     expert fastest; 0 on dense layers */
    int32_t min_replicas;         /* fewest holders of any layer (cell) / MoE slice (swarm) */
    bool complete;                /* every layer / MoE slice has a holder */
    int32_t n_spares;             /* SPARE assignments */
    uint64_t largest_shard;       /* bytes of the largest assignment */
    uint64_t largest_need;        /* most room any assignment needs: bytes + work_bytes */
    int32_t moves;                /* available nodes whose shard (layers, attention, experts)
                                     differs from their `current` one */
    bool replanned;               /* the previous plan was not kept (or there was none) */
    char reason[512];             /* why fewer than `replicas` (empty when all made) */
    char warning[512];            /* other shortfalls, e.g. fewer spares than asked */
    double latency_goal_ms;       /* params.latency_goal_ms (cell; 0: no goal) */
    double worst_trip_ms;         /* cell: the longest trip_ms of its pipelines (0: none) */
    bool latency_goal_met;        /* a goal, at least one pipeline, and every trip_ms
                                     within it */
    char goal_note[512];          /* a goal missed: by how much and what to do; else "" */
} mt_place_plan;

/* Plans the nodes (see the top of this file). When nodes carry current
 * assignments of a complete pipeline / replica, that pipeline is kept; a
 * lost member's shard goes to a free node (a spare, or a new node) that can
 * hold it (or, for experts, to several); new nodes become spares or build a
 * missing pipeline; the plan is made from scratch only when the kept part
 * cannot reach as many pipelines as a fresh plan.
 *
 * Returns 0 with `replicas` pipelines (or more: a latency goal, see
 * mt_place_params), MT_PLACE_SHORT with fewer (as many as
 * the nodes allow; plan->reason says why, e.g. "total capacity 3.1 GB < 2
 * replicas x 4.0 GB: add nodes"; the plan may have 0 pipelines), or -1 on bad
 * input (err names the node or field). Free with mt_place_plan_free. */
int mt_place_plan_make(const mt_place_model *m, const mt_place_node *nodes, int32_t n_nodes,
                       const mt_place_params *p, mt_place_plan *out, mt_error *err);
void mt_place_plan_free(mt_place_plan *plan);

/* The assignment of node `id`, or NULL when the plan does not list it. */
const mt_place_assign *mt_place_plan_find(const mt_place_plan *plan, int64_t id);

/* Sets every node's `current` to its assignment in plan (role NONE when the
 * plan does not list it), as a registry does once nodes have their shards. */
void mt_place_set_current(mt_place_node *nodes, int32_t n_nodes, const mt_place_plan *plan);

/* The shard an assignment holds, for mt_shard_write: layers [a, b), attention
 * as assigned, no head, experts as an explicit ascending list written to ids
 * (room for expert_end - expert_begin ids; out->experts points to it).
 * Fails for a spare or an assignment outside the model. */
int mt_place_shard_spec(const mt_place_model *m, const mt_place_assign *a, int32_t *ids,
                        mt_shard_spec *out, mt_error *err);

const char *mt_place_role_name(mt_place_role r);
const char *mt_place_mode_name(mt_place_mode m);
/* "throughput", "latency", "balanced"; mt_place_objective_parse reads one of
 * them (0, or -1 for any other text). */
const char *mt_place_objective_name(mt_place_objective o);
int mt_place_objective_parse(const char *s, mt_place_objective *out);

/* ----------------------------------------------------------------- routes */

typedef struct mt_place_hop {
    int64_t node;
    mt_place_role role; /* STAGE, PARTNER (follows its stage) or EXPERTS */
    int32_t pipeline;   /* the pipeline / replica it comes from */
    int32_t layer_begin, layer_end;
    int32_t expert_begin, expert_end; /* swarm: the part of its rectangle to use */
} mt_place_hop;

typedef struct mt_place_route {
    mt_place_mode mode;
    int32_t n_hops;
    mt_place_hop *hops; /* cell: stage groups in layer order, each stage followed by its
                           partners; swarm: expert servers by (layer_begin, expert_begin),
                           every MoE slice in exactly one hop */
    int32_t n_groups;   /* cell: stage groups; swarm: hops */
    int32_t pipeline;   /* the one pipeline / replica used, or -1 when several were mixed */
} mt_place_route;

/* Free session memory of nodes, as their last heartbeats reported it: the
 * route choice's hint for spreading sessions (item "sessions limited by
 * memory"). room[i] is node[i]'s free bytes; a node not listed, or with a
 * negative figure, has not reported. */
typedef struct mt_place_room {
    const int64_t *node;
    const int64_t *room;
    int32_t n;
} mt_place_room;

/* Chooses a route through live nodes (those not in avoid[0..n_avoid)).
 * Sessions are spread over pipelines / replicas: session s prefers
 * pipelines[s % n_pipelines], then the next ones in order. Cell with a room
 * hint (may be NULL) in which every pipeline's stages reported and the
 * pipelines' free session memory (each pipeline's fullest stage) differs:
 * session s instead prefers a pipeline drawn with probability proportional
 * to that free memory (a hash of s is the draw, so the choice stays a pure
 * function of its inputs and many sessions opened between two heartbeats
 * still spread, rather than all landing on the freest pipeline), then the
 * next ones in order. Cell: the first pipeline in that order whose every
 * node is live; else a composition of live groups of several pipelines,
 * switching only at layer boundaries they share, with the fewest switches.
 * Swarm (the room hint is not used: its sessions live at the requester):
 * every MoE slice from the preferred replica when its holder is live, else
 * from the next replica that has it live. Fails with a message naming the
 * layers (and experts) that no live node holds. Free with
 * mt_place_route_free. */
int mt_place_route_choose(const mt_place_plan *plan, const int64_t *avoid, int32_t n_avoid,
                          uint64_t session, const mt_place_room *room, mt_place_route *out,
                          mt_error *err);
void mt_place_route_free(mt_place_route *r);

#endif

/* placement_internal.h - what the placement files share: the planning
 * context (model sizes as prefix sums, the nodes, the parameters), the
 * working list of pieces (an assignment by node index, before it becomes an
 * mt_place_assign), and the helpers both modes use: the snake draft, filling
 * a lost shard from free nodes, and the expert water-fill. */
#ifndef MOONTAIL_PLACEMENT_INTERNAL_H
#define MOONTAIL_PLACEMENT_INTERNAL_H

#include "moontail/placement.h"

#include <stddef.h>

#define PL_MAX_GROUP 64 /* hard limit on params.max_group */

typedef struct pl_ctx {
    const mt_place_model *m;
    const mt_place_node *nodes;
    int32_t n_nodes;
    const mt_place_params *p;
    int32_t L, X, U;        /* n_layer, n_expert, n_expert_used */
    uint64_t *attn_pre;     /* (L + 1) prefix sums of attn_bytes */
    uint64_t *exp_pre;      /* (L + 1) prefix sums of expert_bytes (one expert) */
    int32_t *moe_pre;       /* (L + 1) prefix counts of MoE layers */
    uint64_t *work_pre;     /* (L + 1) prefix sums of each layer's working memory: sessions x
                               (state_bytes + n_ctx x position_bytes); all 0 without them */
    uint64_t model_bytes;   /* every attention part + every expert: one cell pipeline */
    uint64_t model_need;    /* model_bytes + every layer's working memory: the room one cell
                               pipeline needs */
    uint64_t experts_bytes; /* every routed expert: one swarm replica */
    int32_t build_min;      /* pl_build makes this many copies or none (0: as many as it
                               can, down to 1); the latency goal's trials set it */
} pl_ctx;

/* Bytes of the attention parts / of ONE expert over layers [a, b), and the
 * number of MoE layers among them. */
static inline uint64_t pl_attn(const pl_ctx *c, int32_t a, int32_t b) {
    return c->attn_pre[b] - c->attn_pre[a];
}
static inline uint64_t pl_exp(const pl_ctx *c, int32_t a, int32_t b) {
    return c->exp_pre[b] - c->exp_pre[a];
}
static inline int32_t pl_moe(const pl_ctx *c, int32_t a, int32_t b) {
    return c->moe_pre[b] - c->moe_pre[a];
}
/* Working memory the holder of the attention parts of layers [a, b) keeps,
 * and the room those parts need on it: their bytes plus that memory. Time
 * estimates use pl_attn (bytes read), capacity decisions pl_attn_room. */
static inline uint64_t pl_work(const pl_ctx *c, int32_t a, int32_t b) {
    return c->work_pre[b] - c->work_pre[a];
}
static inline uint64_t pl_attn_room(const pl_ctx *c, int32_t a, int32_t b) {
    return pl_attn(c, a, b) + pl_work(c, a, b);
}
static inline double pl_speed_bpm(const pl_ctx *c, int32_t node) {
    return c->nodes[node].speed * c->p->bytes_per_ms;
}

/* One node's shard while planning: like mt_place_assign, by node index. */
typedef struct pl_piece {
    int32_t node; /* index into ctx nodes */
    mt_place_role role;
    int32_t pipeline; /* pipeline / replica index */
    int32_t a, b;     /* layers [a, b) */
    bool attention;
    int32_t eb, ee; /* experts [eb, ee) */
    int32_t paired; /* PARTNER: node index of its stage; else -1 */
} pl_piece;

typedef struct pl_pieces {
    pl_piece *v;
    int32_t n, cap;
} pl_pieces;

int pl_push(pl_pieces *l, pl_piece p); /* -1 when out of memory */
void pl_pieces_free(pl_pieces *l);

/* Tensor bytes of a piece (mt_shard_spec_bytes of its spec), and the room
 * it needs on its node: those bytes plus, with attention, the working
 * memory of its layers. */
uint64_t pl_piece_bytes(const pl_ctx *c, int32_t a, int32_t b, bool attention, int32_t eb,
                        int32_t ee);
uint64_t pl_piece_room(const pl_ctx *c, int32_t a, int32_t b, bool attention, int32_t eb,
                       int32_t ee);

/* Sorts node indices fastest first (speed, then capacity descending, then id). */
void pl_sort_fastest(const pl_ctx *c, int32_t *v, int32_t n);
/* Sorts node indices largest first (capacity, then speed descending, then id). */
void pl_sort_largest(const pl_ctx *c, int32_t *v, int32_t n);

/* Splits X experts over k members: n[i] >= lo[i], n[i] <= max[i], sum X,
 * the largest n[i] / speed[i] as small as possible (ties to lower i).
 * Returns false when the maxima cannot hold X. */
bool pl_water_fill(int32_t X, int32_t k, const double *speed, const int32_t *lo, const int32_t *max,
                   int32_t *n);

/* A mode's planner for one set of nodes: makes up to `want` complete
 * pipelines (cell) / replicas (swarm) from pool[0..n_pool) (node indices),
 * the k-th numbered idx[k], appending their pieces to out. Returns how many
 * it made (0..want), -1 when out of memory. */
typedef int32_t (*pl_build_fn)(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                               const int32_t *idx, pl_pieces *out);

/* A mode's check that nodes v[0..n) (fastest first) can hold one pipeline /
 * replica at all (capacity only). */
typedef bool (*pl_feasible_fn)(const pl_ctx *c, const int32_t *v, int32_t n);

/* Distributes v[0..n) (fastest first) over r lists by a snake draft (list 0
 * picks first, then 1 .. r-1, then back), then, while a list cannot hold
 * the model, moves a node to it from the list with the most spare capacity
 * that can do without it. lists is (r, n): list k is lists[k*n .. k*n +
 * len[k]), fastest first. Returns 1 when every list is feasible, 0 when not,
 * -1 when out of memory. */
int pl_draft(const pl_ctx *c, const int32_t *v, int32_t n, int32_t r, pl_feasible_fn ok,
             uint64_t need_bytes, int32_t *lists, int32_t *len);

/* A mode's estimate of one pipeline / replica over nodes v[0..n) (fastest
 * first): the slowest group / server time in ms of the plan it would make,
 * INFINITY when the nodes cannot hold it, -1 when out of memory. */
typedef double (*pl_time_fn)(const pl_ctx *c, const int32_t *v, int32_t n);

/* Evens out drafted lists (as pl_draft leaves them): while swapping one of
 * the slowest list's slower nodes for a faster node of at least its
 * capacity from one of the fastest lists makes the slower of the two
 * faster, swap. A bounded local search: a few candidates per round, at most
 * 40 rounds. Returns 0, -1 when out of memory. */
int pl_balance(const pl_ctx *c, int32_t *lists, int32_t *len, int32_t n, int32_t r,
               pl_time_fn time);

/* A mode's layout of one pipeline / replica over nodes list[0..n) (as
 * pl_draft and pl_balance leave them), appended to out as pieces with index
 * idx: 1 done, 0 the nodes cannot make it, -1 out of memory. */
typedef int (*pl_fill_fn)(const pl_ctx *c, const int32_t *list, int32_t n, int32_t idx,
                          pl_pieces *out);

/* What both modes' builders do: as many of `want` pipelines / replicas as
 * the pool allows, each a drafted and balanced list of nodes laid out by
 * fill; need_bytes is the room one copy needs (bytes and working memory).
 * Appends the pieces to out (with the indices idx[k]) and returns how many
 * were made, or -1. */
int32_t pl_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                 const int32_t *idx, pl_pieces *out, uint64_t need_bytes, pl_feasible_fn feasible,
                 pl_time_fn time, pl_fill_fn fill);

/* A shard to place on free nodes while keeping a plan: layers [a, b),
 * attention or not, experts [eb, ee). pl_fill_piece puts it on the fastest
 * free node that holds it whole (with its working memory), else (experts
 * only, or attention plus experts when attention is set) spreads it over
 * the largest free nodes: the first holds the attention part (and its
 * working memory) and as many experts as fit, the others as many experts as
 * fit each. Appends the parts to got (node, experts, attention on the
 * first), marks them in used, and returns how many parts (>= 1), or 0 when
 * the free nodes cannot hold it (nothing marked). */
typedef struct pl_part {
    int32_t node, eb, ee;
    bool attention;
} pl_part;
int32_t pl_fill_piece(const pl_ctx *c, bool *used, int32_t a, int32_t b, bool attention, int32_t eb,
                      int32_t ee, pl_part *got, int32_t max_got);

/* Calls fn(ctx, a, b, eb, ee) for rectangles that cover exactly the cells
 * (layer l, expert e) of layers [a, b) x experts [eb, ee) where
 * need[l * X + e] is set: each layer's runs of set experts, a run carried on
 * over consecutive layers with the very same run. Stops at fn's first
 * non-zero return and returns it; -1 when out of memory. */
typedef int (*pl_rect_fn)(void *ctx, int32_t a, int32_t b, int32_t eb, int32_t ee);
int pl_rects(const bool *need, int32_t X, int32_t a, int32_t b, int32_t eb, int32_t ee,
             pl_rect_fn fn, void *ctx);

/* Formats bytes as "512 B", "3.1 MB", "4.0 GB" (powers of 1000). */
const char *pl_fmt_bytes(uint64_t n, char *buf, size_t cap);

/* ---- inputs and context (placement_check.c) ---- */

/* Checks every figure of the model, the nodes and the parameters before
 * anything is planned: 0, or -1 with err naming the first bad one. */
int pl_check_inputs(const mt_place_model *m, const mt_place_node *nodes, int32_t n,
                    const mt_place_params *p, mt_error *err);
/* The planning context of checked inputs (prefix sums per layer); -1 when
 * out of memory. pl_ctx_free frees it (also after a failed pl_ctx_init). */
int pl_ctx_init(pl_ctx *c, const mt_place_model *m, const mt_place_node *nodes, int32_t n,
                const mt_place_params *p);
void pl_ctx_free(pl_ctx *c);

/* ---- planning (placement_spares.c, placement_goal.c) ---- */

/* Plans up to `want` pipelines / replicas from pool (node indices) with the
 * mode's builder, numbered idx[k], then keeps params.spares of the nodes out
 * of them as far as the pipelines allow (placement.c). Appends the pieces to
 * out, marks their nodes in used; returns how many were made, -1 when out of
 * memory. */
int32_t pl_build_with_spares(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                             const int32_t *idx, pl_pieces *out, bool *used);

/* Cell mode with a latency goal (placement_goal.c): pipelines of pool, as
 * many as meet the goal, and at least `floor` (params.replicas for a fresh
 * plan; 0 for more pipelines beside kept ones, when none may be made). They
 * take the smallest pipeline indices not among taken[0..n_taken) (may
 * repeat). Appends the pieces to out, marks their nodes in used; returns how
 * many were made, -1 when out of memory. */
int32_t pl_goal_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t floor,
                      const int32_t *taken, int32_t n_taken, pl_pieces *out, bool *used);

/* ---- the plan (placement_summary.c) ---- */

/* Cell: the longest trip (group times + hop_ms each, as mt_place_pipeline's
 * trip_ms) among the pipelines whose pieces w holds, in any order; 0 when
 * it holds none, -1 when out of memory. */
double pl_cell_worst_trip(const pl_ctx *c, const pl_pieces *w);

/* Turns the working pieces w (count pipelines / replicas made; replanned:
 * not kept from the previous plan) into out with its summary: 0, or -1 with
 * err. */
int pl_finish(const pl_ctx *c, pl_pieces *w, bool *used, int32_t count, bool replanned,
              mt_place_plan *out, mt_error *err);

/* ---- modes (placement_cell.c, placement_latency.c, placement_swarm.c) ---- */

int32_t pl_cell_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                      const int32_t *idx, pl_pieces *out);
bool pl_cell_feasible(const pl_ctx *c, const int32_t *v, int32_t n);
double pl_cell_time(const pl_ctx *c, const int32_t *v, int32_t n);

/* A stage group of a cell pipeline while planning: members mem[0..k) (node
 * indices, fastest first), mem[stage] holding the attention parts. */
typedef struct pl_group {
    int32_t a, b; /* layers [a, b) */
    int32_t k;
    int32_t stage;
    int32_t mem[PL_MAX_GROUP];
} pl_group;

/* Appends a group's pieces: the stage with experts [0, n_stage), then the
 * partners in member order, experts split by pl_water_fill. 0, or -1. */
int pl_cell_emit_group(const pl_ctx *c, const pl_group *g, int32_t pipeline, pl_pieces *out);

/* The THROUGHPUT layout of one pipeline over list[0..n) (a pl_fill_fn):
 * the groups of cell_fill, the slowest as fast as these nodes allow. */
int pl_cell_throughput_fill(const pl_ctx *c, const int32_t *list, int32_t n, int32_t idx,
                            pl_pieces *out);

/* The LATENCY / BALANCED layout of one pipeline over list[0..n) (a
 * pl_fill_fn; placement_latency.c): groups of consecutive nodes minimising
 * the sum of (group time + hop_ms), BALANCED with every group within 1.25x
 * the THROUGHPUT layout's slowest (and that layout when no other is). */
int pl_cell_latency_fill(const pl_ctx *c, const int32_t *list, int32_t n, int32_t idx,
                         pl_pieces *out);

int32_t pl_swarm_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                       const int32_t *idx, pl_pieces *out);
bool pl_swarm_feasible(const pl_ctx *c, const int32_t *v, int32_t n);
double pl_swarm_time(const pl_ctx *c, const int32_t *v, int32_t n);

/* Keeps the pipelines / replicas that the nodes' current assignments
 * describe, filling the shards of lost or missing members from free nodes
 * (not marked in used). Appends the kept pieces, marks their nodes in used
 * and writes the kept indices to kept[] (room for n_nodes). Returns how many
 * were kept, -1 when out of memory. */
int32_t pl_cell_keep(const pl_ctx *c, bool *used, pl_pieces *out, int32_t *kept);
int32_t pl_swarm_keep(const pl_ctx *c, bool *used, pl_pieces *out, int32_t *kept);

#endif

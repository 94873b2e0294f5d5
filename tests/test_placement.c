/* test_placement.c - the placement engine (moontail/placement.h).
 *
 * Hand-checked cells (equal nodes make equal pipelines, small nodes pair on
 * a layer, a node twice as fast takes twice the layers, plans short of
 * replicas say why), then seeded random fleets of 3..300 nodes (4-32 GiB,
 * speed 1-8) over a DeepSeek-V3-like, a mid-size and a small layout in
 * both modes: every plan covers each layer / MoE slice exactly once per
 * pipeline or replica, fits every node, leaves spares empty and cuts shards
 * that mt_shard_spec_check accepts; losing a node moves only the spare that
 * takes its shard, adding one moves nothing; routes avoid failed nodes and
 * depend only on the session. Working memory: a stage needs room for its
 * sessions' fixed state and per-position cache besides its shard (hand-worked
 * cells, and half the random cell fleets with a kimi-like pattern), and the
 * model layer's per-layer sizes are what the KV cache of a kimi-k3 model
 * reserves. Prints balance figures (model estimates) for a few fleet sizes. */
#include "../src/control/placement_internal.h"
#include "check.h"
#include "moontail/gguf.h"
#include "moontail/model.h"
#include "moontail/placement.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"

#include <stdint.h>

#define GiB (1024ull * 1024 * 1024)
#define MB  1000000ull

/* ---------------------------------------------------------------- models */

typedef struct test_model {
    const char *name;
    mt_place_model m;
    uint64_t attn[128], exp[128];
    uint64_t state[128], pos[128]; /* working memory of one session (fixed, per position) */
    mt_shard_layout layout;        /* synthetic: the same byte counts, for mt_shard_spec_check */
} test_model;

static void model_finish(test_model *t) {
    t->m.attn_bytes = t->attn;
    t->m.expert_bytes = t->exp;
    memset(&t->layout, 0, sizeof t->layout);
    t->layout.n_layer = t->m.n_layer;
    t->layout.n_expert = t->m.n_expert;
    t->layout.head_bytes = 1000;
    t->layout.attn_bytes = t->attn;
    t->layout.expert_bytes = t->exp;
}

/* n_layer layers of attn bytes + n_expert experts of exp bytes each
 * (the first n_dense layers dense). Working memory as in Kimi K3 (not used
 * unless params point to it): every 4th layer MLA (a 2304-byte latent per
 * position), the others KDA (a 4.28 MiB recurrent state). */
static void model_uniform(test_model *t, const char *name, int32_t n_layer, int32_t n_dense,
                          int32_t n_expert, int32_t n_used, uint64_t attn, uint64_t exp) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->m.n_layer = n_layer;
    t->m.n_expert = n_expert;
    t->m.n_expert_used = n_used;
    for (int32_t il = 0; il < n_layer; il++) {
        t->attn[il] = attn;
        t->exp[il] = il < n_dense ? 0 : exp;
        t->state[il] = il % 4 == 3 ? 0 : 4489216;
        t->pos[il] = il % 4 == 3 ? 2304 : 0;
    }
    model_finish(t);
}

/* DeepSeek-V3 at ~4.5 bits per weight: 61 layers, the first 3 dense (MLA
 * attention + dense FFN, ~328 MB), then MoE layers of ~137 MB attention
 * (incl. shared expert and router) + 256 routed experts of ~24.8 MB; 8 used.
 * About 377 GB in all. */
static void model_deepseek(test_model *t) {
    model_uniform(t, "deepseek-v3", 61, 3, 256, 8, 137 * MB, 24800000ull);
    for (int32_t il = 0; il < 3; il++) t->attn[il] = 328 * MB;
}

static uint64_t model_total(const test_model *t) {
    uint64_t s = 0;
    for (int32_t il = 0; il < t->m.n_layer; il++)
        s += t->attn[il] + (uint64_t)t->m.n_expert * t->exp[il];
    return s;
}

/* The working memory params p reserve for the attention parts of layers
 * [a, b): sessions x (state + n_ctx x position bytes). */
static uint64_t work_of(const mt_place_params *p, int32_t a, int32_t b) {
    uint64_t w = 0;
    for (int32_t l = a; l < b; l++)
        w += (p->state_bytes ? p->state_bytes[l] : 0) +
             (uint64_t)p->n_ctx * (p->position_bytes ? p->position_bytes[l] : 0);
    return (uint64_t)p->sessions * w;
}

static uint64_t model_experts(const test_model *t) {
    uint64_t s = 0;
    for (int32_t il = 0; il < t->m.n_layer; il++) s += (uint64_t)t->m.n_expert * t->exp[il];
    return s;
}

/* ------------------------------------------------------------------ rng */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_range(uint64_t *s, uint64_t lo, uint64_t hi) { /* [lo, hi] */
    return lo + rng_next(s) % (hi - lo + 1);
}

/* n nodes, ids 100 + 7i, capacity 4-32 GiB, speed 1-8 (in quarter steps). */
static mt_place_node *fleet(uint64_t seed, int32_t n) {
    mt_place_node *v = calloc((size_t)n + 1, sizeof *v);
    uint64_t s = seed;
    for (int32_t i = 0; i < n; i++) {
        v[i].id = 100 + 7 * i;
        v[i].capacity = rng_range(&s, 4 * GiB, 32 * GiB);
        v[i].speed = (double)rng_range(&s, 4, 32) / 4.0;
        v[i].available = true;
    }
    return v;
}

static const mt_place_node *find_node(const mt_place_node *v, int32_t n, int64_t id) {
    for (int32_t i = 0; i < n; i++)
        if (v[i].id == id) return &v[i];
    return NULL;
}

/* ------------------------------------------------------------ invariants */

/* Checks what every plan must satisfy; returns false (after CHECK failures)
 * when it does not. */
static bool check_plan(const char *what, const test_model *t, const mt_place_node *nodes, int32_t n,
                       const mt_place_params *p, const mt_place_plan *plan, int rc) {
    int before = check_failures;
    int32_t L = t->m.n_layer, X = t->m.n_expert;
    CHECK(rc == 0 || rc == MT_PLACE_SHORT, "%s: rc %d", what, rc);
    /* a latency goal makes `replicas` the fewest pipelines; without one, the most */
    bool goal = p->latency_goal_ms > 0;
    CHECK((rc == 0) == (plan->n_pipelines >= p->replicas) &&
              (goal || plan->n_pipelines <= p->replicas),
          "%s: rc %d with %d of %d pipelines", what, rc, plan->n_pipelines, p->replicas);
    CHECK((plan->reason[0] != 0) == (plan->n_pipelines < p->replicas), "%s: reason '%s' for %d/%d",
          what, plan->reason, plan->n_pipelines, p->replicas);
    CHECK(plan->min_replicas == plan->n_pipelines, "%s: min_replicas %d, pipelines %d", what,
          plan->min_replicas, plan->n_pipelines);
    CHECK(plan->complete == (plan->n_pipelines > 0), "%s: complete flag", what);
    /* every available node exactly once; no other node */
    int32_t n_avail = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t seen = 0;
        for (int32_t k = 0; k < plan->n_assign; k++) seen += plan->assign[k].node == nodes[i].id;
        n_avail += nodes[i].available;
        CHECK(seen == (nodes[i].available ? 1 : 0), "%s: node %lld listed %d times", what,
              (long long)nodes[i].id, seen);
    }
    CHECK(plan->n_assign == n_avail, "%s: %d assignments for %d available nodes", what,
          plan->n_assign, n_avail);
    int32_t *ids = calloc((size_t)(X > 0 ? X : 1), sizeof *ids);
    int32_t *cov = calloc((size_t)L * (X > 0 ? X : 1) + 1, sizeof *cov);
    int32_t spares = 0;
    uint64_t need = 0;
    for (int32_t k = 0; k < plan->n_assign; k++) {
        const mt_place_assign *a = &plan->assign[k];
        const mt_place_node *x = find_node(nodes, n, a->node);
        if (!x) continue;
        if (a->role == MT_PLACE_SPARE) {
            spares++;
            CHECK(a->bytes == 0 && a->work_bytes == 0 && a->layer_begin == a->layer_end &&
                      a->expert_begin == a->expert_end && a->pipeline == -1 && !a->attention,
                  "%s: spare %lld holds something", what, (long long)a->node);
            CHECK(k >= plan->n_assign - plan->n_spares, "%s: spare before members", what);
            continue;
        }
        CHECK(a->bytes + a->work_bytes <= x->capacity,
              "%s: node %lld holds %llu bytes + %llu working memory > capacity %llu", what,
              (long long)a->node, (unsigned long long)a->bytes, (unsigned long long)a->work_bytes,
              (unsigned long long)x->capacity);
        uint64_t work = a->attention ? work_of(p, a->layer_begin, a->layer_end) : 0;
        CHECK(a->work_bytes == work,
              "%s: node %lld (%s) has %llu bytes of working memory, want %llu", what,
              (long long)a->node, mt_place_role_name(a->role), (unsigned long long)a->work_bytes,
              (unsigned long long)work);
        if (a->bytes + a->work_bytes > need) need = a->bytes + a->work_bytes;
        mt_shard_spec spec;
        mt_error err = {{0}};
        CHECK(mt_place_shard_spec(&t->m, a, ids, &spec, &err) == 0, "%s: spec: %s", what, err.msg);
        CHECK(mt_shard_spec_check(&t->layout, &spec, &err) == 0,
              "%s: node %lld shard (layers %d-%d, experts %d-%d, attention %d) fails: %s", what,
              (long long)a->node, a->layer_begin, a->layer_end, a->expert_begin, a->expert_end,
              a->attention, err.msg);
        CHECK(mt_shard_spec_bytes(&t->layout, &spec) == a->bytes, "%s: bytes differ from spec",
              what);
        CHECK(a->ms_per_token > 0, "%s: node %lld has no time estimate", what, (long long)a->node);
        if (p->mode == MT_PLACE_SWARM) {
            CHECK(a->role == MT_PLACE_EXPERTS && !a->attention, "%s: swarm role %s", what,
                  mt_place_role_name(a->role));
            for (int32_t l = a->layer_begin; l < a->layer_end; l++)
                for (int32_t e = a->expert_begin; e < a->expert_end; e++)
                    if (t->exp[l] > 0) cov[(size_t)l * X + e]++;
        }
    }
    CHECK(spares == plan->n_spares, "%s: %d spares, summary says %d", what, spares, plan->n_spares);
    CHECK(plan->largest_need == need, "%s: largest need %llu, want %llu", what,
          (unsigned long long)plan->largest_need, (unsigned long long)need);
    if (p->mode == MT_PLACE_SWARM) {
        for (int32_t l = 0; l < L; l++)
            for (int32_t e = 0; e < X; e++) {
                int32_t want = t->exp[l] > 0 ? plan->n_pipelines : 0;
                CHECK(cov[(size_t)l * X + e] == want && plan->coverage[(size_t)l * X + e] == want,
                      "%s: slice (%d, %d) held %d times (summary %d), want %d", what, l, e,
                      cov[(size_t)l * X + e], plan->coverage[(size_t)l * X + e], want);
            }
    } else {
        /* each pipeline: groups chain over [0, L); a group = 1 stage + partners
         * paired with it, experts split into a partition of [0, X) */
        for (int32_t pi = 0; pi < plan->n_pipelines; pi++) {
            int32_t pipe = plan->pipelines[pi].index, next = 0, groups = 0;
            for (int32_t k = 0; k < plan->n_assign;) {
                const mt_place_assign *a = &plan->assign[k];
                if (a->role == MT_PLACE_SPARE || a->pipeline != pipe) {
                    k++;
                    continue;
                }
                CHECK(a->role == MT_PLACE_STAGE && a->attention, "%s: group starts with a %s", what,
                      mt_place_role_name(a->role));
                CHECK(a->layer_begin == next, "%s: pipeline %d group at layer %d, want %d", what,
                      pipe, a->layer_begin, next);
                CHECK(a->group == groups, "%s: group index %d, want %d", what, a->group, groups);
                int32_t e_next = a->expert_end, j = k + 1;
                CHECK(a->expert_begin == 0, "%s: stage experts start at %d", what, a->expert_begin);
                for (; j < plan->n_assign && plan->assign[j].role == MT_PLACE_PARTNER &&
                       plan->assign[j].pipeline == pipe &&
                       plan->assign[j].layer_begin == a->layer_begin;
                     j++) {
                    const mt_place_assign *q = &plan->assign[j];
                    CHECK(q->paired_with == a->node && q->layer_end == a->layer_end &&
                              !q->attention && q->expert_begin == e_next &&
                              q->expert_end > q->expert_begin,
                          "%s: partner %lld of %lld: layers %d-%d experts %d-%d", what,
                          (long long)q->node, (long long)a->node, q->layer_begin, q->layer_end,
                          q->expert_begin, q->expert_end);
                    e_next = q->expert_end;
                }
                CHECK(e_next == X, "%s: group at layer %d holds experts up to %d of %d", what,
                      a->layer_begin, e_next, X);
                next = a->layer_end;
                groups++;
                k = j;
            }
            CHECK(next == L, "%s: pipeline %d ends at layer %d of %d", what, pipe, next, L);
            CHECK(groups == plan->pipelines[pi].n_groups, "%s: %d groups, summary %d", what, groups,
                  plan->pipelines[pi].n_groups);
        }
        for (int32_t l = 0; l < L; l++)
            CHECK(plan->coverage[l] == plan->n_pipelines, "%s: layer %d coverage %d", what, l,
                  plan->coverage[l]);
    }
    free(ids);
    free(cov);
    return check_failures == before;
}

static int plan_make(const test_model *t, const mt_place_node *nodes, int32_t n,
                     const mt_place_params *p, mt_place_plan *plan) {
    mt_error err = {{0}};
    int rc = mt_place_plan_make(&t->m, nodes, n, p, plan, &err);
    CHECK(rc >= 0, "%s: plan_make failed: %s", t->name, err.msg);
    return rc;
}

static int32_t count_role(const mt_place_plan *plan, mt_place_role r) {
    int32_t k = 0;
    for (int32_t i = 0; i < plan->n_assign; i++) k += plan->assign[i].role == r;
    return k;
}

/* ------------------------------------------------------- hand-checked */

static void test_equal_nodes(void) {
    /* 4 layers of 1.1 GB (100 MB attention + 8 x 125 MB experts); 4 nodes
     * holding two layers each: 2 pipelines of 2 one-node stages */
    test_model t;
    model_uniform(&t, "equal", 4, 0, 8, 2, 100 * MB, 125 * MB);
    mt_place_node nodes[4] = {0};
    for (int i = 0; i < 4; i++) nodes[i] = (mt_place_node){10 + i, 2500 * MB, 1.0, true, {0}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.spares = 0;
    mt_place_plan plan;
    int rc = plan_make(&t, nodes, 4, &p, &plan);
    check_plan("equal", &t, nodes, 4, &p, &plan, rc);
    CHECK(rc == 0 && plan.n_pipelines == 2 && plan.n_spares == 0, "equal: rc %d, %d pipelines", rc,
          plan.n_pipelines);
    for (int32_t i = 0; i < plan.n_pipelines; i++)
        CHECK(plan.pipelines[i].n_groups == 2 && plan.pipelines[i].n_nodes == 2,
              "equal: pipeline %d has %d groups of %d nodes", i, plan.pipelines[i].n_groups,
              plan.pipelines[i].n_nodes);
    for (int32_t k = 0; k < plan.n_assign; k++) {
        const mt_place_assign *a = &plan.assign[k];
        CHECK(a->role == MT_PLACE_STAGE && a->layer_end - a->layer_begin == 2 &&
                  a->expert_begin == 0 && a->expert_end == 8,
              "equal: node %lld has layers %d-%d experts %d-%d", (long long)a->node, a->layer_begin,
              a->layer_end, a->expert_begin, a->expert_end);
    }
    CHECK(fabs(plan.pipelines[0].slowest_ms - plan.pipelines[1].slowest_ms) < 1e-9 &&
              fabs(plan.pipelines[0].slowest_ms - plan.pipelines[0].average_ms) < 1e-9,
          "equal: pipelines differ: %g vs %g", plan.pipelines[0].slowest_ms,
          plan.pipelines[1].slowest_ms);
    /* (2 x 100 MB + 2 x 2/8 x 1000 MB) / 1e7 B/ms = 70 ms */
    CHECK(fabs(plan.pipelines[0].slowest_ms - 70) < 1e-9, "equal: stage time %g ms, want 70",
          plan.pipelines[0].slowest_ms);
    CHECK(plan.moves == 4 && plan.replanned, "equal: %d moves from nothing", plan.moves);
    mt_place_plan_free(&plan);

    /* one spare asked: three nodes cannot make two pipelines, so replicas win */
    p.spares = 1;
    rc = plan_make(&t, nodes, 4, &p, &plan);
    check_plan("equal+spare", &t, nodes, 4, &p, &plan, rc);
    CHECK(rc == 0 && plan.n_pipelines == 2 && plan.n_spares == 0 &&
              strstr(plan.warning, "only 0 of 1 spares"),
          "equal+spare: rc %d, %d spares, warning '%s'", rc, plan.n_spares, plan.warning);
    mt_place_plan_free(&plan);

    /* a fifth node becomes the spare */
    mt_place_node five[5];
    memcpy(five, nodes, sizeof nodes);
    five[4] = (mt_place_node){99, 2500 * MB, 1.0, true, {0}};
    rc = plan_make(&t, five, 5, &p, &plan);
    check_plan("five", &t, five, 5, &p, &plan, rc);
    CHECK(rc == 0 && plan.n_spares == 1 && plan.warning[0] == 0, "five: %d spares, '%s'",
          plan.n_spares, plan.warning);
    mt_place_plan_free(&plan);
}

static void test_pairing(void) {
    /* 2 layers of 1 GB (100 MB attention + 8 x 112.5 MB); four 600 MB nodes:
     * none holds a layer, so two pairs (stage + partner), one per layer */
    test_model t;
    model_uniform(&t, "pairs", 2, 0, 8, 2, 100 * MB, 112500000ull);
    mt_place_node nodes[4];
    for (int i = 0; i < 4; i++) nodes[i] = (mt_place_node){20 + i, 600 * MB, 1.0, true, {0}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.replicas = 1;
    p.spares = 0;
    mt_place_plan plan;
    int rc = plan_make(&t, nodes, 4, &p, &plan);
    check_plan("pairs", &t, nodes, 4, &p, &plan, rc);
    CHECK(rc == 0 && plan.n_pipelines == 1 && plan.pipelines[0].n_groups == 2 &&
              count_role(&plan, MT_PLACE_STAGE) == 2 && count_role(&plan, MT_PLACE_PARTNER) == 2,
          "pairs: rc %d, %d groups, %d stages, %d partners", rc,
          plan.n_pipelines ? plan.pipelines[0].n_groups : 0, count_role(&plan, MT_PLACE_STAGE),
          count_role(&plan, MT_PLACE_PARTNER));
    for (int32_t k = 0; k < plan.n_assign; k++)
        CHECK(plan.assign[k].layer_end - plan.assign[k].layer_begin == 1,
              "pairs: node %lld has layers %d-%d", (long long)plan.assign[k].node,
              plan.assign[k].layer_begin, plan.assign[k].layer_end);
    mt_place_plan_free(&plan);

    /* a big node and a small one that holds no layer alone: the small one
     * becomes part of a group with more than one member */
    model_uniform(&t, "big+small", 4, 0, 8, 2, 100 * MB, 112500000ull);
    mt_place_node two[2] = {{1, 3600 * MB, 1.0, true, {0}}, {2, 950 * MB, 1.0, true, {0}}};
    rc = plan_make(&t, two, 2, &p, &plan);
    check_plan("big+small", &t, two, 2, &p, &plan, rc);
    const mt_place_assign *s = mt_place_plan_find(&plan, 2);
    CHECK(rc == 0 && s && (s->role == MT_PLACE_PARTNER || count_role(&plan, MT_PLACE_PARTNER) > 0),
          "big+small: rc %d, small node is a %s", rc, s ? mt_place_role_name(s->role) : "none");
    mt_place_plan_free(&plan);
}

static void test_speed(void) {
    /* 8 equal layers, speeds 2, 1, 1, room for all: the fast node takes 4
     * layers, the others 2 each, every stage the same time */
    test_model t;
    model_uniform(&t, "speed", 8, 0, 8, 2, 100 * MB, 50 * MB);
    mt_place_node nodes[3] = {{1, 100 * GiB, 1.0, true, {0}},
                              {2, 100 * GiB, 2.0, true, {0}},
                              {3, 100 * GiB, 1.0, true, {0}}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.replicas = 1;
    p.spares = 0;
    mt_place_plan plan;
    int rc = plan_make(&t, nodes, 3, &p, &plan);
    check_plan("speed", &t, nodes, 3, &p, &plan, rc);
    const mt_place_assign *f = mt_place_plan_find(&plan, 2), *a = mt_place_plan_find(&plan, 1),
                          *b = mt_place_plan_find(&plan, 3);
    CHECK(f && a && b && f->layer_end - f->layer_begin == 4 && a->layer_end - a->layer_begin == 2 &&
              b->layer_end - b->layer_begin == 2 && f->layer_begin == 0,
          "speed: fast node layers %d-%d, others %d-%d and %d-%d", f ? f->layer_begin : -1,
          f ? f->layer_end : -1, a ? a->layer_begin : -1, a ? a->layer_end : -1,
          b ? b->layer_begin : -1, b ? b->layer_end : -1);
    CHECK(plan.n_pipelines == 1 &&
              fabs(plan.pipelines[0].slowest_ms / plan.pipelines[0].average_ms - 1) < 1e-9,
          "speed: stages unbalanced");
    if (f && a) CHECK(fabs(f->ms_per_token - a->ms_per_token) < 1e-9, "speed: times differ");
    mt_place_plan_free(&plan);

    /* swarm: the same nodes share 64 experts by speed (16 / 32 / 16) */
    model_uniform(&t, "speed-swarm", 4, 0, 64, 4, 100 * MB, 10 * MB);
    p = mt_place_default_params(MT_PLACE_SWARM);
    p.replicas = 1;
    rc = plan_make(&t, nodes, 3, &p, &plan);
    check_plan("speed-swarm", &t, nodes, 3, &p, &plan, rc);
    f = mt_place_plan_find(&plan, 2), a = mt_place_plan_find(&plan, 1);
    CHECK(f && a && f->expert_end - f->expert_begin == 32 && a->expert_end - a->expert_begin == 16,
          "speed-swarm: fast node %d experts, slow %d", f ? f->expert_end - f->expert_begin : -1,
          a ? a->expert_end - a->expert_begin : -1);
    mt_place_plan_free(&plan);
}

static void test_short(void) {
    test_model t;
    model_uniform(&t, "short", 4, 0, 8, 2, 100 * MB, 112500000ull); /* 4 GB */
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    mt_place_plan plan;
    /* not enough bytes for one pipeline */
    mt_place_node one[2] = {{1, 1000 * MB, 1, true, {0}}, {2, 2100 * MB, 1, true, {0}}};
    int rc = plan_make(&t, one, 2, &p, &plan);
    check_plan("short", &t, one, 2, &p, &plan, rc);
    CHECK(rc == MT_PLACE_SHORT && plan.n_pipelines == 0 && !plan.complete &&
              strstr(plan.reason, "no complete pipeline: total capacity 3.1 GB of 2 available"
                                  " nodes < 1 replica x 4.0 GB: add nodes"),
          "short: rc %d, reason '%s'", rc, plan.reason);
    CHECK(plan.n_spares == 2, "short: every node is a spare (%d)", plan.n_spares);
    mt_place_route route;
    mt_error err = {{0}};
    CHECK(mt_place_route_choose(&plan, NULL, 0, 0, NULL, &route, &err) < 0 &&
              strstr(err.msg, "no complete pipeline"),
          "short: route: %s", err.msg);
    mt_place_plan_free(&plan);

    /* room for one of two pipelines: by bytes, then by packing (the 2 GiB
     * and 1 GiB nodes hold 3.2 GB, not the 4 layers of 1 GB) */
    mt_place_node three[3] = {
        {1, 5 * GiB, 1, true, {0}}, {2, 1 * GiB, 1, true, {0}}, {3, 1 * GiB, 1, true, {0}}};
    p.spares = 0;
    rc = plan_make(&t, three, 3, &p, &plan);
    check_plan("one of two", &t, three, 3, &p, &plan, rc);
    CHECK(rc == MT_PLACE_SHORT && plan.n_pipelines == 1 &&
              strstr(plan.reason, "made 1 of 2 pipelines: total capacity 7.5 GB of 3 available"
                                  " nodes < 2 replicas x 4.0 GB"),
          "one of two: rc %d, reason '%s'", rc, plan.reason);
    mt_place_plan_free(&plan);
    three[1].capacity = 2 * GiB;
    rc = plan_make(&t, three, 3, &p, &plan);
    check_plan("one of two, packing", &t, three, 3, &p, &plan, rc);
    CHECK(rc == MT_PLACE_SHORT && plan.n_pipelines == 1 &&
              strstr(plan.reason, "made 1 of 2 pipelines: the 3 available nodes (total 8.6 GB,"
                                  " largest 5.4 GB) cannot be packed into 2 complete pipelines"),
          "one of two, packing: rc %d, reason '%s'", rc, plan.reason);
    mt_place_plan_free(&plan);

    /* enough bytes, but a layer's attention part fits on no node */
    model_uniform(&t, "fat attention", 2, 0, 4, 1, 3000 * MB, 10 * MB);
    mt_place_node four[4];
    for (int i = 0; i < 4; i++) four[i] = (mt_place_node){i, 2500 * MB, 1, true, {0}};
    p.replicas = 1;
    rc = plan_make(&t, four, 4, &p, &plan);
    check_plan("fat attention", &t, four, 4, &p, &plan, rc);
    CHECK(rc == MT_PLACE_SHORT &&
              strstr(plan.reason, "the attention part of layer 0 (3.0 GB) fits on no available"
                                  " node (the largest holds 2.5 GB)"),
          "fat attention: reason '%s'", plan.reason);
    mt_place_plan_free(&plan);

    /* no available node */
    four[0].available = four[1].available = four[2].available = four[3].available = false;
    rc = plan_make(&t, four, 4, &p, &plan);
    CHECK(rc == MT_PLACE_SHORT && plan.n_assign == 0 && strstr(plan.reason, "no available node"),
          "none available: '%s'", plan.reason);
    mt_place_plan_free(&plan);
}

static void test_bad_input(void) {
    test_model t;
    model_uniform(&t, "bad", 4, 0, 8, 2, 100 * MB, 10 * MB);
    mt_place_node nodes[2] = {{5, GiB, 1, true, {0}}, {5, GiB, 1, true, {0}}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    mt_place_plan plan;
    mt_error err = {{0}};
    CHECK(mt_place_plan_make(&t.m, nodes, 2, &p, &plan, &err) < 0 &&
              strstr(err.msg, "node id 5 is listed twice"),
          "duplicate id: %s", err.msg);
    nodes[1].id = 6;
    nodes[1].speed = 0;
    CHECK(mt_place_plan_make(&t.m, nodes, 2, &p, &plan, &err) < 0 &&
              strstr(err.msg, "node 6 has speed 0"),
          "zero speed: %s", err.msg);
    nodes[1].speed = 1;
    p.replicas = 0;
    CHECK(mt_place_plan_make(&t.m, nodes, 2, &p, &plan, &err) < 0 && strstr(err.msg, "replicas 0"),
          "replicas 0: %s", err.msg);
    model_uniform(&t, "dense", 4, 4, 0, 0, 100 * MB, 0);
    p = mt_place_default_params(MT_PLACE_SWARM);
    CHECK(mt_place_plan_make(&t.m, nodes, 2, &p, &plan, &err) < 0 &&
              strstr(err.msg, "use cell mode"),
          "swarm on a dense model: %s", err.msg);
    /* a dense model plans fine in cell mode */
    p = mt_place_default_params(MT_PLACE_CELL);
    p.replicas = 1;
    p.spares = 0;
    int rc = plan_make(&t, nodes, 2, &p, &plan);
    check_plan("dense", &t, nodes, 2, &p, &plan, rc);
    CHECK(rc == 0, "dense: rc %d (%s)", rc, plan.reason);
    mt_place_plan_free(&plan);
    mt_place_assign spare = {.node = 3, .role = MT_PLACE_SPARE};
    mt_shard_spec spec;
    int32_t ids[8];
    CHECK(mt_place_shard_spec(&t.m, &spare, ids, &spec, &err) < 0 &&
              strstr(err.msg, "node 3: a spare holds no shard"),
          "spare spec: %s", err.msg);
}

/* --------------------------------------------------------------- routes */

/* Checks a route against the plan: no avoided node; cell: complete groups
 * chained over every layer; swarm: every MoE slice exactly once, inside its
 * node's rectangle. */
static void check_route(const char *what, const test_model *t, const mt_place_plan *plan,
                        const int64_t *avoid, int32_t n_avoid, const mt_place_route *r) {
    int32_t L = t->m.n_layer, X = t->m.n_expert;
    for (int32_t h = 0; h < r->n_hops; h++) {
        for (int32_t k = 0; k < n_avoid; k++)
            CHECK(r->hops[h].node != avoid[k], "%s: route uses failed node %lld", what,
                  (long long)avoid[k]);
        const mt_place_assign *a = mt_place_plan_find(plan, r->hops[h].node);
        CHECK(a && a->role == r->hops[h].role && a->layer_begin <= r->hops[h].layer_begin &&
                  r->hops[h].layer_end <= a->layer_end &&
                  a->expert_begin <= r->hops[h].expert_begin &&
                  r->hops[h].expert_end <= a->expert_end,
              "%s: hop %d is not what node %lld holds", what, h, (long long)r->hops[h].node);
    }
    if (plan->mode == MT_PLACE_CELL) {
        int32_t next = 0, groups = 0;
        for (int32_t h = 0; h < r->n_hops;) {
            const mt_place_hop *s = &r->hops[h];
            CHECK(s->role == MT_PLACE_STAGE && s->layer_begin == next, "%s: hop %d at layer %d",
                  what, h, s->layer_begin);
            int32_t e = s->expert_end, j = h + 1;
            for (; j < r->n_hops && r->hops[j].role == MT_PLACE_PARTNER; j++) {
                CHECK(r->hops[j].expert_begin == e && r->hops[j].layer_begin == s->layer_begin,
                      "%s: partner hop %d", what, j);
                e = r->hops[j].expert_end;
            }
            CHECK(e == X, "%s: group at %d has experts up to %d", what, s->layer_begin, e);
            next = s->layer_end;
            groups++;
            h = j;
        }
        CHECK(next == L && groups == r->n_groups, "%s: route ends at layer %d (%d groups)", what,
              next, groups);
    } else {
        int32_t *cov = calloc((size_t)L * X, sizeof *cov);
        for (int32_t h = 0; h < r->n_hops; h++)
            for (int32_t l = r->hops[h].layer_begin; l < r->hops[h].layer_end; l++)
                for (int32_t e = r->hops[h].expert_begin; e < r->hops[h].expert_end; e++)
                    cov[(size_t)l * X + e]++;
        for (int32_t l = 0; l < L; l++)
            for (int32_t e = 0; e < X; e++)
                CHECK(cov[(size_t)l * X + e] == (t->exp[l] > 0), "%s: slice (%d, %d) %d times",
                      what, l, e, cov[(size_t)l * X + e]);
        free(cov);
    }
}

static bool same_route(const mt_place_route *a, const mt_place_route *b) {
    if (a->n_hops != b->n_hops || a->pipeline != b->pipeline) return false;
    for (int32_t i = 0; i < a->n_hops; i++)
        if (memcmp(&a->hops[i], &b->hops[i], sizeof a->hops[i]) != 0) return false;
    return true;
}

static void test_routes_hand(void) {
    /* 8 equal nodes, 4 layers, one layer each: 2 pipelines of 4 stages */
    test_model t;
    model_uniform(&t, "route", 4, 0, 8, 2, 100 * MB, 125 * MB);
    mt_place_node nodes[8];
    for (int i = 0; i < 8; i++) nodes[i] = (mt_place_node){i + 1, 1500 * MB, 1, true, {0}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.spares = 0;
    mt_place_plan plan;
    int rc = plan_make(&t, nodes, 8, &p, &plan);
    check_plan("route plan", &t, nodes, 8, &p, &plan, rc);
    CHECK(rc == 0 && plan.pipelines[0].n_groups == 4 && plan.pipelines[1].n_groups == 4,
          "route plan: not 2 x 4 stages");
    mt_place_route r0, r1;
    mt_error err = {{0}};
    /* all live: session parity picks the pipeline */
    CHECK(mt_place_route_choose(&plan, NULL, 0, 0, NULL, &r0, &err) == 0 && r0.pipeline == 0,
          "session 0: %s (pipeline %d)", err.msg, r0.pipeline);
    CHECK(mt_place_route_choose(&plan, NULL, 0, 1, NULL, &r1, &err) == 0 && r1.pipeline == 1,
          "session 1: %s (pipeline %d)", err.msg, r1.pipeline);
    check_route("session 0", &t, &plan, NULL, 0, &r0);
    mt_place_route_free(&r0);
    mt_place_route_free(&r1);
    /* free session memory: each pipeline weighs by its fullest stage's room.
     * Pipeline 0's stages have 3 GiB free, pipeline 1's 3 GiB but one stage
     * 1 GiB: sessions should go 3:1, so about 3000 of 4000 to pipeline 0. */
    int64_t ids[8], room[8];
    int32_t one_stage = -1;
    for (int32_t k = 0; k < plan.n_assign && k < 8; k++) {
        ids[k] = plan.assign[k].node;
        room[k] = 3072 * MB;
        if (plan.assign[k].pipeline == plan.pipelines[1].index && one_stage < 0)
            one_stage = k, room[k] = 1024 * MB;
    }
    mt_place_room hint = {ids, room, plan.n_assign < 8 ? plan.n_assign : 8};
    int32_t to0 = 0, other = 0;
    for (uint64_t s = 0; s < 4000; s++) {
        mt_place_route r;
        if (mt_place_route_choose(&plan, NULL, 0, s, &hint, &r, &err) != 0) {
            other++;
            continue;
        }
        to0 += r.pipeline == plan.pipelines[0].index;
        other += r.pipeline != plan.pipelines[0].index && r.pipeline != plan.pipelines[1].index;
        mt_place_route_free(&r);
    }
    CHECK(one_stage >= 0 && other == 0 && to0 > 2800 && to0 < 3200,
          "room 3:1: %d of 4000 sessions on pipeline 0 (want about 3000), %d odd", to0, other);
    /* a full pipeline (one stage with no room) gets no session first */
    room[one_stage] = 0;
    to0 = 0;
    for (uint64_t s = 0; s < 200; s++) {
        mt_place_route r;
        if (mt_place_route_choose(&plan, NULL, 0, s, &hint, &r, &err) == 0) {
            to0 += r.pipeline == plan.pipelines[0].index;
            mt_place_route_free(&r);
        }
    }
    CHECK(to0 == 200, "a full pipeline still got %d of 200 sessions", 200 - to0);
    /* ...unless the other pipeline is down: then it still serves */
    int64_t down = -1;
    for (int32_t k = 0; k < plan.n_assign; k++)
        if (plan.assign[k].pipeline == plan.pipelines[0].index) down = plan.assign[k].node;
    CHECK(mt_place_route_choose(&plan, &down, 1, 0, &hint, &r0, &err) == 0 &&
              r0.pipeline == plan.pipelines[1].index,
          "pipeline 0 down, full pipeline 1 refused: %s (pipeline %d)", err.msg, r0.pipeline);
    mt_place_route_free(&r0);
    /* equal rooms, or a stage that has not reported: session parity as without a hint */
    for (int32_t k = 0; k < hint.n; k++) room[k] = 2048 * MB;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) room[one_stage] = -1;
        for (uint64_t s = 0; s < 4; s++) {
            CHECK(mt_place_route_choose(&plan, NULL, 0, s, &hint, &r0, &err) == 0 &&
                      r0.pipeline == plan.pipelines[s % 2].index,
                  "%s: session %d on pipeline %d", pass ? "unreported stage" : "equal rooms",
                  (int)s, r0.pipeline);
            mt_place_route_free(&r0);
        }
    }
    /* the stage of layer 0 of pipeline 0 and of layer 3 of pipeline 1 fail:
     * a route mixes them, switching at a shared boundary */
    int64_t avoid[2] = {-1, -1};
    for (int32_t k = 0; k < plan.n_assign; k++) {
        const mt_place_assign *a = &plan.assign[k];
        if (a->pipeline == 0 && a->layer_begin == 0) avoid[0] = a->node;
        if (a->pipeline == 1 && a->layer_begin == 3) avoid[1] = a->node;
    }
    CHECK(mt_place_route_choose(&plan, avoid, 2, 0, NULL, &r0, &err) == 0 && r0.pipeline == -1,
          "composed: %s", err.msg);
    check_route("composed", &t, &plan, avoid, 2, &r0);
    /* one switch only: layers 0..k from pipeline 1, the rest from pipeline 0 */
    int32_t switches = 0;
    for (int32_t h = 1; h < r0.n_hops; h++)
        switches += r0.hops[h].pipeline != r0.hops[h - 1].pipeline;
    CHECK(switches == 1, "composed: %d switches", switches);
    CHECK(mt_place_route_choose(&plan, avoid, 2, 0, NULL, &r1, &err) == 0 && same_route(&r0, &r1),
          "composed route is not deterministic");
    mt_place_route_free(&r0);
    mt_place_route_free(&r1);
    /* both holders of layer 2 fail: no route, and the message says which */
    for (int32_t k = 0; k < plan.n_assign; k++)
        if (plan.assign[k].layer_begin == 2) avoid[plan.assign[k].pipeline] = plan.assign[k].node;
    CHECK(mt_place_route_choose(&plan, avoid, 2, 0, NULL, &r0, &err) < 0 &&
              strstr(err.msg, "no live stage group holds layers 2-2") &&
              strstr(err.msg, "failed holders: nodes"),
          "layer 2 dead: %s", err.msg);
    mt_place_plan_free(&plan);

    /* swarm: 2 replicas; kill one server of replica 0: its slices come from
     * replica 1; kill its twin too: the message names the experts */
    model_uniform(&t, "route-swarm", 4, 1, 16, 2, 100 * MB, 100 * MB);
    p = mt_place_default_params(MT_PLACE_SWARM);
    for (int i = 0; i < 8; i++) nodes[i].capacity = 2000 * MB;
    rc = plan_make(&t, nodes, 8, &p, &plan);
    check_plan("route swarm", &t, nodes, 8, &p, &plan, rc);
    CHECK(rc == 0, "route swarm: rc %d '%s'", rc, plan.reason);
    const mt_place_assign *victim = NULL;
    for (int32_t k = 0; k < plan.n_assign && !victim; k++)
        if (plan.assign[k].pipeline == plan.pipelines[0].index) victim = &plan.assign[k];
    if (victim) {
        int64_t dead[4] = {victim->node};
        CHECK(mt_place_route_choose(&plan, dead, 1, 0, NULL, &r0, &err) == 0 && r0.pipeline == -1,
              "swarm route: %s", err.msg);
        check_route("swarm route", &t, &plan, dead, 1, &r0);
        mt_place_route_free(&r0);
        int32_t n_dead = 1;
        for (int32_t k = 0; k < plan.n_assign && n_dead < 4; k++) {
            const mt_place_assign *a = &plan.assign[k];
            if (a->pipeline != victim->pipeline && a->layer_begin < victim->layer_end &&
                victim->layer_begin < a->layer_end && a->expert_begin < victim->expert_end &&
                victim->expert_begin < a->expert_end)
                dead[n_dead++] = a->node;
        }
        CHECK(mt_place_route_choose(&plan, dead, n_dead, 0, NULL, &r0, &err) < 0 &&
                  strstr(err.msg, "no live expert server holds experts") &&
                  strstr(err.msg, "failed holders"),
              "swarm dead slice: %s", err.msg);
    }
    mt_place_plan_free(&plan);
}

/* ------------------------------------------------------------- stability */

static bool same_assign(const mt_place_assign *a, const mt_place_assign *b) {
    return a->role == b->role && a->pipeline == b->pipeline && a->layer_begin == b->layer_begin &&
           a->layer_end == b->layer_end && a->attention == b->attention &&
           a->expert_begin == b->expert_begin && a->expert_end == b->expert_end &&
           a->paired_with == b->paired_with;
}

/* Takes node `lost` out (unavailable, or gone from the list when drop) and
 * replans from plan; when a free node can hold its shard, exactly one node
 * (that spare) changes shard and takes the lost one's place. */
static void check_lose(const char *what, const test_model *t, mt_place_node *nodes, int32_t n,
                       const mt_place_params *p, const mt_place_plan *plan, int32_t lost_k,
                       bool drop) {
    const mt_place_assign *lost = &plan->assign[lost_k];
    mt_place_assign gone = *lost;
    mt_place_node *v = calloc((size_t)n + 1, sizeof *v);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (drop && nodes[i].id == gone.node) continue;
        v[m] = nodes[i];
        if (nodes[i].id == gone.node) v[m].available = false;
        m++;
    }
    mt_place_set_current(v, m, plan);
    /* can some spare take it whole? */
    bool spare_fits = false;
    for (int32_t k = 0; k < plan->n_assign; k++)
        if (plan->assign[k].role == MT_PLACE_SPARE) {
            const mt_place_node *x = find_node(v, m, plan->assign[k].node);
            spare_fits |= x && x->available && x->capacity >= gone.bytes + gone.work_bytes;
        }
    mt_place_plan next;
    int rc = plan_make(t, v, m, p, &next);
    char name[160];
    snprintf(name, sizeof name, "%s lose %s %lld%s", what, mt_place_role_name(gone.role),
             (long long)gone.node, drop ? " (dropped)" : "");
    check_plan(name, t, v, m, p, &next, rc);
    bool was_full = plan->n_pipelines == p->replicas;
    if (gone.role == MT_PLACE_SPARE && was_full) {
        CHECK(next.moves == 0 && !next.replanned, "%s: %d moves", name, next.moves);
    } else if (gone.role != MT_PLACE_SPARE && spare_fits && was_full) {
        CHECK(next.moves == 1 && !next.replanned && next.n_pipelines == plan->n_pipelines,
              "%s: %d moves, replanned %d, %d pipelines (was %d)", name, next.moves, next.replanned,
              next.n_pipelines, plan->n_pipelines);
        int64_t taker = -1;
        for (int32_t k = 0; k < next.n_assign; k++) {
            const mt_place_assign *a = &next.assign[k];
            const mt_place_assign *was = mt_place_plan_find(plan, a->node);
            if (!was) continue;
            if (was->role == MT_PLACE_SPARE && a->role != MT_PLACE_SPARE) {
                CHECK(taker < 0, "%s: two spares took shards", name);
                taker = a->node;
                CHECK(a->role == gone.role && a->pipeline == gone.pipeline &&
                          a->layer_begin == gone.layer_begin && a->layer_end == gone.layer_end &&
                          a->expert_begin == gone.expert_begin && a->expert_end == gone.expert_end,
                      "%s: spare %lld took layers %d-%d experts %d-%d, lost one had %d-%d %d-%d",
                      name, (long long)a->node, a->layer_begin, a->layer_end, a->expert_begin,
                      a->expert_end, gone.layer_begin, gone.layer_end, gone.expert_begin,
                      gone.expert_end);
            }
        }
        for (int32_t k = 0; k < next.n_assign; k++) {
            const mt_place_assign *a = &next.assign[k];
            const mt_place_assign *was = mt_place_plan_find(plan, a->node);
            if (!was || a->node == taker) continue;
            mt_place_assign w = *was;
            if (w.role == MT_PLACE_PARTNER && w.paired_with == gone.node) w.paired_with = taker;
            CHECK(same_assign(a, &w), "%s: node %lld changed from %s %d-%d to %s %d-%d", name,
                  (long long)a->node, mt_place_role_name(was->role), was->layer_begin,
                  was->layer_end, mt_place_role_name(a->role), a->layer_begin, a->layer_end);
        }
    }
    /* and adding a new node to that moves nothing */
    mt_place_set_current(v, m, &next);
    v[m] = (mt_place_node){1000000 + gone.node, 16 * GiB, 3.0, true, {0}};
    mt_place_plan more;
    rc = plan_make(t, v, m + 1, p, &more);
    snprintf(name, sizeof name, "%s add after losing %lld", what, (long long)gone.node);
    check_plan(name, t, v, m + 1, p, &more, rc);
    if (next.n_pipelines == p->replicas) {
        CHECK(more.moves == 0 && !more.replanned, "%s: %d moves", name, more.moves);
        for (int32_t k = 0; k < next.n_assign; k++) {
            const mt_place_assign *now = mt_place_plan_find(&more, next.assign[k].node);
            CHECK(now && same_assign(now, &next.assign[k]), "%s: node %lld changed", name,
                  (long long)next.assign[k].node);
        }
        const mt_place_assign *added = mt_place_plan_find(&more, v[m].id);
        CHECK(added && added->role == MT_PLACE_SPARE, "%s: the new node is a %s", name,
              added ? mt_place_role_name(added->role) : "none");
    } else { /* short before: existing pipelines stay, the new node may help build one */
        CHECK(more.n_pipelines >= next.n_pipelines, "%s: lost pipelines", name);
    }
    mt_place_plan_free(&more);
    mt_place_plan_free(&next);
    free(v);
}

/* Replicas raised and lowered, a node that shrank: kept pipelines stay. */
static void test_keep_hand(void) {
    test_model t;
    model_uniform(&t, "keep", 4, 0, 8, 2, 100 * MB, 125 * MB); /* 4.4 GB */
    mt_place_node nodes[9];
    for (int i = 0; i < 9; i++)
        nodes[i] = (mt_place_node){i + 1, 2500 * MB, 1.0 + i % 3, true, {0}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.replicas = 1;
    mt_place_plan one, two, back;
    int rc = plan_make(&t, nodes, 9, &p, &one);
    check_plan("keep r1", &t, nodes, 9, &p, &one, rc);
    CHECK(rc == 0 && one.n_spares >= 4, "keep r1: rc %d, %d spares", rc, one.n_spares);
    /* two replicas: pipeline 0 stays as it is, pipeline 1 comes from spares */
    mt_place_set_current(nodes, 9, &one);
    p.replicas = 2;
    rc = plan_make(&t, nodes, 9, &p, &two);
    check_plan("keep r2", &t, nodes, 9, &p, &two, rc);
    CHECK(rc == 0 && !two.replanned, "keep r2: rc %d, replanned %d", rc, two.replanned);
    int32_t moved = 0;
    for (int32_t k = 0; k < one.n_assign; k++) {
        const mt_place_assign *was = &one.assign[k], *now = mt_place_plan_find(&two, was->node);
        if (was->role != MT_PLACE_SPARE)
            CHECK(now && same_assign(was, now), "keep r2: node %lld of pipeline 0 changed",
                  (long long)was->node);
        else
            moved += now && now->role != MT_PLACE_SPARE;
    }
    CHECK(two.moves == moved && moved > 0, "keep r2: %d moves, %d spares took shards", two.moves,
          moved);
    /* back to one: pipeline 1's nodes become spares, nothing else changes */
    mt_place_set_current(nodes, 9, &two);
    p.replicas = 1;
    rc = plan_make(&t, nodes, 9, &p, &back);
    check_plan("keep back", &t, nodes, 9, &p, &back, rc);
    CHECK(rc == 0 && back.moves == moved && back.n_pipelines == 1 &&
              back.pipelines[0].index == one.pipelines[0].index,
          "keep back: %d moves, %d pipelines", back.moves, back.n_pipelines);
    for (int32_t k = 0; k < one.n_assign; k++) {
        const mt_place_assign *now = mt_place_plan_find(&back, one.assign[k].node);
        CHECK(now && same_assign(now, &one.assign[k]), "keep back: node %lld differs",
              (long long)one.assign[k].node);
    }
    mt_place_plan_free(&back);
    /* a member that shrank below its shard: a spare takes the shard, the member
     * becomes a spare (2 moves) */
    mt_place_set_current(nodes, 9, &one);
    int32_t victim = -1;
    for (int32_t i = 0; i < 9 && victim < 0; i++)
        if (nodes[i].current.role == MT_PLACE_STAGE) victim = i;
    if (victim >= 0) {
        nodes[victim].capacity = 500 * MB;
        rc = plan_make(&t, nodes, 9, &p, &back);
        check_plan("shrank", &t, nodes, 9, &p, &back, rc);
        const mt_place_assign *v = mt_place_plan_find(&back, nodes[victim].id);
        CHECK(rc == 0 && back.moves == 2 && !back.replanned && v && v->role == MT_PLACE_SPARE,
              "shrank: %d moves, node is a %s", back.moves, v ? mt_place_role_name(v->role) : "?");
        mt_place_plan_free(&back);
    }
    mt_place_plan_free(&one);
    mt_place_plan_free(&two);
}

/* ------------------------------------------------------------ properties */

typedef struct fleet_stats {
    int plans, full, short_plans, routes, losses;
} fleet_stats;

static void check_routes(const char *what, const test_model *t, const mt_place_plan *plan,
                         uint64_t seed) {
    if (plan->n_pipelines == 0) return;
    uint64_t s = seed;
    for (int trial = 0; trial < 3; trial++) {
        int64_t avoid[3];
        int32_t n_avoid = (int32_t)rng_range(&s, 0, 3), members = plan->n_assign - plan->n_spares;
        if (members <= 0) return;
        for (int32_t k = 0; k < n_avoid; k++)
            avoid[k] = plan->assign[rng_range(&s, 0, (uint64_t)members - 1)].node;
        uint64_t session = rng_next(&s);
        mt_place_route r, r2;
        mt_error err = {{0}};
        int rc = mt_place_route_choose(plan, avoid, n_avoid, session, NULL, &r, &err);
        /* is some pipeline / every slice fully live? then a route must exist */
        bool must = false;
        if (plan->mode == MT_PLACE_CELL) {
            for (int32_t pi = 0; pi < plan->n_pipelines && !must; pi++) {
                bool live = true;
                for (int32_t k = 0; k < plan->n_assign; k++)
                    for (int32_t j = 0; j < n_avoid; j++)
                        live &= !(plan->assign[k].pipeline == plan->pipelines[pi].index &&
                                  plan->assign[k].node == avoid[j]);
                must = live;
            }
        } else {
            int32_t L = t->m.n_layer, X = t->m.n_expert;
            bool *live = calloc((size_t)L * X, sizeof *live);
            for (int32_t k = 0; k < plan->n_assign; k++) {
                const mt_place_assign *a = &plan->assign[k];
                bool dead = false;
                for (int32_t j = 0; j < n_avoid; j++) dead |= a->node == avoid[j];
                if (dead || a->role != MT_PLACE_EXPERTS) continue;
                for (int32_t l = a->layer_begin; l < a->layer_end; l++)
                    for (int32_t e = a->expert_begin; e < a->expert_end; e++)
                        live[(size_t)l * X + e] = true;
            }
            must = true;
            for (int32_t l = 0; l < L; l++)
                for (int32_t e = 0; e < X; e++) must &= live[(size_t)l * X + e] || t->exp[l] == 0;
            CHECK(rc == 0 || !must, "%s: swarm route failed with every slice live: %s", what,
                  err.msg);
            CHECK(rc != 0 || must, "%s: swarm route found with a dead slice", what);
            free(live);
        }
        CHECK(rc == 0 || !must, "%s: no route though a pipeline is live: %s", what, err.msg);
        CHECK(rc == 0 || strstr(err.msg, "no route"), "%s: route error '%s'", what, err.msg);
        if (rc == 0) {
            check_route(what, t, plan, avoid, n_avoid, &r);
            CHECK(mt_place_route_choose(plan, avoid, n_avoid, session, NULL, &r2, &err) == 0 &&
                      same_route(&r, &r2),
                  "%s: route not deterministic", what);
            mt_place_route_free(&r2);
            if (n_avoid == 0 && plan->mode == MT_PLACE_CELL)
                CHECK(r.pipeline == plan->pipelines[session % (uint64_t)plan->n_pipelines].index,
                      "%s: session %llu went to pipeline %d", what, (unsigned long long)session,
                      r.pipeline);
            mt_place_route_free(&r);
        }
    }
}

static void fleet_case(const test_model *t, mt_place_mode mode, int32_t replicas, uint64_t seed,
                       int32_t n, fleet_stats *st) {
    mt_place_node *nodes = fleet(seed, n);
    uint64_t s = seed ^ 0x5555;
    /* a few nodes paused */
    for (int32_t i = 0; i < n; i++)
        if (rng_range(&s, 0, 19) == 0) nodes[i].available = false;
    mt_place_params p = mt_place_default_params(mode);
    p.replicas = replicas;
    p.spares = (int32_t)(seed % 3);                    /* 0..2 in both modes */
    bool work = mode == MT_PLACE_CELL && seed % 4 < 2; /* stages keep working memory */
    if (work) {
        p.sessions = 16;
        p.n_ctx = 4096;
        p.state_bytes = t->state;
        p.position_bytes = t->pos;
    }
    mt_place_plan plan;
    int rc = plan_make(t, nodes, n, &p, &plan);
    char what[160];
    snprintf(what, sizeof what, "%s %s%s r%d seed %llu n %d", t->name, mt_place_mode_name(mode),
             work ? "+work" : "", replicas, (unsigned long long)seed, n);
    st->plans++;
    if (!check_plan(what, t, nodes, n, &p, &plan, rc)) {
        mt_place_plan_free(&plan);
        free(nodes);
        return;
    }
    uint64_t total = 0;
    int32_t n_avail = 0;
    for (int32_t i = 0; i < n; i++)
        if (nodes[i].available) total += nodes[i].capacity, n_avail++;
    uint64_t one =
        mode == MT_PLACE_CELL ? model_total(t) + work_of(&p, 0, t->m.n_layer) : model_experts(t);
    /* twice the bytes needed is always enough for these layouts */
    if (total >= 2 * (uint64_t)replicas * one + (mode == MT_PLACE_CELL ? 32 * GiB : 0))
        CHECK(plan.n_pipelines == replicas, "%s: %d of %d pipelines with %.1fx the bytes: %s", what,
              plan.n_pipelines, replicas, (double)total / ((double)replicas * one), plan.reason);
    CHECK(plan.n_spares >= p.spares || plan.warning[0], "%s: %d of %d spares, no warning", what,
          plan.n_spares, p.spares);
    if (plan.n_pipelines == replicas)
        st->full++;
    else
        st->short_plans++;
    /* pipelines of one plan are similarly fast (snake draft): within 3x */
    double lo = INFINITY, hi = 0;
    for (int32_t i = 0; i < plan.n_pipelines; i++) {
        if (plan.pipelines[i].slowest_ms < lo) lo = plan.pipelines[i].slowest_ms;
        if (plan.pipelines[i].slowest_ms > hi) hi = plan.pipelines[i].slowest_ms;
        CHECK(plan.pipelines[i].average_ms <= plan.pipelines[i].slowest_ms + 1e-9 &&
                  plan.pipelines[i].slowest_ms <= plan.pipelines[i].latency_ms + 1e-9,
              "%s: pipeline times out of order", what);
    }
    if (plan.n_pipelines > 1 && n_avail >= 12 * replicas)
        CHECK(hi <= 3 * lo, "%s: pipelines from %.3f to %.3f ms", what, lo, hi);
    /* the same input gives the same plan */
    mt_place_plan again;
    int rc2 = plan_make(t, nodes, n, &p, &again);
    bool same = rc2 == rc && again.n_assign == plan.n_assign;
    for (int32_t k = 0; same && k < plan.n_assign; k++)
        same = plan.assign[k].node == again.assign[k].node &&
               same_assign(&plan.assign[k], &again.assign[k]);
    CHECK(same, "%s: plan not deterministic", what);
    mt_place_plan_free(&again);
    check_routes(what, t, &plan, seed);
    st->routes++;
    /* lose a member (unavailable, then dropped from the list) and a spare */
    int32_t members = plan.n_assign - plan.n_spares;
    if (members > 0) {
        int32_t k = (int32_t)rng_range(&s, 0, (uint64_t)members - 1);
        check_lose(what, t, nodes, n, &p, &plan, k, false);
        k = (int32_t)rng_range(&s, 0, (uint64_t)members - 1);
        check_lose(what, t, nodes, n, &p, &plan, k, true);
        st->losses += 2;
    }
    if (plan.n_spares > 0) check_lose(what, t, nodes, n, &p, &plan, plan.n_assign - 1, false);
    mt_place_plan_free(&plan);
    free(nodes);
}

static void test_fleets(void) {
    static test_model models[3];
    model_deepseek(&models[0]);
    model_uniform(&models[1], "mid", 24, 1, 64, 4, 300 * MB, 150 * MB);  /* ~236 GB */
    model_uniform(&models[2], "small", 12, 2, 16, 2, 200 * MB, 60 * MB); /* ~12 GB */
    const int32_t sizes[] = {3, 4, 5, 7, 9, 13, 17, 24, 31, 40, 57, 80, 120, 200, 300};
    fleet_stats st = {0};
    uint64_t seed = 1;
    for (int32_t m = 0; m < 3; m++)
        for (int32_t si = 0; si < (int32_t)(sizeof sizes / sizeof *sizes); si++)
            for (int mode = 0; mode < 2; mode++) {
                int32_t replicas = 1 + (int32_t)(seed % 3);
                fleet_case(&models[m], mode ? MT_PLACE_SWARM : MT_PLACE_CELL, replicas, seed++,
                           sizes[si], &st);
            }
    printf("fleets: %d plans (%d with every replica, %d short), %d route sets, %d losses\n",
           st.plans, st.full, st.short_plans, st.routes, st.losses);
    CHECK(st.full > st.plans / 3 && st.short_plans > 0, "fleets: %d full, %d short of %d", st.full,
          st.short_plans, st.plans);
}

/* -------------------------------------------------------------- water fill */

/* The split pl_water_fill documents, one expert at a time to whoever finishes it soonest
 * (ties to the lower index): its bulk start must give exactly this. */
static bool greedy_fill(int32_t X, int32_t k, const double *speed, const int32_t *lo,
                        const int32_t *max, int32_t *n) {
    int64_t sum = 0, room = 0;
    for (int32_t i = 0; i < k; i++) n[i] = lo[i], sum += lo[i], room += max[i];
    for (int32_t i = 0; i < k; i++)
        if (lo[i] > max[i]) return false;
    if (sum > X || room < X) return false;
    for (int64_t r = X - sum; r > 0; r--) {
        int32_t best = -1;
        for (int32_t i = 0; i < k; i++)
            if (n[i] < max[i] && (best < 0 || (n[i] + 1) / speed[i] < (n[best] + 1) / speed[best]))
                best = i;
        n[best]++;
    }
    return true;
}

static void test_water_fill(void) {
    uint64_t s = 7;
    int32_t differ = 0, cases = 0;
    for (int it = 0; it < 200000; it++) {
        int32_t k = (int32_t)rng_range(&s, 1, 12), X = (int32_t)rng_range(&s, 1, 1000);
        double speed[12];
        int32_t lo[12], max[12], a[12], b[12];
        for (int32_t i = 0; i < k; i++) {
            speed[i] = rng_range(&s, 0, 3) == 0 ? 1.0 : 0.5 + (double)rng_range(&s, 0, 99) / 50;
            lo[i] = rng_range(&s, 0, 2) == 0 ? 1 : 0;
            max[i] =
                rng_range(&s, 0, 2) == 0 ? (int32_t)rng_range(&s, 0, (uint64_t)(X / k + 1)) : X;
            if (max[i] < lo[i]) max[i] = lo[i];
        }
        bool r1 = greedy_fill(X, k, speed, lo, max, a), r2 = pl_water_fill(X, k, speed, lo, max, b);
        cases++;
        bool same = r1 == r2;
        for (int32_t i = 0; same && r1 && i < k; i++) same = a[i] == b[i];
        differ += !same;
    }
    CHECK(differ == 0, "pl_water_fill differs from the one-at-a-time split in %d of %d cases",
          differ, cases);
}

/* ------------------------------------------------------------ objectives */

/* A pipeline's trip as the latency layouts count it: group times + a hop each. */
static double trip_ms(const mt_place_plan *plan, int32_t i, double hop_ms) {
    return plan->pipelines[i].latency_ms + plan->pipelines[i].n_groups * hop_ms;
}

static void test_objectives_hand(void) {
    /* 4 MoE layers of 100 MB attention + 8 experts of 100 MB (2 used); 8 equal
     * nodes of 2000 MB at 10 MB/ms; partner call 0.25 ms, hop 0.5 ms. A group of
     * k members over l layers (stage = member 0, experts water-filled: the
     * slowest member holds ceil(8/k)) takes 10 l (attention) + 0.25 l (calls,
     * k > 1) + ceil(8/k) x l x 2 x 100 MB / 8 / 10 MB/ms = 2.5 ceil(8/k) l ms;
     * one node alone over one layer: (100 + 2 x 100) / 10 = 30 ms.
     *   THROUGHPUT (slowest group): 4 groups of 2 over 1 layer each, 10 + 0.25
     *     + 10 = 20.25 ms each (a wider group over 2 layers is 20 + 0.5 + 2.5 x 2
     *     x ceil(8/k) >= 30.5); trip 4 x (20.25 + 0.5) = 83 ms.
     *   LATENCY (group times + hops): one group of all 8 over the 4 layers:
     *     40 + 1 + 2.5 x 1 x 4 = 51 ms, trip 51.5 (2 groups of 4 over 2 layers:
     *     2 x (20 + 0.5 + 10 + 0.5) = 62; 4 groups of 2: 83). Capacity: the
     *     stage holds 400 MB attention + 4 experts of 400 MB, the others 5.
     *   BALANCED: groups within 1.25 x 20.25 = 25.31 ms: one layer each (two
     *     layers take at least 20 + 0.5 + 5 = 25.5), each group >= 2 members
     *     (one alone is 30): THROUGHPUT's layout, trip 83. */
    test_model t;
    model_uniform(&t, "objectives", 4, 0, 8, 2, 100 * MB, 100 * MB);
    mt_place_node nodes[8];
    for (int i = 0; i < 8; i++) nodes[i] = (mt_place_node){i + 1, 2000 * MB, 1, true, {0}};
    const mt_place_objective obj[3] = {MT_PLACE_THROUGHPUT, MT_PLACE_LATENCY, MT_PLACE_BALANCED};
    const int32_t want_groups[3] = {4, 1, 4};
    const double want_slowest[3] = {20.25, 51, 20.25}, want_trip[3] = {83, 51.5, 83};
    for (int o = 0; o < 3; o++) {
        mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
        p.replicas = 1;
        p.spares = 0;
        p.objective = obj[o];
        mt_place_plan plan;
        int rc = plan_make(&t, nodes, 8, &p, &plan);
        char what[64];
        snprintf(what, sizeof what, "objective %s", mt_place_objective_name(obj[o]));
        if (!check_plan(what, &t, nodes, 8, &p, &plan, rc)) continue;
        CHECK(rc == 0 && plan.n_pipelines == 1 && plan.pipelines[0].n_groups == want_groups[o] &&
                  plan.pipelines[0].n_nodes == 8 &&
                  fabs(plan.pipelines[0].slowest_ms - want_slowest[o]) < 1e-9 &&
                  fabs(trip_ms(&plan, 0, p.hop_ms) - want_trip[o]) < 1e-9,
              "%s: %d groups of %d nodes, slowest %g ms, trip %g ms; want %d groups, %g, %g", what,
              plan.pipelines[0].n_groups, plan.pipelines[0].n_nodes, plan.pipelines[0].slowest_ms,
              trip_ms(&plan, 0, p.hop_ms), want_groups[o], want_slowest[o], want_trip[o]);
        mt_place_plan_free(&plan);
    }
    mt_place_objective back;
    CHECK(mt_place_objective_parse("latency", &back) == 0 && back == MT_PLACE_LATENCY &&
              mt_place_objective_parse("fast", &back) < 0 &&
              strcmp(mt_place_objective_name(MT_PLACE_BALANCED), "balanced") == 0,
          "objective names");
    mt_place_params bad = mt_place_default_params(MT_PLACE_CELL);
    bad.hop_ms = -1;
    mt_place_plan plan;
    mt_error err = {{0}};
    CHECK(mt_place_plan_make(&t.m, nodes, 8, &bad, &plan, &err) < 0 && strstr(err.msg, "hop_ms"),
          "a negative hop_ms: '%s'", err.msg);
    bad = mt_place_default_params(MT_PLACE_CELL);
    bad.objective = (mt_place_objective)7;
    CHECK(mt_place_plan_make(&t.m, nodes, 8, &bad, &plan, &err) < 0 && strstr(err.msg, "objective"),
          "objective 7: '%s'", err.msg);
}

/* ---------------------------------------------------------- latency goal */

/* The longest trip_ms of a plan's pipelines, and that it is latency_ms + a hop per group. */
static double worst_trip(const mt_place_plan *plan, double hop_ms) {
    double w = 0;
    for (int32_t i = 0; i < plan->n_pipelines; i++) {
        CHECK(fabs(plan->pipelines[i].trip_ms - trip_ms(plan, i, hop_ms)) < 1e-9,
              "pipeline %d: trip_ms %g, latency_ms + hops %g", i, plan->pipelines[i].trip_ms,
              trip_ms(plan, i, hop_ms));
        if (plan->pipelines[i].trip_ms > w) w = plan->pipelines[i].trip_ms;
    }
    return w;
}

static void test_goal_hand(void) {
    /* test_objectives_hand's model (4 MoE layers of 100 MB attention + 8 experts of 100 MB,
     * 2 used; one pipeline needs 3600 MB) on 24 equal nodes of 2000 MB at 10 MB/ms, LATENCY,
     * replicas 2. One group of k nodes over the 4 layers: 40 ms attention + 4 x 0.25 calls +
     * 10 ms per expert its slowest member holds (8 split as evenly as capacity allows: the
     * stage holds at most 4, a partner 5), and a 0.5 ms hop: k = 8: 51.5 ms; k = 4..7: 2
     * experts, 61.5; k = 3: 71.5; k = 2: 81.5 (two nodes of 2 layers each: 2 x 60.5). Splits
     * into two groups cost more (6 nodes as 3 + 3 over 2 layers each: 2 x 36 = 72; 5 + 1:
     * 46.25 + 30.5). So a pipeline of n nodes: n >= 8: 51.5; 4..7: 61.5; 3: 71.5; 2: 81.5.
     * Equal nodes are dealt evenly: P = 2, 3 (12, 8 nodes each): 51.5; P = 4, 5, 6 (6; 5 or 4;
     * 4): 61.5; P = 7..12: 71.5 or more; P = 13 would leave a pipeline 1 node, which cannot
     * hold 3600 MB (and 24 x 2000 / 3600 = 13 is the capacity's most). */
    test_model t;
    model_uniform(&t, "goal", 4, 0, 8, 2, 100 * MB, 100 * MB);
    mt_place_node nodes[24];
    for (int i = 0; i < 24; i++) nodes[i] = (mt_place_node){i + 1, 2000 * MB, 1, true, {0}};
    struct {
        double goal;
        int32_t spares, want_p;
        double want_trip;
        bool met;
    } cases[] = {
        {55, 0, 3, 51.5, true},  /* P = 2, 3 meet it, P = 4 misses: 3 */
        {65, 0, 6, 61.5, true},  /* P = 2..6 meet it, 7 misses: 6 */
        {55, 1, 2, 51.5, true},  /* P = 3 leaves no spare of 24 nodes; with one kept
                                    back a pipeline has 7 nodes, 61.5: 2 */
        {50, 0, 2, 51.5, false}, /* no P meets it: replicas, and the note says so */
        {0, 0, 2, 51.5, false},  /* no goal: replicas, as before */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
        p.replicas = 2;
        p.spares = cases[k].spares;
        p.objective = MT_PLACE_LATENCY;
        p.latency_goal_ms = cases[k].goal;
        mt_place_plan plan;
        int rc = plan_make(&t, nodes, 24, &p, &plan);
        char what[96];
        snprintf(what, sizeof what, "goal %g ms, %d spares", cases[k].goal, cases[k].spares);
        if (!check_plan(what, &t, nodes, 24, &p, &plan, rc)) continue;
        double w = worst_trip(&plan, p.hop_ms);
        CHECK(rc == 0 && plan.n_pipelines == cases[k].want_p &&
                  fabs(w - cases[k].want_trip) < 1e-9 &&
                  fabs(plan.worst_trip_ms - cases[k].want_trip) < 1e-9 &&
                  plan.latency_goal_met == cases[k].met && plan.n_spares >= cases[k].spares,
              "%s: rc %d, %d pipelines, worst trip %g (plan %g), met %d, %d spares; want %d, %g,"
              " %d",
              what, rc, plan.n_pipelines, w, plan.worst_trip_ms, plan.latency_goal_met,
              plan.n_spares, cases[k].want_p, cases[k].want_trip, cases[k].met);
        bool missed = cases[k].goal > 0 && !cases[k].met;
        CHECK(missed
                  ? strstr(plan.goal_note, "latency goal 50 ms") &&
                        strstr(plan.goal_note, "51.5 ms") && strstr(plan.goal_note, "add machines")
                  : plan.goal_note[0] == 0,
              "%s: note '%s'", what, plan.goal_note);
        mt_place_plan_free(&plan);
    }

    /* Kept: the pipelines the goal chose stay (replicas is still 2). */
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.replicas = 2;
    p.spares = 0;
    p.objective = MT_PLACE_LATENCY;
    p.latency_goal_ms = 55;
    mt_place_plan first, again, lost;
    int rc = plan_make(&t, nodes, 24, &p, &first);
    check_plan("goal first", &t, nodes, 24, &p, &first, rc);
    mt_place_set_current(nodes, 24, &first);
    rc = plan_make(&t, nodes, 24, &p, &again);
    check_plan("goal again", &t, nodes, 24, &p, &again, rc);
    CHECK(rc == 0 && again.n_pipelines == 3 && !again.replanned && again.moves == 0 &&
              again.latency_goal_met,
          "goal again: %d pipelines, replanned %d, %d moves, met %d", again.n_pipelines,
          again.replanned, again.moves, again.latency_goal_met);
    /* a member of pipeline 2 is lost and no node is free: pipelines 0 and 1 stay as they are;
     * pipeline 2 cannot be kept, and its 7 other nodes would make one of 61.5 ms, over the
     * goal: they become spares (goal first; 2 pipelines are the replicas asked) */
    int64_t gone = -1;
    for (int32_t i = 0; i < first.n_assign && gone < 0; i++)
        if (first.assign[i].pipeline == 2 && first.assign[i].role == MT_PLACE_PARTNER)
            gone = first.assign[i].node;
    for (int i = 0; i < 24; i++) nodes[i].available = nodes[i].id != gone;
    rc = plan_make(&t, nodes, 24, &p, &lost);
    check_plan("goal lost", &t, nodes, 24, &p, &lost, rc);
    int32_t same = 0, in01 = 0;
    for (int32_t i = 0; i < first.n_assign; i++) {
        if (first.assign[i].pipeline != 0 && first.assign[i].pipeline != 1) continue;
        in01++;
        const mt_place_assign *now = mt_place_plan_find(&lost, first.assign[i].node);
        same += now && same_assign(now, &first.assign[i]);
    }
    CHECK(rc == 0 && lost.n_pipelines == 2 && same == in01 && in01 == 16 && lost.n_spares == 7 &&
              lost.latency_goal_met && fabs(lost.worst_trip_ms - 51.5) < 1e-9,
          "goal lost: %d pipelines, %d of %d unchanged, %d spares, met %d, worst %g",
          lost.n_pipelines, same, in01, lost.n_spares, lost.latency_goal_met, lost.worst_trip_ms);
    /* nodes joining a kept plan: 16 nodes make 2 pipelines of 8 (3 would have 5-6 nodes,
     * 61.5 ms); 8 more make a third of 51.5 ms beside them, the first two unchanged */
    mt_place_plan p16, p24;
    for (int i = 0; i < 24; i++) nodes[i] = (mt_place_node){i + 1, 2000 * MB, 1, true, {0}};
    rc = plan_make(&t, nodes, 16, &p, &p16);
    check_plan("goal 16", &t, nodes, 16, &p, &p16, rc);
    mt_place_set_current(nodes, 16, &p16);
    rc = plan_make(&t, nodes, 24, &p, &p24);
    check_plan("goal 16 + 8", &t, nodes, 24, &p, &p24, rc);
    same = 0;
    for (int32_t i = 0; i < p16.n_assign; i++) {
        const mt_place_assign *now = mt_place_plan_find(&p24, p16.assign[i].node);
        same += now && same_assign(now, &p16.assign[i]);
    }
    CHECK(p16.n_pipelines == 2 && rc == 0 && p24.n_pipelines == 3 && !p24.replanned &&
              same == p16.n_assign && p24.latency_goal_met && fabs(p24.worst_trip_ms - 51.5) < 1e-9,
          "goal 16 + 8: %d then %d pipelines, replanned %d, %d of %d unchanged, met %d",
          p16.n_pipelines, p24.n_pipelines, p24.replanned, same, p16.n_assign,
          p24.latency_goal_met);
    mt_place_plan_free(&p16);
    mt_place_plan_free(&p24);
    for (int i = 0; i < 24; i++) nodes[i].available = true;
    mt_place_plan_free(&first);
    mt_place_plan_free(&again);
    mt_place_plan_free(&lost);

    /* bad goals, and a goal in swarm mode */
    const double bad_goal[] = {-1, NAN, INFINITY, 2e9};
    mt_error err = {{0}};
    mt_place_plan plan;
    for (size_t k = 0; k < sizeof bad_goal / sizeof *bad_goal; k++) {
        mt_place_params b = mt_place_default_params(MT_PLACE_CELL);
        b.latency_goal_ms = bad_goal[k];
        CHECK(mt_place_plan_make(&t.m, nodes, 24, &b, &plan, &err) < 0 &&
                  strstr(err.msg, "latency_goal_ms"),
              "latency goal %g: '%s'", bad_goal[k], err.msg);
    }
    mt_place_params sw = mt_place_default_params(MT_PLACE_SWARM);
    sw.latency_goal_ms = 100;
    CHECK(mt_place_plan_make(&t.m, nodes, 24, &sw, &plan, &err) < 0 &&
              strstr(err.msg, "cell mode only"),
          "a swarm goal: '%s'", err.msg);
}

/* Over seeded fleets and every objective, against plans made without a goal: with a goal
 * just above the no-goal plan's longest trip, the plan has P >= replicas pipelines, all
 * within it, and no count above P up to 16 qualifies: the no-goal plan for replicas = P'
 * either falls short of P' pipelines, keeps fewer spares than asked, or has a trip over the
 * goal (a plan is a pure function of its inputs, so that is what the goal's search saw). */
static void test_goal_fleets(void) {
    test_model t;
    model_uniform(&t, "goal", 16, 1, 32, 4, 300 * MB, 120 * MB); /* 62 GB */
    const int32_t sizes[] = {17, 31, 45};
    int32_t more = 0, cases = 0;
    uint64_t seed = 900;
    for (int32_t si = 0; si < 3; si++)
        for (int o = 0; o < 3; o++, seed++) {
            int32_t n = sizes[si];
            mt_place_node *nodes = fleet(seed, n);
            mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
            p.replicas = 1 + (int32_t)(seed % 2);
            p.objective = (mt_place_objective)o;
            mt_place_plan base, plan;
            int rc = plan_make(&t, nodes, n, &p, &base);
            char what[96];
            snprintf(what, sizeof what, "goal %s seed %llu n %d",
                     mt_place_objective_name(p.objective), (unsigned long long)seed, n);
            if (rc != 0) { /* too few nodes for replicas: nothing to choose */
                mt_place_plan_free(&base);
                free(nodes);
                continue;
            }
            p.latency_goal_ms = worst_trip(&base, p.hop_ms) * 1.3;
            rc = plan_make(&t, nodes, n, &p, &plan);
            cases++;
            if (check_plan(what, &t, nodes, n, &p, &plan, rc)) {
                double w = worst_trip(&plan, p.hop_ms);
                CHECK(rc == 0 && plan.n_pipelines >= p.replicas && plan.latency_goal_met &&
                          w <= p.latency_goal_ms && plan.goal_note[0] == 0,
                      "%s: %d pipelines, worst %g, goal %g, met %d", what, plan.n_pipelines, w,
                      p.latency_goal_ms, plan.latency_goal_met);
                more += plan.n_pipelines > p.replicas;
                uint64_t cap = 0; /* no plan holds more pipelines than the capacity */
                for (int32_t i = 0; i < n; i++) cap += nodes[i].capacity;
                for (int32_t q = plan.n_pipelines + 1;
                     q <= 16 && (uint64_t)q <= cap / model_total(&t); q++) {
                    mt_place_params pq = p;
                    pq.latency_goal_ms = 0;
                    pq.replicas = q;
                    mt_place_plan alt;
                    int rq = plan_make(&t, nodes, n, &pq, &alt);
                    bool qualifies = rq == 0 && alt.n_spares >= p.spares &&
                                     worst_trip(&alt, p.hop_ms) <= p.latency_goal_ms;
                    CHECK(!qualifies, "%s: %d pipelines chosen, but %d also meet the goal %g", what,
                          plan.n_pipelines, q, p.latency_goal_ms);
                    mt_place_plan_free(&alt);
                }
            }
            mt_place_plan_free(&base);
            mt_place_plan_free(&plan);
            free(nodes);
        }
    printf("goal fleets: %d cases, %d with more pipelines than replicas\n", cases, more);
    CHECK(cases >= 6 && more > 0, "goal fleets: %d cases, %d with more pipelines than replicas",
          cases, more);
}

/* Over seeded fleets: every objective gives a valid plan over the same nodes per
 * pipeline; LATENCY's trip is never longer than THROUGHPUT's (its search includes that
 * layout), BALANCED's trip neither, and its slowest group within 1.25x THROUGHPUT's. */
static void test_objectives_fleets(void) {
    static test_model models[2];
    model_uniform(&models[0], "mid", 24, 1, 64, 4, 300 * MB, 150 * MB);
    model_uniform(&models[1], "small", 12, 2, 16, 2, 200 * MB, 60 * MB);
    const int32_t sizes[] = {3, 5, 9, 17, 31, 57, 120};
    int32_t plans = 0, shorter = 0;
    uint64_t seed = 500;
    for (int32_t m = 0; m < 2; m++)
        for (int32_t si = 0; si < (int32_t)(sizeof sizes / sizeof *sizes); si++, seed++) {
            int32_t n = sizes[si];
            mt_place_node *nodes = fleet(seed, n);
            mt_place_plan plan[3];
            int rc[3];
            for (int o = 0; o < 3; o++) {
                mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
                p.replicas = 1 + (int32_t)(seed % 2);
                p.objective = (mt_place_objective)o;
                rc[o] = plan_make(&models[m], nodes, n, &p, &plan[o]);
                char what[96];
                snprintf(what, sizeof what, "%s %s seed %llu n %d", models[m].name,
                         mt_place_objective_name(p.objective), (unsigned long long)seed, n);
                check_plan(what, &models[m], nodes, n, &p, &plan[o], rc[o]);
                plans++;
            }
            double hop = mt_place_default_params(MT_PLACE_CELL).hop_ms;
            for (int o = 1; o < 3; o++) {
                CHECK(plan[o].n_pipelines == plan[0].n_pipelines,
                      "%s seed %llu: %d pipelines under %s, %d under throughput", models[m].name,
                      (unsigned long long)seed, plan[o].n_pipelines,
                      mt_place_objective_name((mt_place_objective)o), plan[0].n_pipelines);
                for (int32_t i = 0; i < plan[o].n_pipelines && i < plan[0].n_pipelines; i++) {
                    double t0 = trip_ms(&plan[0], i, hop), t = trip_ms(&plan[o], i, hop);
                    CHECK(t <= t0 + 1e-6, "%s seed %llu pipeline %d: %s trip %g > throughput %g",
                          models[m].name, (unsigned long long)seed, i,
                          mt_place_objective_name((mt_place_objective)o), t, t0);
                    shorter += o == 1 && t < t0 - 1e-6;
                    if (o == 2)
                        CHECK(plan[o].pipelines[i].slowest_ms <=
                                  1.25 * plan[0].pipelines[i].slowest_ms * 1.0001,
                              "%s seed %llu pipeline %d: balanced slowest %g vs throughput %g",
                              models[m].name, (unsigned long long)seed, i,
                              plan[o].pipelines[i].slowest_ms, plan[0].pipelines[i].slowest_ms);
                }
            }
            for (int o = 0; o < 3; o++) mt_place_plan_free(&plan[o]);
            free(nodes);
        }
    printf("objectives: %d plans, latency shorter than throughput in %d pipelines\n", plans,
           shorter);
    CHECK(shorter > 0, "latency never beat throughput over %d plans", plans);
}

/* ------------------------------------------------------- working memory */

/* Two plans of the same nodes agree node for node (shards and times). */
static bool same_plan(const mt_place_plan *a, const mt_place_plan *b) {
    if (a->n_assign != b->n_assign || a->n_pipelines != b->n_pipelines || a->moves != b->moves ||
        strcmp(a->reason, b->reason) != 0 || strcmp(a->warning, b->warning) != 0)
        return false;
    for (int32_t k = 0; k < a->n_assign; k++)
        if (memcmp(&a->assign[k], &b->assign[k], sizeof a->assign[k]) != 0) return false;
    for (int32_t i = 0; i < a->n_pipelines; i++)
        if (memcmp(&a->pipelines[i], &b->pipelines[i], sizeof a->pipelines[i]) != 0) return false;
    return true;
}

static void test_work_hand(void) {
    /* 4 layers of 1000 MB (200 MB attention + 8 x 100 MB experts); layer 2 keeps
     * a fixed state of 50 MB per session, 4 sessions: its stage needs 200 MB
     * more than its weights. Nodes of exactly 1000 MB hold any layer's weights. */
    test_model t;
    model_uniform(&t, "work", 4, 0, 8, 2, 200 * MB, 100 * MB);
    uint64_t state[4] = {0, 0, 50 * MB, 0}, zeros[4] = {0};
    mt_place_node nodes[5];
    for (int i = 0; i < 5; i++) nodes[i] = (mt_place_node){11 + i, 1000 * MB, 1.0, true, {0}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.replicas = 1;
    p.spares = 0;
    p.sessions = 4;
    p.n_ctx = 4096;
    mt_place_plan plan, ref;

    /* no per-layer sizes: 4 one-layer stages, exactly full */
    int rc = plan_make(&t, nodes, 4, &p, &ref);
    check_plan("work: none", &t, nodes, 4, &p, &ref, rc);
    CHECK(rc == 0 && ref.n_pipelines == 1 && ref.pipelines[0].n_groups == 4 &&
              ref.largest_need == 1000 * MB,
          "work: none: rc %d, %d groups", rc, ref.n_pipelines ? ref.pipelines[0].n_groups : 0);
    for (int32_t k = 0; k < ref.n_assign; k++)
        CHECK(ref.assign[k].work_bytes == 0, "work: none: node %lld keeps %llu bytes",
              (long long)ref.assign[k].node, (unsigned long long)ref.assign[k].work_bytes);

    /* NULL arrays behave exactly as before; so do arrays of zeros and 0 sessions */
    mt_place_params z = p;
    z.state_bytes = zeros;
    z.position_bytes = zeros;
    rc = plan_make(&t, nodes, 4, &z, &plan);
    CHECK(same_plan(&plan, &ref), "work: zero arrays changed the plan");
    mt_place_plan_free(&plan);
    z.state_bytes = state;
    z.sessions = 0;
    rc = plan_make(&t, nodes, 4, &z, &plan);
    CHECK(same_plan(&plan, &ref), "work: 0 sessions changed the plan");
    mt_place_plan_free(&plan);

    /* with the state: no 1000 MB node holds layer 2 (1000 MB + 4 x 50 MB), and
     * 4 nodes hold 4.0 GB < 4.2 GB */
    p.state_bytes = state;
    rc = plan_make(&t, nodes, 4, &p, &plan);
    check_plan("work: 4 nodes", &t, nodes, 4, &p, &plan, rc);
    CHECK(rc == MT_PLACE_SHORT && plan.n_pipelines == 0 &&
              strstr(plan.reason, "no complete pipeline: total capacity 4.0 GB of 4 available nodes"
                                  " < 1 replica x 4.2 GB (200.0 MB of it working memory: 4"
                                  " sessions x 4096 positions): add nodes"),
          "work: 4 nodes: rc %d, reason '%s'", rc, plan.reason);
    mt_place_plan_free(&plan);

    /* a fifth node: layer 2 goes to a stage + partner. The stage keeps the
     * state (room for 1000 - 200 - 200 = 600 MB of experts, speed splits the 8
     * experts 4 + 4); the partner and the other stages keep none. Times are
     * the bytes read: 20 ms attention + 0.25 ms call + 4 x 2/8 x 100 MB = 10 ms
     * for layer 2, 200 MB + 2 x 100 MB = 40 ms for the others. */
    rc = plan_make(&t, nodes, 5, &p, &plan);
    check_plan("work: 5 nodes", &t, nodes, 5, &p, &plan, rc);
    CHECK(rc == 0 && plan.n_pipelines == 1 && plan.pipelines[0].n_groups == 4 &&
              count_role(&plan, MT_PLACE_PARTNER) == 1,
          "work: 5 nodes: rc %d, %d partners", rc, count_role(&plan, MT_PLACE_PARTNER));
    for (int32_t k = 0; k < plan.n_assign; k++) {
        const mt_place_assign *a = &plan.assign[k];
        if (a->role == MT_PLACE_STAGE && a->layer_begin == 2) {
            CHECK(a->layer_end == 3 && a->expert_begin == 0 && a->expert_end == 4 &&
                      a->bytes == 600 * MB && a->work_bytes == 200 * MB &&
                      fabs(a->ms_per_token - 30) < 1e-9,
                  "work: stage of layer 2: layers %d-%d, experts %d-%d, %llu + %llu bytes, %g ms",
                  a->layer_begin, a->layer_end, a->expert_begin, a->expert_end,
                  (unsigned long long)a->bytes, (unsigned long long)a->work_bytes, a->ms_per_token);
        } else if (a->role == MT_PLACE_PARTNER) {
            CHECK(a->layer_begin == 2 && a->expert_begin == 4 && a->expert_end == 8 &&
                      a->bytes == 400 * MB && a->work_bytes == 0,
                  "work: partner: layers %d-%d, experts %d-%d, %llu + %llu bytes", a->layer_begin,
                  a->layer_end, a->expert_begin, a->expert_end, (unsigned long long)a->bytes,
                  (unsigned long long)a->work_bytes);
        } else {
            CHECK(a->role == MT_PLACE_STAGE && a->layer_end - a->layer_begin == 1 &&
                      a->bytes == 1000 * MB && a->work_bytes == 0,
                  "work: node %lld is a %s of layers %d-%d with %llu bytes of working memory",
                  (long long)a->node, mt_place_role_name(a->role), a->layer_begin, a->layer_end,
                  (unsigned long long)a->work_bytes);
        }
    }
    CHECK(fabs(plan.pipelines[0].slowest_ms - 40) < 1e-9 &&
              fabs(plan.pipelines[0].latency_ms - 150.25) < 1e-9,
          "work: times %g ms slowest, %g ms latency; want 40 and 150.25",
          plan.pipelines[0].slowest_ms, plan.pipelines[0].latency_ms);
    CHECK(plan.largest_shard == 1000 * MB && plan.largest_need == 1000 * MB,
          "work: largest shard %llu, need %llu", (unsigned long long)plan.largest_shard,
          (unsigned long long)plan.largest_need);
    mt_place_plan_free(&plan);

    /* keeping a plan: the 4-stage plan made without working memory, now with
     * it. Layer 2's stage no longer fits whole: it keeps the attention and 6
     * experts (200 + 200 + 600 MB), the free fifth node takes the other 2 as its
     * partner; nothing else moves and the pipeline is kept */
    mt_place_set_current(nodes, 4, &ref);
    int64_t stage2 = -1;
    for (int32_t k = 0; k < ref.n_assign; k++)
        if (ref.assign[k].layer_begin == 2) stage2 = ref.assign[k].node;
    rc = plan_make(&t, nodes, 5, &p, &plan);
    check_plan("work: kept", &t, nodes, 5, &p, &plan, rc);
    const mt_place_assign *s2 = mt_place_plan_find(&plan, stage2),
                          *fifth = mt_place_plan_find(&plan, 15);
    CHECK(rc == 0 && !plan.replanned && plan.moves == 2 && s2 && s2->role == MT_PLACE_STAGE &&
              s2->expert_end == 6 && s2->work_bytes == 200 * MB && fifth &&
              fifth->role == MT_PLACE_PARTNER && fifth->paired_with == stage2 &&
              fifth->expert_begin == 6 && fifth->expert_end == 8,
          "work: kept: rc %d, replanned %d, %d moves, stage experts to %d, fifth a %s", rc,
          plan.replanned, plan.moves, s2 ? s2->expert_end : -1,
          fifth ? mt_place_role_name(fifth->role) : "none");
    mt_place_plan_free(&plan);
    for (int i = 0; i < 5; i++) memset(&nodes[i].current, 0, sizeof nodes[i].current);
    mt_place_plan_free(&ref);

    /* per-position bytes scale with the context: layer 3 keeps 10 kB per
     * position. Roomy nodes: its stage keeps sessions x n_ctx x 10 kB. Nodes of
     * exactly 1000 MB: 0 positions fit, 1 does not. */
    uint64_t pos[4] = {0, 0, 0, 10000};
    p.state_bytes = NULL;
    p.position_bytes = pos;
    const int32_t ctxs[3] = {0, 1000, 5000};
    mt_place_node big[4];
    for (int i = 0; i < 4; i++) big[i] = (mt_place_node){21 + i, 2000 * MB, 1.0, true, {0}};
    for (int i = 0; i < 3; i++) {
        p.n_ctx = ctxs[i];
        rc = plan_make(&t, big, 4, &p, &plan);
        check_plan("work: context", &t, big, 4, &p, &plan, rc);
        uint64_t want = 4ull * (uint64_t)ctxs[i] * 10000, got = UINT64_MAX;
        for (int32_t k = 0; k < plan.n_assign; k++)
            if (plan.assign[k].attention && plan.assign[k].layer_end == 4)
                got = plan.assign[k].work_bytes;
        CHECK(rc == 0 && got == want, "work: %d positions: the last stage keeps %llu, want %llu",
              ctxs[i], (unsigned long long)got, (unsigned long long)want);
        mt_place_plan_free(&plan);
        rc = plan_make(&t, nodes, 4, &p, &plan);
        check_plan("work: context, full nodes", &t, nodes, 4, &p, &plan, rc);
        CHECK((rc == 0) == (ctxs[i] == 0), "work: %d positions on full nodes: rc %d '%s'", ctxs[i],
              rc, plan.reason);
        mt_place_plan_free(&plan);
    }
    p.n_ctx = 1;
    rc = plan_make(&t, nodes, 4, &p, &plan);
    CHECK(rc == MT_PLACE_SHORT, "work: 1 position on full nodes: rc %d", rc);
    mt_place_plan_free(&plan);

    /* the attention part of a layer fits nowhere with its working memory */
    p.n_ctx = 25000; /* 4 x 25000 x 10 kB = 1.0 GB: the last stage keeps 1.2 GB */
    rc = plan_make(&t, big, 4, &p, &plan);
    check_plan("work: 25000 positions", &t, big, 4, &p, &plan, rc);
    CHECK(rc == 0 && plan.largest_need >= 1200 * MB, "work: 25000 positions: rc %d '%s'", rc,
          plan.reason);
    mt_place_plan_free(&plan);
    p.n_ctx = 50000; /* 2.0 GB: with the 200 MB attention more than any node */
    rc = plan_make(&t, big, 4, &p, &plan);
    CHECK(rc == MT_PLACE_SHORT &&
              strstr(plan.reason, "the attention part of layer 3 (200.0 MB + 2.0 GB working"
                                  " memory) fits on no available node (the largest holds 2.0 GB)"),
          "work: 50000 positions: rc %d '%s'", rc, plan.reason);
    mt_place_plan_free(&plan);

    /* spares: one that holds the largest shard but not its working memory
     * cannot take it over */
    uint64_t st2[4] = {0, 0, 0, 50 * MB};
    p.state_bytes = st2;
    p.position_bytes = NULL;
    p.spares = 1;
    mt_place_node six[5];
    for (int i = 0; i < 4; i++) six[i] = (mt_place_node){31 + i, 1200 * MB, 2.0, true, {0}};
    six[4] = (mt_place_node){39, 1000 * MB, 1.0, true, {0}};
    rc = plan_make(&t, six, 5, &p, &plan);
    check_plan("work: spare", &t, six, 5, &p, &plan, rc);
    const mt_place_assign *sp = mt_place_plan_find(&plan, 39);
    CHECK(rc == 0 && sp && sp->role == MT_PLACE_SPARE &&
              strstr(plan.warning, "only 0 of 1 spares can take over the largest shard (1.0 GB +"
                                   " 200.0 MB working memory)"),
          "work: spare: rc %d, node 39 a %s, warning '%s'", rc,
          sp ? mt_place_role_name(sp->role) : "none", plan.warning);
    mt_place_plan_free(&plan);

    /* bad sizes are refused, naming the field */
    uint64_t huge[4] = {0, 0, 1ull << 62, 0};
    p.state_bytes = huge;
    mt_error err = {{0}};
    CHECK(mt_place_plan_make(&t.m, nodes, 4, &p, &plan, &err) < 0 &&
              strstr(err.msg, "working memory") && strstr(err.msg, "layer 2"),
          "work: huge state: %s", err.msg);
    p.state_bytes = state;
    p.sessions = -1;
    CHECK(mt_place_plan_make(&t.m, nodes, 4, &p, &plan, &err) < 0 && strstr(err.msg, "sessions -1"),
          "work: negative sessions: %s", err.msg);
    p.sessions = 4;
    p.n_ctx = (1 << 24) + 1;
    CHECK(mt_place_plan_make(&t.m, nodes, 4, &p, &plan, &err) < 0 && strstr(err.msg, "n_ctx"),
          "work: n_ctx: %s", err.msg);

    /* swarm: expert servers hold no attention and keep no working memory */
    p = mt_place_default_params(MT_PLACE_SWARM);
    p.replicas = 1;
    p.state_bytes = state;
    rc = plan_make(&t, nodes, 4, &p, &plan);
    check_plan("work: swarm", &t, nodes, 4, &p, &plan, rc);
    CHECK(rc == 0 && plan.largest_need == plan.largest_shard, "work: swarm: rc %d", rc);
    mt_place_plan_free(&plan);
}

/* The model layer's per-layer sizes (from a file's metadata) are what the KV
 * cache of the loaded model reserves, for every layer range and context; and
 * a placement fed with them reserves, per stage, what its sessions' caches
 * reserve. A kimi-k3 model: 4 layers, MLA at 1 and 3, KDA at 0 and 2. */
static void test_work_from_model(void) {
    mt_synth_params sp = mt_synth_default_params("kimi-k3");
    sp.n_layer = 4;
    sp.mla_layers = "1,3";
    sp.n_expert = 8;
    sp.n_expert_used = 2;
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&sp, path, &err) == 0, "mkmodel kimi-k3: %s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    mt_model *m = mt_model_load(path, &err);
    CHECK(f && m, "kimi-k3: %s", err.msg);
    if (!f || !m) {
        if (f) gguf_close(f);
        mt_model_free(m);
        unlink(path);
        return;
    }
    uint64_t fixed[4], per_pos[4];
    int32_t n_ctx_train = 0;
    CHECK(mt_kv_session_bytes(f, 4, MT_KV_DEFAULT, fixed, per_pos, &n_ctx_train, &err) == 0,
          "sizes: %s", err.msg);
    /* by hand: KDA 3 x D x (K - 1) + H x hd x hd floats, MLA kv_lora + rope per position */
    const mt_hparams *hp = &m->hp;
    uint64_t D = (uint64_t)hp->n_head * (uint64_t)hp->kda_head_dim;
    uint64_t kda = 4 * (3 * D * (uint64_t)(hp->ssm_conv - 1) +
                        (uint64_t)hp->n_head * (uint64_t)hp->kda_head_dim * hp->kda_head_dim);
    /* the default cache type, f16: 2 bytes a value */
    uint64_t mla = 2 * (uint64_t)(hp->kv_lora_rank + hp->qk_rope);
    CHECK(
        fixed[0] == kda && fixed[2] == kda && fixed[1] == 0 && fixed[3] == 0 && per_pos[0] == 0 &&
            per_pos[2] == 0 && per_pos[1] == mla && per_pos[3] == mla &&
            n_ctx_train == hp->n_ctx_train,
        "sizes: fixed %llu %llu %llu %llu (KDA %llu), per position %llu %llu %llu %llu (MLA %llu)",
        (unsigned long long)fixed[0], (unsigned long long)fixed[1], (unsigned long long)fixed[2],
        (unsigned long long)fixed[3], (unsigned long long)kda, (unsigned long long)per_pos[0],
        (unsigned long long)per_pos[1], (unsigned long long)per_pos[2],
        (unsigned long long)per_pos[3], (unsigned long long)mla);
    /* the cache of every range and a few contexts */
    const int32_t ctxs[3] = {1, 7, 300};
    for (int32_t a = 0; a < 4; a++)
        for (int32_t b = a + 1; b <= 4; b++)
            for (int i = 0; i < 3; i++) {
                mt_kv_cache *kv = mt_kv_cache_new(m, a, b, ctxs[i], MT_KV_DEFAULT, &err);
                CHECK(kv != NULL, "cache %d-%d: %s", a, b, err.msg);
                if (!kv) continue;
                uint64_t want = 0, want_rec = 0;
                for (int32_t l = a; l < b; l++)
                    want += fixed[l] + (uint64_t)ctxs[i] * per_pos[l], want_rec += fixed[l];
                CHECK(mt_kv_cache_bytes(kv) == want && mt_kv_cache_rec_bytes(kv) == want_rec,
                      "cache %d-%d, %d positions: %zu bytes (%zu recurrent), sizes say %llu (%llu)",
                      a, b, ctxs[i], mt_kv_cache_bytes(kv), mt_kv_cache_rec_bytes(kv),
                      (unsigned long long)want, (unsigned long long)want_rec);
                mt_kv_cache_free(kv);
            }
    /* the other types: f32 4 bytes a value, bf16 2; KDA state stays f32. q8_0 stores blocks
     * of 32 values, which this latent (kv_lora + rope) is not cut in: refused by name */
    const struct {
        mt_kv_type t;
        uint64_t num, den;
    } per_type[] = {{MT_KV_F32, 4, 1}, {MT_KV_BF16, 2, 1}};
    for (size_t i = 0; i < sizeof per_type / sizeof per_type[0]; i++) {
        uint64_t tf[4], tp[4];
        uint64_t want =
            (uint64_t)(hp->kv_lora_rank + hp->qk_rope) * per_type[i].num / per_type[i].den;
        CHECK(mt_kv_session_bytes(f, 4, per_type[i].t, tf, tp, NULL, &err) == 0 && tf[0] == kda &&
                  tp[1] == want && tp[0] == 0,
              "sizes as %s: fixed %llu (KDA %llu), per position %llu (want %llu)",
              mt_kv_type_name(per_type[i].t), (unsigned long long)tf[0], (unsigned long long)kda,
              (unsigned long long)tp[1], (unsigned long long)want);
    }
    {
        uint64_t tf[4], tp[4];
        CHECK((hp->kv_lora_rank + hp->qk_rope) % 32 == 0 ||
                  (mt_kv_session_bytes(f, 4, MT_KV_Q8_0, tf, tp, NULL, &err) < 0 &&
                   strstr(err.msg, "blocks of 32") && strstr(err.msg, "--kv-type f16")),
              "sizes as q8_0 of a %d-wide latent: %s", hp->kv_lora_rank + hp->qk_rope, err.msg);
    }
    CHECK(mt_kv_session_bytes(f, 5, MT_KV_DEFAULT, fixed, per_pos, NULL, &err) < 0 &&
              strstr(err.msg, "block_count says 4 layers"),
          "sizes, wrong layer count: %s", err.msg);

    /* a placement of the file's layout with those sizes: each stage keeps what
     * `sessions` caches of its layers reserve */
    mt_shard_layout layout;
    CHECK(mt_shard_layout_read(f, &layout, &err) == 0, "layout: %s", err.msg);
    mt_place_model pm = mt_place_model_from_layout(&layout, hp->n_expert_used);
    uint64_t total = 0;
    for (int32_t l = 0; l < 4; l++) total += layout.attn_bytes[l] + 8 * layout.expert_bytes[l];
    /* a node holds the whole model's weights and one KDA + one MLA layer's
     * working memory, not all four layers': with the sizes no stage holds the
     * whole model */
    mt_place_node nodes[4];
    for (int i = 0; i < 4; i++)
        nodes[i] = (mt_place_node){i + 1, total + 3 * (kda + 64 * mla), 1.0, true, {0}};
    mt_place_params p = mt_place_default_params(MT_PLACE_CELL);
    p.spares = 0;
    p.sessions = 3;
    p.n_ctx = 64;
    p.state_bytes = fixed;
    p.position_bytes = per_pos;
    mt_place_plan plan;
    int rc = mt_place_plan_make(&pm, nodes, 4, &p, &plan, &err);
    CHECK(rc == 0 && plan.n_pipelines == 2, "kimi placement: rc %d (%s%s)", rc,
          rc < 0 ? err.msg : "", plan.reason);
    for (int32_t k = 0; rc >= 0 && k < plan.n_assign; k++) {
        const mt_place_assign *a = &plan.assign[k];
        mt_kv_cache *kv =
            a->attention ? mt_kv_cache_new(m, a->layer_begin, a->layer_end, 64, MT_KV_DEFAULT, &err)
                         : NULL;
        uint64_t want = 3 * (uint64_t)mt_kv_cache_bytes(kv);
        CHECK(a->work_bytes == want && a->bytes + a->work_bytes <= nodes[0].capacity &&
                  (!a->attention || a->layer_end - a->layer_begin < 4),
              "kimi placement: node %lld (layers %d-%d) keeps %llu, 3 caches reserve %llu",
              (long long)a->node, a->layer_begin, a->layer_end, (unsigned long long)a->work_bytes,
              (unsigned long long)want);
        mt_kv_cache_free(kv);
    }
    if (rc >= 0) mt_place_plan_free(&plan);
    mt_shard_layout_free(&layout);

    /* a GQA model (qwen3moe): K and V rows per position, no fixed state */
    mt_synth_params q = mt_synth_default_params("qwen3moe");
    const char *qpath = check_tmp(".gguf");
    CHECK(mt_synth_write(&q, qpath, &err) == 0, "mkmodel qwen3moe: %s", err.msg);
    gguf_file *qf = gguf_open(qpath, &err);
    mt_model *qm = mt_model_load(qpath, &err);
    if (qf && qm) {
        int32_t L = qm->hp.n_layer;
        uint64_t qfixed[16], qpos[16];
        CHECK(L <= 16 && mt_kv_session_bytes(qf, L, MT_KV_DEFAULT, qfixed, qpos, NULL, &err) == 0,
              "qwen3moe: %s", err.msg);
        mt_kv_cache *kv = mt_kv_cache_new(qm, 0, L, 10, MT_KV_DEFAULT, &err);
        uint64_t row = 2 * 2 * (uint64_t)qm->hp.n_head_kv * (uint64_t)qm->hp.head_dim_k; /* f16 */
        CHECK(kv && qfixed[0] == 0 && qpos[0] == row && mt_kv_cache_bytes(kv) == 10 * L * row,
              "qwen3moe: fixed %llu, per position %llu (want %llu), cache %zu",
              (unsigned long long)qfixed[0], (unsigned long long)qpos[0], (unsigned long long)row,
              mt_kv_cache_bytes(kv));
        mt_kv_cache_free(kv);
    }
    if (qf) gguf_close(qf);
    mt_model_free(qm);
    unlink(qpath);
    gguf_close(f);
    mt_model_free(m);
    unlink(path);
}

/* --------------------------------------------------------------- balance */

static void print_balance(void) {
    test_model t;
    model_deepseek(&t);
    const int32_t sizes[] = {48, 100, 200, 300};
    printf("balance (DeepSeek-V3-like, 377 GB; model estimates at 10 GB/s per unit speed):\n");
    for (int mode = 0; mode < 2; mode++)
        for (int32_t si = 0; si < 4; si++) {
            mt_place_node *nodes = fleet(4242 + (uint64_t)si, sizes[si]);
            mt_place_params p = mt_place_default_params(mode ? MT_PLACE_SWARM : MT_PLACE_CELL);
            mt_place_plan plan;
            int rc = plan_make(&t, nodes, sizes[si], &p, &plan);
            check_plan("balance", &t, nodes, sizes[si], &p, &plan, rc);
            printf("  %-5s %3d nodes: %d %s, %d spares%s%s\n", mt_place_mode_name(p.mode),
                   sizes[si], plan.n_pipelines, mode ? "replicas" : "pipelines", plan.n_spares,
                   plan.reason[0] ? "; " : "", plan.reason);
            for (int32_t i = 0; i < plan.n_pipelines; i++) {
                const mt_place_pipeline *pp = &plan.pipelines[i];
                printf("    %s %d: %3d nodes, %3d %s, slowest %.3f ms, average %.3f ms "
                       "(slowest/average %.2f), token latency %.2f ms\n",
                       mode ? "replica" : "pipeline", pp->index, pp->n_nodes, pp->n_groups,
                       mode ? "servers" : "groups", pp->slowest_ms, pp->average_ms,
                       pp->slowest_ms / pp->average_ms, pp->latency_ms);
                /* bisection makes the slowest close to the typical group */
                CHECK(pp->slowest_ms <= 4 * pp->average_ms, "balance: %s %d slowest/average %.2f",
                      mode ? "replica" : "pipeline", pp->index, pp->slowest_ms / pp->average_ms);
            }
            mt_place_plan_free(&plan);
            free(nodes);
        }
}

int main(void) {
    test_equal_nodes();
    test_pairing();
    test_speed();
    test_short();
    test_bad_input();
    test_routes_hand();
    test_keep_hand();
    test_work_hand();
    test_work_from_model();
    test_fleets();
    test_water_fill();
    test_objectives_hand();
    test_objectives_fleets();
    test_goal_hand();
    test_goal_fleets();
    print_balance();
    return check_report("test_placement");
}

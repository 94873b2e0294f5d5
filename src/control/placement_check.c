/* placement_check.c - the placement engine's input checks (every size,
 * count and byte figure of the model, the nodes and the parameters, before
 * anything is planned) and the context it plans in: per-layer prefix sums of
 * attention, expert and working-memory bytes. */
#include "placement_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ validation */

/* Working memory of layer il's attention part: sessions x (state + n_ctx x
 * position bytes); false when that overflows 64 bits. */
static bool layer_work(const mt_place_params *p, int32_t il, uint64_t *out) {
    uint64_t state = p->state_bytes ? p->state_bytes[il] : 0;
    uint64_t pos = p->position_bytes ? p->position_bytes[il] : 0, per_session;
    *out = 0;
    if (p->sessions <= 0) return true;
    return !__builtin_mul_overflow(pos, (uint64_t)(p->n_ctx > 0 ? p->n_ctx : 0), &per_session) &&
           !__builtin_add_overflow(per_session, state, &per_session) &&
           !__builtin_mul_overflow(per_session, (uint64_t)p->sessions, out);
}

int pl_check_inputs(const mt_place_model *m, const mt_place_node *nodes, int32_t n,
                    const mt_place_params *p, mt_error *err) {
    if (!m || !p || (n > 0 && !nodes) || n < 0)
        return mt_error_set(err, "placement: model, params and %d nodes are required", n);
    if (m->n_layer < 1 || m->n_layer > 100000)
        return mt_error_set(err, "placement: n_layer %d is outside 1..100000", m->n_layer);
    if (m->n_expert < 0 || m->n_expert > 100000)
        return mt_error_set(err, "placement: n_expert %d is outside 0..100000", m->n_expert);
    if (!m->attn_bytes || !m->expert_bytes)
        return mt_error_set(err, "placement: the model's attn_bytes and expert_bytes are required");
    if (m->n_expert > 0 && (m->n_expert_used < 1 || m->n_expert_used > m->n_expert))
        return mt_error_set(err, "placement: n_expert_used %d must be in 1..%d (n_expert)",
                            m->n_expert_used, m->n_expert);
    uint64_t total = 0;
    bool moe = false;
    for (int32_t il = 0; il < m->n_layer; il++) {
        uint64_t e = m->expert_bytes[il], x;
        if (e > 0 && m->n_expert == 0)
            return mt_error_set(err,
                                "placement: layer %d has routed expert bytes but the model has no"
                                " experts (n_expert 0)",
                                il);
        moe |= e > 0;
        if (__builtin_mul_overflow(e, (uint64_t)m->n_expert, &x) ||
            __builtin_add_overflow(total, x, &total) ||
            __builtin_add_overflow(total, m->attn_bytes[il], &total) || total > (1ull << 62))
            return mt_error_set(err,
                                "placement: the model's sizes add up past 2^62 bytes at layer"
                                " %d; check attn_bytes and expert_bytes",
                                il);
    }
    if (p->mode != MT_PLACE_CELL && p->mode != MT_PLACE_SWARM)
        return mt_error_set(err, "placement: mode %d is neither cell nor swarm", (int)p->mode);
    if (p->mode == MT_PLACE_SWARM && !moe)
        return mt_error_set(err, "placement: swarm mode places routed experts and this model has"
                                 " none; use cell mode");
    if (p->replicas < 1 || p->replicas > 1024)
        return mt_error_set(err, "placement: replicas %d is outside 1..1024", p->replicas);
    if (p->spares < 0 || p->spares > 1000000)
        return mt_error_set(err, "placement: spares %d is outside 0..1000000", p->spares);
    if (p->max_group < 1 || p->max_group > PL_MAX_GROUP)
        return mt_error_set(err, "placement: max_group %d is outside 1..%d", p->max_group,
                            PL_MAX_GROUP);
    if (!(p->bytes_per_ms > 0) || !isfinite(p->bytes_per_ms))
        return mt_error_set(err, "placement: bytes_per_ms must be a positive number");
    if (!(p->partner_call_ms >= 0) || !isfinite(p->partner_call_ms))
        return mt_error_set(err, "placement: partner_call_ms must be a number >= 0");
    if (!(p->hop_ms >= 0) || !isfinite(p->hop_ms))
        return mt_error_set(err, "placement: hop_ms must be a number >= 0");
    if (!(p->latency_goal_ms >= 0) || !isfinite(p->latency_goal_ms) || p->latency_goal_ms > 1e9)
        return mt_error_set(err,
                            "placement: latency_goal_ms %g must be a number in 0..1e9 ms (0: no"
                            " goal)",
                            p->latency_goal_ms);
    if (p->latency_goal_ms > 0 && p->mode != MT_PLACE_CELL)
        return mt_error_set(err, "placement: a latency goal applies to cell mode only; swarm"
                                 " requesters keep the backbone and choose no pipelines");
    if (p->objective != MT_PLACE_THROUGHPUT && p->objective != MT_PLACE_LATENCY &&
        p->objective != MT_PLACE_BALANCED)
        return mt_error_set(err, "placement: objective %d is not throughput, latency or balanced",
                            (int)p->objective);
    if (p->state_bytes || p->position_bytes) {
        if (p->sessions < 0 || p->sessions > (1 << 20))
            return mt_error_set(err, "placement: sessions %d is outside 0..2^20", p->sessions);
        if (p->n_ctx < 0 || p->n_ctx > (1 << 24))
            return mt_error_set(err, "placement: n_ctx %d is outside 0..2^24", p->n_ctx);
        for (int32_t il = 0; il < m->n_layer; il++) {
            uint64_t w;
            if (!layer_work(p, il, &w) || __builtin_add_overflow(total, w, &total) ||
                total > (1ull << 62))
                return mt_error_set(err,
                                    "placement: the model's sizes and working memory (%d sessions"
                                    " x %d positions) add up past 2^62 bytes at layer %d; check"
                                    " state_bytes and position_bytes",
                                    p->sessions, p->n_ctx, il);
        }
    }
    if (n > (1 << 20)) return mt_error_set(err, "placement: %d nodes is more than 2^20", n);
    for (int32_t i = 0; i < n; i++) {
        if (!(nodes[i].speed > 0) || !isfinite(nodes[i].speed) || nodes[i].speed > 1e9)
            return mt_error_set(err, "placement: node %lld has speed %g; it must be in (0, 1e9]",
                                (long long)nodes[i].id, nodes[i].speed);
        if (nodes[i].capacity > (1ull << 43)) /* so that sums over 2^20 nodes fit 64 bits */
            return mt_error_set(err,
                                "placement: node %lld has capacity %llu bytes; at most 2^43 (8 TiB)"
                                " is supported",
                                (long long)nodes[i].id, (unsigned long long)nodes[i].capacity);
    }
    int64_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) return mt_error_set(err, "out of memory");
    for (int32_t i = 0; i < n; i++) ids[i] = nodes[i].id;
    int rc = 0;
    /* shell sort (gaps n/2, n/4, ...), then neighbours must differ */
    for (int32_t gap = n / 2; gap > 0; gap /= 2)
        for (int32_t i = gap; i < n; i++)
            for (int32_t j = i; j >= gap && ids[j - gap] > ids[j]; j -= gap) {
                int64_t t = ids[j];
                ids[j] = ids[j - gap];
                ids[j - gap] = t;
            }
    for (int32_t i = 1; i < n && !rc; i++)
        if (ids[i] == ids[i - 1])
            rc = mt_error_set(err, "placement: node id %lld is listed twice; ids must be unique",
                              (long long)ids[i]);
    free(ids);
    return rc;
}

int pl_ctx_init(pl_ctx *c, const mt_place_model *m, const mt_place_node *nodes, int32_t n,
                const mt_place_params *p) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->nodes = nodes;
    c->n_nodes = n;
    c->p = p;
    c->L = m->n_layer;
    c->X = m->n_expert;
    c->U = m->n_expert > 0 ? m->n_expert_used : 0;
    c->attn_pre = calloc((size_t)c->L + 1, sizeof *c->attn_pre);
    c->exp_pre = calloc((size_t)c->L + 1, sizeof *c->exp_pre);
    c->moe_pre = calloc((size_t)c->L + 1, sizeof *c->moe_pre);
    c->work_pre = calloc((size_t)c->L + 1, sizeof *c->work_pre);
    if (!c->attn_pre || !c->exp_pre || !c->moe_pre || !c->work_pre) return -1;
    for (int32_t il = 0; il < c->L; il++) {
        uint64_t w;
        layer_work(p, il, &w); /* check_inputs saw it fit */
        c->attn_pre[il + 1] = c->attn_pre[il] + m->attn_bytes[il];
        c->exp_pre[il + 1] = c->exp_pre[il] + m->expert_bytes[il];
        c->moe_pre[il + 1] = c->moe_pre[il] + (m->expert_bytes[il] > 0);
        c->work_pre[il + 1] = c->work_pre[il] + w;
    }
    c->experts_bytes = (uint64_t)c->X * c->exp_pre[c->L];
    c->model_bytes = c->attn_pre[c->L] + c->experts_bytes;
    c->model_need = c->model_bytes + c->work_pre[c->L];
    return 0;
}

void pl_ctx_free(pl_ctx *c) {
    free(c->attn_pre);
    free(c->exp_pre);
    free(c->moe_pre);
    free(c->work_pre);
}

/* node_partner.c - paired layers: a node holding a layer's attention part
 * and some of its routed experts runs the other experts on partner nodes
 * (remote.h), through an expert dispatch table (expert_dispatch.h). A
 * partner whose connection broke is reconnected once on its next use and
 * must come back holding the same experts. */
#include "node_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- partners (paired layers) -------------------------------------------------------- */

static int partner_connect(node_partner *p, mt_error *err) {
    mt_node *n = p->node;
    mt_remote *r = mt_remote_connect(p->addr, p->pk, &n->keys, n->cfg.timeout_ms, 0, err);
    if (!r) return -1;
    const mt_proto_info *pi = mt_remote_info(r);
    int rc = 0;
    if (strcmp(pi->source_id, n->info.source_id) != 0)
        rc = mt_error_set(err, "it holds a different model (source_id %.16s..., here %.16s...)",
                          pi->source_id, n->info.source_id);
    else if (!pi->experts || pi->layer_begin > n->info.layer_begin ||
             pi->layer_end < n->info.layer_end)
        rc = mt_error_set(err,
                          "it holds %s of layers [%d, %d); this node needs experts of layers"
                          " [%d, %d)",
                          pi->experts ? "experts" : "no routed experts", pi->layer_begin,
                          pi->layer_end, n->info.layer_begin, n->info.layer_end);
    else if (p->held && (pi->n_held != p->n_held ||
                         memcmp(pi->held, p->held, (size_t)p->n_held * sizeof(int32_t)) != 0))
        rc = mt_error_set(err, "it came back holding other experts than before");
    if (rc) {
        mt_remote_close(r);
        return -1;
    }
    if (!p->held) {
        p->n_held = pi->n_held;
        p->held = malloc((size_t)(pi->n_held > 0 ? pi->n_held : 1) * sizeof(int32_t));
        if (!p->held) {
            mt_remote_close(r);
            return mt_error_set(err, "out of memory");
        }
        memcpy(p->held, pi->held, (size_t)pi->n_held * sizeof(int32_t));
    }
    mt_remote_close(p->r);
    p->r = r;
    return 0;
}

/* mt_expert_backend run() for a partner: reconnects once if the connection broke. */
static int partner_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                       float *y, mt_pool *pool, mt_error *err) {
    node_partner *p = ctx;
    if ((!p->r || !mt_remote_is_open(p->r)) && partner_connect(p, err)) {
        mt_error_prefix(err, "partner %s", p->addr);
        return -1;
    }
    int rc = mt_remote_experts_run(p->r, il, n, ids, u, y, pool, err);
    if (rc) mt_error_prefix(err, "partner %s", p->addr);
    return rc;
}

/* Builds the expert table of a node holding attention: its own experts and
 * its partners'; every expert of its MoE layers must be held by someone. */
int node_setup_experts(mt_node *n, const mt_node_config *cfg, mt_error *err) {
    const mt_model *m = n->model;
    bool moe = false;
    for (int32_t il = m->layer_begin; il < m->layer_end; il++) moe |= m->layers[il].is_moe;
    if (cfg->n_partners > 0 && (!m->has_attention || !moe))
        return mt_error_set(err,
                            "partners are for paired layers (attention + some experts of MoE"
                            " layers); this shard has %s",
                            m->has_attention ? "no MoE layers" : "no attention part");
    if (!m->has_attention || !moe) return 0;
    if (cfg->n_partners == 0) {
        if (m->has_experts && m->n_local_experts == m->hp.n_expert) return 0;
        return mt_error_set(err,
                            "this shard holds the attention part of MoE layers but %d of %d"
                            " routed experts; give --partner ADDR=KEY for nodes holding the rest",
                            m->has_experts ? m->n_local_experts : 0, m->hp.n_expert);
    }
    if (mt_expert_dispatch_init(&n->dispatch, &m->hp, err)) return -1;
    n->use_dispatch = true;
    if (m->has_experts && mt_expert_dispatch_add_model(&n->dispatch, m, err)) return -1;
    n->partners = calloc((size_t)cfg->n_partners, sizeof *n->partners);
    if (!n->partners) return mt_error_set(err, "out of memory");
    n->n_partners = cfg->n_partners;
    for (int i = 0; i < cfg->n_partners; i++) {
        node_partner *p = &n->partners[i];
        p->node = n;
        snprintf(p->addr, sizeof p->addr, "%s", cfg->partners[i].addr);
        memcpy(p->pk, cfg->partners[i].pk, MT_KEYS_PUBLIC_BYTES);
        if (partner_connect(p, err)) {
            mt_error_prefix(err, "partner %s", p->addr);
            return -1;
        }
        mt_expert_backend b = {partner_run, p, true}; /* pool unused: see remote.h */
        if (mt_expert_dispatch_add(&n->dispatch, b, p->held, p->n_held, err)) {
            mt_error_prefix(err, "partner %s", p->addr);
            return -1;
        }
    }
    int32_t missing[64], n_missing = 0, total = 0;
    for (int32_t e = 0; e < n->dispatch.n_expert; e++)
        if (n->dispatch.owner[e] < 0) {
            if (n_missing < 64) missing[n_missing++] = e;
            total++;
        }
    if (total) {
        char ids[512];
        node_format_ids(missing, n_missing, ids, sizeof ids);
        return mt_error_set(err, "%d routed experts (%s%s) are held neither here nor by a partner",
                            total, ids, total > n_missing ? ",..." : "");
    }
    return 0;
}

void node_partners_free(mt_node *n) {
    for (int i = 0; i < n->n_partners; i++) {
        mt_remote_close(n->partners[i].r);
        free(n->partners[i].held);
    }
    free(n->partners);
    n->partners = NULL;
    n->n_partners = 0;
}

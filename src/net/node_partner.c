/* node_partner.c - paired layers: a node holding a layer's attention part
 * and some of its routed experts runs the other experts on partner nodes
 * (expert_remote.h), through an expert dispatch table (expert_dispatch.h)
 * that calls the partners concurrently beside the node's own experts. A
 * partner whose connection broke is reconnected once on its next use and
 * must come back holding the same experts. */
#include "node_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- partners (paired layers) -------------------------------------------------------- */

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
    for (int i = 0; i < cfg->n_partners; i++) {
        expert_remote_config xc = {.role = "partner",
                                   .addr = cfg->partners[i].addr,
                                   .pk = cfg->partners[i].pk,
                                   .keys = &n->keys,
                                   .timeout_ms = n->cfg.timeout_ms,
                                   .wire = MT_PROTO_F32,
                                   .source_id = n->info.source_id,
                                   .n_embd = n->info.n_embd,
                                   .n_embd_exp = n->info.n_embd_exp,
                                   .n_layer = n->info.n_layer,
                                   .layer_begin = n->info.layer_begin,
                                   .layer_end = n->info.layer_end};
        expert_remote *p = &n->partners[i];
        if (expert_remote_open(p, &xc, err)) return -1;
        n->n_partners++;
        if (mt_expert_dispatch_add(&n->dispatch, expert_remote_backend(p), p->held, p->n_held,
                                   err)) {
            mt_error_prefix(err, "partner %s", p->addr);
            return -1;
        }
    }
    int32_t missing[64], n_missing = 0, total = 0;
    for (int32_t e = 0; e < n->dispatch.n_expert; e++) {
        bool held = true;
        for (int32_t il = m->layer_begin; il < m->layer_end; il++)
            held &= !m->layers[il].is_moe || mt_expert_dispatch_owner(&n->dispatch, il, e) >= 0;
        if (!held) {
            if (n_missing < 64) missing[n_missing++] = e;
            total++;
        }
    }
    if (total) {
        char ids[512];
        expert_ids_format(missing, n_missing, ids, sizeof ids);
        return mt_error_set(err, "%d routed experts (%s%s) are held neither here nor by a partner",
                            total, ids, total > n_missing ? ",..." : "");
    }
    return 0;
}

void node_partners_free(mt_node *n) {
    for (int i = 0; i < n->n_partners; i++) expert_remote_close(&n->partners[i]);
    free(n->partners);
    n->partners = NULL;
    n->n_partners = 0;
}

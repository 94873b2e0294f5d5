/* node_chain.c - a stage node's part in a chained STAGE_FORWARD (proto.h):
 * the request is computed by the worker like any other, then this node
 * sends the rows, with the remaining hops, to the first hop (as a client
 * with its own key, pinned to the hop's key) and answers with that hop's
 * reply, so the result travels back along the chain to the requester.
 *
 * The downstream call runs on the connection's reader thread, never in the
 * worker: the worker goes on batching other sessions while a chain waits on
 * the network. The reader would only have waited for this reply's requester
 * anyway (a requester has one request on the wire per connection). Next-hop
 * connections are kept in a small table (one per address and key), shared
 * by all readers; a broken one is reconnected once per call. */
#include "node_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table entry for a hop (created unconnected when new); NULL when the
 * table is full. */
static node_hop *hop_get(mt_node *n, const mt_proto_hop *h) {
    node_hop *e = NULL;
    pthread_mutex_lock(&n->lock);
    for (int i = 0; i < n->n_hops && !e; i++)
        if (strcmp(n->hops[i]->addr, h->addr) == 0 &&
            memcmp(n->hops[i]->pk, h->pk, MT_KEYS_PUBLIC_BYTES) == 0)
            e = n->hops[i];
    if (!e && n->n_hops < NODE_MAX_HOPS && (e = calloc(1, sizeof *e))) {
        snprintf(e->addr, sizeof e->addr, "%s", h->addr);
        memcpy(e->pk, h->pk, MT_KEYS_PUBLIC_BYTES);
        pthread_mutex_init(&e->lock, NULL);
        n->hops[n->n_hops++] = e;
    }
    pthread_mutex_unlock(&n->lock);
    return e;
}

void node_hops_free(mt_node *n) {
    for (int i = 0; i < n->n_hops; i++) {
        mt_remote_close(n->hops[i]->r);
        pthread_mutex_destroy(&n->hops[i]->lock);
        free(n->hops[i]);
    }
    n->n_hops = 0;
}

/* Connects e (e->lock held). */
static int hop_connect(mt_node *n, node_hop *e, mt_error *err) {
    mt_remote_close(e->r);
    mt_keys me;
    node_identity(n, &me); /* the certificate as it is now (it may have been renewed) */
    e->r = mt_remote_connect(e->addr, e->pk, &me, n->cfg.timeout_ms, 0, err);
    mt_keys_wipe(&me);
    if (!e->r) return -1;
    /* the rows passed on are this model's whole hidden states: the hop must hold the same */
    const mt_proto_info *h = mt_remote_info(e->r), *in = &n->info;
    if (strcmp(h->source_id, in->source_id) != 0 || h->n_embd != in->n_embd ||
        h->n_layer != in->n_layer || h->res_block != in->res_block) {
        mt_error_set(err, "it holds another model (source_id %.16s..., this node's %.16s...)",
                     h->source_id, in->source_id);
        mt_remote_close(e->r);
        e->r = NULL;
        return -1;
    }
    return 0;
}

/* The downstream call: rows (n_tok, W: whole hidden states) in place. 0, or -1 with *code
 * (0 for a transport failure) and err. */
static int forward(mt_node *n, const mt_proto_msg *m, float *rows, uint32_t *code, mt_error *err) {
    const mt_proto_hop *h = &m->hops[0];
    *code = 0;
    node_hop *e = hop_get(n, h);
    if (!e) {
        *code = MT_PROTO_ERR_BUSY;
        return mt_error_set(err, "this node keeps at most %d next-hop connections", NODE_MAX_HOPS);
    }
    pthread_mutex_lock(&e->lock);
    int rc = e->r ? 0 : hop_connect(n, e, err);
    for (int attempt = 0; rc == 0; attempt++) {
        rc = mt_remote_stage_chain(e->r, m->session, h->layer_begin, h->layer_end, m->hops + 1,
                                   m->n_hops - 1, m->speculative, m->pos, m->n, rows, m->dtype,
                                   code, err);
        if (rc == 0 || *code != 0 || mt_remote_is_open(e->r) || attempt > 0) break;
        mt_error e2 = {{0}}; /* the connection broke: reconnect once and retry */
        if (hop_connect(n, e, &e2)) {
            char first[sizeof err->msg];
            snprintf(first, sizeof first, "%s", err->msg);
            mt_error_set(err, "%.300s; reconnecting failed too: %.200s", first, e2.msg);
            break;
        }
        rc = 0;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

void node_chain(node_client *c, mt_proto_msg *m) {
    mt_node *n = c->node;
    /* the reader keeps the hops and positions; the worker gets a plain request */
    mt_proto_msg keep = *m;
    keep.rows = NULL;
    keep.ids = NULL;
    keep.info.held = NULL;
    keep.pos = malloc((size_t)m->n * sizeof(int32_t));
    if (!keep.pos) {
        node_send_error(c, m->request_id, MT_PROTO_ERR_BUSY, "out of memory; retry later");
        mt_proto_msg_free(m);
        return;
    }
    memcpy(keep.pos, m->pos, (size_t)m->n * sizeof(int32_t));
    m->hops = NULL;
    m->n_hops = 0;
    node_fwd fwd = {0};
    if (node_enqueue(c, m, &fwd)) {
        pthread_mutex_lock(&n->lock);
        while (!fwd.done) pthread_cond_wait(&n->fwd_cv, &n->lock);
        pthread_mutex_unlock(&n->lock);
    }
    if (fwd.rows) { /* computed here (else the worker already sent an ERROR) */
        mt_error err = {{0}};
        uint32_t code = 0;
        if (forward(n, &keep, fwd.rows, &code, &err)) {
            node_send_error(c, keep.request_id, code ? code : MT_PROTO_ERR_COMPUTE,
                            "next hop %s (layers [%d, %d)): %s", keep.hops[0].addr,
                            keep.hops[0].layer_begin, keep.hops[0].layer_end, err.msg);
        } else {
            /* the stream and every checkpoint banked from this node's first layer on */
            const mt_proto_info *in = &n->info;
            int32_t end = keep.hops[keep.n_hops - 1].layer_end;
            int32_t cols = mt_proto_cols_out(in, keep.layer_begin, end);
            float *out = malloc((size_t)keep.n * (size_t)cols * sizeof(float));
            if (!out) {
                node_send_error(c, keep.request_id, MT_PROTO_ERR_BUSY, "out of memory; retry");
            } else {
                mt_proto_pack_out(in, keep.layer_begin, end, keep.n, fwd.rows, out);
                mt_proto_msg r = {.type = MT_PROTO_STAGE_REPLY,
                                  .request_id = keep.request_id,
                                  .dtype = keep.dtype,
                                  .n = keep.n,
                                  .cols = cols,
                                  .rows = out};
                node_send_msg(c, &r);
                free(out);
            }
        }
    }
    free(fwd.rows);
    mt_proto_msg_free(&keep);
}

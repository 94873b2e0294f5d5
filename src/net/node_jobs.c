/* node_jobs.c - what a node does with a request once its reader has decoded
 * it (node_internal.h): checks it against what the node holds, queues it as
 * a job for the worker (node_worker.c), sends
 * replies and errors on the client's connection, and lets go of the client
 * when its last job is done. The reader and accept threads and start/stop
 * are in node_server.c. */
#include "moontail/clock.h"
#include "moontail/generate.h"
#include "moontail/shard.h"
#include "moontail/transport.h"
#include "node_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- identity and replies ----------------------------------------------------------- */

void node_identity(mt_node *n, mt_keys *out) {
    pthread_mutex_lock(&n->id_lock);
    *out = n->keys;
    pthread_mutex_unlock(&n->id_lock);
}

/* Sends one encoded message (and frees it). A failed send breaks only this
 * connection; its reader then ends. */
static void node_client_send(node_client *c, uint8_t *buf, size_t len) {
    if (!buf) return;
    mt_error err = {{0}};
    pthread_mutex_lock(&c->send_lock);
    int rc = mt_conn_send(c->conn, buf, len, &err);
    pthread_mutex_unlock(&c->send_lock);
    free(buf);
    if (rc) mt_log_as(&c->node->log, MT_LOG_WARN, "reply to %s failed: %s", c->peer, err.msg);
}

/* An ERROR reply (back >= 0: naming the failed stage of a one-way pass). */
static void send_error(node_client *c, uint64_t request_id, uint32_t code, int32_t back,
                       const char *text) {
    mt_node *n = c->node;
    pthread_mutex_lock(&n->lock);
    n->stats.errors++;
    pthread_mutex_unlock(&n->lock);
    mt_log_as(&n->log, MT_LOG_WARN, "request %llu from %s: error %u: %s",
              (unsigned long long)request_id, c->peer, code, text);
    mt_proto_msg m = {.type = MT_PROTO_ERROR,
                      .request_id = request_id,
                      .code = code,
                      .has_back = back >= 0,
                      .back = back};
    snprintf(m.text, sizeof m.text, "%s", text);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (mt_proto_encode(&m, &buf, &len, NULL) == 0) node_client_send(c, buf, len);
}

void node_send_error(node_client *c, uint64_t request_id, uint32_t code, const char *fmt, ...) {
    char text[MT_PROTO_MAX_TEXT + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    send_error(c, request_id, code, -1, text);
}

void node_send_stage_error(node_client *c, uint64_t request_id, uint32_t code, int32_t back,
                           const char *text) {
    send_error(c, request_id, code, back, text);
}

void node_send_msg(node_client *c, const mt_proto_msg *m) {
    uint8_t *buf;
    size_t len;
    mt_error err = {{0}};
    if (mt_proto_encode(m, &buf, &len, &err))
        node_send_error(c, m->request_id, MT_PROTO_ERR_COMPUTE, "cannot encode the reply: %s",
                        err.msg);
    else
        node_client_send(c, buf, len);
}

/* ---- clients ------------------------------------------------------------------------ */

/* Drops one reference (node->lock held); the last one frees the client. */
void node_client_unref_locked(node_client *c) {
    mt_node *n = c->node;
    if (--c->refs > 0) return;
    if (c->prev)
        c->prev->next = c->next;
    else
        n->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->conn) mt_conn_close(c->conn);
    if (c->wake_fd != MT_SOCK_NONE) mt_sock_close(c->wake_fd);
    pthread_mutex_destroy(&c->send_lock);
    free(c);
}

/* A queued request is finished (replied to). */
void node_job_done(node_job *j) {
    node_client *c = j->client;
    mt_node *n = c->node;
    uint64_t bytes = j->bytes;
    mt_proto_msg_free(&j->msg);
    free(j->out);
    free(j);
    pthread_mutex_lock(&n->lock);
    c->inflight--;
    c->inflight_bytes -= bytes;
    pthread_cond_broadcast(&n->client_cv);
    node_client_unref_locked(c);
    pthread_mutex_unlock(&n->lock);
}

/* Checks a decoded request against what this node holds (before queueing):
 * 0, or -1 with *code and err. Session state is checked by the worker. */
int node_check_request(mt_node *n, const mt_proto_msg *m, uint32_t *code, mt_error *err) {
    const mt_model *md = n->model;
    const mt_proto_info *in = &n->info;
    *code = MT_PROTO_ERR_NOT_HELD;
    if (m->type == MT_PROTO_STAGE_FORWARD) {
        if (!md->has_attention)
            return mt_error_set(err,
                                "this node holds no attention part (routed experts of layers"
                                " [%d, %d) only): send it EXPERT_RUN, not STAGE_FORWARD",
                                in->layer_begin, in->layer_end);
        if (m->layer_begin < in->layer_begin || m->layer_end > in->layer_end)
            return mt_error_set(err,
                                "this node holds layers [%d, %d); STAGE_FORWARD asked for layers"
                                " [%d, %d)",
                                in->layer_begin, in->layer_end, m->layer_begin, m->layer_end);
        *code = MT_PROTO_ERR_BAD_REQUEST;
        int32_t end = m->n_hops ? m->hops[m->n_hops - 1].layer_end : m->layer_end;
        if (end > in->n_layer)
            return mt_error_set(err, "layers up to %d were asked for; the model has %d", end,
                                in->n_layer);
        if (m->oneway && end != in->n_layer)
            return mt_error_set(err,
                                "a one-way pass must end at the model's last layer (%d), not at"
                                " layer %d: its last stage answers the requester",
                                in->n_layer, end);
        /* a speculative pass keeps a copy of the KDA states per token: only as long as the
         * longest check a requester makes (the last token and MT_GEN_MAX_DRAFT guesses) */
        if (m->speculative && (m->n > 1 + MT_GEN_MAX_DRAFT || m->pos[0] == 0))
            return mt_error_set(err,
                                "a speculative pass continues a session with at most %d tokens;"
                                " this one starts at %d with %d",
                                1 + MT_GEN_MAX_DRAFT, m->pos[0], m->n);
        if (m->cols != mt_proto_cols_in(in, m->layer_begin))
            return mt_error_set(err,
                                "rows into layer %d must have %d values (the stream and %d"
                                " attention-residual checkpoints), not %d",
                                m->layer_begin, mt_proto_cols_in(in, m->layer_begin),
                                mt_proto_banked(in, m->layer_begin), m->cols);
        for (int32_t i = 1; i < m->n; i++)
            if (m->pos[i] != m->pos[i - 1] + 1)
                return mt_error_set(err,
                                    "positions must be consecutive: token %d is at position %d"
                                    " after %d",
                                    i, m->pos[i], m->pos[i - 1]);
        *code = MT_PROTO_ERR_POSITION;
        if ((int64_t)m->pos[0] + m->n > in->n_ctx)
            return mt_error_set(err,
                                "positions [%d, %d) exceed this node's context of %d positions"
                                " per session",
                                m->pos[0], m->pos[0] + m->n, in->n_ctx);
        return 0;
    }
    if (m->type == MT_PROTO_EXPERT_RUN) {
        int32_t il = m->layer_begin;
        if (!md->has_experts)
            return mt_error_set(err, "this node holds no routed experts (layers [%d, %d))",
                                in->layer_begin, in->layer_end);
        if (il < in->layer_begin || il >= in->layer_end)
            return mt_error_set(err, "layer %d is not held here: this node holds layers [%d, %d)",
                                il, in->layer_begin, in->layer_end);
        if (!md->layers[il].is_moe)
            return mt_error_set(err, "layer %d is a dense layer: it has no routed experts", il);
        if (m->cols != in->n_embd_exp) {
            *code = MT_PROTO_ERR_BAD_REQUEST;
            return mt_error_set(err, "expert rows of this model have %d values, not %d",
                                in->n_embd_exp, m->cols);
        }
        for (int32_t r = 0; r < m->n; r++) {
            int32_t e = m->ids[r];
            if (e >= in->n_expert) {
                *code = MT_PROTO_ERR_BAD_REQUEST;
                return mt_error_set(err, "expert id %d of row %d is outside the model's [0, %d)", e,
                                    r, in->n_expert);
            }
            if (mt_model_expert_slot(md, e) < 0) {
                char held[256];
                expert_ids_format(in->held, in->n_held, held, sizeof held);
                return mt_error_set(err,
                                    "expert %d of layer %d (row %d) is not held here; this node"
                                    " holds experts %s",
                                    e, il, r, held);
            }
        }
        return 0;
    }
    return 0; /* SESSION_END */
}

/* Queues a validated request for the worker (takes m's arrays); false when
 * it was answered with an ERROR instead. */
bool node_enqueue(node_client *c, mt_proto_msg *m) {
    mt_node *n = c->node;
    node_job *j = malloc(sizeof *j);
    if (!j) {
        if (m->oneway) return false; /* the caller tells the pass's last stage */
        node_send_error(c, m->request_id, MT_PROTO_ERR_BUSY, "out of memory; retry later");
        mt_proto_msg_free(m);
        return false;
    }
    j->next = NULL;
    j->done = 0;
    j->out = NULL;
    j->client = c;
    j->msg = *m;
    /* a one-way forward is limited by its rows' bytes, so that a stage can batch many
     * sessions coming from one upstream stage; a request that gets a reply by count */
    j->bytes = m->oneway ? (uint64_t)m->n * (uint64_t)m->cols * sizeof(float) : 0;
    const uint64_t max_bytes = (uint64_t)NODE_MAX_INFLIGHT_MB << 20;
    pthread_mutex_lock(&n->lock);
    while (!n->stop && (m->oneway ? c->inflight > 0 && c->inflight_bytes + j->bytes > max_bytes
                                  : c->inflight >= NODE_MAX_INFLIGHT))
        pthread_cond_wait(&n->client_cv, &n->lock);
    if (n->stop) {
        pthread_mutex_unlock(&n->lock);
        free(j);
        if (m->oneway) return false; /* the caller tells the pass's last stage */
        node_send_error(c, m->request_id, MT_PROTO_ERR_BUSY, "the node is shutting down");
        mt_proto_msg_free(m);
        return false;
    }
    c->refs++;
    c->inflight++;
    c->inflight_bytes += j->bytes;
    j->arrived_ms = mt_mono_ms_frac();
    if (n->q_tail)
        n->q_tail->next = j;
    else
        n->q_head = j;
    n->q_tail = j;
    n->stats.queued++;
    pthread_cond_signal(&n->work_cv);
    pthread_mutex_unlock(&n->lock);
    return true;
}

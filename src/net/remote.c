/* remote.c - the client side of the data plane (remote.h): a connection to
 * one node, and INFO / STAGE_FORWARD / EXPERT_RUN / SESSION_END calls over
 * it, each checked to answer exactly the request that was sent. */
#include "moontail/remote.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_remote {
    mt_conn *conn;
    pthread_mutex_t lock; /* one call at a time */
    uint64_t next_id;
    mt_proto_dtype wire; /* dtype of expert rows */
    bool broken;
    char reason[sizeof(((mt_error *)0)->msg)];
    char addr[128];
    mt_proto_info info;
};

/* ---- calls ------------------------------------------------------------------------ */

static uint16_t reply_type(uint16_t request) {
    if (request == MT_PROTO_STAGE_AWAIT) return MT_PROTO_STAGE_REPLY; /* the pass's rows */
    return (uint16_t)(request | 0x8000);
}

/* Breaks r for good with err's message (the stream is out of step). */
static int remote_break(mt_remote *r, mt_error *err) {
    if (!r->broken) {
        r->broken = true;
        snprintf(r->reason, sizeof r->reason, "%s", err ? err->msg : "failed");
    }
    return -1;
}

/* Sends req with the next request id (r->lock held); a failed send breaks r. */
static int send_msg(mt_remote *r, mt_proto_msg *m, mt_error *err) {
    if (r->broken)
        return mt_error_set(err, "node %s: connection is broken: %s", r->addr, r->reason);
    m->request_id = r->next_id++;
    uint8_t *buf;
    size_t len;
    if (mt_proto_encode(m, &buf, &len, err)) return -1;
    int rc = mt_conn_send(r->conn, buf, len, err);
    free(buf);
    if (rc) {
        mt_error_prefix(err, "node %s", r->addr);
        return remote_break(r, err);
    }
    return 0;
}

/* The call itself, with r->lock held. */
static int call_locked(mt_remote *r, mt_proto_msg *req, mt_proto_msg *reply, uint32_t *code,
                       mt_error *err) {
    if (code) *code = 0;
    memset(reply, 0, sizeof *reply);
    if (send_msg(r, req, err)) return -1;
    void *in;
    size_t len;
    int rc = mt_conn_recv(r->conn, &in, &len, err);
    if (rc == 1) mt_error_set(err, "the node closed the connection without replying");
    if (rc) {
        mt_error_prefix(err, "node %s: %s", r->addr, mt_proto_type_name(req->type));
        return remote_break(r, err);
    }
    rc = mt_proto_decode(in, len, reply, err);
    free(in);
    if (rc) {
        mt_error_prefix(err, "node %s: bad reply to %s", r->addr, mt_proto_type_name(req->type));
        return remote_break(r, err);
    }
    if (reply->request_id != req->request_id ||
        (reply->type != reply_type(req->type) && reply->type != MT_PROTO_ERROR)) {
        mt_error_set(err, "node %s: %s reply (request %llu) does not answer %s (request %llu)",
                     r->addr, mt_proto_type_name(reply->type),
                     (unsigned long long)reply->request_id, mt_proto_type_name(req->type),
                     (unsigned long long)req->request_id);
        mt_proto_msg_free(reply);
        return remote_break(r, err);
    }
    if (reply->type == MT_PROTO_ERROR) {
        if (code) *code = reply->code;
        return mt_error_set(err, "node %s: %s", r->addr, reply->text);
    }
    return 0;
}

int mt_remote_call(mt_remote *r, mt_proto_msg *req, mt_proto_msg *reply, uint32_t *code,
                   mt_error *err) {
    pthread_mutex_lock(&r->lock);
    int rc = call_locked(r, req, reply, code, err);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* A reply carrying rows must carry exactly the rows asked for, of the width
 * expected, in the same dtype. */
static int check_rows(mt_remote *r, const mt_proto_msg *reply, int32_t n, int32_t cols,
                      mt_proto_dtype dtype, mt_error *err) {
    if (reply->n == n && reply->cols == cols && reply->dtype == dtype) return 0;
    mt_error_set(err,
                 "node %s: %s has %d rows of %d values in %s; %d rows of %d in %s were asked for",
                 r->addr, mt_proto_type_name(reply->type), reply->n, reply->cols,
                 mt_proto_dtype_name(reply->dtype), n, cols, mt_proto_dtype_name(dtype));
    return remote_break(r, err);
}

int mt_remote_stage_forward(mt_remote *r, uint64_t session, int32_t layer_begin, int32_t layer_end,
                            const int32_t *pos, int32_t n_tok, float *hidden, mt_proto_dtype dtype,
                            uint32_t *code, mt_error *err) {
    return mt_remote_stage_forward_as(r, session, layer_begin, layer_end, false, pos, n_tok, hidden,
                                      dtype, code, err);
}

int mt_remote_stage_forward_as(mt_remote *r, uint64_t session, int32_t layer_begin,
                               int32_t layer_end, bool speculative, const int32_t *pos,
                               int32_t n_tok, float *hidden, mt_proto_dtype dtype, uint32_t *code,
                               mt_error *err) {
    const mt_proto_info *in = &r->info;
    const int32_t W = mt_proto_hidden_width(in), cin = mt_proto_cols_in(in, layer_begin),
                  cout = mt_proto_cols_out(in, layer_begin, layer_end);
    const int32_t chunk = mt_proto_max_rows(MT_PROTO_STAGE_FORWARD, cin, dtype);
    if (code) *code = 0;
    if (n_tok <= 0) return mt_error_set(err, "stage forward: no tokens given");
    if (layer_begin < 0 || layer_end > in->n_layer || layer_begin >= layer_end)
        return mt_error_set(err, "stage forward: layers [%d, %d) are not in the model's [0, %d)",
                            layer_begin, layer_end, in->n_layer);
    /* the wire rows, unless they are the whole hidden states */
    const int32_t n_buf = n_tok < chunk ? n_tok : chunk;
    float *rows = cin == W ? NULL : malloc((size_t)n_buf * (size_t)cin * sizeof(float));
    if (cin != W && !rows) return mt_error_set(err, "stage forward: out of memory");
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    for (int32_t t0 = 0; t0 < n_tok && rc == 0; t0 += chunk) {
        int32_t n = n_tok - t0 < chunk ? n_tok - t0 : chunk;
        float *h = hidden + (size_t)t0 * (size_t)W;
        if (rows) mt_proto_pack_in(in, layer_begin, n, h, rows);
        mt_proto_msg req = {.type = MT_PROTO_STAGE_FORWARD,
                            .session = session,
                            .dtype = dtype,
                            .n = n,
                            .cols = cin,
                            .layer_begin = layer_begin,
                            .layer_end = layer_end,
                            .speculative = speculative,
                            .pos = (int32_t *)(pos + t0),
                            .rows = rows ? rows : h};
        mt_proto_msg reply;
        rc = call_locked(r, &req, &reply, code, err);
        if (rc == 0 && (rc = check_rows(r, &reply, n, cout, dtype, err)) == 0)
            mt_proto_unpack_out(in, layer_begin, layer_end, n, reply.rows, h);
        mt_proto_msg_free(&reply);
    }
    pthread_mutex_unlock(&r->lock);
    free(rows);
    return rc;
}

/* Sends one message that gets no reply (r->lock held). */
static int send_locked(mt_remote *r, mt_proto_msg *m, mt_error *err) {
    if (!r->broken && mt_conn_peer_closed(r->conn)) {
        mt_error_set(err, "node %s: %s", r->addr, mt_conn_reason(r->conn));
        return remote_break(r, err);
    }
    return send_msg(r, m, err);
}

int mt_remote_send(mt_remote *r, mt_proto_msg *m, mt_error *err) {
    pthread_mutex_lock(&r->lock);
    int rc = send_locked(r, m, err);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int mt_remote_stage_send(mt_remote *r, uint64_t session, int32_t layer_begin, int32_t layer_end,
                         const mt_proto_hop *hops, int32_t n_hops, const mt_proto_origin *origin,
                         bool speculative, const int32_t *pos, int32_t n_tok, const float *hidden,
                         mt_proto_dtype dtype, mt_error *err) {
    const mt_proto_info *in = &r->info;
    const int32_t W = mt_proto_hidden_width(in), cin = mt_proto_cols_in(in, layer_begin);
    const int32_t chunk = mt_proto_max_rows(MT_PROTO_STAGE_FORWARD, cin, dtype);
    if (n_tok <= 0) return mt_error_set(err, "one-way stage forward: no tokens given");
    const int32_t n_buf = n_tok < chunk ? n_tok : chunk;
    float *rows = malloc((size_t)n_buf * (size_t)cin * sizeof(float));
    if (!rows) return mt_error_set(err, "one-way stage forward: out of memory");
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    for (int32_t t0 = 0; t0 < n_tok && rc == 0; t0 += chunk) {
        int32_t n = n_tok - t0 < chunk ? n_tok - t0 : chunk;
        mt_proto_pack_in(in, layer_begin, n, hidden + (size_t)t0 * (size_t)W, rows);
        mt_proto_msg req = {.type = MT_PROTO_STAGE_FORWARD,
                            .session = session,
                            .dtype = dtype,
                            .n = n,
                            .cols = cin,
                            .layer_begin = layer_begin,
                            .layer_end = layer_end,
                            .n_hops = n_hops,
                            .hops = (mt_proto_hop *)hops,
                            .oneway = true,
                            .speculative = speculative,
                            .origin = *origin,
                            .pos = (int32_t *)(pos + t0),
                            .rows = rows};
        rc = send_locked(r, &req, err);
    }
    pthread_mutex_unlock(&r->lock);
    free(rows);
    return rc;
}

int mt_remote_stage_await(mt_remote *r, uint64_t session, uint64_t pass_id, int32_t pass_begin,
                          int32_t pass_end, const uint8_t prev_pk[MT_KEYS_PUBLIC_BYTES],
                          float *hidden, mt_proto_dtype dtype, uint32_t *code, int32_t *back,
                          mt_error *err) {
    const mt_proto_info *in = &r->info;
    const int32_t a = in->layer_begin, end = in->n_layer, n = pass_end - pass_begin;
    mt_proto_msg req = {.type = MT_PROTO_STAGE_AWAIT,
                        .session = session,
                        .origin = {.pass_id = pass_id, .pass_end = pass_end},
                        .pass_begin = pass_begin},
                 reply;
    memcpy(req.prev_pk, prev_pk, sizeof req.prev_pk);
    pthread_mutex_lock(&r->lock);
    int rc = call_locked(r, &req, &reply, code, err);
    if (back) *back = rc && reply.type == MT_PROTO_ERROR && reply.has_back ? reply.back : -1;
    if (rc == 0 && (rc = check_rows(r, &reply, n, mt_proto_cols_out(in, a, end), dtype, err)) == 0)
        mt_proto_unpack_out(in, a, end, n, reply.rows, hidden);
    mt_proto_msg_free(&reply);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int mt_remote_experts_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                          float *y, mt_pool *pool, mt_error *err) {
    (void)pool;
    mt_remote *r = ctx;
    const int32_t C = r->info.n_embd_exp;
    const size_t E = (size_t)C;
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    const int32_t chunk = mt_proto_max_rows(MT_PROTO_EXPERT_RUN, C, r->wire);
    for (int32_t r0 = 0; r0 < n && rc == 0; r0 += chunk) {
        int32_t k = n - r0 < chunk ? n - r0 : chunk;
        mt_proto_msg req = {.type = MT_PROTO_EXPERT_RUN,
                            .dtype = r->wire,
                            .n = k,
                            .cols = C,
                            .layer_begin = il,
                            .ids = (int32_t *)(ids + r0),
                            .rows = (float *)(u + (size_t)r0 * E)};
        mt_proto_msg reply;
        rc = call_locked(r, &req, &reply, NULL, err);
        if (rc == 0 && (rc = check_rows(r, &reply, k, C, r->wire, err)) == 0)
            memcpy(y + (size_t)r0 * E, reply.rows, (size_t)k * E * sizeof(float));
        mt_proto_msg_free(&reply);
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void mt_remote_set_wire(mt_remote *r, mt_proto_dtype dtype) {
    pthread_mutex_lock(&r->lock);
    r->wire = dtype;
    pthread_mutex_unlock(&r->lock);
}

int mt_remote_session_end(mt_remote *r, uint64_t session, bool *existed, mt_error *err) {
    mt_proto_msg req = {.type = MT_PROTO_SESSION_END, .session = session}, reply;
    int rc = mt_remote_call(r, &req, &reply, NULL, err);
    if (rc == 0 && existed) *existed = reply.existed;
    mt_proto_msg_free(&reply);
    return rc;
}

/* ---- life cycle ---------------------------------------------------------------------- */

mt_remote *mt_remote_connect(const char *addr, const uint8_t pk[MT_KEYS_PUBLIC_BYTES],
                             const mt_keys *me, int timeout_ms, int call_timeout_ms,
                             mt_error *err) {
    if (timeout_ms <= 0) timeout_ms = 10000;
    if (call_timeout_ms <= 0) call_timeout_ms = 120000;
    mt_remote *r = calloc(1, sizeof *r);
    if (!r) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->next_id = 1;
    snprintf(r->addr, sizeof r->addr, "%s", addr);
    mt_sock fd = mt_connect_tcp(addr, timeout_ms, err);
    if (fd == MT_SOCK_NONE || !(r->conn = mt_conn_client(fd, me, pk, timeout_ms, err))) {
        mt_error_prefix(err, "node %s", addr);
        mt_remote_close(r);
        return NULL;
    }
    mt_conn_set_timeout(r->conn, call_timeout_ms);
    mt_proto_msg req = {.type = MT_PROTO_INFO}, reply;
    if (mt_remote_call(r, &req, &reply, NULL, err)) {
        mt_remote_close(r);
        return NULL;
    }
    r->info = reply.info; /* takes the held list */
    return r;
}

void mt_remote_close(mt_remote *r) {
    if (!r) return;
    if (r->conn) mt_conn_close(r->conn);
    free(r->info.held);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

const mt_proto_info *mt_remote_info(const mt_remote *r) {
    return &r->info;
}
const char *mt_remote_addr(const mt_remote *r) {
    return r->addr;
}

void mt_remote_set_call_timeout(mt_remote *r, int call_timeout_ms) {
    pthread_mutex_lock(&r->lock);
    if (r->conn && call_timeout_ms > 0) mt_conn_set_timeout(r->conn, call_timeout_ms);
    pthread_mutex_unlock(&r->lock);
}

bool mt_remote_is_open(mt_remote *r) {
    pthread_mutex_lock(&r->lock);
    bool open = !r->broken && mt_conn_is_open(r->conn);
    pthread_mutex_unlock(&r->lock);
    return open;
}

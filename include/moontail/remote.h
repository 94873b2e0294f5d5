/* remote.h - the client side of the data plane: one authenticated, encrypted
 * connection to a node (pinned to the node's public key), and the calls a
 * requester or a paired node makes over it (proto.h): INFO, STAGE_FORWARD,
 * EXPERT_RUN and SESSION_END.
 *
 * Calls are synchronous: one request is on the wire at a time per mt_remote
 * (a mutex serialises callers; one-way messages, which get no reply, may be
 * sent between calls), so several threads may share one remote but
 * do not overlap on it; open one remote per thread to have a node batch
 * their work together. Work larger than one message allows is split into
 * several messages transparently (mt_proto_max_rows); since the node
 * computes each token and row exactly, the results do not depend on the
 * split.
 *
 * A transport failure or a reply that does not answer the request (wrong
 * request_id, type or size) breaks the remote: later calls fail with the
 * first reason. An ERROR reply does not; the call fails with the node's
 * message and its code (mt_proto_errcode). */
#ifndef MOONTAIL_REMOTE_H
#define MOONTAIL_REMOTE_H

#include "moontail/keys.h"
#include "moontail/model.h"
#include "moontail/proto.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mt_remote mt_remote;

/* Connects to addr ("host:port", transport.h), runs the handshake as `me`
 * requiring the node to prove identity pk, and asks for its INFO. timeout_ms
 * (<= 0: 10 s) bounds the connect and handshake; call_timeout_ms (<= 0: 120
 * s) bounds each wait for a reply (compute included). */
mt_remote *mt_remote_connect(const char *addr, const uint8_t pk[MT_KEYS_PUBLIC_BYTES],
                             const mt_keys *me, int timeout_ms, int call_timeout_ms, mt_error *err);
void mt_remote_close(mt_remote *r);

/* What the node holds (from its INFO reply at connect). */
const mt_proto_info *mt_remote_info(const mt_remote *r);
const char *mt_remote_addr(const mt_remote *r);
bool mt_remote_is_open(mt_remote *r);

/* Runs the node's layers [layer_begin, layer_end) on hidden (n_tok, W) in
 * place, W = mt_proto_hidden_width (the model's hp.n_hidden: the stream and
 * every attention-residual checkpoint slot), for tokens at positions
 * pos[0..n_tok) (consecutive) of the node-side session `session`, with rows
 * sent and returned in dtype. Only what the layers need goes out (the stream
 * and the checkpoints banked before layer_begin) and only what they change
 * comes back (the stream and the checkpoints they bank). On an ERROR reply
 * *code (if not NULL) gets its code, else 0. */
int mt_remote_stage_forward(mt_remote *r, uint64_t session, int32_t layer_begin, int32_t layer_end,
                            const int32_t *pos, int32_t n_tok, float *hidden, mt_proto_dtype dtype,
                            uint32_t *code, mt_error *err);
/* The same, speculative marking the pass MT_PROTO_FLAG_SPECULATIVE (the node
 * keeps what it needs to go back inside it). */
int mt_remote_stage_forward_as(mt_remote *r, uint64_t session, int32_t layer_begin,
                               int32_t layer_end, bool speculative, const int32_t *pos,
                               int32_t n_tok, float *hidden, mt_proto_dtype dtype, uint32_t *code,
                               mt_error *err);

/* One-way passes (proto.h). mt_remote_stage_send sends tokens at pos[0..n_tok)
 * of hidden (n_tok, W) as one-way STAGE_FORWARDs (several messages when they
 * do not fit one) for layers [layer_begin, layer_end) followed by hops[0..
 * n_hops), with the origin block `origin` (speculative: marked
 * MT_PROTO_FLAG_SPECULATIVE, every stage keeping what it needs to go back
 * inside the pass); nothing comes back on r. Then
 * mt_remote_stage_await asks r, the route's last stage (its layers end the
 * model), for positions [pass_begin, pass_end) of that pass as sent on by the
 * stage whose key is prev_pk, and writes them into hidden (n, W) as
 * mt_remote_stage_forward's reply would. On an ERROR reply *code gets its
 * code and *back (when not NULL) the stage that failed the pass, that many
 * stages before the last (a CHAIN_ABORT's, proto.h flag STAGE), or -1 when
 * the ERROR names none (else -1 as well). */
int mt_remote_stage_send(mt_remote *r, uint64_t session, int32_t layer_begin, int32_t layer_end,
                         const mt_proto_hop *hops, int32_t n_hops, const mt_proto_origin *origin,
                         bool speculative, const int32_t *pos, int32_t n_tok, const float *hidden,
                         mt_proto_dtype dtype, mt_error *err);
int mt_remote_stage_await(mt_remote *r, uint64_t session, uint64_t pass_id, int32_t pass_begin,
                          int32_t pass_end, const uint8_t prev_pk[MT_KEYS_PUBLIC_BYTES],
                          float *hidden, mt_proto_dtype dtype, uint32_t *code, int32_t *back,
                          mt_error *err);

/* Sends one message that gets no reply (a one-way STAGE_FORWARD or a
 * CHAIN_ABORT; its request_id is assigned here). Fails, and breaks r, when
 * the node has closed the connection (mt_conn_peer_closed) or the send fails. */
int mt_remote_send(mt_remote *r, mt_proto_msg *m, mt_error *err);

/* Computes y[i] = expert ids[i] of layer il applied to u[i] (n rows of
 * n_embd_exp) on the node: an mt_expert_backend run() with ctx = the mt_remote,
 * rows sent in the dtype set by mt_remote_set_wire (default f32). pool is
 * not used, so mt_remote_experts() is a concurrent backend (model.h): a
 * dispatcher calls several expert servers at once. */
int mt_remote_experts_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                          float *y, mt_pool *pool, mt_error *err);
void mt_remote_set_wire(mt_remote *r, mt_proto_dtype dtype);

static inline mt_expert_backend mt_remote_experts(mt_remote *r) {
    mt_expert_backend b = {mt_remote_experts_run, r, true};
    return b;
}

/* Tells the node to forget a session. *existed (if not NULL) says whether it
 * still had it. */
int mt_remote_session_end(mt_remote *r, uint64_t session, bool *existed, mt_error *err);

/* Sends one request (its request_id is assigned here) and receives its
 * reply, checked to answer it: same request_id, the matching reply type
 * (or ERROR, then -1 with the node's message and *code set). The reply is
 * decoded with the node's n_embd; free it with mt_proto_msg_free. */
int mt_remote_call(mt_remote *r, mt_proto_msg *req, mt_proto_msg *reply, uint32_t *code,
                   mt_error *err);

/* How long the next calls wait for each reply (ms, > 0); a wait that runs out breaks the
 * connection, as any other failure of a call does. */
void mt_remote_set_call_timeout(mt_remote *r, int call_timeout_ms);

#endif

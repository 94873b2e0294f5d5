/* expert_remote.h - a remote holder of routed experts (an expert server for
 * the requester's backbone, a partner for a paired node) as an
 * mt_expert_backend that survives a broken connection.
 *
 * Connecting checks that the node holds the expected model and experts of
 * the needed layers, and remembers which experts it holds. When a call
 * finds the connection broken (now or by an earlier call: a transport
 * failure, not an ERROR reply), it reconnects once and runs the rows again
 * on the new connection; expert rows carry no session state, so the result
 * is the same. A node that comes back holding other experts than at first
 * is an error, as is a failed reconnect (the message names the address and
 * both reasons). Not a public API: for route.c and node_partner.c. */
#ifndef MOONTAIL_EXPERT_REMOTE_H
#define MOONTAIL_EXPERT_REMOTE_H

#include "moontail/remote.h"
#include "moontail/shard.h"

typedef struct expert_remote {
    /* set by expert_remote_open and kept */
    char role[24]; /* "expert server", "partner": for messages */
    char addr[128];
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    const mt_keys *keys; /* ours (not copied: must outlive this) */
    int timeout_ms, call_timeout_ms;
    mt_proto_dtype wire;
    char source_id[MT_SHARD_HASH_HEX];   /* the model it must hold */
    int32_t n_embd, n_embd_exp, n_layer; /* the model's widths (n_embd_exp: expert rows) */
    int32_t layer_begin, layer_end;      /* it must hold experts of these layers */
    /* state */
    mt_remote *r;      /* the connection (kept, broken, when a reconnect fails) */
    int32_t n_held;    /* what it held at the first connect */
    int32_t *held;     /* (n_held) ascending ids */
    int reconnects;    /* successful reconnects so far */
    bool no_reconnect; /* a broken connection fails the call (the caller finds another holder) */
} expert_remote;

typedef struct expert_remote_config {
    const char *role, *addr;
    const uint8_t *pk; /* the node's identity */
    const mt_keys *keys;
    int timeout_ms, call_timeout_ms; /* as for mt_remote_connect */
    mt_proto_dtype wire;
    const char *source_id; /* what it must hold */
    int32_t n_embd, n_embd_exp, n_layer, layer_begin, layer_end;
    bool no_reconnect;
} expert_remote_config;

/* Connects and checks what the node holds; err names the node. On failure
 * x holds nothing to close. */
int expert_remote_open(expert_remote *x, const expert_remote_config *c, mt_error *err);
void expert_remote_close(expert_remote *x);

/* mt_expert_backend run() with ctx = the expert_remote; pool is not used. */
int expert_remote_run(void *ctx, int32_t il, int32_t n, const int32_t *ids, const float *u,
                      float *y, mt_pool *pool, mt_error *err);

static inline mt_expert_backend expert_remote_backend(expert_remote *x) {
    mt_expert_backend b = {expert_remote_run, x, true};
    return b;
}

/* "0-3,6" (or "none"): a list of expert ids for messages. */
void expert_ids_format(const int32_t *ids, int32_t n, char *out, size_t cap);

#endif

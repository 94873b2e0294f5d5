/* registry_referee.c - the registry's own check of nodes a spot-check report
 * names (docs/spot-checking.md): it computes the disputed layers itself and
 * asks each node for the same, so that a verdict never rests on a
 * requester's word.
 *
 * The registry holds the whole model (it cuts every shard from it), so it is
 * the one party every requester and node already trusts with the weights.
 * A probe:
 *   - draws random token ids and takes their embeddings as the input rows of
 *     layer a: the registry's own data, never a user's, and only the
 *     disputed layers [a, b) are computed (as much work as the node does,
 *     not the layers before);
 *   - runs them locally through layers [a, b) (mt_model_forward_layers) in
 *     one prompt-like call and then single-token calls, as a generation
 *     would, to as many positions as the report's (within bounds);
 *   - sends each node the same rows over the data plane as an ordinary
 *     requester would: a fresh key with a requester certificate the registry
 *     signs for it, the f32 wire, a fresh session;
 *   - compares every reply with its own result bit for bit (docs/design.md
 *     invariant 1). One difference makes the node wrong; no answer (refused,
 *     broken, an ERROR reply) proves nothing either way.
 * It runs without the registry's lock (the caller lets only one probe run at
 * a time), lasts at most about PROBE_TOTAL_MS plus one call's timeout, and
 * keeps the model loaded (mapped, not read) between probes. */
#include "moontail/cert.h"
#include "moontail/remote.h"
#include "registry_internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    PROBE_MIN_POSITIONS = 12,  /* 4 prompt positions and 8 single-token calls */
    PROBE_MAX_POSITIONS = 128, /* bounds the registry's work per probe */
    PROBE_SINGLE_CALLS = 8,
    PROBE_CONNECT_MS = 5000,
    PROBE_CALL_MS = 30000,
    PROBE_TOTAL_MS = 60000, /* a node still being asked after this gets no verdict */
};

const char *reg_probe_result_name(reg_probe_result res) {
    switch (res) {
    case REG_PROBE_RIGHT:
        return "right";
    case REG_PROBE_WRONG:
        return "wrong";
    case REG_PROBE_NO_ANSWER:
        return "no_answer";
    }
    return "?";
}

int reg_referee_identity(mt_registry *r, mt_keys *k, mt_error *err) {
    if (mt_keys_generate(k, err)) return -1;
    mt_cert c = {.role = MT_CERT_ROLE_REQUESTER, .account = 0};
    memcpy(c.subject, k->pk, sizeof c.subject);
    uint64_t now = mt_cert_now();
    c.not_before = now - 60;
    c.not_after = now + 600;
    c.serial = ++r->cert_serial;
    uint8_t cert[MT_CERT_BYTES];
    if (mt_cert_issue(&c, &r->key, cert, err)) return -1;
    return mt_keys_set_cert(k, cert, sizeof cert, err);
}

/* What a node running the model's last layer replies (proto.h): for kimi-k3
 * the stream's place holds the head's input, the checkpoints mixed in, and
 * no checkpoint comes back (their places keep the probe's input). */
static int head_input_in_place(const mt_model *m, float *hidden, const float *input, int32_t n,
                               mt_error *err) {
    if (m->hp.attn_res_block <= 0) return 0;
    const size_t E = (size_t)m->hp.n_embd, W = (size_t)m->hp.n_hidden;
    float *x = malloc((size_t)n * E * sizeof *x);
    if (!x) return mt_error_set(err, "out of memory for a probe of %d positions", n);
    int rc = mt_model_head_input(m, hidden, n, x, err);
    for (size_t t = 0; rc == 0 && t < (size_t)n; t++) {
        memcpy(hidden + t * W, x + t * E, E * sizeof *x);
        memcpy(hidden + t * W + E, input + t * W + E, (W - E) * sizeof *x);
    }
    free(x);
    return rc;
}

int reg_referee_probe(mt_registry *r, const mt_keys *keys, int32_t a, int32_t b, int32_t positions,
                      const reg_probe_target *targets, int n_targets, reg_probe_outcome *out,
                      mt_error *err) {
    for (int t = 0; t < n_targets; t++) {
        out[t].result = REG_PROBE_RIGHT;
        out[t].why[0] = 0;
    }
    if (!r->referee_model && !(r->referee_model = mt_model_load(r->model_path, err))) return -1;
    const mt_model *m = r->referee_model;
    if (a < 0 || b <= a || b > m->hp.n_layer)
        return mt_error_set(err, "layers [%d, %d) are not layers of the model", a, b);
    const int32_t T = positions < PROBE_MIN_POSITIONS   ? PROBE_MIN_POSITIONS
                      : positions > PROBE_MAX_POSITIONS ? PROBE_MAX_POSITIONS
                                                        : positions;
    const size_t E = (size_t)m->hp.n_hidden; /* whole states: stream and checkpoint slots */
    int32_t *ids = malloc((size_t)T * sizeof *ids), *pos = malloc((size_t)T * sizeof *pos);
    float *input = malloc((size_t)T * E * sizeof *input),
          *truth = malloc((size_t)T * E * sizeof *truth),
          *reply = malloc((size_t)T * E * sizeof *reply);
    mt_remote **rem = calloc((size_t)n_targets, sizeof *rem);
    uint64_t *session = calloc((size_t)n_targets, sizeof *session);
    mt_kv_cache *kv = NULL;
    mt_pool *pool = NULL;
    int rc = -1;
    if (!ids || !pos || !input || !truth || !reply || !rem || !session) {
        mt_error_set(err, "out of memory for a probe of %d positions", T);
        goto done;
    }
    for (int32_t i = 0; i < T; i++) {
        ids[i] = (int32_t)randombytes_uniform((uint32_t)m->hp.n_vocab);
        pos[i] = i;
    }
    if (mt_model_embed(m, ids, T, input, err) ||
        !(kv = mt_kv_cache_new(m, a, b, T, r->cfg.kv_type, err)))
        goto done;
    /* kimi-k3: the checkpoints a stage is given are copies of the embedding */
    for (size_t t = 0, s = (size_t)m->hp.n_embd; t < (size_t)T; t++)
        for (size_t o = s; o < E; o += s)
            memcpy(input + t * E + o, input + t * E, s * sizeof *input);
    if (!(pool = mt_pool_create(0))) {
        mt_error_set(err, "cannot start threads for the probe");
        goto done;
    }
    for (int t = 0; t < n_targets; t++) {
        mt_error e = {{0}};
        randombytes_buf(&session[t], sizeof session[t]);
        rem[t] = mt_remote_connect(targets[t].addr, targets[t].pk, keys, PROBE_CONNECT_MS,
                                   PROBE_CALL_MS, &e);
        if (!rem[t]) {
            out[t].result = REG_PROBE_NO_ANSWER;
            snprintf(out[t].why, sizeof out[t].why, "%.255s", e.msg);
        }
    }
    /* one prompt-like call, then single tokens */
    const int64_t t_start = mt_wall_ms();
    for (int32_t p = 0; p < T;) {
        const int32_t n = p == 0 ? T - PROBE_SINGLE_CALLS : 1;
        const size_t bytes = (size_t)n * E * sizeof(float);
        memcpy(truth + (size_t)p * E, input + (size_t)p * E, bytes);
        if (mt_model_forward_layers(m, kv, a, b, pos + p, n, truth + (size_t)p * E, NULL, pool,
                                    err) ||
            (b == m->hp.n_layer &&
             head_input_in_place(m, truth + (size_t)p * E, input + (size_t)p * E, n, err)))
            goto done;
        for (int t = 0; t < n_targets; t++) {
            if (out[t].result != REG_PROBE_RIGHT) continue;
            if (mt_wall_ms() - t_start > PROBE_TOTAL_MS) {
                out[t].result = REG_PROBE_NO_ANSWER;
                snprintf(out[t].why, sizeof out[t].why,
                         "it answered too slowly: the probe took over %d s", PROBE_TOTAL_MS / 1000);
                continue;
            }
            mt_error e = {{0}};
            memcpy(reply, input + (size_t)p * E, bytes);
            if (mt_remote_stage_forward(rem[t], session[t], a, b, pos + p, n, reply, MT_PROTO_F32,
                                        NULL, &e)) {
                out[t].result = REG_PROBE_NO_ANSWER;
                snprintf(out[t].why, sizeof out[t].why, "%.255s", e.msg);
            } else if (memcmp(reply, truth + (size_t)p * E, bytes) != 0) {
                out[t].result = REG_PROBE_WRONG;
                snprintf(out[t].why, sizeof out[t].why,
                         "its output of layers [%d, %d) at positions [%d, %d) of the registry's"
                         " probe differs from the registry's own",
                         a, b, p, p + n);
            }
        }
        p += n;
    }
    rc = 0;
done:
    for (int t = 0; rem && t < n_targets; t++) {
        if (rem[t]) mt_remote_session_end(rem[t], session[t], NULL, NULL);
        mt_remote_close(rem[t]);
    }
    mt_pool_free(pool);
    mt_kv_cache_free(kv);
    free(ids), free(pos), free(input), free(truth), free(reply), free(rem), free(session);
    return rc;
}

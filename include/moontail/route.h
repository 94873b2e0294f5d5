/* route.h - the requester's route executor: runs a model whose layers live
 * on other machines, keeping everything that names tokens local.
 *
 * The requester holds the head shard (token embeddings, final norm, output
 * head), so nodes see hidden states only, never token ids, text or what is
 * sampled (docs/design.md invariant 5). A route is
 *   - optionally a local backbone: a shard with the attention parts of
 *     layers [0, a), whose routed experts run on remote expert servers
 *     (swarm mode) and/or locally (the experts the backbone holds itself);
 *   - then remote stages, each a node holding layers [b_i, b_{i+1}) whole
 *     (cell mode), in order, ending at the model's last layer.
 * Everything is checked when the route opens: every node holds the same
 * model (source_id), the layers chain without gap or overlap, and every
 * routed expert of the backbone's layers has exactly one holder.
 *
 * A session keeps its token history on the requester (docs/design.md invariant 4):
 * when a stage answers that it does not know the session (evicted), or a
 * stage's connection broke and a reconnect to the same node succeeds, the
 * executor replays the history from position 0 and carries on; with the f32
 * wire the logits are bit-identical to an uninterrupted run. Expert servers
 * keep no session state: the backbone calls them concurrently, and one whose
 * connection broke is reconnected once when next used (it must come back
 * holding the same experts) and gets the same rows again.
 *
 * A route is used by one thread at a time (calls take a lock); open one
 * route per thread to have nodes batch several sessions together. */
#ifndef MOONTAIL_ROUTE_H
#define MOONTAIL_ROUTE_H

#include "moontail/generate.h"
#include "moontail/keys.h"
#include "moontail/model.h"
#include "moontail/proto.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mt_route_peer {
    char addr[128];                   /* "host:port" */
    uint8_t pk[MT_KEYS_PUBLIC_BYTES]; /* the node's identity */
    /* expert servers only (all zero: every expert it holds, every backbone layer):
     * use it for experts [expert_begin, expert_end) of layers [layer_begin, layer_end),
     * so that several servers can share the work as a swarm plan tiles it */
    int32_t layer_begin, layer_end;
    int32_t expert_begin, expert_end;
} mt_route_peer;

/* A node that can check stage `stage` of a route (it holds the same layers). */
typedef struct mt_route_checker {
    int stage;
    mt_route_peer peer;
} mt_route_checker;

/* Spot-check counters (see mt_route_config.check_rate). */
typedef struct mt_route_check_stats {
    int64_t checks;     /* (session, stage) pairs given a shadow session */
    int64_t compared;   /* passes whose output a checker confirmed bit for bit */
    int64_t dropped;    /* checks dropped (checker failed or too slow) */
    int64_t mismatches; /* outputs that differed */
    char last_dropped[400];
} mt_route_check_stats;

/* Where a checker and the checked stage disagreed (after a failed mt_route_eval). */
typedef struct mt_route_mismatch {
    int stage;                                 /* index of the checked stage in the route */
    char checked_addr[128], checker_addr[128]; /* "host:port" */
    uint8_t checked_pk[MT_KEYS_PUBLIC_BYTES], checker_pk[MT_KEYS_PUBLIC_BYTES];
    int32_t layer_begin, layer_end;
    int32_t pos, n;                          /* the positions whose outputs differ */
    uint64_t session;                        /* the checked stage's session id */
    int32_t step;                            /* the session's mt_route_eval call (0: first) */
    char checked_hash[65], checker_hash[65]; /* BLAKE2b-256 (hex) of each output's f32 rows */
    int64_t reply_unix_ms;                   /* when the checked stage's output arrived */
    int64_t detected_unix_ms;                /* when the comparison found the difference */
} mt_route_mismatch;

typedef struct mt_route_config {
    const char *head;           /* local shard (or whole model) with the head */
    const mt_model *head_model; /* optional: that file already loaded (borrowed, must outlive the
                                   route), so that a requester changing routes keeps one model
                                   and the vocabulary it made from it */
    const char *backbone;       /* local shard with attention of layers [0, a); NULL: none. May be
                                   the same file as head (loaded once) */
    mt_proto_dtype wire;        /* dtype of hidden states and expert rows on the network */
    const mt_keys *keys;        /* the requester's identity */
    const mt_route_peer *stages;
    int n_stages;
    const mt_route_peer *experts; /* expert servers for the backbone's MoE layers */
    int n_experts;
    int threads;             /* local compute threads (<= 0: all CPUs) */
    mt_kv_type kv_type;      /* the backbone's cache (0: f16) */
    int ubatch;              /* tokens per pass through the route (<= 0: 512) */
    int timeout_ms;          /* connect + handshake (<= 0: 10 s) */
    int call_timeout_ms;     /* the longest wait for a reply (<= 0: 120 s); a stage's waits adapt
                                below it to the step times seen (route.c), unless: */
    bool fixed_call_timeout; /* every wait is call_timeout_ms (a lossy link's replies vary
                                by whole TCP retransmission timeouts) */
    char *failed_addr;       /* optional (128 bytes): when opening fails at a node, its address */
    bool no_reconnect;       /* a broken node fails the call at once (a requester with a registry
                                takes a new route instead: reconnecting to a node that went silent
                                would cost a whole connect timeout first) */
    bool chain; /* one-way passes (proto.h): send each pass to the first stage with the later
                   stages as next hops, each stage sends its output straight to the next, and
                   the last stage answers a STAGE_AWAIT; instead of calling each stage in
                   turn. A stage that fails, refuses the session or cannot reach its next hop
                   is named by the last stage's answer; an AWAIT without an answer in time makes
                   the route ask every stage for its INFO (2 s, at once) to name the one gone.
                   Recovery is as in turn mode (unknown session: replay; else failed peers) */
    /* spot-checking (docs/spot-checking.md; not with chain): checkers[i] holds the same layers
     * as stage checkers[i].stage. Each new session gives each stage that has a checker, with
     * probability check_rate (0: never, 1: always), a shadow session on one of its checkers
     * (picked at random) that gets the stage's input rows in every pass; before a pass
     * returns, the checker's output must equal the stage's bit for bit, or mt_route_eval
     * fails and mt_route_last_mismatch says where. A checker that fails or is slow (it has
     * 2 s plus the pass's own time after the pass ends) only drops its check. */
    const mt_route_checker *checkers;
    int n_checkers;
    double check_rate;
    mt_route_check_stats *check_stats; /* optional: counters added to (the caller's) */
} mt_route_config;

typedef struct mt_route mt_route;

/* Loads the local shards, connects to every node and checks the route. */
mt_route *mt_route_open(const mt_route_config *cfg, mt_error *err);
void mt_route_close(mt_route *r);

/* The head model (its GGUF also holds the tokenizer) and its vocabulary size. */
const mt_model *mt_route_head(const mt_route *r);
/* Most positions a session may hold (the smallest node context). */
int32_t mt_route_max_ctx(const mt_route *r);
/* Replays done so far (after evictions or reconnects), for tests and logs. */
int mt_route_replays(const mt_route *r);

/* Changes the spot-check rate for sessions made from now on (0..1). */
void mt_route_set_check_rate(mt_route *r, double rate);

/* After a failed mt_route_eval: true (and *out) when it failed because a
 * spot-check found a stage's output different from its checker's. */
bool mt_route_last_mismatch(const mt_route *r, mt_route_mismatch *out);

/* After a failed mt_route_eval: the addresses (up to max) of the nodes whose
 * connection is broken and did not come back, or that failed the call;
 * returns how many. A requester avoids them in its next route. */
int mt_route_failed_peers(const mt_route *r, char (*addrs)[128], int max);

/* ---- sessions -------------------------------------------------------------------- */

typedef struct mt_route_session mt_route_session;

/* A session of up to n_ctx positions (<= 0: mt_route_max_ctx) with a fresh
 * random id. */
mt_route_session *mt_route_session_new(mt_route *r, int32_t n_ctx, mt_error *err);
/* Tells every stage to forget the session (best effort) and frees it. */
void mt_route_session_end(mt_route *r, mt_route_session *s);

/* Evaluates n tokens after the session's history and appends them to it.
 * logits receives (n, n_vocab) floats when all_logits, else the last token's
 * n_vocab. */
int mt_route_eval(mt_route *r, mt_route_session *s, const int32_t *tokens, int32_t n,
                  bool all_logits, float *logits, mt_error *err);

/* Speculative decoding (generate.h): mt_route_eval with every row's logits, sent as
 * MT_PROTO_FLAG_SPECULATIVE passes, so that mt_route_rewind may then take the session
 * back to any n_past inside this pass (after its first token). The nodes restore their
 * KDA states when the next pass starts there; the history is cut at once, so a replay
 * after a lost node runs only what was kept. A spot checker gets the passes as the
 * checked stage does, so it goes back with it. */
int mt_route_eval_speculative(mt_route *r, mt_route_session *s, const int32_t *tokens, int32_t n,
                              float *logits, mt_error *err);
int mt_route_rewind(mt_route *r, mt_route_session *s, int32_t n_past, mt_error *err);

/* The session's token history (n_past tokens) and id. */
const int32_t *mt_route_session_tokens(const mt_route_session *s, int32_t *n_past);
uint64_t mt_route_session_id(const mt_route_session *s);

/* The route as the generation loop's backend (generate.h, generate_route.c): r stays the
 * caller's and must outlive it; a slot runs one session at a time, from one thread (a
 * route is not shared between threads). */
mt_gen_backend *mt_route_backend(mt_route *r, mt_error *err);

/* ---- route files ----------------------------------------------------------------- */

/* A route file (JSON):
 *   {"head": "head shard or whole model",
 *    "backbone": "local shard with attention parts" (optional),
 *    "wire": "f32" | "bf16" (optional, default "f32"),
 *    "key": "the requester's secret key file",
 *    "cert": "the requester's certificate file" (optional, cert.h; nodes that
 *            trust its issuer admit the key without listing it),
 *    "stages": [{"addr": "127.0.0.1:7001", "key": "<64 hex digits>"}, ...] (optional),
 *    "chain": true | false (optional, default false: one-way passes, see
 *             mt_route_config.chain),
 *    "experts": [{"addr": ..., "key": ...}, ...] (optional)}
 * Relative paths are relative to the route file's directory. Unknown fields
 * are errors. */
typedef struct mt_route_file {
    mt_route_config cfg; /* points into this struct */
    char *head, *backbone;
    mt_keys keys; /* with the certificate when the file names one */
    mt_route_peer *stages, *experts;
} mt_route_file;

int mt_route_file_load(const char *path, mt_route_file *out, mt_error *err);
void mt_route_file_free(mt_route_file *f);

#endif

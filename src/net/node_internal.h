/* node_internal.h - what the files of the node share (node_server.c:
 * connections, start and stop; node_worker.c: sessions and continuous
 * batching; node_partner.c: paired layers' partners). Not a public API;
 * include/moontail/node.h is.
 *
 * Threads and ownership:
 *   - accept thread: accepts sockets, starts a detached reader per socket;
 *   - reader (one per connection): handshake, then decode + validate each
 *     request, answer INFO and bad requests itself, queue the rest;
 *   - worker: takes the whole queue each step, computes, replies.
 * A client record is reference counted (its reader + each queued job) and
 * freed, with its connection, when the last reference goes. Replies from the
 * reader and the worker are serialised by the client's send lock. Sessions,
 * partners and the model's compute pool belong to the worker alone (the
 * expert dispatcher runs partners on threads of its own, but only within a
 * worker's call that waits for them).
 *
 * One-way passes (proto.h, node_oneway.c): a one-way STAGE_FORWARD is
 * queued like any other, but is never replied to. Each chunk the worker
 * finishes goes, as its own one-way STAGE_FORWARD, onto the queue of the
 * next hop's sender thread (node_hop: one per (address, key), bounded in
 * bytes, at most NODE_MAX_HOPS of them, idle ones reused and closed; a job
 * whose hop queue is full waits in the worker's queue, the worker never
 * blocks on the network). The last stage keeps each pass's
 * chunks in its pass table (node_pass) until the requester's STAGE_AWAIT,
 * answered by whichever thread completes the pass (the worker with the last
 * chunk, or the reader with the AWAIT or a CHAIN_ABORT). A failure of a
 * one-way job goes to the last stage as a CHAIN_ABORT (through the hop
 * senders), never back on the connection it came from. */

#ifndef MOONTAIL_NODE_INTERNAL_H
#define MOONTAIL_NODE_INTERNAL_H

#include "expert_remote.h"
#include "moontail/expert_dispatch.h"
#include "moontail/log.h"
#include "moontail/model.h"
#include "moontail/node.h"
#include "moontail/remote.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    NODE_MAX_INFLIGHT = 8,       /* queued requests per connection before its reader waits */
    NODE_MAX_INFLIGHT_MB = 256,  /* ... one-way forwards: their rows' MiB (a stage batches many
                                    sessions from one upstream stage) */
    NODE_HOP_QUEUE_MB = 256,     /* rows' MiB queued for one next hop before jobs for it wait */
    NODE_MAX_PASSES = 65536,     /* one-way passes the last stage keeps at once */
    NODE_MAX_CLIENTS = 256,      /* connections at once */
    NODE_MAX_SESSIONS = 1 << 20, /* sessions at once, however much memory is offered */
};

/* ---- structures ------------------------------------------------------------------- */

typedef struct node_client {
    struct mt_node *node;
    mt_sock fd;      /* the socket until the handshake ends (owned by mt_conn_server from then) */
    mt_sock wake_fd; /* a second handle on it: shutting it down wakes the reader at stop */
    mt_conn *conn;
    pthread_mutex_t send_lock;
    int refs, inflight;      /* guarded by node->lock */
    uint64_t inflight_bytes; /* guarded by node->lock: rows of its queued one-way forwards */
    char peer[160];          /* "name (ip:port)" for the log */
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    bool has_cert; /* the client presented a certificate the handshake accepted */
    mt_cert cert;  /* its fields (role, account, not_after: for metering per account) */
    bool forwards; /* a stage that may pass on others' one-way passes: it has this node's own
                      key, or a node certificate (a requester's origin must be its own key) */
    struct node_client *prev, *next;
} node_client;

/* A queued request. A STAGE_FORWARD may be computed in chunks over several
 * steps (chunked prefill, node_worker.c): `done` tokens are computed so far,
 * their results in `out`, and it is answered when done == msg.n. */
typedef struct node_job {
    struct node_job *next;
    node_client *client;
    mt_proto_msg msg;
    int32_t done;      /* tokens computed so far */
    float *out;        /* (msg.n, cols_out) the reply's rows, or (msg.n, W) whole hidden states
                          for a one-way job with next hops; NULL before its first chunk */
    uint64_t bytes;    /* its rows' bytes, counted in client->inflight_bytes (one-way) */
    double arrived_ms; /* mt_mono_ms_frac() when it was queued (decode pacing) */
} node_job;

/* Whether a STAGE_FORWARD is scheduled as a decode (node.h, "Step order"):
 * it continues a session with few tokens (a speculative pass whatever its
 * size), and is not marked as a prompt's chunk. */
static inline bool node_is_decode(const mt_proto_msg *m) {
    return !m->prompt && m->pos[0] > 0 && (m->n <= MT_NODE_DECODE_MAX_TOKENS || m->speculative);
}

/* Whose session a job names: the origin's for a one-way forward (the same
 * requester's session on every stage), else the client's. */
static inline const uint8_t *node_job_owner(const node_job *j);

/* A message waiting for a next hop's sender (node_oneway.c). */
typedef struct node_hop_msg {
    struct node_hop_msg *next;
    mt_proto_msg msg; /* owns its arrays */
    uint64_t bytes;   /* its rows */
} node_hop_msg;

/* A next hop: its connection and its sender thread, kept for later passes
 * while it is used. An idle hop (nothing queued, nothing being sent) is
 * given to another (address, key) when the table is full, and ended when it
 * stays idle for session_idle_ms (node_hops_expire). */
typedef struct node_hop {
    char addr[MT_PROTO_HOP_ADDR_MAX + 1]; /* guarded by node->lock (changed only while idle) */
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];     /* guarded by node->lock (changed only while idle) */
    uint32_t gen;                         /* guarded by node->lock: +1 when addr/pk change */
    mt_remote *r;                         /* sender thread only; NULL: not connected */
    node_hop_msg *head, *tail;            /* guarded by node->lock */
    uint64_t queued_bytes;                /* guarded by node->lock */
    bool sending;          /* guarded by node->lock: the sender is sending a message */
    bool retire;           /* guarded by node->lock: the sender ends (the hop is freed) */
    int64_t idle_since_ms; /* guarded by node->lock: mt_mono_ms() when it last became idle */
    pthread_cond_t cv;     /* its sender waits here: a message queued, retire, or stop */
    pthread_t thread;
    bool started;
} node_hop;

enum {
    NODE_MAX_HOPS = 64,    /* next-hop connections the forwards of passes may keep */
    NODE_HOP_RESERVE = 16, /* ... and more for CHAIN_ABORTs only, so that a pass refused
                              because the table is full can still be reported */
};

/* A one-way pass on the last stage (node_oneway.c), guarded by node->lock. */
typedef struct node_pass {
    struct node_pass *next;              /* in its bucket's chain */
    uint8_t owner[MT_KEYS_PUBLIC_BYTES]; /* the origin's key */
    uint64_t session, pass_id;
    int32_t begin, end;                 /* positions [begin, end); begin -1 until known */
    int32_t got;                        /* positions received, from begin on */
    int32_t cols;                       /* values per row */
    mt_proto_dtype dtype;               /* the chunks' (the reply's) */
    float *rows;                        /* (end - begin, cols), NULL before the first chunk */
    uint8_t from[MT_KEYS_PUBLIC_BYTES]; /* who sent the chunks */
    uint32_t code;                      /* non-zero: the pass failed */
    int32_t back; /* ... at the stage this many before the last (-1: none named) */
    char text[MT_PROTO_MAX_TEXT + 1];
    node_client *waiter; /* the AWAIT's client (a reference held), or NULL */
    uint64_t request_id; /* the AWAIT's */
    uint8_t prev_pk[MT_KEYS_PUBLIC_BYTES];
    int64_t created_ms;
} node_pass;

/* How many passes one origin key keeps on this last stage (node_oneway.c),
 * guarded by node->lock; there only while it keeps some. */
typedef struct node_origin {
    struct node_origin *next; /* in its bucket's chain */
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    int32_t passes;
} node_origin;

enum {
    NODE_PASS_BUCKETS = 8192, /* chains of the pass table (keyed hash: ~8 long when full) */
    NODE_ORIGIN_BUCKETS = 256,
};

typedef struct node_session {
    uint8_t owner[MT_KEYS_PUBLIC_BYTES]; /* the client's key */
    uint64_t id;
    mt_kv_cache *kv;                    /* layers [layer_begin, layer_end) */
    int32_t layer_begin, layer_end;     /* the range it was started with */
    int32_t n_past;                     /* positions [0, n_past) are in the cache */
    uint64_t held;                      /* bytes counted for it in node_sessions.kv_used */
    uint64_t last_used;                 /* step of its last request */
    int64_t last_used_ms;               /* mt_mono_ms() of its last request (idle expiry) */
    struct node_session *hnext;         /* next in its hash bucket */
    struct node_session *newer, *older; /* the recency list */
    node_job *busy; /* a prompt computed in chunks, not finished yet: the session's later jobs
                       wait, it holds the memory of the whole request, and it is neither evicted
                       nor expired meanwhile */
    mt_node_pace_decode pace; /* decode pacing: its last decodes' arrivals (0: not decoding) */
} node_session;

/* The sessions (node_sessions.c), worker only: found by (owner, id) in O(1),
 * listed from the most to the least recently used (node_session_touch), and
 * the sum of their `held` bytes, which admission keeps within kv_budget. */
typedef struct node_sessions {
    node_session **buckets; /* (n_buckets, a power of 2) chains */
    size_t n_buckets;
    int32_t count;
    node_session *newest, *oldest;
    uint64_t kv_used;
    uint8_t hash_key[16]; /* crypto_shorthash's key, random per node */
} node_sessions;

struct mt_node {
    mt_node_config cfg;      /* strings and arrays are not kept */
    mt_keys keys;            /* guarded by id_lock (mt_node_set_cert replaces its certificate) */
    pthread_mutex_t id_lock; /* taken only to copy keys (node_identity) or to change them */
    const mt_keys_authorized *authorized;
    mt_model *model;
    uint64_t kv_budget;       /* bytes the sessions' caches may fill (mt_node_size_sessions) */
    uint64_t kv_fixed;        /* bytes a session keeps whatever its length (KDA state) */
    uint64_t kv_per_position; /* bytes a session keeps per position */
    mt_pool *pool;
    mt_proto_info info;
    expert_remote *partners; /* (n_partners) holders of the rest of a paired layer's experts */
    int n_partners;
    mt_expert_dispatch dispatch;
    bool use_dispatch;
    mt_sock listen_fd;
    mt_wake wake; /* ends the accept thread's wait */
    char addr[96];
    mt_log_source log; /* "node: ADDR: ..." lines (none when cfg.quiet) */

    pthread_t accept_thread, worker_thread;
    bool accept_started, worker_started;
    pthread_mutex_t lock;
    pthread_cond_t work_cv;   /* worker: something queued, or stop (CLOCK_MONOTONIC) */
    pthread_cond_t client_cv; /* readers: inflight went down, or stop */
    pthread_cond_t done_cv;   /* stop: a reader thread ended */
    node_hop *hops[NODE_MAX_HOPS + NODE_HOP_RESERVE]; /* guarded by lock */
    int n_hops;
    /* guarded by lock: the one-way passes waiting on this (last) stage, found by (owner,
     * session, pass_id) in O(1), and how many each origin keeps (node_oneway.c) */
    struct node_pass **pass_buckets;     /* (NODE_PASS_BUCKETS) chains */
    struct node_origin **origin_buckets; /* (NODE_ORIGIN_BUCKETS) chains */
    uint8_t pass_key[16];                /* their hash's key (crypto_shorthash), random */
    int n_passes;
    node_job *q_head, *q_tail;
    node_client *clients;
    int n_readers; /* reader threads alive */
    bool stop, held;
    mt_node_stats stats;

    node_sessions sessions; /* worker only */
    int session_cap;        /* sessions kept at most: cfg.max_sessions when given, else 2^20 */
    uint64_t step;          /* worker only */
    /* decode pacing (worker only; node.h "Step order"): the recent time of a step of prompt
     * chunks alone and of one of decodes alone, and when a held prompt step may start at the
     * latest (0: none held) */
    mt_node_pace_costs pace_costs;
    double pace_hold_until;
    int pace_skips; /* steps in a row whose decodes went without the prompts waiting */
    mt_node_pace_decode *pace_due; /* the decoding sessions' rhythms, for mt_node_pace_hold */
    int pace_cap;

    /* shard checks (node_verify.c) */
    struct mt_shard_info *shard_info; /* NULL: a whole model (no stored hashes) */
    pthread_t recheck_thread;
    bool recheck_started;
    pthread_cond_t recheck_cv; /* the re-check's waits; stop (CLOCK_MONOTONIC) */
    bool shard_bad;            /* guarded by lock: a re-check failed, nothing is computed */
    char shard_error[512];     /* guarded by lock */
    uint64_t rechecked;        /* guarded by lock: tensors re-hashed */
};

/* ---- node_verify.c ---------------------------------------------------------------- */

/* The start-up check of the loaded shard (see mt_node_config); keeps its
 * info for the re-checks. Logs that a whole model has nothing to check. */
int node_verify_shard(mt_node *n, const char *path, mt_error *err);
/* Starts the background re-check (a shard only, unless recheck_ms < 0). */
int node_recheck_start(mt_node *n, mt_error *err);
/* Ends it (after n->stop is set) and frees the shard info. */
void node_recheck_stop(mt_node *n);

/* ---- node_jobs.c ------------------------------------------------------------------ */

/* A copy of the node's identity as it is now (for one handshake); wipe it
 * with mt_keys_wipe after use. */
void node_identity(mt_node *n, mt_keys *out);
/* Replies to a client (a failed send breaks only that connection). */
void node_send_error(node_client *c, uint64_t request_id, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The ERROR answering a STAGE_AWAIT whose pass failed at the stage `back`
 * stages before the last (proto.h: flag STAGE). */
void node_send_stage_error(node_client *c, uint64_t request_id, uint32_t code, int32_t back,
                           const char *text);
void node_send_msg(node_client *c, const mt_proto_msg *m);
/* A queued request is finished (replied to): frees it, drops its reference. */
void node_job_done(node_job *j);
/* Checks a decoded request against what this node holds (before queueing):
 * 0, or -1 with *code and err. Session state is checked by the worker. */
int node_check_request(mt_node *n, const mt_proto_msg *m, uint32_t *code, mt_error *err);
/* Queues a validated request for the worker (takes m's arrays). false when
 * it could not be queued (out of memory, stopping): then a request that gets
 * a reply was answered with an ERROR (m freed), while a one-way forward is
 * left as it was for the caller to report (node_oneway_fail) and free. */
bool node_enqueue(node_client *c, mt_proto_msg *m);
/* Drops one reference to c (n->lock held); the last one closes its
 * connection and frees it. */
void node_client_unref_locked(node_client *c);

/* ---- node_sessions.c -------------------------------------------------------------- */

/* An empty table (-1: out of memory). */
int node_sessions_init(node_sessions *t);
/* Frees every session (and its cache) and the table. */
void node_sessions_free(node_sessions *t);
node_session *node_session_find(const node_sessions *t, const uint8_t *owner, uint64_t id);
/* The table's keyed hash of (owner, id) (a client cannot choose collisions). */
uint64_t node_sessions_hash(const node_sessions *t, const uint8_t *owner, uint64_t id);
/* A new session (zeroed, no cache yet), the most recently used; NULL: out of memory. */
node_session *node_session_add(node_sessions *t, const uint8_t *owner, uint64_t id);
/* Takes s out of the table and frees it and its cache. */
void node_session_remove(node_sessions *t, node_session *s);
/* s was used in `step` at now_ms: it becomes the most recently used. */
void node_session_touch(node_sessions *t, node_session *s, uint64_t step, int64_t now_ms);
/* s now holds `bytes` (kv_used follows). */
void node_session_hold(node_sessions *t, node_session *s, uint64_t bytes);

/* ---- node_worker.c ---------------------------------------------------------------- */

/* The worker thread (arg: the mt_node). */
void *node_worker_main(void *arg);

/* ---- node_oneway.c ---------------------------------------------------------------- */

/* A one-way forward m (from client c) failed here with code and text:
 * tells the last stage (CHAIN_ABORT through the hop senders, or this node's
 * own pass table when it is the last), naming this stage. */
void node_oneway_fail(mt_node *n, const mt_proto_msg *m, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A failed job: an ERROR reply, or node_oneway_fail for a one-way job. */
void node_job_fail(mt_node *n, node_job *j, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Whether the next hop of one-way job j has no room for more rows now
 * (its job then waits for a later step). */
bool node_oneway_hop_full(mt_node *n, const node_job *j);
/* Tokens [first, first + count) of one-way job j are computed (in j->out):
 * sends them on to its next hop, or into the pass table on the last stage. */
void node_oneway_chunk(mt_node *n, node_job *j, int32_t first, int32_t count);
/* A STAGE_AWAIT or a CHAIN_ABORT from c (takes m's arrays). */
void node_oneway_await(node_client *c, mt_proto_msg *m);
void node_oneway_abort(node_client *c, mt_proto_msg *m);
/* Drops passes older than max_age_ms (their AWAIT, if any, gets an ERROR). */
void node_passes_expire(mt_node *n, int64_t now_ms, int64_t max_age_ms);
/* Ends the next hops idle (nothing queued or being sent) for max_idle_ms:
 * their senders and connections. */
void node_hops_expire(mt_node *n, int64_t now_ms, int64_t max_idle_ms);
/* The empty pass table. */
int node_passes_init(mt_node *n, mt_error *err);
/* Stops the hop senders (after n->stop is set and the worker and readers
 * have ended), closes their connections, and frees the pass table. */
void node_hops_free(mt_node *n);

/* ---- node_partner.c --------------------------------------------------------------- */

/* Builds the expert table of a node holding attention: its own experts and
 * its partners' (connected here); every expert of its MoE layers must be
 * held by someone. */
int node_setup_experts(mt_node *n, const mt_node_config *cfg, mt_error *err);
/* Closes the partners' connections and frees them. */
void node_partners_free(mt_node *n);

static inline const uint8_t *node_job_owner(const node_job *j) {
    return j->msg.oneway ? j->msg.origin.pk : j->client->pk;
}

#endif

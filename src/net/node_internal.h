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
 * A STAGE_FORWARD with next hops (proto.h) is queued like any other, but the
 * worker hands its result back to the connection's reader (node_fwd)
 * instead of replying; the reader makes the downstream call and replies.
 * The worker never waits on the network for a chain, so other sessions keep
 * being batched; only that connection's reader waits (its requester is
 * waiting for this very reply anyway). Next-hop connections (node_hop) are
 * shared by all readers, one per (address, key), one call at a time. */
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
    NODE_MAX_CLIENTS = 256,      /* connections at once */
    NODE_MAX_SESSIONS = 1 << 20, /* sessions at once, however much memory is offered */
};

/* ---- structures ------------------------------------------------------------------- */

typedef struct node_client {
    struct mt_node *node;
    int fd;      /* the socket until the handshake ends (owned by mt_conn_server from then) */
    int wake_fd; /* dup of the socket: shutdown() on it wakes the reader at stop */
    mt_conn *conn;
    pthread_mutex_t send_lock;
    int refs, inflight; /* guarded by node->lock */
    char peer[160];     /* "name (ip:port)" for the log */
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    bool has_cert; /* the client presented a certificate the handshake accepted */
    mt_cert cert;  /* its fields (role, account, not_after: for metering per account) */
    struct node_client *prev, *next;
} node_client;

/* A chained request's result, handed from the worker to the reader that
 * waits for it (guarded by node->lock; signalled on node->fwd_cv). */
typedef struct node_fwd {
    bool done;   /* the job is finished */
    float *rows; /* (n, n_embd) its output, or NULL when it was answered with an ERROR */
} node_fwd;

/* A queued request. A STAGE_FORWARD may be computed in chunks over several
 * steps (chunked prefill, node_worker.c): `done` tokens are computed so far,
 * their results in `out`, and it is answered when done == msg.n. */
typedef struct node_job {
    struct node_job *next;
    node_client *client;
    mt_proto_msg msg;
    node_fwd *fwd; /* NULL: reply as usual */
    int32_t done;  /* tokens computed so far */
    float *out;    /* (msg.n, cols_out) the reply's rows, or (msg.n, W) whole hidden states
                      for a chained job; NULL before its first chunk */
} node_job;

/* A connection to a next hop, kept for later requests. */
typedef struct node_hop {
    char addr[MT_PROTO_HOP_ADDR_MAX + 1];
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    mt_remote *r;         /* NULL: not connected */
    pthread_mutex_t lock; /* one chained call (and reconnect) at a time */
} node_hop;

enum { NODE_MAX_HOPS = 64 }; /* next-hop connections kept */

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
    int listen_fd;
    int wake[2]; /* a pipe: writing to wake[1] ends the accept thread's wait */
    char addr[96];
    mt_log_source log; /* "node: ADDR: ..." lines (none when cfg.quiet) */

    pthread_t accept_thread, worker_thread;
    bool accept_started, worker_started;
    pthread_mutex_t lock;
    pthread_cond_t work_cv;        /* worker: something queued, or stop (CLOCK_MONOTONIC) */
    pthread_cond_t client_cv;      /* readers: inflight went down, or stop */
    pthread_cond_t done_cv;        /* stop: a reader thread ended */
    pthread_cond_t fwd_cv;         /* readers: a chained job finished */
    node_hop *hops[NODE_MAX_HOPS]; /* guarded by lock (each hop by its own) */
    int n_hops;
    node_job *q_head, *q_tail;
    node_client *clients;
    int n_readers; /* reader threads alive */
    bool stop, held;
    mt_node_stats stats;

    node_sessions sessions; /* worker only */
    int session_cap;        /* sessions kept at most: cfg.max_sessions when given, else 2^20 */
    uint64_t step;          /* worker only */

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
void node_send_msg(node_client *c, const mt_proto_msg *m);
/* A queued request is finished (replied to): frees it, drops its reference. */
void node_job_done(node_job *j);
/* Checks a decoded request against what this node holds (before queueing):
 * 0, or -1 with *code and err. Session state is checked by the worker. */
int node_check_request(mt_node *n, const mt_proto_msg *m, uint32_t *code, mt_error *err);
/* Queues a validated request for the worker (takes m's arrays; fwd: see
 * node_fwd). false when it was answered with an ERROR instead. */
bool node_enqueue(node_client *c, mt_proto_msg *m, node_fwd *fwd);
/* Drops one reference to c (n->lock held); the last one closes its
 * connection and frees it. */
void node_client_unref_locked(node_client *c);

/* ---- node_sessions.c -------------------------------------------------------------- */

/* An empty table (-1: out of memory). */
int node_sessions_init(node_sessions *t);
/* Frees every session (and its cache) and the table. */
void node_sessions_free(node_sessions *t);
node_session *node_session_find(const node_sessions *t, const uint8_t *owner, uint64_t id);
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

/* ---- node_chain.c ----------------------------------------------------------------- */

/* A validated STAGE_FORWARD with next hops (takes m's arrays): queues it,
 * waits for the worker's rows, forwards them to the first hop and replies
 * with its answer. Runs on the connection's reader thread. */
void node_chain(node_client *c, mt_proto_msg *m);
/* Closes the next-hop connections. */
void node_hops_free(mt_node *n);

/* ---- node_partner.c --------------------------------------------------------------- */

/* Builds the expert table of a node holding attention: its own experts and
 * its partners' (connected here); every expert of its MoE layers must be
 * held by someone. */
int node_setup_experts(mt_node *n, const mt_node_config *cfg, mt_error *err);
/* Closes the partners' connections and frees them. */
void node_partners_free(mt_node *n);

#endif

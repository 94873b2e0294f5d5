/* node_agent.h - `moontail node --registry URL`: a node that runs itself.
 *
 * The agent detects the machine (hwinfo.h), measures its read bandwidth,
 * joins the registry with an account token, and then heartbeats (every
 * heartbeat_ms the registry asks for, 1 s by default). Each heartbeat
 * reports what it serves and how much it computed, and brings back its
 * assignment. When the assignment names a shard it does not hold, the agent
 * fetches it in the background (peers first, the registry's seed copy last,
 * every piece verified; shard_fetch.h) while heartbeats go on, then starts
 * the data-plane server (node.h) on its fixed address with that shard and
 * the partners of its paired layer, and reports the shard as ready. It
 * trusts the registry's key as an authority, so it admits exactly the
 * requesters and nodes the registry vouches for, and it presents the
 * certificate the registry issued for its own key (renewed by heartbeats).
 * When told to drain (paused) or given no shard, it stops serving once no
 * request is waiting. It also serves the shards it holds to peers (HTTP,
 * GET /v1/shards/<name> with Range) so that the model is never downloaded
 * whole by anyone. If the registry is unreachable it keeps serving what it
 * has and retries; if the registry no longer knows it, it joins again. A
 * failed fetch is tried again after 1 s, doubling to 10 s; one that found
 * the data directory too small (shard_fetch.h keeps no partial file then)
 * lowers the capacity the node offers to what fits there, with the shard it
 * serves (heartbeat "capacity"), so that the registry places the shard on
 * another node; it says so, naming the directory, and offers more only
 * after a restart.
 *
 * Behind NAT (docs/volunteers.md): with `tunnel` the agent supervises a
 * tunnel program (tunnel.h) and registers the public address it prints; with
 * `relay` it keeps a connection to the registry's relay (relay.h) and
 * registers the public address the relay gives it. In both modes the node's
 * own data-plane server listens on loopback only, the public address goes to
 * the registry in every heartbeat ("addr"; a change after a tunnel restart or
 * a relay reconnect reaches the registry within one heartbeat), the node
 * reports no ready shard while that address is down (so it gets no routes),
 * and it does not serve shard bytes to peers (it registers no shard server;
 * peers fetch from others and from the registry's seed copy). */
#ifndef MOONTAIL_NODE_AGENT_H
#define MOONTAIL_NODE_AGENT_H

#include "moontail/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest reason (bytes) a node gives in its heartbeats for not serving the shard it
 * was assigned (field "problem"); the registry keeps and shows as much. */
#define MT_NODE_PROBLEM_MAX 480

typedef struct mt_agent_config {
    const char *registry;       /* "http://host:port" */
    const char *token;          /* the account's token */
    const char *key_path;       /* this node's secret key file (created if missing) */
    const char *name;           /* shown in status (NULL: mt_agent_default_name) */
    const char *listen;         /* data plane "host:port" (port 0: pick one once, and another
                                   if a process takes it while no data plane runs) */
    const char *shard_listen;   /* shard server "host:port" (NULL: same host, port 0) */
    const char *data_dir;       /* where shards are kept (created if missing) */
    int64_t capacity;           /* bytes of shard offered (<= 0: 70% of available RAM) */
    double speed;               /* <= 0: measure (1.0 = 10 GB/s of reads) */
    int threads;                /* compute threads (<= 0: all CPUs) */
    int max_sessions;           /* <= 0: the node default (node.h) */
    int n_ctx;                  /* <= 0: the node default */
    uint64_t memory_bytes;      /* memory the node offers for weights and caches (node.h) */
    int session_idle_ms;        /* unused sessions expire after (<= 0: the node default) */
    int step_tokens;            /* a step's tokens (<= 0: the node default, node.h) */
    int prefill_chunk;          /* a prompt's chunk (<= 0: the node default) */
    const char *tunnel;         /* tunnel command ({port}, {host}); NULL: none */
    const char *tunnel_pattern; /* NULL: the default (tunnel.h) */
    int tunnel_wait_ms;         /* first address within (<= 0: 60000) */
    bool relay;                 /* reach peers through the registry's relay */
    bool quiet;
    double corrupt_rate; /* FOR TESTS ONLY: passed to the data-plane server (node.h) */
    int recheck_ms;      /* the served shard's background re-check (node.h recheck_ms) */
} mt_agent_config;

typedef struct mt_agent mt_agent;

/* The name a node goes by when it is given none: this machine's host name
 * and 4 hex digits of the node's public key ("pc7-3fa9"), so that two nodes
 * on one machine, or machines cloned with one host name, differ, and a node
 * keeps its name across restarts. */
void mt_agent_default_name(const uint8_t pk[32], char *out, size_t cap);

/* Joins the registry (a refusal is an error naming why) and starts the
 * heartbeat thread. */
mt_agent *mt_agent_start(const mt_agent_config *cfg, mt_error *err);
/* Leaves: stops heartbeats, the data plane and the shard server. */
void mt_agent_stop(mt_agent *a);

typedef struct mt_agent_state {
    int64_t node_id;
    char shard[96];    /* serving now ("" = nothing) */
    char fetching[96]; /* being fetched ("" = nothing) */
    uint64_t fetch_done, fetch_total;
    double fetch_rate; /* bytes/s */
    char role[16];
    int heartbeats, heartbeat_failures;
    char last_error[512];
    char addr[160];    /* data plane address as registered (public in tunnel / relay mode) */
    char local[160];   /* where the data-plane server listens */
    int tunnel_starts; /* times the tunnel program was started */
} mt_agent_state;

void mt_agent_get_state(mt_agent *a, mt_agent_state *out);

#endif

/* registry.h - `moontail registry`: the control plane (docs/design.md, layer 4).
 *
 * One process with an HTTP + JSON API and its state in an embedded SQLite
 * database (WAL, synchronous=FULL: a restart loses no node, credit or
 * ledger row). It never sees activations or tokens. It
 *   - issues account tokens, and node tokens when a node joins;
 *   - vouches for data-plane keys: it signs a certificate for each node's
 *     and each account's key with its own Ed25519 key, and nodes admit
 *     exactly the keys its certificates name (cert.h);
 *   - knows the nodes by their heartbeats (default every second; a node not
 *     heard from for dead_after_ms is dead). Time the registry itself was
 *     down does not count: after a restart, the nodes that were alive when
 *     it stopped stay alive for dead_after_ms from the start, so that they
 *     can check in before placement moves their shards;
 *   - places shards: every layer covered `replicas` times (cell: pipelines
 *     of stages, small machines paired on a layer; swarm: expert servers),
 *     `spares` hot spares, faster nodes where compute is heaviest
 *     (placement.h), and re-places when nodes come, go or pause;
 *   - is the seed for shard bytes: it cuts the shards it assigns from the
 *     model file and serves them in verified pieces; nodes prefer peers;
 *   - hands requesters a route per session, avoiding nodes they report as
 *     failed, and refuses (swarm mode) accounts that have not volunteered;
 *   - meters work: token-layers and expert rows served per node (credited
 *     to the node's account), tokens used per account;
 *   - checks the nodes a requester's spot-check reports as disagreeing by
 *     computing the disputed layers itself, and quarantines a node found
 *     wrong (no role, no route, no credit) until an operator releases it
 *     (docs/spot-checking.md);
 *   - optionally runs a relay (relay.h) for nodes behind NAT: they keep a
 *     connection to it, authenticated with their node token, and peers reach
 *     them through a public port of the relay; the relay copies the data
 *     plane's encrypted bytes and never decrypts them.
 *
 * The HTTP API is described in docs/control-plane.md. */
#ifndef MOONTAIL_REGISTRY_H
#define MOONTAIL_REGISTRY_H

#include "moontail/error.h"
#include "moontail/http.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum mt_registry_mode { MT_REGISTRY_CELL, MT_REGISTRY_SWARM } mt_registry_mode;

typedef struct mt_registry_config {
    const char *model;     /* the model (GGUF) the registry places */
    const char *db;        /* SQLite database file (created if missing) */
    const char *key;       /* the registry's secret key file (created if missing) */
    const char *shard_dir; /* where cut shards are kept (created if missing) */
    const char *listen;    /* "host:port" (NULL: 127.0.0.1:8470; port 0 picks one) */
    mt_registry_mode mode;
    int replicas;             /* copies of every layer/expert slice (<= 0: 2) */
    int spares;               /* hot spares (< 0: 1 in cell mode, 0 in swarm mode) */
    int objective;            /* cell: mt_place_objective, how each pipeline is laid out
                                 (0: THROUGHPUT, the slowest stage fastest) */
    double latency_goal_ms;   /* cell: per-user ms per token; > 0 makes `replicas` the
                                 fewest pipelines and placement makes as many as meet it
                                 (mt_place_params.latency_goal_ms); 0: none */
    int heartbeat_ms;         /* what nodes are told (<= 0: 1000) */
    int dead_after_ms;        /* silence that makes a node dead (<= 0: 5000) */
    int cert_minutes;         /* validity of issued certificates (<= 0: 60) */
    const char *admin_token;  /* needed to create accounts; NULL: anyone may (swarm sign-up) */
    bool require_volunteer;   /* swarm: only accounts that volunteered may get routes */
    int64_t capacity_limit;   /* testing aid: cap every node's offered capacity (0: none) */
    const char *relay_listen; /* run a relay: where nodes connect ("HOST:PORT"); NULL: none */
    const char *relay_host;   /* the name nodes and peers reach the relay at (NULL: the host
                                 of relay_listen) */
    int relay_port_lo, relay_port_hi; /* public ports for relayed nodes (0, 0: any free port) */
    int relay_max_conns;              /* relayed connections per node (<= 0: 64) */
    int max_active;         /* requests holding routes at once; more wait in line (0: no limit) */
    int ticket_ttl_ms;      /* a request not heard of for this long is dropped (<= 0: 30000) */
    int reports_per_minute; /* spot-check reports one account may make a minute (<= 0: 6) */
    /* Working memory placement reserves on every node that holds attention parts (a
     * cell stage): `sessions` sessions of n_ctx positions each, at the model's KV and
     * recurrent-state sizes (placement.h). 0 sessions: none (shard bytes only). */
    int sessions; /* 0..2^20; a node keeps up to --max-sessions (64) */
    /* The KV cache type every node of the cell uses (0: f16), handed out with their
     * assignments: replicas of a layer must compute the same numbers, bit for bit, and the
     * registry's own spot-check recomputes them with it. */
    mt_kv_type kv_type;
    int n_ctx; /* <= 0: a node's default, min(context_length, 4096) */
    /* The model's tensor hashes (its source_id, the seed shards' keys) are kept
     * in a hash cache (hash_cache.h) so that a restart on an unchanged model
     * does not read it again: this file, NULL for hashes.sqlite in the
     * database's directory, "none" for no cache. rehash: read and hash the
     * model at this start whatever the cache holds. */
    const char *hash_cache;
    bool rehash;
    bool quiet;
    /* what one client may take of the HTTP API (zero fields: http.h's defaults); nodes'
     * addresses are reserved once a heartbeat proves them */
    mt_http_limits http_limits;
    /* TLS for the HTTP API (tls_cert.h): the certificate and key (PEM) it is
     * served with, and the certificate's pin, shown at GET / and /v1/status.
     * Without them the API is plain HTTP, which a listen address off this
     * machine (not loopback) gets only with insecure_http: tokens would cross
     * the network in clear. */
    const char *tls_cert_pem, *tls_key_pem, *tls_pin;
    bool insecure_http;
} mt_registry_config;

typedef struct mt_registry mt_registry;

/* Opens (or creates) the database, loads the model's layout, starts the
 * HTTP server and the placement thread. */
mt_registry *mt_registry_start(const mt_registry_config *cfg, mt_error *err);
void mt_registry_stop(mt_registry *r);

/* "http://host:port" as bound ("https://" with TLS). */
const char *mt_registry_url(const mt_registry *r);
/* The registry's public key (hex), the authority nodes trust. */
const char *mt_registry_pubkey_hex(const mt_registry *r);
/* "HOST:PORT" of the relay nodes connect to, or NULL when there is none. */
const char *mt_registry_relay_addr(const mt_registry *r);

#endif

/* node_agent_internal.h - the node agent's state (node_agent.c), shared with
 * its shard fetch thread (node_agent_fetch.c) and the helpers both use
 * (node_agent_state.c). Private to src/control. */
#ifndef MOONTAIL_NODE_AGENT_INTERNAL_H
#define MOONTAIL_NODE_AGENT_INTERNAL_H

#include "moontail/bg_thread.h"
#include "moontail/http.h"
#include "moontail/hwinfo.h"
#include "moontail/keys.h"
#include "moontail/log.h"
#include "moontail/node.h"
#include "moontail/node_agent.h"
#include "moontail/progress.h"
#include "moontail/relay.h"
#include "moontail/shard_fetch.h"
#include "moontail/tunnel.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

enum { MAX_PARTNERS = 16 };

typedef struct partner_set {
    int n;
    mt_node_partner p[MAX_PARTNERS];
    char addr[MAX_PARTNERS][128];
} partner_set;

struct mt_agent {
    mt_agent_config cfg;
    char *registry, *token, *key_path, *data_dir;
    char name[64];
    char log_name[80];    /* "node NAME", prefix of the tunnel's and relay's log lines */
    mt_log_source log;    /* "node: NAME: ..." lines */
    char listen[160];     /* data plane: its port stays, unless picked here and then taken */
    bool listen_auto;     /* its port was picked here (--listen HOST:0), so it may change */
    bool listen_moved;    /* it changed since joining: heartbeats carry it (field addr) */
    char shard_addr[160]; /* shard server as bound */
    mt_keys keys;
    mt_keys_authorized *auth;
    mt_http_server *shards; /* NULL in tunnel / relay mode */
    mt_tunnel *tunnel;
    mt_relay_client *relay;
    bool nat;              /* tunnel or relay mode */
    char public_addr[160]; /* tunnel / relay: the address registered last */
    bool public_up;        /* tunnel / relay: the address works now */
    char relay_addr[160];  /* the registry's relay, from its join answer */
    mt_hwinfo hw;
    double speed;
    int64_t capacity;

    pthread_mutex_t lock;
    mt_bg_thread hb; /* the heartbeat thread; a wake makes it beat now */
    pthread_t fetch_thread;
    bool fetch_running, fetch_joinable;

    int64_t node_id;
    char node_token[65];
    int heartbeat_ms;
    uint64_t cert_expires; /* unix seconds */

    /* what the registry wants and what runs */
    char want[96];
    partner_set want_partners;
    mt_kv_type want_kv, serving_kv; /* the cell's KV cache type (the registry's --kv-type) */
    bool drain;
    bool beat_now;    /* the data plane stopped or started: tell the registry without waiting */
    bool quarantined; /* the registry says so (docs/spot-checking.md) */
    mt_node *node;
    char serving[96];
    partner_set serving_partners;
    char fetching[96];
    mt_fetch_progress progress;
    mt_progress bar;       /* the fetch in progress, in the log (a bar on a terminal) */
    char fetch_failed[96]; /* the shard whose last fetch failed */
    int fetch_failures;    /* its failed fetches in a row */
    double fetch_retry_at; /* mt_mono_s() before which it is not fetched again (backoff) */
    int64_t disk_limit;    /* what the data directory can hold, once a fetch ran out of
                              room there (-1: never); caps the capacity offered */
    char verified[96];     /* the shard last checked against the registry's manifest */
    /* the served shard changed on disk (the node's background re-check): it is not served
     * again until the agent restarts (which fetches it again), and every heartbeat says so */
    char bad_shard[96];
    mt_node_stats base;     /* counters of node instances already stopped */
    mt_node_stats credited; /* the counters in the last heartbeat the registry took */
    mt_node_stats joined;   /* what `credited` was when the registry last took this node in */
    uint64_t last_requests;
    int idle_beats;
    double last_tok_time;
    uint64_t last_tokens;
    double tok_per_s;

    json_t *sources; /* peers holding the wanted shard, from the last heartbeat */
    int heartbeats, failures;
    char last_error[512];
    /* why the node cannot serve problem_shard (its fetch or its load failed); heartbeats
     * carry it while that shard is still wanted and not served */
    char problem[MT_NODE_PROBLEM_MAX + 1];
    char problem_shard[96];
};

/* Records why shard `name` cannot be served (caller holds a->lock): one line (the registry
 * refuses control characters), cut at a character boundary if it is too long. */
void agent_set_problem(mt_agent *a, const char *name, const char *what, const char *why);
/* The bytes of shard the node offers: what it was given, or less once its data directory
 * turned out to be too small (caller holds a->lock, or the heartbeat thread has not started). */
int64_t agent_offered_capacity(const mt_agent *a);
/* DATA_DIR/NAME.gguf, malloc'ed (NULL when out of memory). */
char *agent_shard_path(const mt_agent *a, const char *name);

/* Starts fetching a->want in the background, unless a fetch runs or the last one of that
 * shard failed less than its backoff ago (caller holds a->lock). When it ends, the fetch
 * sets a->verified (or a->problem) and wakes the heartbeat thread. */
void agent_fetch_start(mt_agent *a);
/* Waits up to 5 s for a running fetch (the heartbeat thread has stopped; a->lock not held).
 * Returns false when it is still waiting on the network: it then still uses the agent,
 * which must not be freed. */
bool agent_fetch_join(mt_agent *a);

#endif

/* registry_internal.h - what the registry's files share (see registry.h for
 * what the registry does): the registry object, node rows as the planner
 * and the HTTP handlers see them, and the database helpers. */
#ifndef MOONTAIL_REGISTRY_INTERNAL_H
#define MOONTAIL_REGISTRY_INTERNAL_H

#include "moontail/bg_thread.h"
#include "moontail/clock.h" /* mt_wall_ms: the times the database keeps */
#include "moontail/gguf.h"
#include "moontail/http.h"
#include "moontail/keys.h"
#include "moontail/log.h"
#include "moontail/model.h"
#include "moontail/node_agent.h"
#include "moontail/placement.h"
#include "moontail/progress.h"
#include "moontail/registry.h"
#include "moontail/relay.h"
#include "moontail/shard.h"
#include "moontail/tls_cert.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- assignments --------------------------------------------------------------------- */

typedef struct reg_assign {
    mt_place_role role; /* stored in the database as its number */
    int32_t replica;    /* pipeline (cell) or replica index; -1 none */
    int32_t layer_begin, layer_end;
    bool attention;
    int32_t expert_begin, expert_end; /* [0, 0) = no routed experts */
    int64_t paired_with;              /* partner: the stage node's id */
} reg_assign;

/* ---- nodes ------------------------------------------------------------------------------ */

typedef struct reg_node {
    int64_t id, account_id;
    char name[64];
    char pubkey[65];
    char addr[128];       /* data plane "host:port" */
    char shard_addr[128]; /* its shard server "host:port", "" = none */
    int64_t ram, disk, vram;
    int32_t cores;
    char simd[16], gpu[64];
    int64_t capacity; /* bytes of shard it offers */
    double speed;     /* relative compute speed from its self-benchmark */
    bool paused;
    char schedule[128]; /* pause windows, "" = none */
    int64_t joined, last_seen, uptime_ms;
    reg_assign a;
    char ready_shard[96]; /* the shard it serves now ("" = none) */
    int64_t served_token_layers, served_expert_rows, served_tokens;
    int32_t load_queue, load_sessions;
    int64_t load_kv_bytes;     /* KV cache bytes its sessions reserve, as last reported */
    int32_t load_ctx;          /* positions per session it offers (0: not reported) */
    int32_t load_max_sessions; /* sessions of min(ctx, 4096) positions it holds (0: not
                                  reported); it keeps more when shorter */
    int64_t load_kv_budget;    /* bytes its sessions may hold (0: not reported) */
    int64_t load_kv_used;      /* bytes they hold, as last reported */
    double tok_per_s;
    bool quarantined; /* a spot-check found it computing wrong results (registry_reports.c) */
    int64_t quarantined_at;
    char quarantine_reason[256];
    char problem[MT_NODE_PROBLEM_MAX + 1]; /* why it cannot serve its shard ("" = none) */
} reg_node;

/* ---- admission (registry_queue.c) --------------------------------------------------------- */

typedef struct reg_ticket {
    char id[33];
    int64_t account;
    int64_t last_ms; /* last heard of */
    bool active;     /* holds a slot (may get routes) */
} reg_ticket;

/* ---- the registry ---------------------------------------------------------------------- */

struct mt_registry {
    mt_registry_config cfg;
    mt_log_source log; /* "registry: ..." lines; quiet with cfg.quiet */
    char *db_path, *model_path, *shard_dir, *listen;
    mt_relay *relay;      /* NULL unless relay_listen was given */
    pthread_mutex_t lock; /* the database and everything below */
    sqlite3 *db;
    mt_http_server *http;
    char url[160];
    char tls_pin[MT_TLS_PIN_SIZE]; /* "" without TLS */
    mt_keys key;
    char key_hex[65];
    gguf_file *model;
    mt_shard_layout layout;
    int32_t n_expert_used; /* <arch>.expert_used_count, 0 for a dense model */
    char source_id[MT_SHARD_HASH_HEX];
    uint64_t model_bytes; /* every layer's bytes (what placement must cover once) */
    /* per-session working memory of each layer (mt_kv_session_bytes), when cfg.sessions > 0;
     * NULL otherwise. cfg.n_ctx is resolved to the node default at start */
    uint64_t *state_bytes, *position_bytes; /* (n_layer) fixed / per position, one session */
    uint64_t plan_version;
    int64_t last_plan_ms;
    char plan_why[512];      /* why coverage is incomplete, "" when complete */
    char goal_why[512];      /* the plan's goal_note (a latency goal missed), "" when met */
    uint8_t plan_inputs[32]; /* digest of the nodes the current plan was made of */
    int64_t moves;           /* shard changes made by placement so far */
    mt_place_plan plan;      /* the last plan (its assignments are the nodes' rows) */
    bool have_plan;
    mt_bg_thread ticker; /* placement turns (reg_replan); a wake makes one now */
    int64_t routes_served;
    int64_t started_ms; /* when this process started (counters above restart from 0) */
    /* restart grace (reg_node_alive): nodes heard from at or after grace_from (alive when the
     * registry last ran) count as alive until grace_until, dead_after_ms after the start */
    int64_t grace_from, grace_until;
    /* overload grace (reg_note_overload): while the registry itself is overloaded (its HTTP
     * server turns clients away, its placement thread runs late), the nodes alive when that
     * began (heard from at or after overload_from) count as alive until dead_after_ms after
     * it ended (overload_until), but never after a silence longer than 12 x dead_after_ms or
     * REG_OVERLOAD_GRACE_MIN_MS, whichever is longer: an attacker may delay the detection of
     * a dead node, not stop it. Written under grace_mu, read without it. */
    _Atomic int64_t overload_from, overload_until;
    pthread_mutex_t grace_mu;
    _Atomic int64_t overloads, overload_ms; /* times noted, and the total time they covered */
    /* the placement thread's last turn, monotonic and wall ms */
    _Atomic int64_t turned_ms, turned_wall_ms;
    uint64_t cert_serial; /* serial of the last certificate issued (start: time-based) */
    reg_ticket *tickets;  /* active and queued requests, queued ones in arrival order */
    int32_t n_tickets, cap_tickets;
    bool probing;            /* a spot-check report's probe runs (one at a time) */
    mt_model *referee_model; /* the whole model for probes (mapped), loaded by the first */
    /* how the model is read and hashed (the cache, progress); seed shards are cut with it
     * under their cut lock */
    mt_shard_io io;
    mt_progress bar;
    char bar_step[300];
    /* the seed shards found to hold what their names mean, or cut, in this run: checked once
     * (registry_shards.c; under its cut lock) */
    char (*seeds_checked)[96];
    int32_t n_seeds_checked, cap_seeds_checked;
    /* the hashing at start, for the status: model bytes read, taken from the cache, seconds */
    uint64_t start_hash_read, start_hash_cached;
    double start_hash_s;
    /* made by this start (a failed start removes them again): the shard directory, the
     * database, the identity, the hash cache */
    bool made_shard_dir, made_db, made_key, made_hash_cache;
};

/* registry_db.c */
int reg_db_open(mt_registry *r, const char *path, mt_error *err);
void reg_db_close(mt_registry *r);
int reg_db_exec(mt_registry *r, mt_error *err, const char *fmt, ...);
sqlite3_stmt *reg_db_prepare(mt_registry *r, mt_error *err, const char *sql);
int reg_db_step_done(mt_registry *r, sqlite3_stmt *st, mt_error *err);
int reg_meta_get(mt_registry *r, const char *key, char *out, size_t cap);
int reg_meta_set(mt_registry *r, const char *key, const char *value, mt_error *err);
int reg_ledger_add(mt_registry *r, int64_t t_ms, int64_t account, int64_t node, const char *kind,
                   int64_t amount, mt_error *err);
int64_t reg_ledger_sum(mt_registry *r, const char *where_col, int64_t id, const char *kind);

/* registry_nodes.c: node rows */
int reg_nodes_load(mt_registry *r, reg_node **out, int32_t *n, mt_error *err);
int reg_node_get(mt_registry *r, int64_t id, reg_node *out);
int reg_node_save_assign(mt_registry *r, int64_t id, const reg_assign *a, mt_error *err);
/* Alive: heard from within dead_after_ms, or alive when the registry last ran
 * and it started less than dead_after_ms ago. Heard: the first part only.
 * Available: alive, not paused now. */
bool reg_node_alive(const mt_registry *r, const reg_node *n, int64_t now_ms);
/* The registry has not kept up since began_ms (wall ms; see overload_from): the nodes
 * heard from within dead_after_ms before that stay alive until dead_after_ms from now.
 * Thread-safe. */
void reg_note_overload(mt_registry *r, int64_t began_ms);
/* the shortest silence the overload grace covers (reg_node_alive), whatever dead_after_ms */
#define REG_OVERLOAD_GRACE_MIN_MS 60000
/* Notes an overload when the placement thread has not turned for a second (registry.c);
 * called (holding r->lock) before anything that judges liveness. */
void reg_check_stall(mt_registry *r);
bool reg_node_heard(const mt_registry *r, const reg_node *n, int64_t now_ms);
bool reg_node_available(const mt_registry *r, const reg_node *n, int64_t now_ms);
/* "joining", "loading", "failing" (it reports why it cannot serve), "serving", "spare",
 * "idle", "paused", "draining", "dead" or "quarantined" */
const char *reg_node_state(const mt_registry *r, const reg_node *n, int64_t now_ms);

/* registry_shards.c: shard names, cutting, manifests */
void reg_shard_name(const reg_assign *a, char out[96]);
void reg_assign_spec(const mt_registry *r, const reg_assign *a, mt_shard_spec *spec,
                     int32_t *ids_storage);
/* Cuts shard `name` (if not cut yet) and returns its manifest (new reference). */
json_t *reg_shard_manifest(mt_registry *r, const char *name, mt_error *err);
/* Parses a shard name back into an assignment (or the head/backbone). */
int reg_shard_parse(const mt_registry *r, const char *name, reg_assign *a, bool *head);

/* registry_plan.c: placement and routes */
void reg_replan(mt_registry *r, int64_t now_ms);
json_t *reg_route(mt_registry *r, uint64_t session, const int64_t *avoid, int32_t n_avoid,
                  mt_error *err);

/* registry_queue.c: admission. take: the ticket id (or NULL for a new one),
 * touched and maybe activated; *position 0 when active, else its place in
 * line (1 = next). */
reg_ticket *reg_ticket_take(mt_registry *r, int64_t account, const char *id, int64_t now,
                            int32_t *position);
bool reg_ticket_touch(mt_registry *r, const char *id, int64_t account, int64_t now);
bool reg_ticket_done(mt_registry *r, const char *id, int64_t account);
void reg_ticket_counts(mt_registry *r, int64_t now, int32_t *active, int32_t *waiting);

/* registry_accounts.c: tokens and credits */
int reg_token_new(char out[65]);
void reg_token_hash(const char *token, char out[65]);
int64_t reg_account_by_token(mt_registry *r, const char *token);
int64_t reg_account_create(mt_registry *r, const char *name, char token[65], mt_error *err);
bool reg_account_volunteered(mt_registry *r, int64_t account);
json_t *reg_account_credits(mt_registry *r, int64_t account);

/* registry_api.c: the HTTP endpoints (an mt_http_handler with ctx = the registry) */
void reg_api_handle(void *ctx, const mt_http_request *req, mt_http_response *resp);

/* registry_referee.c: the registry's own check of the nodes a spot-check
 * report names (docs/spot-checking.md) */
typedef enum reg_probe_result {
    REG_PROBE_RIGHT,     /* every reply equals the registry's own result, bit for bit */
    REG_PROBE_WRONG,     /* a reply differs: the node computes wrong results */
    REG_PROBE_NO_ANSWER, /* it could not be asked (refused, broken, an ERROR): no verdict */
} reg_probe_result;
typedef struct reg_probe_target {
    int64_t node_id;
    char addr[128];
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
} reg_probe_target;
typedef struct reg_probe_outcome {
    reg_probe_result result;
    char why[256];
} reg_probe_outcome;
const char *reg_probe_result_name(reg_probe_result res);
/* A fresh key with a requester certificate of this registry, for one probe
 * (with the registry's lock held: it takes a certificate serial). */
int reg_referee_identity(mt_registry *r, mt_keys *k, mt_error *err);
/* Probes the targets on layers [a, b) for up to `positions` positions as
 * identity `keys` (without the registry's lock; one probe at a time). -1
 * only when the registry itself cannot compute (out[] is then undecided). */
int reg_referee_probe(mt_registry *r, const mt_keys *keys, int32_t a, int32_t b, int32_t positions,
                      const reg_probe_target *targets, int n_targets, reg_probe_outcome *out,
                      mt_error *err);

/* registry_reports.c: POST /v1/reports (spot-check reports, quarantine) and
 * POST /v1/nodes/ID/release (the operator lets a quarantined node work
 * again); with the registry's lock held (a probe lets go of it meanwhile) */
void reg_reports_post(mt_registry *r, const mt_http_request *req, json_t *body,
                      mt_http_response *resp);
void reg_node_release(mt_registry *r, const mt_http_request *req, const char *id_text,
                      mt_http_response *resp);

/* registry_api.c helpers the other handlers share: a string field of at
 * most max printable bytes, an integer field in [lo, hi] (NULL / dflt with
 * resp set when bad; *ok false), the request's account (401 when none), and
 * whether it carries the admin token (401/403 otherwise) */
const char *reg_api_str_field(json_t *body, const char *name, size_t max, bool required,
                              mt_http_response *resp);
int64_t reg_api_int_field(json_t *body, const char *name, int64_t lo, int64_t hi, int64_t dflt,
                          bool required, bool *ok, mt_http_response *resp);
int64_t reg_api_account(mt_registry *r, const mt_http_request *req, mt_http_response *resp);
bool reg_api_admin_ok(mt_registry *r, const mt_http_request *req, const char *what,
                      mt_http_response *resp);

/* registry_status.c */
json_t *reg_status_json(mt_registry *r);

/* registry_metrics.c: GET /metrics, the status object in Prometheus text format
 * 0.0.4 (malloc'd; NULL when out of memory) */
char *reg_metrics_text(mt_registry *r);
#define REG_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* status_page.c, generated at build time from src/control/status_page.html
 * (cmake/embed_text.cmake): the page served at GET / and GET /status */
extern const unsigned char reg_status_page_html[];
extern const unsigned long reg_status_page_html_len;

#endif

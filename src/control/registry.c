/* registry.c - the registry's life cycle (registry.h): database, identity,
 * model layout, HTTP server, the placement thread that re-places shards
 * when nodes come, go, or pause, and the relay for nodes behind NAT (which
 * asks here whether a node's proof matches its token). */
#include "moontail/log.h"
#include "registry_internal.h"
#include "moontail/clock.h"
#include "moontail/transport.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The registry's identity: loaded, or made on first start. */
static int load_key(mt_registry *r, mt_error *err) {
    struct stat sb;
    if (stat(r->cfg.key, &sb) != 0) {
        if (errno != ENOENT) return mt_error_set(err, "%s: %s", r->cfg.key, strerror(errno));
        if (mt_keys_generate(&r->key, err) || mt_keys_save(&r->key, r->cfg.key, err)) return -1;
        r->made_key = true;
        mt_log_as(&r->log, MT_LOG_INFO, "created identity %s", r->cfg.key);
    } else if (mt_keys_load(&r->key, r->cfg.key, err)) {
        return -1;
    }
    mt_keys_pk_to_hex(r->key.pk, r->key_hex);
    return 0;
}

/* Progress of hashing the model and cutting seed shards, in the log. */
static void on_progress(void *ctx, const char *what, uint64_t done, uint64_t total) {
    mt_registry *r = ctx;
    if (strncmp(r->bar_step, what, sizeof r->bar_step - 1) != 0) {
        snprintf(r->bar_step, sizeof r->bar_step, "%s", what);
        mt_progress_init_log(&r->bar, &r->log, what, 1.0);
    }
    mt_progress_bytes(&r->bar, done, total);
}

/* The cache of the model's hashes: cfg.hash_cache, or hashes.sqlite beside
 * the database. Without one (it cannot be opened) the model is hashed. */
static void open_hash_cache(mt_registry *r) {
    r->io.rehash = r->cfg.rehash;
    if (!r->log.quiet) {
        r->io.progress = on_progress;
        r->io.progress_ctx = r;
    }
    const char *path = r->cfg.hash_cache;
    char buf[4096];
    if (path && strcmp(path, "none") == 0) return;
    if (!path) {
        const char *slash = strrchr(r->db_path, '/');
        int dir = slash ? (int)(slash - r->db_path) : 0;
        snprintf(buf, sizeof buf, "%.*s%shashes.sqlite", dir, r->db_path, slash ? "/" : "");
        path = buf;
    }
    mt_error e = {{0}};
    struct stat sb;
    bool existed = stat(path, &sb) == 0;
    r->io.cache = mt_hash_cache_open(path, &e);
    r->made_hash_cache = r->io.cache && !existed;
    if (!r->io.cache)
        mt_log_as(&r->log, MT_LOG_WARN, "%s; hashing the whole model at every start", e.msg);
}

/* The model: its layout for placement, and its identity, which the database
 * remembers so that a registry is never restarted on another model by
 * mistake. */
static int load_model(mt_registry *r, mt_error *err) {
    r->model = gguf_open(r->cfg.model, err);
    if (!r->model || mt_model_check_file(r->model, err) ||
        mt_shard_layout_read(r->model, &r->layout, err))
        return -1;
    mt_error e = {{0}};
    char *arch = gguf_get_string(r->model, "general.architecture", &e);
    if (arch) {
        char key[128];
        uint32_t used = 0;
        snprintf(key, sizeof key, "%s.expert_used_count", arch);
        if (gguf_get_u32(r->model, key, &used, &e)) r->n_expert_used = (int32_t)used;
        free(arch);
    }
    for (int32_t il = 0; il < r->layout.n_layer; il++)
        r->model_bytes +=
            r->layout.attn_bytes[il] + (uint64_t)r->layout.n_expert * r->layout.expert_bytes[il];
    { /* what each session of a stage keeps, from the metadata (placement reserves it for
       * cfg.sessions sessions); sizing it also checks that the cache type suits the model,
       * or no node could serve it */
        int32_t L = r->layout.n_layer, n_ctx_train = 0;
        r->state_bytes = calloc((size_t)L, sizeof *r->state_bytes);
        r->position_bytes = calloc((size_t)L, sizeof *r->position_bytes);
        if (!r->state_bytes || !r->position_bytes) return mt_error_set(err, "out of memory");
        if (mt_kv_session_bytes(r->model, L, r->cfg.kv_type, r->state_bytes, r->position_bytes,
                                &n_ctx_train, err)) {
            mt_error_prefix(err, "registry: sizing the sessions' %s KV cache",
                            mt_kv_type_name(r->cfg.kv_type));
            return -1;
        }
        if (r->cfg.sessions > 0 && r->cfg.n_ctx <= 0) /* the node's default (node_server.c) */
            r->cfg.n_ctx = n_ctx_train > 0 && n_ctx_train < 4096 ? n_ctx_train : 4096;
    }
    open_hash_cache(r);
    mt_log_as(&r->log, MT_LOG_INFO, "hashing %s", r->cfg.model);
    if (mt_shard_source_id_io(r->model, &r->io, r->source_id, NULL, err)) return -1;
    r->start_hash_read = r->io.bytes_hashed;
    r->start_hash_cached = r->io.bytes_cached;
    r->start_hash_s = r->io.hash_s;
    if (r->io.cache_err.msg[0])
        mt_log_as(&r->log, MT_LOG_WARN, "the hash cache failed (%s); hashing went on without it",
                  r->io.cache_err.msg);
    char speed[96] = "";
    if (r->io.bytes_hashed > 0 && r->io.hash_s > 0)
        snprintf(speed, sizeof speed, " (%.1f MB in %.2f s, %.0f MB/s)", r->io.bytes_hashed / 1e6,
                 r->io.hash_s, r->io.bytes_hashed / 1e6 / r->io.hash_s);
    mt_log_as(&r->log, MT_LOG_INFO, "model hashes: read %llu bytes%s, %.1f MB from the cache%s%s",
              (unsigned long long)r->io.bytes_hashed, speed, r->io.bytes_cached / 1e6,
              r->io.cache ? " " : " (none)", r->io.cache ? mt_hash_cache_path(r->io.cache) : "");
    char had[MT_SHARD_HASH_HEX];
    if (reg_meta_get(r, "source_id", had, sizeof had) == 0) {
        if (strcmp(had, r->source_id) != 0)
            return mt_error_set(err,
                                "%s was made for another model (source_id %.16s..., %s is "
                                "%.16s...); use that model or a new database",
                                r->db_path, had, r->cfg.model, r->source_id);
    } else if (reg_meta_set(r, "source_id", r->source_id, err)) {
        return -1;
    }
    const char *mode = r->cfg.mode == MT_REGISTRY_SWARM ? "swarm" : "cell";
    char had_mode[16];
    if (reg_meta_get(r, "mode", had_mode, sizeof had_mode) == 0 && strcmp(had_mode, mode) != 0)
        return mt_error_set(err, "%s holds a %s, not a %s; use --mode %s or a new database",
                            r->db_path, had_mode, mode, had_mode);
    return reg_meta_set(r, "mode", mode, err);
}

static void *ticker(void *arg) {
    mt_registry *r = arg;
    while (!mt_bg_thread_stopping(&r->ticker)) {
        pthread_mutex_lock(&r->lock);
        reg_check_stall(r);
        atomic_store(&r->turned_ms, mt_mono_ms());
        atomic_store(&r->turned_wall_ms, mt_wall_ms());
        reg_replan(r, mt_wall_ms());
        pthread_mutex_unlock(&r->lock);
        mt_bg_thread_sleep(&r->ticker, 250);
    }
    return NULL;
}

/* The relay's check of a control hello: the proof must be keyed with this
 * node's token (the database keeps its BLAKE2b hash, which is the key). */
static int relay_auth(void *ctx, int64_t node_id, const uint8_t challenge[MT_RELAY_CHALLENGE_BYTES],
                      const uint8_t proof[32], char *why, size_t why_size) {
    mt_registry *r = ctx;
    char hash[65] = "";
    pthread_mutex_lock(&r->lock);
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT token_hash FROM nodes WHERE id = ?");
    if (st) {
        sqlite3_bind_int64(st, 1, node_id);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
            snprintf(hash, sizeof hash, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&r->lock);
    uint8_t key[32], want[32];
    size_t kl = 0;
    if (!hash[0] || sodium_hex2bin(key, sizeof key, hash, strlen(hash), NULL, &kl, NULL) != 0 ||
        kl != sizeof key) {
        snprintf(why, why_size,
                 "node %lld is not known to this registry; restart the node so that it joins"
                 " again",
                 (long long)node_id);
        return -1;
    }
    mt_relay_proof(key, challenge, node_id, want);
    if (sodium_memcmp(want, proof, sizeof want) != 0) {
        snprintf(why, why_size,
                 "node %lld: the proof does not match its current node token (it may have"
                 " joined again since); restart the node",
                 (long long)node_id);
        return -1;
    }
    return 0;
}

/* The HTTP server turned a client away because it is full. */
static void on_http_overload(void *ctx) {
    reg_note_overload(ctx, mt_wall_ms()); /* began now: the server was not full before */
}

/* The nodes alive when the registry last ran (heard from within dead_after_ms
 * of the last heartbeat it took) stay alive for dead_after_ms from this start. */
static void restart_grace(mt_registry *r) {
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT MAX(last_seen) FROM nodes");
    int64_t last = 0;
    if (st && sqlite3_step(st) == SQLITE_ROW) last = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (last <= 0) return; /* a new database: nobody to wait for */
    r->grace_from = last - r->cfg.dead_after_ms;
    r->grace_until = r->started_ms + r->cfg.dead_after_ms;
}

/* A port another process holds, found before anything is created or hashed (which takes
 * minutes for a large model): 0, or -1 with err. Other errors are left to the real bind. */
static int port_free(const char *what, const char *addr, mt_error *err) {
    if (!addr || mt_listen_probe(addr, NULL) != 1) return 0;
    return mt_error_set(err,
                        "%s %s: another process holds this port (a registry started"
                        " earlier?); stop it, or give another port",
                        what, addr);
}

/* Removes path and its SQLite companions (-wal, -shm, -journal). */
static void remove_db(const char *path) {
    static const char *const ext[] = {"", "-wal", "-shm", "-journal"};
    char p[4200];
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        snprintf(p, sizeof p, "%s%s", path, ext[i]);
        unlink(p);
    }
}

/* A failed start: removes what it created (made_*), so that a second try starts from what
 * the operator had; then stops and frees r. */
static void start_failed(mt_registry *r) {
    char *db = r->made_db ? strdup(r->db_path) : NULL;
    char *key = r->made_key ? strdup(r->cfg.key) : NULL;
    char *cache = r->made_hash_cache ? strdup(mt_hash_cache_path(r->io.cache)) : NULL;
    char *dir = r->made_shard_dir ? strdup(r->shard_dir) : NULL;
    if (db || key || cache || dir)
        mt_log_as(&r->log, MT_LOG_WARN,
                  "not started; removing what this start made:%s%s%s%s%s%s%s%s", db ? " " : "",
                  db ? db : "", key ? " " : "", key ? key : "", cache ? " " : "",
                  cache ? cache : "", dir ? " " : "", dir ? dir : "");
    mt_registry_stop(r); /* closes the database and the cache first */
    if (db) remove_db(db);
    if (cache) remove_db(cache);
    if (key) unlink(key);
    DIR *d = dir ? opendir(dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) { /* seed shards cut in this run */
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    if (dir) rmdir(dir);
    free(db);
    free(key);
    free(cache);
    free(dir);
}

mt_registry *mt_registry_start(const mt_registry_config *cfg, mt_error *err) {
    if (!cfg->model || !cfg->db || !cfg->key || !cfg->shard_dir) {
        mt_error_set(err, "registry: the model, database, key file and shard directory are all"
                          " required");
        return NULL;
    }
    mt_registry *r = calloc(1, sizeof *r);
    if (!r) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    r->cfg = *cfg;
    mt_log_source_init(&r->log, "registry", NULL, cfg->quiet);
    if (r->cfg.replicas <= 0) r->cfg.replicas = 2;
    if (r->cfg.spares < 0) r->cfg.spares = cfg->mode == MT_REGISTRY_CELL ? 1 : 0;
    if (r->cfg.heartbeat_ms <= 0) r->cfg.heartbeat_ms = 1000;
    if (r->cfg.dead_after_ms <= 0) r->cfg.dead_after_ms = 5000;
    if (r->cfg.cert_minutes <= 0) r->cfg.cert_minutes = 60;
    if (r->cfg.ticket_ttl_ms <= 0) r->cfg.ticket_ttl_ms = 30000;
    if (r->cfg.reports_per_minute <= 0) r->cfg.reports_per_minute = 6;
    if (r->cfg.max_active < 0) r->cfg.max_active = 0;
    if (r->cfg.sessions < 0 || r->cfg.sessions > (1 << 20) || r->cfg.n_ctx > (1 << 24)) {
        mt_error_set(err,
                     "registry: %d sessions of %d positions: sessions must be in 0..2^20"
                     " and positions at most 2^24",
                     r->cfg.sessions, r->cfg.n_ctx);
        free(r);
        return NULL;
    }
    if (!(r->cfg.latency_goal_ms >= 0) || !isfinite(r->cfg.latency_goal_ms) ||
        r->cfg.latency_goal_ms > 1e9 ||
        (r->cfg.latency_goal_ms > 0 && r->cfg.mode != MT_REGISTRY_CELL)) {
        mt_error_set(err,
                     "registry: latency goal %g ms: it must be a number in 0..1e9 (0: none),"
                     " and applies to cell mode only",
                     r->cfg.latency_goal_ms);
        free(r);
        return NULL;
    }
    const char *listen = cfg->listen ? cfg->listen : "127.0.0.1:8470";
    if (!cfg->tls_cert_pem && !cfg->insecure_http && !mt_addr_loopback(listen)) {
        mt_error_set(err,
                     "registry: refusing plain HTTP on %s, which is not a loopback address:"
                     " account and node tokens would cross the network in clear. Serve HTTPS"
                     " (the default there: a self-signed certificate, or your own with"
                     " --tls-cert FILE --tls-key FILE), or accept plain HTTP with"
                     " --insecure-http",
                     listen);
        free(r);
        return NULL;
    }
    if (port_free("--listen", listen, err) || port_free("--relay-listen", cfg->relay_listen, err)) {
        free(r);
        return NULL;
    }
    if (cfg->tls_pin) snprintf(r->tls_pin, sizeof r->tls_pin, "%s", cfg->tls_pin);
    r->cfg.tls_cert_pem = r->cfg.tls_key_pem = r->cfg.tls_pin = NULL; /* used only below */
    r->db_path = strdup(cfg->db);
    r->shard_dir = strdup(cfg->shard_dir);
    r->cfg.db = r->db_path;
    r->cfg.shard_dir = r->shard_dir;
    r->cfg.model = r->model_path = strdup(cfg->model);
    r->cfg.key = strdup(cfg->key);
    r->cfg.admin_token = cfg->admin_token ? strdup(cfg->admin_token) : NULL;
    r->cfg.listen = r->listen = strdup(listen);
    r->cfg.relay_listen = r->cfg.relay_host = NULL; /* used only below, by the relay */
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->grace_mu, NULL);
    if (mt_bg_thread_init(&r->ticker, err)) goto fail;
    if (mkdir(r->shard_dir, 0755) == 0) {
        r->made_shard_dir = true;
    } else if (errno != EEXIST) {
        mt_error_set(err, "shard directory %s: %s", r->shard_dir, strerror(errno));
        goto fail;
    }
    struct stat sb;
    r->made_db = stat(r->db_path, &sb) != 0;
    if (reg_db_open(r, r->db_path, err) || load_key(r, err) || load_model(r, err)) goto fail;
    r->started_ms = mt_wall_ms();
    atomic_store(&r->turned_ms, mt_mono_ms());
    r->cert_serial = (uint64_t)r->started_ms * 1000; /* unique across restarts */
    restart_grace(r);
    /* the first plan before the first request: a route asked for right after a restart
     * would otherwise find none ("not placed any shard yet") until the ticker's first turn */
    pthread_mutex_lock(&r->lock);
    reg_replan(r, r->started_ms);
    pthread_mutex_unlock(&r->lock);
    mt_http_server_config hc = {.addr = r->listen,
                                .threads = 4,
                                .max_body = 1 << 20,
                                .handler = reg_api_handle,
                                .ctx = r,
                                .limits = cfg->http_limits,
                                .on_overload = on_http_overload,
                                .tls_cert_pem = cfg->tls_cert_pem,
                                .tls_key_pem = cfg->tls_key_pem};
    /* every request takes the lock: the first ones wait until the URL they may hand out
     * (a join's seed) is written, instead of reading it while it is written */
    pthread_mutex_lock(&r->lock);
    r->http = mt_http_server_start_cfg(&hc, err);
    if (r->http)
        snprintf(r->url, sizeof r->url, "%s://%s", cfg->tls_cert_pem ? "https" : "http",
                 mt_http_server_addr(r->http));
    pthread_mutex_unlock(&r->lock);
    if (!r->http) goto fail;
    if (cfg->relay_listen) {
        mt_relay_config rc = {.listen = cfg->relay_listen,
                              .public_host = cfg->relay_host,
                              .port_lo = cfg->relay_port_lo,
                              .port_hi = cfg->relay_port_hi,
                              .max_conns = cfg->relay_max_conns,
                              .auth = relay_auth,
                              .auth_ctx = r,
                              .quiet = cfg->quiet};
        r->relay = mt_relay_start(&rc, err);
        if (!r->relay) goto fail;
    }
    if (mt_bg_thread_start(&r->ticker, ticker, r, err)) {
        mt_error_prefix(err, "the placement thread");
        goto fail;
    }
    return r;
fail:
    start_failed(r);
    return NULL;
}

void mt_registry_stop(mt_registry *r) {
    if (!r) return;
    if (r->relay) mt_relay_stop(r->relay); /* before the database its checks read */
    if (r->http) mt_http_server_stop(r->http);
    mt_bg_thread_stop(&r->ticker);
    reg_db_close(r);
    mt_hash_cache_close(r->io.cache);
    if (r->have_plan) mt_place_plan_free(&r->plan);
    mt_model_free(r->referee_model);
    free(r->tickets);
    free(r->seeds_checked);
    mt_shard_layout_free(&r->layout);
    free(r->state_bytes);
    free(r->position_bytes);
    if (r->model) gguf_close(r->model);
    mt_keys_wipe(&r->key);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->grace_mu);
    mt_bg_thread_destroy(&r->ticker);
    free(r->db_path);
    free(r->shard_dir);
    free(r->model_path);
    free((char *)r->cfg.key);
    free((char *)r->cfg.admin_token);
    free(r->listen);
    free(r);
}

const char *mt_registry_url(const mt_registry *r) {
    return r->url;
}

const char *mt_registry_pubkey_hex(const mt_registry *r) {
    return r->key_hex;
}

const char *mt_registry_relay_addr(const mt_registry *r) {
    return r->relay ? mt_relay_addr(r->relay) : NULL;
}

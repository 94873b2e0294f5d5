/* requester.c - generation through a registry with failover (requester.h):
 * certificate, routes, the head shard, and replaying a session's history on
 * a new route when a node is lost or a spot-check finds one computing
 * wrong results (reported to the registry, which checks it itself). */
#include "moontail/requester.h"
#include "moontail/clock.h"
#include "moontail/http.h"
#include "moontail/keys.h"
#include "moontail/log.h"
#include "moontail/progress.h"
#include "moontail/route.h"
#include "moontail/shard_fetch.h"
#include "moontail/file.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_AVOID = 256 };

struct mt_requester {
    mt_requester_config cfg;
    mt_log_source log; /* "requester: ..." lines */
    char *registry, *token, *cache_dir;
    mt_keys keys;
    char head_path[600], backbone_path[600];
    bool swarm;
    json_t *route_json;
    mt_model *head_model; /* loaded once: every route borrows it (and the caller's vocabulary
                             made from it stays valid across failovers) */
    mt_route *route;
    mt_route_session *s;
    int32_t n_ctx;
    uint64_t session_hint;
    int64_t avoid[MAX_AVOID];
    int32_t n_avoid;
    char ticket[33];       /* this request's place at the registry (registry_queue.c) */
    double last_keepalive; /* ms */
    double check_rate;     /* spot-checks now: cfg.spot_check, or 1 after a mismatch */
    mt_route_check_stats checks;
    int64_t dropped_said; /* checks.dropped already told */
    mt_requester_stats stats;
};

/* ---- setup ------------------------------------------------------------------------------ */

static int get_cert(mt_requester *q, mt_error *err) {
    char url[600], pk[MT_KEYS_HEX_SIZE];
    mt_keys_pk_to_hex(q->keys.pk, pk);
    snprintf(url, sizeof url, "%s/v1/accounts/me/cert", q->registry);
    json_t *body = json_pack("{s:s}", "pubkey", pk), *out = NULL;
    int st = mt_http_json("POST", url, q->token, body, 10000, &out, err);
    json_decref(body);
    if (st < 0) /* the first call to the registry: no answer at all is worth saying plainly */
        mt_error_prefix(err,
                        "the registry at %s does not answer (is it running and reachable? "
                        "`moontail status --registry %s` tells)",
                        q->registry, q->registry);
    const char *hex = json_string_value(json_object_get(out, "cert"));
    uint8_t cert[MT_CERT_BYTES];
    size_t n = 0;
    int rc = -1;
    if (st == 200 && hex &&
        sodium_hex2bin(cert, sizeof cert, hex, strlen(hex), NULL, &n, NULL) == 0 &&
        n == MT_CERT_BYTES)
        rc = mt_keys_set_cert(&q->keys, cert, n, err);
    else if (st == 200)
        mt_error_set(err, "%s: the registry's answer has no certificate", url);
    json_decref(out);
    return rc;
}

static void on_fetch_progress(void *ctx, const mt_fetch_progress *p) {
    mt_progress_update(ctx, p->bytes_done, p->bytes_total, p->rate, p->eta_s);
}

/* The head (cell) or backbone (swarm) shard, from the cache or the registry. */
static int get_shard(mt_requester *q, const char *name, char *path, size_t cap, mt_error *err) {
    char url[600];
    snprintf(url, sizeof url, "%s/v1/shards/%s/manifest", q->registry, name);
    json_t *m = NULL;
    int st = mt_http_json("GET", url, NULL, NULL, 600000, &m, err);
    if (st != 200 || mt_shard_manifest_check(m, err)) {
        json_decref(m);
        return -1;
    }
    /* named by content, so a cache never serves another model's head */
    snprintf(path, cap, "%s/%s-%.16s.gguf", q->cache_dir, name,
             json_string_value(json_object_get(m, "blake2b")));
    int rc = 0;
    if (!mt_shard_file_matches(path, m)) {
        mt_log_as(&q->log, MT_LOG_INFO, "fetching the %s shard (%lld bytes)", name,
                  (long long)json_integer_value(json_object_get(m, "bytes")));
        const char *src[1] = {q->registry};
        char label[64];
        snprintf(label, sizeof label, "%s shard", name);
        mt_progress bar;
        mt_progress_init_log(&bar, &q->log, label, 0);
        mt_fetch_config fc = {.manifest = m,
                              .sources = src,
                              .n_sources = 1,
                              .n_seeds = 1,
                              .out = path,
                              .progress = on_fetch_progress,
                              .progress_ctx = &bar};
        rc = mt_shard_fetch(&fc, NULL, err);
    }
    json_decref(m);
    return rc;
}

static int peers_of(json_t *arr, mt_route_peer **out, int *n, mt_error *err) {
    *n = (int)json_array_size(arr);
    *out = calloc((size_t)(*n ? *n : 1), sizeof **out);
    if (!*out) return mt_error_set(err, "out of memory");
    for (int i = 0; i < *n; i++) {
        json_t *p = json_array_get(arr, (size_t)i);
        const char *addr = json_string_value(json_object_get(p, "addr"));
        const char *key = json_string_value(json_object_get(p, "key"));
        json_t *ex = json_object_get(p, "experts");
        if (!addr || strlen(addr) >= sizeof(*out)[i].addr || !key ||
            mt_keys_pk_from_hex((*out)[i].pk, key, err))
            return mt_error_set(err, "the registry's route has a malformed node entry");
        snprintf((*out)[i].addr, sizeof(*out)[i].addr, "%s", addr);
        if (json_array_size(ex) == 2) {
            (*out)[i].expert_begin = (int32_t)json_integer_value(json_array_get(ex, 0));
            (*out)[i].expert_end = (int32_t)json_integer_value(json_array_get(ex, 1));
        }
        json_t *ly = json_object_get(p, "layers");
        if (json_array_size(ly) == 2) {
            (*out)[i].layer_begin = (int32_t)json_integer_value(json_array_get(ly, 0));
            (*out)[i].layer_end = (int32_t)json_integer_value(json_array_get(ly, 1));
        }
    }
    return 0;
}

/* The spot-check candidates the registry lists with each stage (cell mode). */
static int checkers_of(json_t *stages, mt_route_checker **out, int *n, mt_error *err) {
    *n = 0;
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(stages); i++)
        total += json_array_size(json_object_get(json_array_get(stages, i), "checkers"));
    if (!(*out = calloc(total ? total : 1, sizeof **out)))
        return mt_error_set(err, "out of memory");
    for (size_t i = 0; i < json_array_size(stages); i++) {
        json_t *list = json_object_get(json_array_get(stages, i), "checkers");
        mt_route_peer *peers = NULL;
        int k = 0;
        if (!list) continue;
        if (!json_is_array(list) || peers_of(list, &peers, &k, err)) {
            free(peers);
            return mt_error_set(err, "the registry's route lists malformed checkers");
        }
        for (int j = 0; j < k; j++) (*out)[(*n)++] = (mt_route_checker){(int)i, peers[j]};
        free(peers);
    }
    return 0;
}

static void describe_route(mt_requester *q) {
    char *p = q->stats.route;
    size_t left = sizeof q->stats.route;
    p[0] = 0;
    json_t *arr = json_object_get(q->route_json, q->swarm ? "experts" : "stages");
    for (size_t i = 0; i < json_array_size(arr) && left > 1; i++) {
        json_t *h = json_array_get(arr, i);
        json_t *l = json_object_get(h, q->swarm ? "experts" : "layers");
        int k = snprintf(p, left, "%s%s%s[%lld,%lld)", i ? " " : "",
                         json_string_value(json_object_get(h, "addr")), q->swarm ? "e" : "",
                         json_integer_value(json_array_get(l, 0)),
                         json_integer_value(json_array_get(l, 1)));
        if (k < 0 || (size_t)k >= left) break;
        p += k, left -= (size_t)k;
    }
}

/* The ids of nodes on the current route whose address is addr. */
static void avoid_addr(mt_requester *q, const char *addr) {
    json_t *arr = json_object_get(q->route_json, q->swarm ? "experts" : "stages");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *h = json_array_get(arr, i);
        const char *a = json_string_value(json_object_get(h, "addr"));
        if (a && strcmp(a, addr) == 0 && q->n_avoid < MAX_AVOID)
            q->avoid[q->n_avoid++] = json_integer_value(json_object_get(h, "node_id"));
    }
}

/* Asks for a route (avoiding failed nodes) and opens it. */
static int open_route(mt_requester *q, mt_error *err) {
    char url[600];
    snprintf(url, sizeof url, "%s/v1/routes", q->registry);
    json_t *avoid = json_array();
    for (int32_t i = 0; i < q->n_avoid; i++)
        json_array_append_new(avoid, json_integer(q->avoid[i]));
    json_t *body = json_pack("{s:I, s:o}", "session", (json_int_t)(q->session_hint & INT64_MAX),
                             "avoid", avoid),
           *out = NULL;
    int st, last_position = -1;
    /* 202: the cell is busy; wait in line, asking again with the ticket */
    for (;;) {
        if (q->ticket[0]) json_object_set_new(body, "ticket", json_string(q->ticket));
        st = mt_http_json("POST", url, q->token, body, 15000, &out, err);
        const char *t = json_string_value(json_object_get(out, "ticket"));
        if (t && strlen(t) < sizeof q->ticket) snprintf(q->ticket, sizeof q->ticket, "%s", t);
        if (st != 202) break;
        int position = (int)json_integer_value(json_object_get(out, "queued"));
        if (position != last_position)
            mt_log_as(&q->log, MT_LOG_INFO,
                      "waiting in line: position %d (%lld requests running, at most %lld at once)",
                      position, json_integer_value(json_object_get(out, "active")),
                      json_integer_value(json_object_get(out, "max_active")));
        last_position = position;
        json_int_t wait = json_integer_value(json_object_get(out, "retry_ms"));
        json_decref(out);
        out = NULL;
        mt_sleep_ms(wait < 100 ? 100 : wait > 5000 ? 5000 : wait);
    }
    json_decref(body);
    if (st != 200 || !json_is_object(out)) {
        json_decref(out);
        return -1;
    }
    if (last_position >= 0) mt_log_as(&q->log, MT_LOG_INFO, "our turn: the request runs now");
    q->last_keepalive = mt_mono_ms_frac();
    const char *mode = json_string_value(json_object_get(out, "mode"));
    q->swarm = mode && strcmp(mode, "swarm") == 0;
    const char *head = q->swarm ? "backbone" : "head";
    char *path = q->swarm ? q->backbone_path : q->head_path;
    if (!path[0] && get_shard(q, head, path, sizeof q->head_path, err)) {
        path[0] = 0;
        json_decref(out);
        return -1;
    }
    mt_route_peer *stages = NULL, *experts = NULL;
    int n_stages = 0, n_experts = 0;
    mt_route_checker *checkers = NULL;
    int n_checkers = 0;
    int rc = peers_of(json_object_get(out, "stages"), &stages, &n_stages, err);
    if (rc == 0) rc = peers_of(json_object_get(out, "experts"), &experts, &n_experts, err);
    if (rc == 0) rc = checkers_of(json_object_get(out, "stages"), &checkers, &n_checkers, err);
    if (rc == 0 && !q->head_model && !(q->head_model = mt_model_load(path, err))) rc = -1;
    if (rc == 0) {
        mt_route_config c = {.head = path,
                             .head_model = q->head_model,
                             .backbone = q->swarm ? path : NULL,
                             .wire = q->cfg.wire,
                             .keys = &q->keys,
                             .stages = stages,
                             .n_stages = n_stages,
                             .experts = experts,
                             .n_experts = n_experts,
                             .threads = q->cfg.threads,
                             .ubatch = q->cfg.ubatch,
                             .kv_type = q->cfg.kv_type,
                             .timeout_ms = q->cfg.timeout_ms > 0 ? q->cfg.timeout_ms : 5000,
                             .call_timeout_ms =
                                 q->cfg.call_timeout_ms > 0 ? q->cfg.call_timeout_ms : 30000,
                             .fixed_call_timeout = q->cfg.fixed_call_timeout,
                             .checkers = checkers,
                             .n_checkers = n_checkers,
                             .check_rate = q->check_rate,
                             .check_stats = &q->checks,
                             .chain = q->cfg.chain};
        mt_route_close(q->route);
        char failed[128] = "";
        c.failed_addr = failed;
        c.no_reconnect = true; /* the registry has the replacement */
        q->route = mt_route_open(&c, err);
        rc = q->route ? 0 : -1;
        if (!q->route && failed[0]) {
            json_decref(q->route_json);
            q->route_json = json_incref(out); /* so that the node id can be found */
            avoid_addr(q, failed);
        }
    }
    free(stages);
    free(experts);
    free(checkers);
    json_decref(q->route_json);
    q->route_json = out;
    if (rc == 0) {
        describe_route(q);
        mt_log_as(&q->log, MT_LOG_INFO, "route: %s", q->stats.route);
    }
    return rc;
}

/* The first route. The registry may list a node that has not (re)started its
 * data plane yet, e.g. one resumed a moment ago: a node that refuses the
 * connection is avoided and another route asked for, as in a failover, for up
 * to 8 tries or 20 s. Any other failure (the registry's answer, the head) ends
 * it at once. */
static int open_first_route(mt_requester *q, mt_error *err) {
    const double t0 = mt_mono_ms_frac();
    for (int attempt = 0;; attempt++) {
        const int32_t avoided = q->n_avoid;
        if (open_route(q, err) == 0) return 0;
        if (q->n_avoid == avoided || attempt >= 7 || mt_mono_ms_frac() - t0 > 20000) return -1;
        mt_log_as(&q->log, MT_LOG_WARN, "%s; asking for a route without that node", err->msg);
        mt_sleep_ms(250);
    }
}

mt_requester *mt_requester_open(const mt_requester_config *cfg, mt_error *err) {
    if (!cfg->registry || !cfg->token || !cfg->key_path || !cfg->cache_dir) {
        mt_error_set(err, "requester: registry URL, account token, key file and cache directory"
                          " are required");
        return NULL;
    }
    mt_requester *q = calloc(1, sizeof *q);
    if (!q) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    q->cfg = *cfg;
    mt_log_source_init(&q->log, "requester", NULL, cfg->quiet);
    if (!(cfg->spot_check >= 0 && cfg->spot_check <= 1)) {
        free(q);
        mt_error_set(err, "requester: the spot-check rate %g is not a fraction in [0, 1]",
                     cfg->spot_check);
        return NULL;
    }
    q->check_rate = cfg->spot_check;
    q->registry = strdup(cfg->registry);
    size_t rl = strlen(q->registry);
    while (rl > 0 && q->registry[rl - 1] == '/') q->registry[--rl] = 0;
    q->token = strdup(cfg->token);
    q->cache_dir = strdup(cfg->cache_dir);
    randombytes_buf(&q->session_hint, sizeof q->session_hint);
    mt_file_info sb;
    int rc = 0;
    if (mt_dir_make(q->cache_dir, false) != 0 && errno != EEXIST)
        rc = mt_error_set(err, "cache directory %s: %s", q->cache_dir, strerror(errno));
    else if (mt_file_stat(cfg->key_path, &sb) == 0)
        rc = mt_keys_load(&q->keys, cfg->key_path, err);
    else
        rc = mt_keys_generate(&q->keys, err) || mt_keys_save(&q->keys, cfg->key_path, err);
    if (rc == 0) rc = get_cert(q, err);
    if (rc == 0) rc = open_first_route(q, err);
    if (rc) {
        mt_requester_close(q);
        return NULL;
    }
    return q;
}

/* Tells the registry this request still runs (active) or is over. */
static void ticket_call(mt_requester *q, const char *what) {
    if (!q->ticket[0]) return;
    char url[600];
    snprintf(url, sizeof url, "%s/v1/routes/%s", q->registry, what);
    json_t *body = json_pack("{s:s}", "ticket", q->ticket);
    mt_http_json("POST", url, q->token, body, 5000, NULL, NULL);
    json_decref(body);
    q->last_keepalive = mt_mono_ms_frac();
}

void mt_requester_close(mt_requester *q) {
    if (!q) return;
    ticket_call(q, "done");
    if (q->s) mt_route_session_end(q->route, q->s);
    mt_route_close(q->route);
    mt_model_free(q->head_model);
    json_decref(q->route_json);
    mt_keys_wipe(&q->keys);
    free(q->registry);
    free(q->token);
    free(q->cache_dir);
    free(q);
}

const mt_model *mt_requester_head(const mt_requester *q) {
    return mt_route_head(q->route);
}

int mt_requester_begin(mt_requester *q, int32_t n_ctx, mt_error *err) {
    if (q->s) mt_route_session_end(q->route, q->s);
    q->n_avoid = 0; /* a new request trusts the registry's view again */
    q->check_rate = q->cfg.spot_check;
    if (q->route) mt_route_set_check_rate(q->route, q->check_rate);
    q->s = mt_route_session_new(q->route, n_ctx, err);
    q->n_ctx = n_ctx;
    randombytes_buf(&q->session_hint, sizeof q->session_hint);
    return q->s ? 0 : -1;
}

/* ---- spot-check mismatches --------------------------------------------------------------- */

/* The id of the node at addr: a stage of the current route, or one of its
 * checkers; 0 when not found. */
static int64_t node_id_at(const mt_requester *q, const char *addr) {
    json_t *stages = json_object_get(q->route_json, "stages");
    for (size_t i = 0; i < json_array_size(stages); i++) {
        json_t *h = json_array_get(stages, i), *c = json_object_get(h, "checkers");
        const char *a = json_string_value(json_object_get(h, "addr"));
        if (a && strcmp(a, addr) == 0) return json_integer_value(json_object_get(h, "node_id"));
        for (size_t k = 0; k < json_array_size(c); k++) {
            a = json_string_value(json_object_get(json_array_get(c, k), "addr"));
            if (a && strcmp(a, addr) == 0)
                return json_integer_value(json_object_get(json_array_get(c, k), "node_id"));
        }
    }
    return 0;
}

static void avoid_id(mt_requester *q, int64_t id) {
    for (int32_t i = 0; i < q->n_avoid; i++)
        if (q->avoid[i] == id) return;
    if (id > 0 && q->n_avoid < MAX_AVOID) q->avoid[q->n_avoid++] = id;
}

/* POST /v1/reports: the registry checks both nodes itself and answers with
 * what it found (it may be busy with another report: asked again for up to
 * 20 s). The answer, or NULL. */
static json_t *report_mismatch(mt_requester *q, const mt_route_mismatch *m, int64_t checked,
                               int64_t checker, mt_error *err) {
    char url[600];
    snprintf(url, sizeof url, "%s/v1/reports", q->registry);
    json_t *body =
        json_pack("{s:[I,I], s:[i,i], s:i, s:i, s:[s,s]}", "nodes", (json_int_t)checked,
                  (json_int_t)checker, "layers", m->layer_begin, m->layer_end, "position", m->pos,
                  "tokens", m->n, "hashes", m->checked_hash, m->checker_hash);
    json_t *out = NULL;
    const double t0 = mt_mono_ms_frac();
    for (;;) {
        json_decref(out);
        out = NULL;
        int st = mt_http_json("POST", url, q->token, body, 120000, &out, err);
        json_int_t wait = json_integer_value(json_object_get(out, "retry_ms"));
        if (st == 200 || st != 429 || wait <= 0 || wait > 2000 || mt_mono_ms_frac() - t0 > 20000) {
            if (st != 200) json_decref(out), out = NULL;
            break;
        }
        mt_sleep_ms(wait);
    }
    json_decref(body);
    return out;
}

/* After a spot-check mismatch: says what was found, reports it, and decides
 * whom this request avoids from now on (the nodes the registry found wrong;
 * without a verdict, the checked node, whose output was about to be used).
 * Every stage is checked for the rest of the request. */
static void on_mismatch(mt_requester *q, const mt_route_mismatch *m) {
    int64_t checked = node_id_at(q, m->checked_addr), checker = node_id_at(q, m->checker_addr);
    q->stats.reports++;
    mt_log_as(
        &q->log, MT_LOG_WARN,
        "spot check: node %lld (%s) and checker node %lld (%s) computed layers [%d, %d) of"
        " positions [%d, %d) differently (session %016llx, step %d; detected %lld ms after the"
        " node's reply, at unix ms %lld); reporting both to the registry",
        (long long)checked, m->checked_addr, (long long)checker, m->checker_addr, m->layer_begin,
        m->layer_end, m->pos, m->pos + m->n, (unsigned long long)m->session, m->step,
        (long long)(m->detected_unix_ms - m->reply_unix_ms), (long long)m->detected_unix_ms);
    mt_error err = {{0}};
    json_t *v = checked && checker ? report_mismatch(q, m, checked, checker, &err) : NULL;
    if (!checked || !checker) mt_error_set(&err, "the nodes are not on the registry's route");
    char verdict[400] = "";
    size_t len = 0;
    bool avoided = false;
    json_t *nodes = json_object_get(v, "nodes");
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        json_t *x = json_array_get(nodes, i);
        int64_t id = json_integer_value(json_object_get(x, "node_id"));
        const char *res = json_string_value(json_object_get(x, "result"));
        if (!res) res = "?";
        int k = snprintf(verdict + len, sizeof verdict - len, "%snode %lld %s", i ? ", " : "",
                         (long long)id, res);
        if (k > 0 && (size_t)k < sizeof verdict - len) len += (size_t)k;
        if (strcmp(res, "wrong") == 0 || strcmp(res, "quarantined") == 0) {
            avoid_id(q, id);
            avoided = true;
        }
    }
    const char *word = json_string_value(json_object_get(v, "verdict"));
    if (word && strcmp(word, "confirmed") == 0) q->stats.reports_confirmed++;
    if (!avoided) avoid_id(q, checked); /* no verdict: do not use the checked output again */
    snprintf(q->stats.last_spot_check, sizeof q->stats.last_spot_check,
             "layers [%d, %d) at positions [%d, %d): %s (%s)", m->layer_begin, m->layer_end, m->pos,
             m->pos + m->n, v ? word : "not reported", v ? verdict : err.msg);
    if (v)
        mt_log_as(&q->log, MT_LOG_WARN,
                  "spot check: the registry's own check: %s (%s in %lld ms); %s", word, verdict,
                  json_integer_value(json_object_get(v, "check_ms")),
                  avoided ? "continuing without the node found wrong"
                          : "no node found wrong; continuing without the checked node");
    else
        mt_log_as(&q->log, MT_LOG_WARN,
                  "spot check: could not report (%s); continuing without the checked node",
                  err.msg);
    json_decref(v);
    if (q->cfg.spot_check > 0) q->check_rate = 1;
}

/* mt_requester_eval and mt_requester_eval_speculative. */
static int req_eval(mt_requester *q, const int32_t *ids, int32_t n, bool speculative, float *logits,
                    mt_error *err) {
    if (!q->s) return mt_error_set(err, "no session: call mt_requester_begin first");
    if (mt_mono_ms_frac() - q->last_keepalive > 10000) ticket_call(q, "keepalive");
    const double t_call = mt_mono_ms_frac();
    int ok = speculative ? mt_route_eval_speculative(q->route, q->s, ids, n, logits, err)
                         : mt_route_eval(q->route, q->s, ids, n, false, logits, err);
    if (q->checks.dropped > q->dropped_said) {
        mt_log_as(&q->log, MT_LOG_INFO, "spot check: %s", q->checks.last_dropped);
        q->dropped_said = q->checks.dropped;
    }
    if (ok == 0) return 0;
    /* the failed call's own time: short for a broken connection, the reply
     * timeout (and one reconnect attempt) for a node that went silent */
    double t0 = mt_mono_ms_frac();
    mt_route_mismatch mm;
    if (mt_route_last_mismatch(q->route, &mm)) on_mismatch(q, &mm);
    /* the history to replay: everything before this call, then the new tokens */
    int32_t n_past = 0;
    const int32_t *hist = mt_route_session_tokens(q->s, &n_past);
    const int32_t total = n_past + n;
    int32_t *all = malloc((size_t)total * sizeof *all);
    if (!all) return mt_error_set(err, "out of memory");
    memcpy(all, hist, (size_t)n_past * sizeof *all);
    memcpy(all + n_past, ids, (size_t)n * sizeof *all);
    const int max = q->cfg.max_failovers > 0 ? q->cfg.max_failovers : 8;
    int rc = -1;
    /* the registry notices a dead node within its dead-after time; try for longer than that */
    for (int attempt = 0; attempt < 4 * max && mt_mono_ms_frac() - t0 < 20000; attempt++) {
        snprintf(q->stats.last_failure, sizeof q->stats.last_failure, "%s", err->msg);
        char failed[8][128];
        int nf = q->route ? mt_route_failed_peers(q->route, failed, 8) : 0;
        for (int i = 0; i < nf; i++) avoid_addr(q, failed[i]);
        if (attempt == 0)
            mt_log_as(&q->log, MT_LOG_WARN, "route failed (%s); asking for another%s", err->msg,
                      nf ? " that avoids the failed node" : "");
        if (q->s) mt_route_session_end(q->route, q->s);
        q->s = NULL;
        if (attempt > 0) {
            mt_sleep_ms(250);
        }
        /* nodes avoided for long may be back (restarted): after a few refusals the registry,
         * which knows who is alive, decides alone */
        if (attempt > 0 && attempt % 8 == 0) q->n_avoid = 0;
        rc = open_route(q, err);
        if (rc == 0 && !(q->s = mt_route_session_new(q->route, q->n_ctx, err))) rc = -1;
        if (rc == 0 && !speculative)
            rc = mt_route_eval(q->route, q->s, all, total, false, logits, err);
        /* the history kept, then the speculative pass as it was asked for */
        if (rc == 0 && speculative && n_past > 0)
            rc = mt_route_eval(q->route, q->s, all, n_past, false, logits, err);
        if (rc == 0 && speculative)
            rc = mt_route_eval_speculative(q->route, q->s, all + n_past, n, logits, err);
        if (rc == 0) break;
    }
    free(all);
    if (rc == 0) {
        q->stats.failovers++;
        q->stats.last_recovery_ms = mt_mono_ms_frac() - t0;
        q->stats.total_recovery_ms += q->stats.last_recovery_ms;
        mt_log_as(&q->log, MT_LOG_INFO,
                  "recovered on a new route in %.0f ms (replayed %d tokens; the failed call took"
                  " %.0f ms)",
                  q->stats.last_recovery_ms, total, t0 - t_call);
        return 0;
    }
    mt_error_prefix(err, "no working route (tried for %.0f s)", (mt_mono_ms_frac() - t0) / 1000);
    return -1;
}

int mt_requester_eval(mt_requester *q, const int32_t *ids, int32_t n, float *logits,
                      mt_error *err) {
    return req_eval(q, ids, n, false, logits, err);
}

int mt_requester_eval_speculative(mt_requester *q, const int32_t *ids, int32_t n, float *logits,
                                  mt_error *err) {
    return req_eval(q, ids, n, true, logits, err);
}

int mt_requester_rewind(mt_requester *q, int32_t n_past, mt_error *err) {
    if (!q->s) return mt_error_set(err, "no session: call mt_requester_begin first");
    return mt_route_rewind(q->route, q->s, n_past, err);
}

int mt_requester_report_usage(mt_requester *q, int64_t tokens, mt_error *err) {
    char url[600];
    snprintf(url, sizeof url, "%s/v1/usage", q->registry);
    json_t *body = json_pack("{s:I}", "tokens", (json_int_t)tokens);
    int st = mt_http_json("POST", url, q->token, body, 10000, NULL, err);
    json_decref(body);
    return st == 200 ? 0 : -1;
}

void mt_requester_get_stats(const mt_requester *q, mt_requester_stats *s) {
    *s = q->stats;
    s->replays = q->route ? mt_route_replays(q->route) : 0;
    s->spot_checks = q->checks.checks;
    s->spot_compared = q->checks.compared;
    s->spot_dropped = q->checks.dropped;
    s->spot_mismatches = q->checks.mismatches;
}

/* node_agent.c - a node driven by the registry (node_agent.h): join,
 * heartbeats, background shard fetches, (re)starting the data-plane server
 * with the assigned shard and partners, draining, and serving held shards
 * to peers; behind NAT, a tunnel program or the registry's relay gives it
 * the public address it registers. */
#include "moontail/node_agent.h"
#include "moontail/bg_thread.h"
#include "moontail/clock.h"
#include "moontail/http.h"
#include "moontail/hwinfo.h"
#include "moontail/keys.h"
#include "moontail/log.h"
#include "moontail/node.h"
#include "moontail/progress.h"
#include "moontail/relay.h"
#include "moontail/shard_fetch.h"
#include "moontail/transport.h"
#include "moontail/tunnel.h"
#include "node_agent_internal.h"
#include "relay_internal.h"
#include "moontail/sysinfo.h"
#include "moontail/file.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The reason heartbeats report: the last failure of the shard wanted now, unless it serves. */
static const char *current_problem(const mt_agent *a) {
    if (!a->want[0] || strcmp(a->problem_shard, a->want) != 0 || strcmp(a->serving, a->want) == 0)
        return "";
    return a->problem;
}

static bool safe_name(const char *s) {
    if (!s[0] || strlen(s) > 95) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return false;
    return true;
}

/* ---- serving held shards to peers ------------------------------------------------------- */

static void shard_handler(void *ctx, const mt_http_request *req, mt_http_response *resp) {
    mt_agent *a = ctx;
    const char *p = req->path;
    if (strcmp(req->method, "GET") != 0 || strncmp(p, "/v1/shards/", 11) != 0 || !safe_name(p + 11))
        return mt_http_error(resp, 404, "this node serves GET /v1/shards/<name> only");
    /* only whole, verified shards are ever at <name>.gguf (fetches write .part) */
    char *path = agent_shard_path(a, p + 11);
    mt_file_info sb;
    if (!path || mt_file_stat(path, &sb) != 0) {
        free(path);
        return mt_http_error(resp, 404, "this node does not hold shard '%s'", p + 11);
    }
    resp->file = path;
}

/* ---- the data plane ------------------------------------------------------------------------ */

static bool same_partners(const partner_set *x, const partner_set *y) {
    if (x->n != y->n) return false;
    for (int i = 0; i < x->n; i++)
        if (strcmp(x->addr[i], y->addr[i]) != 0 || memcmp(x->p[i].pk, y->p[i].pk, 32) != 0)
            return false;
    return true;
}

static void add_stats(mt_node_stats *base, const mt_node_stats *s) {
    base->served_tokens += s->served_tokens;
    base->served_token_layers += s->served_token_layers;
    base->served_expert_rows += s->served_expert_rows;
    base->requests += s->requests;
}

/* Stops the running node (caller holds a->lock; it is released meanwhile). */
static void stop_node(mt_agent *a) {
    mt_node *n = a->node;
    if (!n) return;
    mt_node_stats s;
    mt_node_get_stats(n, &s);
    add_stats(&a->base, &s);
    a->node = NULL;
    a->serving[0] = 0;
    pthread_mutex_unlock(&a->lock);
    mt_node_stop(n);
    pthread_mutex_lock(&a->lock);
}

/* mt_listen_tcp with the socket above descriptor 0 (a closed stdin frees 0), since
 * mt_node_config.listen_fd takes sockets other than 0 only; errno is kept on failure. */
static mt_sock listen_above_0(const char *addr, mt_error *err) {
    mt_sock fd = mt_listen_tcp(addr, err);
    if (fd != 0) return fd;
    mt_sock moved = mt_sock_dup(fd);
    int e = errno;
    mt_sock_close(fd);
    if (moved == MT_SOCK_NONE) {
        mt_error_set(err, "listen on %s: %s", addr, mt_sock_strerror(e));
        errno = e;
    }
    return moved;
}

/* The data plane's listening socket on a->listen, or -1 with err (caller holds a->lock).
 * A port this agent picked (--listen HOST:0) is free while no data plane runs (before the
 * first one, during fetches, between restarts), and another process may take it meanwhile:
 * its own listening socket, or a connection of its that closed and holds the port for a
 * minute in TIME_WAIT. Asking for that port again and again kept a node 'loading' for as
 * long; it moves to a new port instead, and its heartbeats tell the registry (which hands
 * the new address to requesters and to the stages this node is a partner of). A port given
 * on the command line stays: the error says that another process holds it. */
static mt_sock data_plane_socket(mt_agent *a, mt_error *err) {
    mt_sock fd = listen_above_0(a->listen, err);
    if (fd != MT_SOCK_NONE || errno != EADDRINUSE || !a->listen_auto || a->nat) return fd;
    int hl = (int)(strrchr(a->listen, ':') - a->listen); /* fix_listen made it HOST:PORT */
    char any[160], was[160];
    snprintf(any, sizeof any, "%.*s:0", hl, a->listen);
    snprintf(was, sizeof was, "%s", a->listen);
    mt_error e2 = {{0}};
    fd = listen_above_0(any, &e2);
    if (fd == MT_SOCK_NONE) {
        mt_error_set(err,
                     "listen on %s: another process holds the port, and no other port is"
                     " free either: %s",
                     was, e2.msg);
        return MT_SOCK_NONE;
    }
    snprintf(a->listen, sizeof a->listen, "%.*s:%d", hl, was, mt_listen_port(fd));
    a->listen_moved = true;
    mt_log_as(&a->log, MT_LOG_WARN,
              "data-plane port %s is held by another process; serving on %s instead (the next"
              " heartbeat tells the registry)",
              was, a->listen);
    return fd;
}

/* Starts the node with shard `name` and partners ps (caller holds a->lock). */
static int start_node(mt_agent *a, const char *name, const partner_set *ps, mt_error *err) {
    stop_node(a);
    /* first: a port in use fails here, before the shard is loaded and partners are called */
    mt_sock fd = data_plane_socket(a, err);
    if (fd == MT_SOCK_NONE) return -1;
    char *path = agent_shard_path(a, name);
    if (!path) {
        mt_sock_close(fd);
        return mt_error_set(err, "out of memory");
    }
    partner_set local = *ps;
    for (int i = 0; i < local.n; i++) local.p[i].addr = local.addr[i];
    mt_node_config c = {.shard_path = path,
                        .keys = &a->keys,
                        .authorized = a->auth,
                        .listen = a->listen,
                        .listen_fd = fd,
                        .partners = local.p,
                        .n_partners = local.n,
                        .max_sessions = a->cfg.max_sessions,
                        .n_ctx = a->cfg.n_ctx,
                        .memory_bytes = a->cfg.memory_bytes,
                        .kv_type = a->want_kv,
                        .threads = a->cfg.threads,
                        .session_idle_ms = a->cfg.session_idle_ms,
                        .step_tokens = a->cfg.step_tokens,
                        .prefill_chunk = a->cfg.prefill_chunk,
                        .quiet = a->cfg.quiet,
                        .corrupt_rate = a->cfg.corrupt_rate,
                        /* fetch_main hashed the whole file against the registry's manifest
                         * before `verified` named it (a download piece by piece, a file left
                         * by an earlier run whole): the per-tensor hashes add nothing */
                        .shard_verified = strcmp(a->verified, name) == 0,
                        .recheck_ms = a->cfg.recheck_ms};
    pthread_mutex_unlock(&a->lock);
    char label[120];
    snprintf(label, sizeof label, "loading %s", name);
    mt_progress bar;
    mt_progress_init_log(&bar, &a->log, label, 0);
    mt_progress_warm(path, &bar);
    mt_node *n = mt_node_start(&c, err);
    pthread_mutex_lock(&a->lock);
    free(path);
    if (!n) return -1;
    a->node = n;
    snprintf(a->serving, sizeof a->serving, "%s", name);
    a->problem[0] = a->problem_shard[0] = 0;
    a->serving_partners = *ps;
    a->serving_kv = a->want_kv;
    a->idle_beats = 0;
    mt_log_as(&a->log, MT_LOG_INFO, "serving shard %s on %s%s", name, a->listen,
              ps->n ? " with partners" : "");
    return 0;
}

/* ---- heartbeats ----------------------------------------------------------------------------- */

static int join(mt_agent *a, mt_error *err) {
    json_t *hw = json_pack("{s:I, s:I, s:i, s:s, s:s, s:I}", "ram", (json_int_t)a->hw.ram_total,
                           "disk", (json_int_t)a->hw.disk_free, "cores", a->hw.cores, "simd",
                           a->hw.simd, "gpu", a->hw.gpu, "vram", (json_int_t)a->hw.vram);
    char pk[MT_KEYS_HEX_SIZE];
    mt_keys_pk_to_hex(a->keys.pk, pk);
    /* relay mode joins before it has a public address: the first heartbeat brings it */
    pthread_mutex_lock(&a->lock);
    char addr[160];
    snprintf(addr, sizeof addr, "%s", a->public_addr[0] ? a->public_addr : a->listen);
    int64_t capacity = agent_offered_capacity(a);
    pthread_mutex_unlock(&a->lock);
    json_t *body = json_pack("{s:s, s:s, s:s, s:s, s:o, s:I, s:f}", "name", a->name, "pubkey", pk,
                             "addr", addr, "shard_addr", a->shard_addr, "hw", hw, "capacity",
                             (json_int_t)capacity, "speed", a->speed);
    char url[600];
    snprintf(url, sizeof url, "%s/v1/nodes", a->registry);
    json_t *out = NULL;
    int st = mt_http_json("POST", url, a->token, body, 15000, &out, err);
    json_decref(body);
    int rc = -1;
    json_t *id = json_object_get(out, "node_id"), *tok = json_object_get(out, "token"),
           *rk = json_object_get(out, "registry_key"), *cert = json_object_get(out, "cert"),
           *hbms = json_object_get(out, "heartbeat_ms"), *relay = json_object_get(out, "relay");
    uint8_t rpk[MT_KEYS_PUBLIC_BYTES], cb[MT_CERT_BYTES];
    size_t cl = 0;
    if (st != 201) {
        if (st > 0) mt_error_prefix(err, "joining %s", a->registry);
    } else if (!json_is_integer(id) || !json_is_string(tok) ||
               strlen(json_string_value(tok)) > 64 || !json_is_string(rk) ||
               mt_keys_pk_from_hex(rpk, json_string_value(rk), err) || !json_is_string(cert) ||
               sodium_hex2bin(cb, sizeof cb, json_string_value(cert),
                              strlen(json_string_value(cert)), NULL, &cl, NULL) != 0 ||
               cl != MT_CERT_BYTES) {
        mt_error_set(err,
                     "joining %s: the registry's answer lacks node_id, token, registry_key"
                     " or a certificate",
                     a->registry);
    } else {
        mt_cert fields;
        pthread_mutex_lock(&a->lock);
        a->node_id = json_integer_value(id);
        snprintf(a->node_token, sizeof a->node_token, "%s", json_string_value(tok));
        if (json_is_integer(hbms) && json_integer_value(hbms) >= 50 &&
            json_integer_value(hbms) <= 60000)
            a->heartbeat_ms = (int)json_integer_value(hbms);
        rc = mt_keys_set_cert(&a->keys, cb, cl, err);
        if (rc == 0 && mt_cert_decode(cb, cl, &fields, NULL) == 0)
            a->cert_expires = fields.not_after;
        if (rc == 0 && !mt_keys_authorized_find_authority(a->auth, rpk))
            rc = mt_keys_authorized_add_authority(a->auth, rpk, "registry", err);
        /* a join starts the node's counters at 0 in the registry: report the
         * work it was not credited for yet, not again what it was */
        a->joined = a->credited;
        if (json_is_string(relay) && relay_addr_ok(json_string_value(relay)))
            snprintf(a->relay_addr, sizeof a->relay_addr, "%s", json_string_value(relay));
        else
            a->relay_addr[0] = 0;
        if (a->relay) mt_relay_client_set_auth(a->relay, a->node_id, a->node_token);
        pthread_mutex_unlock(&a->lock);
        if (rc == 0)
            mt_log_as(&a->log, MT_LOG_INFO, "joined %s as node %lld", a->registry,
                      (long long)a->node_id);
    }
    json_decref(out);
    return rc;
}

static void parse_partners(json_t *asg, partner_set *ps) {
    memset(ps, 0, sizeof *ps);
    json_t *arr = json_object_get(asg, "partners");
    for (size_t i = 0; i < json_array_size(arr) && ps->n < MAX_PARTNERS; i++) {
        json_t *p = json_array_get(arr, i);
        const char *addr = json_string_value(json_object_get(p, "addr"));
        const char *key = json_string_value(json_object_get(p, "key"));
        if (!addr || !key || strlen(addr) >= 128 || mt_keys_pk_from_hex(ps->p[ps->n].pk, key, NULL))
            continue;
        snprintf(ps->addr[ps->n], 128, "%s", addr);
        ps->n++;
    }
}

/* One heartbeat: report, then act on the answer (caller holds a->lock). */
static void heartbeat(mt_agent *a) {
    char bad[512];
    if (a->node && mt_node_shard_error(a->node, bad, sizeof bad)) {
        /* reported like any other reason it cannot serve that shard (problem) */
        agent_set_problem(a, a->serving, "changed on disk, not serving", bad);
        snprintf(a->bad_shard, sizeof a->bad_shard, "%s", a->serving);
        mt_log_as(&a->log, MT_LOG_ERROR,
                  "shard %s changed on disk while served; stopping its data plane, and not serving"
                  " it again until this node restarts (which fetches it again; check the disk"
                  " first): %s",
                  a->serving, bad);
        a->verified[0] = 0;
        stop_node(a);
    }
    mt_node_stats s = {0};
    int32_t ctx = 0, max_sessions = 0;
    if (a->node) {
        mt_node_get_stats(a->node, &s);
        ctx = mt_node_info(a->node)->n_ctx;
        max_sessions = mt_node_info(a->node)->max_sessions;
    }
    mt_node_stats total = a->base;
    add_stats(&total, &s);
    double t = mt_mono_s();
    if (a->last_tok_time > 0 && t > a->last_tok_time)
        a->tok_per_s = (double)(total.served_tokens - a->last_tokens) / (t - a->last_tok_time);
    a->last_tok_time = t;
    a->last_tokens = total.served_tokens;
    /* tunnel / relay: the public address now; while it is down, no ready shard (no routes) */
    char pub[160] = "";
    if (a->tunnel) mt_tunnel_addr(a->tunnel, pub, sizeof pub);
    if (a->relay) mt_relay_client_addr(a->relay, pub, sizeof pub);
    if (a->nat) {
        if (pub[0] && strcmp(pub, a->public_addr) != 0) {
            mt_log_as(&a->log, MT_LOG_INFO, "public address now %s (was %s); telling the registry",
                      pub, a->public_addr[0] ? a->public_addr : "none");
            snprintf(a->public_addr, sizeof a->public_addr, "%s", pub);
        } else if (pub[0] && !a->public_up) {
            mt_log_as(&a->log, MT_LOG_INFO, "public address %s is back", pub);
        } else if (!pub[0] && a->public_up) {
            mt_log_as(&a->log, MT_LOG_WARN,
                      "public address %s is down; this node takes no routes until it is back",
                      a->public_addr);
        }
        a->public_up = pub[0] != 0;
    }
    json_t *body = json_pack(
        "{s:s, s:{s:I, s:I, s:I}, s:{s:i, s:i, s:I, s:f}, s:I, s:I}", "ready_shard",
        !a->nat || a->public_up ? a->serving : "", "served", "token_layers",
        (json_int_t)(total.served_token_layers - a->joined.served_token_layers), "expert_rows",
        (json_int_t)(total.served_expert_rows - a->joined.served_expert_rows), "tokens",
        (json_int_t)(total.served_tokens - a->joined.served_tokens), "load", "queue", s.queued,
        "sessions", s.sessions, "kv_bytes", (json_int_t)s.kv_bytes, "tok_per_s", a->tok_per_s,
        "cert_expires", (json_int_t)a->cert_expires, "capacity",
        (json_int_t)agent_offered_capacity(a));
    if (ctx) { /* what sessions it offers: a route's context is its stages' smallest */
        json_t *load = json_object_get(body, "load");
        json_object_set_new(load, "ctx", json_integer(ctx));
        json_object_set_new(load, "max_sessions", json_integer(max_sessions));
        /* sessions are limited by these bytes, not by max_sessions (node.h); a node
         * offered no memory limit has an unbounded budget, sent as INT64_MAX / 2 */
        uint64_t budget = s.kv_budget < (uint64_t)INT64_MAX / 2 ? s.kv_budget : INT64_MAX / 2;
        json_object_set_new(load, "kv_budget", json_integer((json_int_t)budget));
        json_object_set_new(load, "kv_used", json_integer((json_int_t)s.kv_used));
    }
    if (current_problem(a)[0])
        json_object_set_new(body, "problem", json_string(current_problem(a)));
    if (a->nat && a->public_addr[0]) json_object_set_new(body, "addr", json_string(a->public_addr));
    if (!a->nat && a->listen_moved) json_object_set_new(body, "addr", json_string(a->listen));
    char url[600];
    snprintf(url, sizeof url, "%s/v1/nodes/%lld/heartbeat", a->registry, (long long)a->node_id);
    char token[65];
    snprintf(token, sizeof token, "%s", a->node_token);
    pthread_mutex_unlock(&a->lock);
    json_t *out = NULL;
    mt_error err = {{0}};
    int st = mt_http_json("POST", url, token, body, 10000, &out, &err);
    json_decref(body);
    if (st == 404 || st == 401) { /* the registry forgot us (new database): join again */
        mt_log_as(&a->log, MT_LOG_WARN,
                  "the registry does not know this node any more; joining again");
        if (join(a, &err)) st = -1;
    }
    pthread_mutex_lock(&a->lock);
    if (st != 200 || !json_is_object(out)) {
        if (a->failures++ % 10 == 0)
            mt_log_as(&a->log, MT_LOG_WARN, "heartbeat failed: %s", err.msg);
        snprintf(a->last_error, sizeof a->last_error, "heartbeat: %.490s", err.msg);
        json_decref(out);
        return;
    }
    a->heartbeats++;
    a->credited = total;
    json_t *asg = json_object_get(out, "assignment");
    const char *shard = json_string_value(json_object_get(asg, "shard"));
    snprintf(a->want, sizeof a->want, "%s", shard && safe_name(shard) ? shard : "");
    parse_partners(asg, &a->want_partners);
    /* absent (no attention in the shard): the default; unknown (a newer registry): not
     * served, since its numbers would differ from the other replicas' */
    const char *kv_name = json_string_value(json_object_get(asg, "kv_type"));
    mt_kv_type kv = MT_KV_DEFAULT;
    if (kv_name && mt_kv_type_parse(kv_name, &kv, NULL)) {
        if (a->want[0])
            mt_log_as(&a->log, MT_LOG_ERROR,
                      "the registry asks for a %.20s KV cache, which this version does not"
                      " have; upgrade moontail on this machine",
                      kv_name);
        a->want[0] = 0;
    }
    a->want_kv = kv;
    a->drain = json_is_true(json_object_get(out, "drain"));
    /* tell whoever runs this machine, once each time it happens */
    const char *state = json_string_value(json_object_get(out, "state"));
    bool quarantined = state && strcmp(state, "quarantined") == 0;
    if (quarantined && !a->quarantined)
        mt_log_as(&a->log, MT_LOG_ERROR,
                  "the registry quarantined this node: a spot-check found it computing wrong"
                  " results (docs/spot-checking.md). Check the machine (memory, overclocking),"
                  " then ask the operator to release it ('moontail cell release')");
    else if (!quarantined && a->quarantined)
        mt_log_as(&a->log, MT_LOG_INFO, "released from quarantine");
    a->quarantined = quarantined;
    json_t *src = json_object_get(out, "sources");
    if (json_is_array(src)) {
        json_decref(a->sources);
        a->sources = json_incref(src);
    }
    const char *cert = json_string_value(json_object_get(out, "cert"));
    uint8_t cb[MT_CERT_BYTES];
    size_t cl = 0;
    mt_cert fields;
    if (cert && sodium_hex2bin(cb, sizeof cb, cert, strlen(cert), NULL, &cl, NULL) == 0 &&
        cl == MT_CERT_BYTES && mt_cert_decode(cb, cl, &fields, NULL) == 0 &&
        mt_keys_set_cert(&a->keys, cb, cl, NULL) == 0) {
        a->cert_expires = fields.not_after;
        if (a->node) mt_node_set_cert(a->node, cb, cl, NULL);
    }
    json_decref(out);

    /* act: drain, fetch, (re)start */
    if (!a->want[0] || a->drain) {
        bool idle = s.queued == 0 && s.requests == a->last_requests;
        a->idle_beats = idle ? a->idle_beats + 1 : 0;
        if (a->node && a->idle_beats >= 2) {
            mt_log_as(&a->log, MT_LOG_INFO, "%s: no more work here; stopping the data plane",
                      a->drain ? "draining" : "idle");
            stop_node(a);
            a->beat_now = true;
        }
    } else if (a->bad_shard[0] && strcmp(a->want, a->bad_shard) == 0) {
        /* changed on disk under the node: not served again by this process */
    } else if (strcmp(a->want, a->serving) != 0 ||
               !same_partners(&a->want_partners, &a->serving_partners) ||
               a->want_kv != a->serving_kv) {
        /* a file of that name may be left from another model (the names say
         * which layers, not which model): it is served only once checked
         * against the registry's manifest, which the fetch thread does first */
        char *path = agent_shard_path(a, a->want);
        mt_file_info sb;
        bool have = path && mt_file_stat(path, &sb) == 0 && strcmp(a->verified, a->want) == 0;
        free(path);
        if (have) {
            mt_error e2 = {{0}};
            if (start_node(a, a->want, &a->want_partners, &e2)) {
                snprintf(a->last_error, sizeof a->last_error, "%s", e2.msg);
                char was[sizeof a->problem];
                snprintf(was, sizeof was, "%s", a->problem);
                agent_set_problem(a, a->want, "cannot serve", e2.msg);
                if (strcmp(was, a->problem) != 0) /* once per reason, not at every heartbeat */
                    mt_log_as(&a->log, MT_LOG_WARN, "cannot serve %s yet: %s", a->want, e2.msg);
            } else {
                a->beat_now = true;
            }
        } else {
            agent_fetch_start(a);
        }
    }
    a->last_requests = s.requests;
}

static void *hb_main(void *arg) {
    mt_agent *a = arg;
    pthread_mutex_lock(&a->lock);
    while (!mt_bg_thread_stopping(&a->hb)) {
        heartbeat(a);
        if (mt_bg_thread_stopping(&a->hb)) break;
        /* until its next report the registry would still route to a stopped
         * data plane (or not yet to a started one) */
        if (a->beat_now) {
            a->beat_now = false;
            continue;
        }
        int64_t wait_ms = a->heartbeat_ms;
        pthread_mutex_unlock(&a->lock);
        mt_bg_thread_sleep(&a->hb, wait_ms);
        pthread_mutex_lock(&a->lock);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

/* A fixed data-plane address: with port 0, the port the system picks now. */
static int fix_listen(mt_agent *a, const char *listen, mt_error *err) {
    const char *colon = strrchr(listen, ':');
    if (!colon) return mt_error_set(err, "--listen %s: expected HOST:PORT", listen);
    if (strncmp(listen, "0.0.0.0:", 8) == 0 || strncmp(listen, "[::]:", 5) == 0)
        return mt_error_set(err,
                            "--listen %s: give the address peers reach this node at (e.g. "
                            "192.168.1.20:7411), since the registry hands it out",
                            listen);
    if (atoi(colon + 1) != 0) {
        /* a port another process holds is found now, before joining, rather than at every
         * start of the data plane while the registry and its status say "loading" */
        if (mt_listen_probe(listen, err)) return -1; /* its message names the address */
        snprintf(a->listen, sizeof a->listen, "%s", listen);
        return 0;
    }
    a->listen_auto = true;
    mt_sock fd = mt_listen_tcp(listen, err);
    if (fd == MT_SOCK_NONE) return -1;
    int port = mt_listen_port(fd);
    mt_sock_close(fd);
    snprintf(a->listen, sizeof a->listen, "%.*s:%d", (int)(colon - listen),
             colon == listen ? "127.0.0.1" : listen, port);
    return 0;
}

/* Tunnel and relay modes: the node's own server must stay on loopback. */
static int check_loopback(const char *listen, mt_error *err) {
    const char *colon = strrchr(listen, ':');
    size_t hl = colon ? (size_t)(colon - listen) : 0;
    if (colon && (hl == 0 || (hl >= 4 && strncmp(listen, "127.", 4) == 0) ||
                  (hl == 9 && strncmp(listen, "localhost", 9) == 0) ||
                  (hl == 5 && strncmp(listen, "[::1]", 5) == 0)))
        return 0;
    return mt_error_set(err,
                        "--listen %s: with --tunnel or --relay the node's own server stays on"
                        " loopback (peers reach it through the tunnel or the relay); use"
                        " 127.0.0.1:PORT or 127.0.0.1:0",
                        listen);
}

/* The tunnel or the relay client has a new public address (or lost it): heartbeat now. */
static void on_public_change(void *ctx) {
    mt_agent *a = ctx;
    mt_bg_thread_wake(&a->hb);
}

/* Starts the tunnel program and waits for its first address (before joining). */
static int start_tunnel(mt_agent *a, mt_error *err) {
    const char *colon = strrchr(a->listen, ':');
    char host[128];
    snprintf(host, sizeof host, "%.*s", (int)(colon - a->listen), a->listen);
    mt_tunnel_config tc = {.command = a->cfg.tunnel,
                           .pattern = a->cfg.tunnel_pattern,
                           .local_host = host,
                           .local_port = atoi(colon + 1),
                           .on_change = on_public_change,
                           .ctx = a,
                           .log_name = a->log_name,
                           .quiet = a->cfg.quiet};
    a->tunnel = mt_tunnel_start(&tc, err);
    if (!a->tunnel) return -1;
    char pub[160];
    int wait_ms = a->cfg.tunnel_wait_ms > 0 ? a->cfg.tunnel_wait_ms : 60000;
    if (mt_tunnel_wait(a->tunnel, wait_ms, pub, sizeof pub, err)) return -1;
    snprintf(a->public_addr, sizeof a->public_addr, "%s", pub);
    a->public_up = true;
    return 0;
}

/* Connects to the registry's relay (after joining) and waits for the public address. */
static int start_relay(mt_agent *a, mt_error *err) {
    if (!a->relay_addr[0])
        return mt_error_set(err,
                            "the registry at %s runs no relay (its operator starts one with"
                            " `moontail registry --relay-listen HOST:PORT`); use --tunnel"
                            " \"COMMAND\" or a --listen address that peers can reach",
                            a->registry);
    mt_relay_client_config rc = {.relay = a->relay_addr,
                                 .local = a->listen,
                                 .node_id = a->node_id,
                                 .token = a->node_token,
                                 .on_change = on_public_change,
                                 .ctx = a,
                                 .log_name = a->log_name,
                                 .quiet = a->cfg.quiet};
    a->relay = mt_relay_client_start(&rc, err);
    if (!a->relay) return -1;
    char pub[160];
    int wait_ms = a->cfg.tunnel_wait_ms > 0 ? a->cfg.tunnel_wait_ms : 60000;
    if (mt_relay_client_wait(a->relay, wait_ms, pub, sizeof pub, err)) return -1;
    pthread_mutex_lock(&a->lock);
    snprintf(a->public_addr, sizeof a->public_addr, "%s", pub);
    a->public_up = true;
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* The node's identity from a->key_path, made there when there is none (*made says so). */
static int load_or_make_key(mt_agent *a, bool *made, mt_error *err) {
    mt_file_info sb;
    *made = false;
    if (mt_file_stat(a->key_path, &sb) == 0) return mt_keys_load(&a->keys, a->key_path, err);
    if (errno != ENOENT) return mt_error_set(err, "%s: %s", a->key_path, strerror(errno));
    if (mt_keys_generate(&a->keys, err) || mt_keys_save(&a->keys, a->key_path, err)) return -1;
    *made = true;
    return 0;
}

void mt_agent_default_name(const uint8_t pk[32], char *out, size_t cap) {
    char host[64];
    if (mt_sys_host_name(host, sizeof host) != 0) snprintf(host, sizeof host, "node");
    snprintf(out, cap, "%.50s-%02x%02x", host, pk[0], pk[1]);
}

mt_agent *mt_agent_start(const mt_agent_config *cfg, mt_error *err) {
    if (!cfg->registry || !cfg->token || !cfg->key_path || !cfg->data_dir || !cfg->listen) {
        mt_error_set(err, "node agent: registry URL, account token, key file, data directory and"
                          " listen address are required");
        return NULL;
    }
    mt_agent *a = calloc(1, sizeof *a);
    if (!a) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    a->cfg = *cfg;
    a->nat = cfg->tunnel || cfg->relay;
    a->registry = strdup(cfg->registry);
    size_t rl = strlen(a->registry);
    while (rl > 0 && a->registry[rl - 1] == '/') a->registry[--rl] = 0;
    a->token = strdup(cfg->token);
    a->key_path = strdup(cfg->key_path);
    a->data_dir = strdup(cfg->data_dir);
    a->heartbeat_ms = 1000;
    a->disk_limit = -1;
    pthread_mutex_init(&a->lock, NULL);
    /* until the key gives the default name its suffix, the lines carry cfg->name or none */
    mt_log_source_init(&a->log, "node", cfg->name, cfg->quiet);
    if (mt_bg_thread_init(&a->hb, err)) goto fail;
    if (cfg->tunnel && cfg->relay) {
        mt_error_set(err, "--tunnel and --relay: choose one way for peers to reach this node");
        goto fail;
    }
    /* the address first: a port another process holds stops the node before it makes
     * anything */
    if ((a->nat && check_loopback(cfg->listen, err)) || fix_listen(a, cfg->listen, err)) goto fail;
    if (mt_dir_make(a->data_dir, false) != 0 && errno != EEXIST) {
        mt_error_set(err, "data directory %s: %s", a->data_dir, strerror(errno));
        goto fail;
    }
    bool made_key;
    if (load_or_make_key(a, &made_key, err)) goto fail;
    if (cfg->name)
        snprintf(a->name, sizeof a->name, "%s", cfg->name);
    else
        mt_agent_default_name(a->keys.pk, a->name, sizeof a->name);
    mt_log_source_init(&a->log, "node", a->name, cfg->quiet);
    snprintf(a->log_name, sizeof a->log_name, "node %s", a->name);
    if (made_key) mt_log_as(&a->log, MT_LOG_INFO, "created identity %s", a->key_path);
    /* peers on other machines connect to this one: how to let them through a firewall
     * that would refuse them (Windows Firewall) */
    char hint[1400];
    if (!a->nat && !mt_addr_loopback(a->listen) && mt_sys_firewall_blocks(hint, sizeof hint))
        mt_log_as(&a->log, MT_LOG_WARN, "%s", hint);
    a->auth = mt_keys_authorized_new();
    if (!a->auth) {
        mt_error_set(err, "out of memory");
        goto fail;
    }
    mt_hwinfo_detect(a->data_dir, &a->hw);
    a->speed = cfg->speed > 0 ? cfg->speed : mt_hwinfo_speed(mt_hwinfo_read_bandwidth(a->hw.cores));
    a->capacity = cfg->capacity > 0 ? cfg->capacity : a->hw.ram_available / 10 * 7;
    if (a->capacity <= 0) a->capacity = 1 << 30;
    char sl[160];
    if (cfg->shard_listen) {
        snprintf(sl, sizeof sl, "%s", cfg->shard_listen);
    } else {
        const char *colon = strrchr(a->listen, ':');
        snprintf(sl, sizeof sl, "%.*s:0", (int)(colon - a->listen), a->listen);
    }
    /* behind NAT peers could not reach a shard server: none is registered */
    if (!a->nat) {
        a->shards = mt_http_server_start(sl, 2, 4096, shard_handler, a, err);
        if (!a->shards) goto fail;
        snprintf(a->shard_addr, sizeof a->shard_addr, "%s", mt_http_server_addr(a->shards));
        mt_log_as(&a->log, MT_LOG_INFO, "peers fetch shards from http://%s", a->shard_addr);
    }
    mt_log_as(&a->log, MT_LOG_INFO, "%.1f GB offered, speed %.2f (%.1f GB/s reads), %d cores, %s",
              a->capacity / 1e9, a->speed, a->speed * 10, a->hw.cores, a->hw.simd);
    if (cfg->tunnel && start_tunnel(a, err)) goto fail;
    if (join(a, err)) goto fail;
    if (cfg->relay && start_relay(a, err)) goto fail;
    if (a->nat)
        mt_log_as(&a->log, MT_LOG_INFO,
                  "own server on %s (loopback); peers reach it at %s through the %s; it serves no"
                  " shard bytes to peers",
                  a->listen, a->public_addr, a->tunnel ? "tunnel" : "relay");
    if (mt_bg_thread_start(&a->hb, hb_main, a, err)) {
        mt_error_prefix(err, "heartbeats");
        goto fail;
    }
    return a;
fail:
    mt_agent_stop(a);
    return NULL;
}

void mt_agent_stop(mt_agent *a) {
    if (!a) return;
    mt_bg_thread_stop(&a->hb);
    bool fetch_left = !agent_fetch_join(a);
    pthread_mutex_lock(&a->lock);
    stop_node(a);
    pthread_mutex_unlock(&a->lock);
    /* without a->lock: their threads call on_public_change, which takes it */
    if (a->tunnel) mt_tunnel_stop(a->tunnel);
    if (a->relay) mt_relay_client_stop(a->relay);
    if (a->shards) mt_http_server_stop(a->shards);
    if (fetch_left) return; /* the fetch thread still uses the agent; the process ends soon */
    mt_bg_thread_destroy(&a->hb);
    if (a->auth) mt_keys_authorized_free(a->auth);
    json_decref(a->sources);
    mt_keys_wipe(&a->keys);
    pthread_mutex_destroy(&a->lock);
    free(a->registry);
    free(a->token);
    free(a->key_path);
    free(a->data_dir);
    free(a);
}

void mt_agent_get_state(mt_agent *a, mt_agent_state *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&a->lock);
    o->node_id = a->node_id;
    snprintf(o->shard, sizeof o->shard, "%s", a->serving);
    snprintf(o->fetching, sizeof o->fetching, "%s", a->fetching);
    o->fetch_done = a->progress.bytes_done;
    o->fetch_total = a->progress.bytes_total;
    o->fetch_rate = a->progress.rate;
    o->heartbeats = a->heartbeats;
    o->heartbeat_failures = a->failures;
    snprintf(o->last_error, sizeof o->last_error, "%s", a->last_error);
    snprintf(o->addr, sizeof o->addr, "%s", a->nat ? a->public_addr : a->listen);
    snprintf(o->local, sizeof o->local, "%s", a->listen);
    pthread_mutex_unlock(&a->lock);
    o->tunnel_starts = a->tunnel ? mt_tunnel_starts(a->tunnel) : 0;
}

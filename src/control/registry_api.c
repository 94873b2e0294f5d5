/* registry_api.c - the registry's HTTP endpoints (docs/control-plane.md):
 * accounts, node join / heartbeat / pause, shard manifests and seed bytes,
 * routes, usage and status, and for people and monitoring the status page
 * and Prometheus metrics. Every field of every request is checked before
 * it is used; a bad request gets a 4xx with a message naming the field. */
#include "moontail/cert.h"
#include "moontail/schedule.h"
#include "moontail/log.h"
#include "registry_internal.h"
#include "relay_internal.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request helpers ------------------------------------------------------------------ */

/* HOST:PORT that peers can be handed: a host name or address (IPv6 in
 * brackets) and a port in 1..65535. */
static bool valid_addr(const char *a) {
    return relay_addr_ok(a);
}

/* Another node than `self` that is alive now at data-plane address addr, into *other: two
 * nodes cannot share one address (a second node started on a port that another already
 * holds would never serve, and requesters would reach the first). true when there is one. */
static bool addr_taken(mt_registry *r, const char *addr, int64_t self, int64_t now,
                       reg_node *other) {
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT id FROM nodes WHERE addr = ? AND id != ?");
    if (!st) return false;
    sqlite3_bind_text(st, 1, addr, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, self);
    int64_t ids[16];
    int n = 0;
    while (n < 16 && sqlite3_step(st) == SQLITE_ROW) ids[n++] = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    for (int i = 0; i < n; i++)
        if (reg_node_get(r, ids[i], other) == 0 && reg_node_alive(r, other, now)) return true;
    return false;
}

static void addr_taken_error(mt_http_response *resp, const char *addr, const reg_node *other,
                             int64_t now) {
    mt_http_error(resp, 409,
                  "address %s is taken by node %lld '%s', alive (heard from %.1f s ago): two"
                  " nodes cannot share one address. Give this node another --listen port, or"
                  " stop node %lld first",
                  addr, (long long)other->id, other->name,
                  other->last_seen > 0 ? (double)(now - other->last_seen) / 1000 : 0.0,
                  (long long)other->id);
}

/* The node whose token hashes to h, or 0. */
static int64_t node_by_token(mt_registry *r, const char *h) {
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT id FROM nodes WHERE token_hash = ?");
    if (!st) return 0;
    sqlite3_bind_text(st, 1, h, -1, SQLITE_STATIC);
    int64_t id = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return id;
}

/* The node named by a /v1/nodes/<id>/... path whose token the request
 * carries, or -1 with resp set. account_may: its account's token will do
 * too (pause, resume); heartbeats take the node's own token only, so that a
 * cell's shared account token cannot speak (or give an address) for a node. */
static int64_t authed_node(mt_registry *r, const mt_http_request *req, const char *id_text,
                           reg_node *n, bool account_may, mt_http_response *resp) {
    char *end;
    long long id = strtoll(id_text, &end, 10);
    if (end == id_text || (*end && *end != '/') || id <= 0) {
        mt_http_error(resp, 404, "no such node '%s'", id_text);
        return -1;
    }
    if (reg_node_get(r, id, n)) {
        mt_http_error(resp, 404, "node %lld is not known to this registry; join again", id);
        return -1;
    }
    const char *tok = mt_http_bearer(req);
    char h[65];
    if (tok) reg_token_hash(tok, h);
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT token_hash FROM nodes WHERE id = ?");
    bool match = false;
    if (st) {
        sqlite3_bind_int64(st, 1, id);
        match = tok && sqlite3_step(st) == SQLITE_ROW &&
                strcmp((const char *)sqlite3_column_text(st, 0), h) == 0;
        sqlite3_finalize(st);
    }
    /* the node's own account may act for it too (pause, resume) */
    int64_t account = tok && !match ? reg_account_by_token(r, tok) : 0;
    if (account > 0 && account == n->account_id && !account_may) {
        mt_http_error(resp, 403,
                      "node %lld: this is its account's token; a node's heartbeats carry the"
                      " node's own token, which the registry gave it when it joined",
                      id);
        return -1;
    }
    if (account == n->account_id) match = true;
    if (!match && (account > 0 || (tok && node_by_token(r, h) > 0))) {
        mt_http_error(resp, 403,
                      "node %lld: this token is another account's or another node's; use the"
                      " node's token or its account's",
                      id);
        return -1;
    }
    if (!match) {
        mt_http_error(resp, 401,
                      "node %lld: missing or wrong token (Authorization: Bearer <node token>)", id);
        return -1;
    }
    return id;
}

/* A certificate for pk (hex) as hex, or NULL. */
static char *issue_cert(mt_registry *r, const char *pk_hex, mt_cert_role role, int64_t account) {
    mt_cert c = {.role = role, .account = (uint64_t)account};
    if (mt_keys_pk_from_hex(c.subject, pk_hex, NULL)) return NULL;
    uint64_t now = mt_cert_now();
    c.not_before = now - 60; /* a little slack for clocks that differ */
    c.not_after = now + 60ULL * (uint64_t)r->cfg.cert_minutes;
    c.serial = ++r->cert_serial;
    uint8_t cert[MT_CERT_BYTES];
    if (mt_cert_issue(&c, &r->key, cert, NULL)) return NULL;
    char *hex = malloc(2 * MT_CERT_BYTES + 1);
    if (hex) sodium_bin2hex(hex, 2 * MT_CERT_BYTES + 1, cert, MT_CERT_BYTES);
    return hex;
}

/* ---- accounts ------------------------------------------------------------------------- */

static void accounts_create(mt_registry *r, const mt_http_request *req, json_t *body,
                            mt_http_response *resp) {
    if (!reg_api_admin_ok(r, req, "creating accounts (ask the operator of this registry)", resp))
        return;
    const char *name = reg_api_str_field(body, "name", 63, true, resp);
    if (!name) return;
    if (!name[0]) return mt_http_error(resp, 400, "field \"name\" is empty");
    char token[65];
    mt_error err = {{0}};
    int64_t id = reg_account_create(r, name, token, &err);
    if (id < 0) return mt_http_error(resp, 409, "%s", err.msg);
    resp->status = 201;
    resp->json =
        json_pack("{s:I, s:s, s:s}", "account_id", (json_int_t)id, "name", name, "token", token);
}

static void account_me(mt_registry *r, const mt_http_request *req, mt_http_response *resp) {
    int64_t a = reg_api_account(r, req, resp);
    if (a <= 0) return;
    json_t *c = reg_account_credits(r, a);
    json_t *nodes = json_array();
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT id, name FROM nodes WHERE account_id = ?");
    if (st) {
        sqlite3_bind_int64(st, 1, a);
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(nodes, json_pack("{s:I, s:s}", "node_id",
                                                   (json_int_t)sqlite3_column_int64(st, 0), "name",
                                                   sqlite3_column_text(st, 1)));
        sqlite3_finalize(st);
    }
    resp->json =
        json_pack("{s:I, s:o, s:o}", "account_id", (json_int_t)a, "credits", c, "nodes", nodes);
}

/* A certificate for the requester's data-plane key. */
static void account_cert(mt_registry *r, const mt_http_request *req, json_t *body,
                         mt_http_response *resp) {
    int64_t a = reg_api_account(r, req, resp);
    if (a <= 0) return;
    const char *pk = reg_api_str_field(body, "pubkey", 64, true, resp);
    if (!pk) return;
    if (mt_keys_pk_from_hex((uint8_t[MT_KEYS_PUBLIC_BYTES]){0}, pk, NULL))
        return mt_http_error(resp, 400, "field \"pubkey\" must be 64 hex digits");
    char *cert = issue_cert(r, pk, MT_CERT_ROLE_REQUESTER, a);
    if (!cert) return mt_http_error(resp, 500, "could not issue a certificate");
    resp->json = json_pack("{s:s, s:s}", "cert", cert, "registry_key", r->key_hex);
    free(cert);
}

/* ---- nodes ------------------------------------------------------------------------------ */

static void nodes_join(mt_registry *r, const mt_http_request *req, json_t *body,
                       mt_http_response *resp) {
    int64_t account = reg_api_account(r, req, resp);
    if (account <= 0) return;
    const char *name = reg_api_str_field(body, "name", 63, true, resp);
    const char *pk = name ? reg_api_str_field(body, "pubkey", 64, true, resp) : NULL;
    const char *addr = pk ? reg_api_str_field(body, "addr", 127, true, resp) : NULL;
    if (!addr) return;
    const char *shard_addr = reg_api_str_field(body, "shard_addr", 127, false, resp);
    if (!shard_addr && resp->json) return;
    uint8_t raw[MT_KEYS_PUBLIC_BYTES];
    if (mt_keys_pk_from_hex(raw, pk, NULL))
        return mt_http_error(resp, 400, "field \"pubkey\" must be 64 hex digits");
    if (!valid_addr(addr) || (shard_addr && shard_addr[0] && !valid_addr(shard_addr)))
        return mt_http_error(resp, 400, "\"addr\" and \"shard_addr\" must be HOST:PORT");
    json_t *hw = json_object_get(body, "hw");
    if (hw && !json_is_object(hw)) return mt_http_error(resp, 400, "\"hw\" must be an object");
    bool ok = true;
    int64_t ram = reg_api_int_field(hw, "ram", 0, INT64_MAX / 2, 0, false, &ok, resp);
    int64_t disk = ok ? reg_api_int_field(hw, "disk", 0, INT64_MAX / 2, 0, false, &ok, resp) : 0;
    int64_t cores = ok ? reg_api_int_field(hw, "cores", 0, 1 << 16, 0, false, &ok, resp) : 0;
    int64_t vram = ok ? reg_api_int_field(hw, "vram", 0, INT64_MAX / 2, 0, false, &ok, resp) : 0;
    int64_t capacity =
        ok ? reg_api_int_field(body, "capacity", 1, INT64_MAX / 2, 0, true, &ok, resp) : 0;
    if (!ok) return;
    const char *simd = reg_api_str_field(hw, "simd", 15, false, resp);
    if (!simd && resp->json) return;
    const char *gpu = reg_api_str_field(hw, "gpu", 63, false, resp);
    if (!gpu && resp->json) return;
    json_t *sp = json_object_get(body, "speed");
    double speed = sp ? json_number_value(sp) : 1.0; /* 0 when not a number */
    if (!(speed > 0 && speed < 1e9))
        return mt_http_error(resp, 400, "field \"speed\" must be a positive number");
    if (r->cfg.capacity_limit > 0 && capacity > r->cfg.capacity_limit)
        capacity = r->cfg.capacity_limit;

    char token[65], th[65];
    reg_token_new(token);
    reg_token_hash(token, th);
    int64_t now = mt_wall_ms();
    /* a node that joins again with the same key keeps its id, counters and ledger */
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT id, account_id FROM nodes WHERE pubkey = ?");
    int64_t id = 0, owner = 0;
    if (st) {
        sqlite3_bind_text(st, 1, pk, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            id = sqlite3_column_int64(st, 0), owner = sqlite3_column_int64(st, 1);
        sqlite3_finalize(st);
    }
    if (id && owner != account)
        return mt_http_error(resp, 409, "this node key belongs to another account");
    reg_node other;
    if (addr_taken(r, addr, id, now, &other)) return addr_taken_error(resp, addr, &other, now);
    mt_error err = {{0}};
    st = reg_db_prepare(
        r, &err,
        id ? "UPDATE nodes SET name = ?1, token_hash = ?2, addr = ?3, shard_addr = ?4, ram = ?5,"
             " disk = ?6, cores = ?7, simd = ?8, gpu = ?9, vram = ?10, capacity = ?11,"
             " speed = ?12, last_seen = ?13, ready_shard = '', served_token_layers = 0,"
             " served_expert_rows = 0, served_tokens = 0 WHERE id = ?15"
           : "INSERT INTO nodes(name, token_hash, addr, shard_addr, ram, disk, cores, simd, gpu,"
             " vram, capacity, speed, last_seen, joined, account_id, pubkey)"
             " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14, ?16)");
    if (!st) return mt_http_error(resp, 500, "%s", err.msg);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, th, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, addr, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, shard_addr ? shard_addr : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, ram);
    sqlite3_bind_int64(st, 6, disk);
    sqlite3_bind_int64(st, 7, cores);
    sqlite3_bind_text(st, 8, simd ? simd : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, gpu ? gpu : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 10, vram);
    sqlite3_bind_int64(st, 11, capacity);
    sqlite3_bind_double(st, 12, speed);
    sqlite3_bind_int64(st, 13, now);
    sqlite3_bind_int64(st, 14, account);
    sqlite3_bind_int64(st, 15, id);
    sqlite3_bind_text(st, 16, pk, -1, SQLITE_STATIC);
    if (reg_db_step_done(r, st, &err)) return mt_http_error(resp, 500, "%s", err.msg);
    if (!id) id = sqlite3_last_insert_rowid(r->db);
    char *cert = issue_cert(r, pk, MT_CERT_ROLE_NODE, account);
    if (!cert) return mt_http_error(resp, 500, "could not issue a certificate");
    mt_log_as(&r->log, MT_LOG_INFO, "node %lld '%s' joined from %s (%.1f GB, speed %.2f)",
              (long long)id, name, addr, capacity / 1e9, speed);
    resp->status = 201;
    resp->json =
        json_pack("{s:I, s:s, s:s, s:s, s:i, s:s}", "node_id", (json_int_t)id, "token", token,
                  "registry_key", r->key_hex, "cert", cert, "heartbeat_ms", r->cfg.heartbeat_ms,
                  "mode", r->cfg.mode == MT_REGISTRY_SWARM ? "swarm" : "cell");
    if (r->relay) json_object_set_new(resp->json, "relay", json_string(mt_relay_addr(r->relay)));
    free(cert);
    mt_bg_thread_wake(&r->ticker);
}

/* Peers among nodes[0..k) that serve shard `name` (the seed is added apart). */
static json_t *sources_of(mt_registry *r, const reg_node *nodes, int32_t k, const char *name,
                          int64_t except, int64_t now) {
    json_t *a = json_array();
    for (int32_t i = 0; i < k; i++)
        if (nodes[i].id != except && nodes[i].shard_addr[0] &&
            strcmp(nodes[i].ready_shard, name) == 0 && reg_node_alive(r, &nodes[i], now)) {
            char url[160];
            snprintf(url, sizeof url, "http://%s", nodes[i].shard_addr);
            json_array_append_new(a, json_string(url));
        }
    return a;
}

/* n's assignment; a stage's partners are looked up in all[0..k). */
static json_t *assignment_json(mt_registry *r, const reg_node *n, const reg_node *all, int32_t k,
                               int64_t now) {
    char name[96];
    reg_shard_name(&n->a, name);
    json_t *j =
        json_pack("{s:s, s:i, s:[i,i], s:b, s:[i,i]}", "role", mt_place_role_name(n->a.role),
                  "replica", n->a.replica, "layers", n->a.layer_begin, n->a.layer_end, "attention",
                  n->a.attention, "experts", n->a.expert_begin, n->a.expert_end);
    if (name[0]) json_object_set_new(j, "shard", json_string(name));
    if (n->a.attention)
        json_object_set_new(j, "kv_type", json_string(mt_kv_type_name(r->cfg.kv_type)));
    if (n->a.role == MT_PLACE_STAGE) { /* paired layer: the partners this stage calls */
        json_t *partners = json_array();
        for (int32_t i = 0; i < k; i++)
            if (all[i].a.role == MT_PLACE_PARTNER && all[i].a.paired_with == n->id)
                json_array_append_new(
                    partners, json_pack("{s:I, s:s, s:s, s:b}", "node_id", (json_int_t)all[i].id,
                                        "addr", all[i].addr, "key", all[i].pubkey, "alive",
                                        reg_node_alive(r, &all[i], now)));
        json_object_set_new(j, "partners", partners);
    }
    return j;
}

static void nodes_heartbeat(mt_registry *r, const mt_http_request *req, const char *id_text,
                            json_t *body, mt_http_response *resp) {
    reg_node n;
    int64_t id = authed_node(r, req, id_text, &n, false, resp);
    if (id < 0) return;
    /* a node's address gets in while the public side of the server is full */
    mt_http_reserve_client(req, 600);
    const char *ready = reg_api_str_field(body, "ready_shard", 95, false, resp);
    if (!ready && resp->json) return;
    /* a node behind a tunnel or the relay reports its public address, which may change */
    const char *addr = reg_api_str_field(body, "addr", 127, false, resp);
    if (!addr && resp->json) return;
    /* why it cannot serve its shard (absent: it can, or it is waiting for it) */
    const char *problem = reg_api_str_field(body, "problem", MT_NODE_PROBLEM_MAX, false, resp);
    if (!problem && resp->json) return;
    if (addr && !valid_addr(addr))
        return mt_http_error(resp, 400,
                             "field \"addr\" must be HOST:PORT (a host name or IP address, IPv6"
                             " in brackets, and a port in 1..65535)");
    json_t *served = json_object_get(body, "served"), *load = json_object_get(body, "load");
    if (served && !json_is_object(served))
        return mt_http_error(resp, 400, "field \"served\" must be an object");
    if (load && !json_is_object(load))
        return mt_http_error(resp, 400, "field \"load\" must be an object");
    bool ok = true;
    int64_t tl = reg_api_int_field(served, "token_layers", 0, INT64_MAX / 4, n.served_token_layers,
                                   false, &ok, resp);
    int64_t er = ok ? reg_api_int_field(served, "expert_rows", 0, INT64_MAX / 4,
                                        n.served_expert_rows, false, &ok, resp)
                    : 0;
    int64_t tk = ok ? reg_api_int_field(served, "tokens", 0, INT64_MAX / 4, n.served_tokens, false,
                                        &ok, resp)
                    : 0;
    int64_t q = ok ? reg_api_int_field(load, "queue", 0, 1 << 30, 0, false, &ok, resp) : 0;
    int64_t ss = ok ? reg_api_int_field(load, "sessions", 0, 1 << 30, 0, false, &ok, resp) : 0;
    int64_t kvb =
        ok ? reg_api_int_field(load, "kv_bytes", 0, INT64_MAX / 4, 0, false, &ok, resp) : 0;
    int64_t lctx = ok ? reg_api_int_field(load, "ctx", 0, 1 << 24, 0, false, &ok, resp) : 0;
    int64_t lms = ok ? reg_api_int_field(load, "max_sessions", 0, 1 << 24, 0, false, &ok, resp) : 0;
    int64_t kvbud =
        ok ? reg_api_int_field(load, "kv_budget", 0, INT64_MAX / 2, 0, false, &ok, resp) : 0;
    int64_t kvused =
        ok ? reg_api_int_field(load, "kv_used", 0, INT64_MAX / 2, 0, false, &ok, resp) : 0;
    int64_t expires =
        ok ? reg_api_int_field(body, "cert_expires", 0, INT64_MAX / 1000, 0, false, &ok, resp) : 0;
    /* a node offers less when its disk turns out too small for a shard (node_agent.c) */
    int64_t capacity =
        ok ? reg_api_int_field(body, "capacity", 1, INT64_MAX / 2, n.capacity, false, &ok, resp)
           : 0;
    if (!ok) return;
    if (r->cfg.capacity_limit > 0 && capacity > r->cfg.capacity_limit)
        capacity = r->cfg.capacity_limit;
    json_t *tps = json_object_get(load, "tok_per_s");
    double tok_per_s = tps ? json_number_value(tps) : 0; /* 0 when not a number */
    if (tps && (!json_is_number(tps) || !(tok_per_s >= 0 && tok_per_s < 1e12)))
        return mt_http_error(resp, 400, "field \"tok_per_s\" must be a number >= 0");
    int64_t now = mt_wall_ms();
    reg_node other;
    if (addr && strcmp(addr, n.addr) != 0 && addr_taken(r, addr, id, now, &other))
        return addr_taken_error(resp, addr, &other, now);
    /* counters are cumulative since the node started: a smaller one means it restarted */
    int64_t d_tl = tl >= n.served_token_layers ? tl - n.served_token_layers : tl;
    int64_t d_er = er >= n.served_expert_rows ? er - n.served_expert_rows : er;
    if (n.quarantined) d_tl = d_er = 0; /* found computing wrong results: no credit */
    /* uptime grows by the gaps between heartbeats, not by a registry's own downtime */
    int64_t up = reg_node_heard(r, &n, now) ? now - n.last_seen : 0;
    mt_error err = {{0}};
    if (reg_db_exec(r, &err, "BEGIN") ||
        reg_ledger_add(r, now, n.account_id, id, "served_token_layers", d_tl, &err) ||
        reg_ledger_add(r, now, n.account_id, id, "served_expert_rows", d_er, &err)) {
        reg_db_exec(r, NULL, "ROLLBACK");
        return mt_http_error(resp, 500, "%s", err.msg);
    }
    sqlite3_stmt *st = reg_db_prepare(
        r, &err,
        "UPDATE nodes SET last_seen = ?, uptime_ms = uptime_ms + ?, ready_shard = ?,"
        " served_token_layers = ?, served_expert_rows = ?, served_tokens = ?, load_queue = ?,"
        " load_sessions = ?, tok_per_s = ?, load_kv_bytes = ?, load_ctx = ?, load_max_sessions = ?,"
        " problem = ?, load_kv_budget = ?, load_kv_used = ? WHERE id = ?");
    bool was_alive = reg_node_alive(r, &n, now);
    if (st) {
        sqlite3_bind_int64(st, 1, now);
        sqlite3_bind_int64(st, 2, up);
        sqlite3_bind_text(st, 3, ready ? ready : n.ready_shard, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 4, tl);
        sqlite3_bind_int64(st, 5, er);
        sqlite3_bind_int64(st, 6, tk);
        sqlite3_bind_int64(st, 7, q);
        sqlite3_bind_int64(st, 8, ss);
        sqlite3_bind_double(st, 9, tok_per_s);
        sqlite3_bind_int64(st, 10, kvb);
        sqlite3_bind_int64(st, 11, lctx);
        sqlite3_bind_int64(st, 12, lms);
        sqlite3_bind_text(st, 13, problem ? problem : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 14, kvbud);
        sqlite3_bind_int64(st, 15, kvused);
        sqlite3_bind_int64(st, 16, id);
    }
    bool moved = addr && strcmp(addr, n.addr) != 0, resized = capacity != n.capacity;
    bool failed = !st || reg_db_step_done(r, st, &err);
    if (!failed && moved) {
        st = reg_db_prepare(r, &err, "UPDATE nodes SET addr = ? WHERE id = ?");
        if (st) {
            sqlite3_bind_text(st, 1, addr, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(st, 2, id);
        }
        failed = !st || reg_db_step_done(r, st, &err);
    }
    if (!failed && resized) {
        st = reg_db_prepare(r, &err, "UPDATE nodes SET capacity = ? WHERE id = ?");
        if (st) {
            sqlite3_bind_int64(st, 1, capacity);
            sqlite3_bind_int64(st, 2, id);
        }
        failed = !st || reg_db_step_done(r, st, &err);
    }
    if (failed || reg_db_exec(r, &err, "COMMIT")) {
        reg_db_exec(r, NULL, "ROLLBACK");
        return mt_http_error(resp, 500, "%s", err.msg);
    }
    if (moved)
        mt_log_as(&r->log, MT_LOG_INFO, "node %lld '%s' is now at %s (was %s)", (long long)id,
                  n.name, addr, n.addr);
    if (problem && strcmp(problem, n.problem) != 0)
        mt_log_as(&r->log, MT_LOG_WARN, "node %lld '%s' %s", (long long)id, n.name, problem);
    if (resized)
        mt_log_as(&r->log, MT_LOG_INFO, "node %lld '%s' now offers %.1f MB (was %.1f MB)",
                  (long long)id, n.name, capacity / 1e6, n.capacity / 1e6);
    reg_node_get(r, id, &n);
    if (!was_alive || resized) /* back, or smaller: placement looks again */
        mt_bg_thread_wake(&r->ticker);

    /* one read of the node rows serves the partners and the shard's sources */
    reg_node *all = NULL;
    int32_t k = 0;
    if (reg_nodes_load(r, &all, &k, NULL)) k = 0;
    json_t *out =
        json_pack("{s:o, s:b, s:I, s:s}", "assignment", assignment_json(r, &n, all, k, now),
                  "drain", n.paused || !reg_node_available(r, &n, now), "plan_version",
                  (json_int_t)r->plan_version, "state", reg_node_state(r, &n, now));
    char name[96];
    reg_shard_name(&n.a, name);
    if (name[0]) {
        json_object_set_new(out, "sources", sources_of(r, all, k, name, id, now));
        json_object_set_new(out, "seed", json_string(r->url));
    }
    free(all);
    /* a fresh certificate when the last one is past half its life */
    if (expires - now / 1000 < 30LL * r->cfg.cert_minutes) {
        char *cert = issue_cert(r, n.pubkey, MT_CERT_ROLE_NODE, n.account_id);
        if (cert) json_object_set_new(out, "cert", json_string(cert));
        free(cert);
    }
    resp->json = out;
}

static void nodes_pause(mt_registry *r, const mt_http_request *req, const char *id_text,
                        json_t *body, mt_http_response *resp) {
    reg_node n;
    int64_t id = authed_node(r, req, id_text, &n, true, resp);
    if (id < 0) return;
    json_t *now = json_object_get(body, "now"), *resume = json_object_get(body, "resume");
    const char *sched = reg_api_str_field(body, "schedule", 127, false, resp);
    if (!sched && resp->json) return;
    if ((now && !json_is_boolean(now)) || (resume && !json_is_boolean(resume)))
        return mt_http_error(resp, 400, "\"now\" and \"resume\" must be true or false");
    mt_error err = {{0}};
    if (sched && sched[0]) {
        mt_schedule s;
        if (mt_schedule_parse(sched, &s, &err)) return mt_http_error(resp, 400, "%s", err.msg);
    }
    int paused = json_is_true(resume) ? 0 : json_is_true(now) ? 1 : n.paused;
    sqlite3_stmt *st = reg_db_prepare(
        r, &err, "UPDATE nodes SET paused = ?, schedule = COALESCE(?, schedule) WHERE id = ?");
    if (!st) return mt_http_error(resp, 500, "%s", err.msg);
    sqlite3_bind_int(st, 1, paused);
    if (sched)
        sqlite3_bind_text(st, 2, sched, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 2);
    sqlite3_bind_int64(st, 3, id);
    if (reg_db_step_done(r, st, &err)) return mt_http_error(resp, 500, "%s", err.msg);
    reg_node_get(r, id, &n);
    mt_bg_thread_wake(&r->ticker);
    resp->json = json_pack("{s:I, s:b, s:s, s:s}", "node_id", (json_int_t)id, "paused", n.paused,
                           "schedule", n.schedule, "state", reg_node_state(r, &n, mt_wall_ms()));
}

/* ---- shards ------------------------------------------------------------------------------ */

static void shards_get(mt_registry *r, const char *rest, mt_http_response *resp) {
    char name[96];
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (n == 0 || n >= sizeof name) return mt_http_error(resp, 404, "no such shard");
    memcpy(name, rest, n);
    name[n] = 0;
    reg_assign a;
    bool head;
    if (reg_shard_parse(r, name, &a, &head))
        return mt_http_error(resp, 404,
                             "'%s' is not a shard of this model (names: head, backbone,"
                             " L<first>[-<last>][A][-E<first>[-<last>]], ranges inclusive)",
                             name);
    if (slash && strcmp(slash, "/manifest") == 0) {
        /* cutting takes a while for a big shard; the lock is not held meanwhile */
        pthread_mutex_unlock(&r->lock);
        mt_error err = {{0}};
        json_t *m = reg_shard_manifest(r, name, &err);
        pthread_mutex_lock(&r->lock);
        if (!m) return mt_http_error(resp, 500, "%s", err.msg);
        resp->json = m;
        return;
    }
    if (slash) return mt_http_error(resp, 404, "no such shard resource '%s'", slash);
    size_t k = strlen(r->shard_dir) + n + 8;
    char *json_path = malloc(k), *path = malloc(k);
    snprintf(json_path, k, "%s/%s.json", r->shard_dir, name);
    snprintf(path, k, "%s/%s.gguf", r->shard_dir, name);
    FILE *f = fopen(json_path, "r");
    free(json_path);
    if (!f) {
        free(path);
        return mt_http_error(
            resp, 404, "shard '%s' is not cut yet; GET /v1/shards/%s/manifest first", name, name);
    }
    fclose(f);
    resp->file = path;
}

/* ---- routes and usage ------------------------------------------------------------------ */

static void routes_new(mt_registry *r, const mt_http_request *req, json_t *body,
                       mt_http_response *resp) {
    int64_t a = reg_api_account(r, req, resp);
    if (a <= 0) return;
    if (r->cfg.mode == MT_REGISTRY_SWARM && r->cfg.require_volunteer &&
        !reg_account_volunteered(r, a))
        return mt_http_error(resp, 403,
                             "this account has not volunteered yet: in a swarm you lend before"
                             " you prompt. On a machine with spare RAM run 'moontail setup"
                             " --accept-terms --registry %s --token-file FILE' (FILE: this"
                             " account's token), let its node serve, then try again",
                             r->url);
    json_t *avoid = json_object_get(body, "avoid");
    if (avoid && (!json_is_array(avoid) || json_array_size(avoid) > 4096))
        return mt_http_error(resp, 400, "\"avoid\" must be an array of node ids");
    int64_t ids[4096];
    int32_t n = 0;
    for (size_t i = 0; avoid && i < json_array_size(avoid); i++) {
        json_t *v = json_array_get(avoid, i);
        if (!json_is_integer(v)) return mt_http_error(resp, 400, "\"avoid\" holds a non-id");
        ids[n++] = json_integer_value(v);
    }
    bool ok = true;
    int64_t session = reg_api_int_field(body, "session", 0, INT64_MAX, 0, false, &ok, resp);
    if (!ok) return;
    const char *tid = reg_api_str_field(body, "ticket", 32, false, resp);
    if (!tid && resp->json) return;
    /* admission: a request waits in line while max_active others hold routes */
    int32_t position = 0;
    reg_ticket *t = reg_ticket_take(r, a, tid, mt_wall_ms(), &position);
    if (!t) return mt_http_error(resp, 503, "out of memory for the request queue");
    if (!t->active) {
        int32_t active, waiting;
        reg_ticket_counts(r, mt_wall_ms(), &active, &waiting);
        resp->status = 202;
        resp->json = json_pack("{s:s, s:i, s:i, s:i, s:i}", "ticket", t->id, "queued", position,
                               "active", active, "max_active", r->cfg.max_active, "retry_ms", 500);
        return;
    }
    mt_error err = {{0}};
    json_t *route = reg_route(r, (uint64_t)session, ids, n, &err);
    if (!route) return mt_http_error(resp, 503, "%s", err.msg);
    json_object_set_new(route, "ticket", json_string(t->id));
    r->routes_served++;
    resp->json = route;
}

/* POST /v1/routes/keepalive and /v1/routes/done {"ticket"}: a request still
 * running, or finished (its slot goes to the next in line). */
static void routes_ticket(mt_registry *r, const mt_http_request *req, json_t *body, bool done,
                          mt_http_response *resp) {
    int64_t a = reg_api_account(r, req, resp);
    if (a <= 0) return;
    const char *tid = reg_api_str_field(body, "ticket", 32, true, resp);
    if (!tid) return;
    bool known = done ? reg_ticket_done(r, tid, a) : reg_ticket_touch(r, tid, a, mt_wall_ms());
    if (!known)
        return mt_http_error(resp, 404, "ticket '%s' is not known (finished or expired)", tid);
    resp->json = json_pack("{s:s, s:b}", "ticket", tid, "done", done);
}

static void usage_add(mt_registry *r, const mt_http_request *req, json_t *body,
                      mt_http_response *resp) {
    int64_t a = reg_api_account(r, req, resp);
    if (a <= 0) return;
    bool ok = true;
    int64_t tokens = reg_api_int_field(body, "tokens", 0, 1LL << 40, 0, true, &ok, resp);
    if (!ok) return;
    mt_error err = {{0}};
    if (reg_ledger_add(r, mt_wall_ms(), a, 0, "used_tokens", tokens, &err))
        return mt_http_error(resp, 500, "%s", err.msg);
    resp->json = json_pack("{s:o}", "credits", reg_account_credits(r, a));
}

/* Work served per node, summed from the ledger (for `moontail cell earnings`). */
static void ledger_nodes(mt_registry *r, const mt_http_request *req, mt_http_response *resp) {
    if (!reg_api_admin_ok(r, req, "the ledger", resp)) return;
    reg_node *nodes;
    int32_t n;
    mt_error err = {{0}};
    if (reg_nodes_load(r, &nodes, &n, &err)) return mt_http_error(resp, 500, "%s", err.msg);
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++)
        json_array_append_new(
            a,
            json_pack("{s:I, s:s, s:I, s:I, s:I, s:I}", "node_id", (json_int_t)nodes[i].id, "name",
                      nodes[i].name, "account_id", (json_int_t)nodes[i].account_id, "token_layers",
                      (json_int_t)reg_ledger_sum(r, "node_id", nodes[i].id, "served_token_layers"),
                      "expert_rows",
                      (json_int_t)reg_ledger_sum(r, "node_id", nodes[i].id, "served_expert_rows"),
                      "uptime_ms", (json_int_t)nodes[i].uptime_ms));
    free(nodes);
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT COUNT(*) FROM ledger");
    int64_t rows = st && sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    if (st) sqlite3_finalize(st);
    resp->json = json_pack("{s:o, s:i, s:i, s:I}", "nodes", a, "n_layer", r->layout.n_layer,
                           "n_expert_used", r->n_expert_used, "ledger_rows", (json_int_t)rows);
}

/* ---- the status page and metrics --------------------------------------------------------- */

/* A browser asks for a page: its Accept header names text/html. curl, scripts
 * and moontail's own client do not, and keep getting the JSON index at GET /. */
static bool wants_html(const mt_http_request *req) {
    const char *accept = mt_http_header(req, "Accept");
    return accept && strcasestr(accept, "text/html");
}

static void status_page(mt_http_response *resp) {
    resp->text = malloc(reg_status_page_html_len + 1);
    if (!resp->text) return mt_http_error(resp, 500, "out of memory");
    memcpy(resp->text, reg_status_page_html, reg_status_page_html_len + 1);
    resp->content_type = "text/html; charset=utf-8";
}

static void metrics(mt_registry *r, mt_http_response *resp) {
    resp->text = reg_metrics_text(r);
    if (!resp->text) return mt_http_error(resp, 500, "out of memory");
    resp->content_type = REG_METRICS_CONTENT_TYPE;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

/* Whether p is "/v1/nodes/<one path segment>/<action>". */
static bool node_path(const char *p, const char *action) {
    if (strncmp(p, "/v1/nodes/", 10) != 0) return false;
    const char *slash = strchr(p + 10, '/');
    return slash && slash > p + 10 && strcmp(slash + 1, action) == 0;
}

void reg_api_handle(void *ctx, const mt_http_request *req, mt_http_response *resp) {
    mt_registry *r = ctx;
    const char *p = req->path, *m = req->method;
    bool get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0;
    json_t *body = NULL;
    if (post) {
        json_error_t je;
        body = req->body_len ? json_loadb(req->body, req->body_len, 0, &je) : json_object();
        if (!json_is_object(body)) {
            json_decref(body);
            return mt_http_error(resp, 400, "the body must be a JSON object%s%s",
                                 req->body_len ? ": " : "", req->body_len ? je.text : "");
        }
    }
    pthread_mutex_lock(&r->lock);
    reg_check_stall(r);
    if (post && strcmp(p, "/v1/accounts") == 0)
        accounts_create(r, req, body, resp);
    else if (get && strcmp(p, "/v1/accounts/me") == 0)
        account_me(r, req, resp);
    else if (post && strcmp(p, "/v1/accounts/me/cert") == 0)
        account_cert(r, req, body, resp);
    else if (post && strcmp(p, "/v1/nodes") == 0)
        nodes_join(r, req, body, resp);
    else if (post && node_path(p, "heartbeat"))
        nodes_heartbeat(r, req, p + 10, body, resp);
    else if (post && node_path(p, "pause"))
        nodes_pause(r, req, p + 10, body, resp);
    else if (post && node_path(p, "release"))
        reg_node_release(r, req, p + 10, resp);
    else if (post && strcmp(p, "/v1/reports") == 0)
        reg_reports_post(r, req, body, resp);
    else if (get && strncmp(p, "/v1/shards/", 11) == 0)
        shards_get(r, p + 11, resp);
    else if (post && strcmp(p, "/v1/routes") == 0)
        routes_new(r, req, body, resp);
    else if (post && strcmp(p, "/v1/routes/keepalive") == 0)
        routes_ticket(r, req, body, false, resp);
    else if (post && strcmp(p, "/v1/routes/done") == 0)
        routes_ticket(r, req, body, true, resp);
    else if (post && strcmp(p, "/v1/usage") == 0)
        usage_add(r, req, body, resp);
    else if (get && strcmp(p, "/v1/ledger/nodes") == 0)
        ledger_nodes(r, req, resp);
    else if (get && strcmp(p, "/v1/status") == 0)
        resp->json = reg_status_json(r);
    else if (get && strcmp(p, "/metrics") == 0)
        metrics(r, resp);
    else if (get && (strcmp(p, "/status") == 0 || (strcmp(p, "/") == 0 && wants_html(req))))
        status_page(resp);
    else if (get && strcmp(p, "/") == 0) {
        resp->json = json_pack("{s:s, s:s, s:s, s:s, s:s}", "service", "moontail registry",
                               "status", "/v1/status", "page", "/status", "metrics", "/metrics",
                               "docs", "docs/control-plane.md");
        if (r->tls_pin[0]) json_object_set_new(resp->json, "tls_pin", json_string(r->tls_pin));
    } else
        mt_http_error(resp, 404, "no endpoint %s %s (see docs/control-plane.md)", m, p);
    pthread_mutex_unlock(&r->lock);
    json_decref(body);
}

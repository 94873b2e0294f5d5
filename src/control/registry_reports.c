/* registry_reports.c - spot-check reports and quarantine
 * (docs/spot-checking.md).
 *
 * POST /v1/reports: a requester whose spot-check found a stage and its
 * checker computing the same layers differently names both nodes. The
 * registry does not take its word for it: a report only makes the registry
 * check the two nodes itself (registry_referee.c), and a node is quarantined
 * only when the registry's own computation shows it wrong. So a false report
 * costs its sender a report and the registry one probe, and quarantines
 * nobody. What a report can cost is bounded:
 *   - every field is checked, and both nodes must be stages that hold
 *     exactly the layers named, now (or be quarantined already);
 *   - an account may make reports_per_minute reports a minute (429 beyond);
 *   - one probe runs at a time (429 "busy" meanwhile);
 *   - a node the registry found right within the last PROBE_COOLDOWN_MS is
 *     not probed again, whoever reports it.
 * Every report that passes the checks is kept in the `reports` table with
 * what the registry found for each node.
 *
 * A quarantined node keeps its connection to the registry (heartbeats) but
 * gets no role, so no route and no work, and earns no credit; its shard goes
 * to a spare as for a dead node. POST /v1/nodes/ID/release, with the admin
 * token, lets it work again. */
#include "moontail/log.h"
#include "registry_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    PROBE_COOLDOWN_MS = 30000, /* a node found right is not probed again for this long */
    REPORT_MAX_POSITION = 1 << 24,
    REPORT_MAX_TOKENS = 1 << 20,
};

/* ---- fields ------------------------------------------------------------------------------ */

/* Two distinct node ids in "nodes". */
static bool report_nodes(json_t *body, int64_t ids[2], mt_http_response *resp) {
    json_t *a = json_object_get(body, "nodes");
    if (!json_is_array(a) || json_array_size(a) != 2) {
        mt_http_error(resp, 400,
                      "field \"nodes\" must be [checked node id, checker node id]: the stage"
                      " whose output was checked and the node that computed it differently");
        return false;
    }
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) <= 0) {
            mt_http_error(resp, 400, "field \"nodes\" must hold two node ids (whole numbers > 0)");
            return false;
        }
        ids[i] = json_integer_value(v);
    }
    if (ids[0] == ids[1]) {
        mt_http_error(resp, 400, "field \"nodes\" names node %lld twice; a report needs two nodes",
                      (long long)ids[0]);
        return false;
    }
    return true;
}

/* [a, b) in "layers", a layer range of the model. */
static bool report_layers(const mt_registry *r, json_t *body, int32_t *a, int32_t *b,
                          mt_http_response *resp) {
    json_t *l = json_object_get(body, "layers");
    json_t *x = json_array_get(l, 0), *y = json_array_get(l, 1);
    if (!json_is_array(l) || json_array_size(l) != 2 || !json_is_integer(x) ||
        !json_is_integer(y) || json_integer_value(x) < 0 ||
        json_integer_value(y) <= json_integer_value(x) ||
        json_integer_value(y) > r->layout.n_layer) {
        mt_http_error(resp, 400,
                      "field \"layers\" must be [first, end) with 0 <= first < end <= %d (the"
                      " model's layers)",
                      r->layout.n_layer);
        return false;
    }
    *a = (int32_t)json_integer_value(x);
    *b = (int32_t)json_integer_value(y);
    return true;
}

static bool is_hex64(const char *s) {
    if (!s || strlen(s) != 64) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

/* Two different BLAKE2b-256 hashes (64 lowercase hex digits) in "hashes". */
static bool report_hashes(json_t *body, const char *h[2], mt_http_response *resp) {
    json_t *a = json_object_get(body, "hashes");
    h[0] = json_string_value(json_array_get(a, 0));
    h[1] = json_string_value(json_array_get(a, 1));
    if (!json_is_array(a) || json_array_size(a) != 2 || !is_hex64(h[0]) || !is_hex64(h[1])) {
        mt_http_error(resp, 400,
                      "field \"hashes\" must be two BLAKE2b-256 hashes (64 lowercase hex digits"
                      " each) of the two outputs, checked node's first");
        return false;
    }
    if (strcmp(h[0], h[1]) == 0) {
        mt_http_error(resp, 400,
                      "the two hashes are equal: the nodes agree, there is nothing to"
                      " report");
        return false;
    }
    return true;
}

/* ---- the database ------------------------------------------------------------------------- */

static int64_t count_since(mt_registry *r, const char *sql, int64_t id, int64_t since) {
    sqlite3_stmt *st = reg_db_prepare(r, NULL, sql);
    if (!st) return 0;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, since);
    int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return v;
}

/* Whether the registry found node id right in a probe since `since`. */
static bool found_right_since(mt_registry *r, int64_t id, int64_t since) {
    return count_since(r,
                       "SELECT COUNT(*) FROM reports WHERE t >= ?2 AND"
                       " ((checked = ?1 AND checked_result = 'right') OR"
                       "  (checker = ?1 AND checker_result = 'right'))",
                       id, since) > 0;
}

static int64_t save_report(mt_registry *r, int64_t now, int64_t account, const int64_t ids[2],
                           int32_t a, int32_t b, int64_t position, int64_t tokens,
                           const char *hashes[2], const char *results[2], mt_error *err) {
    sqlite3_stmt *st = reg_db_prepare(
        r, err,
        "INSERT INTO reports(t, account_id, checked, checker, layer_begin,"
        " layer_end, position, tokens, checked_hash, checker_hash,"
        " checked_result, checker_result) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int64(st, 2, account);
    sqlite3_bind_int64(st, 3, ids[0]);
    sqlite3_bind_int64(st, 4, ids[1]);
    sqlite3_bind_int(st, 5, a);
    sqlite3_bind_int(st, 6, b);
    sqlite3_bind_int64(st, 7, position);
    sqlite3_bind_int64(st, 8, tokens);
    sqlite3_bind_text(st, 9, hashes[0], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 10, hashes[1], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 11, results[0], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 12, results[1], -1, SQLITE_STATIC);
    if (reg_db_step_done(r, st, err)) return -1;
    return sqlite3_last_insert_rowid(r->db);
}

static int set_quarantine(mt_registry *r, int64_t id, bool on, int64_t now, const char *reason,
                          mt_error *err) {
    sqlite3_stmt *st = reg_db_prepare(r, err,
                                      "UPDATE nodes SET quarantined = ?, quarantined_at = ?,"
                                      " quarantine_reason = ? WHERE id = ?");
    if (!st) return -1;
    sqlite3_bind_int(st, 1, on);
    sqlite3_bind_int64(st, 2, on ? now : 0);
    sqlite3_bind_text(st, 3, on ? reason : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, id);
    return reg_db_step_done(r, st, err);
}

/* ---- POST /v1/reports ---------------------------------------------------------------------- */

void reg_reports_post(mt_registry *r, const mt_http_request *req, json_t *body,
                      mt_http_response *resp) {
    int64_t account = reg_api_account(r, req, resp);
    if (account <= 0) return;
    if (r->cfg.mode != MT_REGISTRY_CELL)
        return mt_http_error(resp, 400,
                             "spot-check reports are about cell stages; this registry runs a"
                             " swarm");
    int64_t ids[2];
    int32_t a, b;
    const char *hashes[2];
    bool ok = true;
    if (!report_nodes(body, ids, resp) || !report_layers(r, body, &a, &b, resp)) return;
    int64_t position =
        reg_api_int_field(body, "position", 0, REPORT_MAX_POSITION, 0, true, &ok, resp);
    int64_t tokens =
        ok ? reg_api_int_field(body, "tokens", 1, REPORT_MAX_TOKENS, 0, true, &ok, resp) : 0;
    if (!ok || !report_hashes(body, hashes, resp)) return;
    reg_node n[2];
    for (int i = 0; i < 2; i++) {
        if (reg_node_get(r, ids[i], &n[i]))
            return mt_http_error(resp, 404, "node %lld is not known to this registry",
                                 (long long)ids[i]);
        if (!n[i].quarantined &&
            (n[i].a.role != MT_PLACE_STAGE || n[i].a.layer_begin != a || n[i].a.layer_end != b))
            return mt_http_error(resp, 409,
                                 "node %lld is not a stage holding layers [%d, %d) now (it is %s"
                                 " [%d, %d)); report what the route and its checkers held",
                                 (long long)ids[i], a, b, mt_place_role_name(n[i].a.role),
                                 n[i].a.layer_begin, n[i].a.layer_end);
    }
    const int64_t now = mt_wall_ms();
    int64_t recent = count_since(
        r, "SELECT COUNT(*) FROM reports WHERE account_id = ?1 AND t >= ?2", account, now - 60000);
    if (recent >= r->cfg.reports_per_minute) {
        mt_http_error(resp, 429,
                      "this account made %lld spot-check reports in the last minute; at most %d a"
                      " minute are taken, try again later",
                      (long long)recent, r->cfg.reports_per_minute);
        json_object_set_new(resp->json, "retry_ms", json_integer(10000));
        return;
    }
    if (r->probing) {
        mt_http_error(resp, 429, "the registry is checking another report; try again shortly");
        json_object_set_new(resp->json, "retry_ms", json_integer(500));
        return;
    }

    /* what each node gets: no probe when quarantined already or found right lately */
    const char *results[2];
    reg_probe_target targets[2];
    int probe_of[2] = {-1, -1}, n_targets = 0;
    for (int i = 0; i < 2; i++) {
        if (n[i].quarantined) {
            results[i] = "quarantined";
        } else if (found_right_since(r, ids[i], now - PROBE_COOLDOWN_MS)) {
            results[i] = "right_recently";
        } else {
            results[i] = NULL;
            reg_probe_target *t = &targets[n_targets];
            t->node_id = ids[i];
            snprintf(t->addr, sizeof t->addr, "%s", n[i].addr);
            if (mt_keys_pk_from_hex(t->pk, n[i].pubkey, NULL)) {
                results[i] = "no_answer";
                continue;
            }
            probe_of[i] = n_targets++;
        }
    }
    reg_probe_outcome outcome[2];
    mt_error err = {{0}};
    if (n_targets > 0) {
        mt_keys keys;
        if (reg_referee_identity(r, &keys, &err))
            return mt_http_error(resp, 500, "cannot make the probe's identity: %s", err.msg);
        r->probing = true;
        pthread_mutex_unlock(&r->lock); /* the probe talks to nodes and computes */
        int rc = reg_referee_probe(r, &keys, a, b, (int32_t)(position + tokens), targets, n_targets,
                                   outcome, &err);
        pthread_mutex_lock(&r->lock);
        r->probing = false;
        mt_keys_wipe(&keys);
        if (rc) return mt_http_error(resp, 500, "the registry could not check: %s", err.msg);
    }
    for (int i = 0; i < 2; i++)
        if (probe_of[i] >= 0) results[i] = reg_probe_result_name(outcome[probe_of[i]].result);

    const int64_t done = mt_wall_ms();
    int64_t report_id =
        save_report(r, done, account, ids, a, b, position, tokens, hashes, results, &err);
    if (report_id < 0) return mt_http_error(resp, 500, "%s", err.msg);
    json_t *nodes = json_array(), *quarantined = json_array();
    bool confirmed = false;
    for (int i = 0; i < 2; i++) {
        bool wrong = strcmp(results[i], "wrong") == 0;
        confirmed |= wrong || strcmp(results[i], "quarantined") == 0;
        json_t *o = json_pack("{s:I, s:s}", "node_id", (json_int_t)ids[i], "result", results[i]);
        if (probe_of[i] >= 0 && outcome[probe_of[i]].why[0])
            json_object_set_new(o, "why", json_string(outcome[probe_of[i]].why));
        json_array_append_new(nodes, o);
        if (!wrong) continue;
        char reason[256];
        snprintf(reason, sizeof reason,
                 "computed layers [%d, %d) wrong in the registry's own check (report %lld)", a, b,
                 (long long)report_id);
        if (set_quarantine(r, ids[i], true, done, reason, &err))
            return mt_http_error(resp, 500, "%s", err.msg);
        json_array_append_new(quarantined, json_integer(ids[i]));
        mt_log_as(&r->log, MT_LOG_WARN, "node %lld '%s' quarantined: %s", (long long)ids[i],
                  n[i].name, reason);
    }
    if (json_array_size(quarantined)) mt_bg_thread_wake(&r->ticker); /* re-place its shard */
    mt_log_as(&r->log, MT_LOG_INFO,
              "report %lld by account %lld on layers [%d, %d): node %lld %s, node %lld %s (%lld"
              " ms)",
              (long long)report_id, (long long)account, a, b, (long long)ids[0], results[0],
              (long long)ids[1], results[1], (long long)(done - now));
    resp->json = json_pack("{s:I, s:s, s:o, s:o, s:I}", "report_id", (json_int_t)report_id,
                           "verdict", confirmed ? "confirmed" : "unconfirmed", "nodes", nodes,
                           "quarantined", quarantined, "check_ms", (json_int_t)(done - now));
}

/* ---- POST /v1/nodes/ID/release ------------------------------------------------------------ */

void reg_node_release(mt_registry *r, const mt_http_request *req, const char *id_text,
                      mt_http_response *resp) {
    if (!r->cfg.admin_token)
        return mt_http_error(resp, 403,
                             "releasing a quarantined node needs the operator's admin token, and"
                             " this registry has none: restart it with --admin-token-file");
    if (!reg_api_admin_ok(r, req, "releasing a quarantined node", resp)) return;
    char *end;
    long long id = strtoll(id_text, &end, 10);
    reg_node n;
    if (end == id_text || *end != '/' || id <= 0 || reg_node_get(r, id, &n))
        return mt_http_error(resp, 404, "no such node '%.*s'", (int)strcspn(id_text, "/"), id_text);
    if (!n.quarantined)
        return mt_http_error(resp, 409, "node %lld is not quarantined (it is %s)", id,
                             reg_node_state(r, &n, mt_wall_ms()));
    mt_error err = {{0}};
    if (set_quarantine(r, id, false, 0, "", &err)) return mt_http_error(resp, 500, "%s", err.msg);
    mt_log_as(&r->log, MT_LOG_INFO, "node %lld '%s' released from quarantine (was: %s)", id, n.name,
              n.quarantine_reason);
    reg_node_get(r, id, &n);
    mt_bg_thread_wake(&r->ticker);
    resp->json = json_pack("{s:I, s:s}", "node_id", (json_int_t)id, "state",
                           reg_node_state(r, &n, mt_wall_ms()));
}

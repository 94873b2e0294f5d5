/* registry_db.c - the registry's state in SQLite: schema, migrations and the
 * few statements every part of the registry shares.
 *
 * One database file in WAL mode with synchronous=FULL, so that a row a
 * client was told about (a node id, a ledger entry) survives a crash or a
 * restart of the registry. The registry uses one connection, guarded by its
 * big lock (registry_internal.h); statements are prepared per call, which
 * costs microseconds against HTTP round trips of milliseconds.
 *
 * Tables:
 *   meta      key/value: schema version, the model's source_id, the mode
 *   accounts  people and their API token hashes
 *   nodes     machines: identity, address, hardware, state, assignment,
 *             counters as last reported
 *   ledger    append-only work served (per node, credited to its account)
 *             and tokens used (per account)
 *   reports   spot-check reports (docs/spot-checking.md): who reported which
 *             two nodes for which layers, and what the registry's own check
 *             found for each
 *
 * Columns added after a database was first made are added to it when it is
 * opened (migrate below), so an older registry's database keeps working. */
#include "registry_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS accounts("
    "  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, token_hash TEXT NOT NULL UNIQUE,"
    "  created INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS nodes("
    "  id INTEGER PRIMARY KEY, account_id INTEGER NOT NULL REFERENCES accounts(id),"
    "  name TEXT NOT NULL, pubkey TEXT NOT NULL UNIQUE, token_hash TEXT NOT NULL,"
    "  addr TEXT NOT NULL, shard_addr TEXT NOT NULL DEFAULT '',"
    "  ram INTEGER NOT NULL DEFAULT 0, disk INTEGER NOT NULL DEFAULT 0,"
    "  cores INTEGER NOT NULL DEFAULT 0, simd TEXT NOT NULL DEFAULT '',"
    "  gpu TEXT NOT NULL DEFAULT '', vram INTEGER NOT NULL DEFAULT 0,"
    "  capacity INTEGER NOT NULL, speed REAL NOT NULL,"
    "  paused INTEGER NOT NULL DEFAULT 0, schedule TEXT NOT NULL DEFAULT '',"
    "  joined INTEGER NOT NULL, last_seen INTEGER NOT NULL DEFAULT 0,"
    "  uptime_ms INTEGER NOT NULL DEFAULT 0,"
    "  role INTEGER NOT NULL DEFAULT 0, replica INTEGER NOT NULL DEFAULT -1,"
    "  layer_begin INTEGER NOT NULL DEFAULT 0, layer_end INTEGER NOT NULL DEFAULT 0,"
    "  attention INTEGER NOT NULL DEFAULT 0,"
    "  expert_begin INTEGER NOT NULL DEFAULT 0, expert_end INTEGER NOT NULL DEFAULT 0,"
    "  paired_with INTEGER NOT NULL DEFAULT 0,"
    "  ready_shard TEXT NOT NULL DEFAULT '',"
    "  served_token_layers INTEGER NOT NULL DEFAULT 0,"
    "  served_expert_rows INTEGER NOT NULL DEFAULT 0,"
    "  served_tokens INTEGER NOT NULL DEFAULT 0,"
    "  load_queue INTEGER NOT NULL DEFAULT 0, load_sessions INTEGER NOT NULL DEFAULT 0,"
    "  tok_per_s REAL NOT NULL DEFAULT 0, load_kv_bytes INTEGER NOT NULL DEFAULT 0,"
    "  load_ctx INTEGER NOT NULL DEFAULT 0, load_max_sessions INTEGER NOT NULL DEFAULT 0,"
    "  load_kv_budget INTEGER NOT NULL DEFAULT 0, load_kv_used INTEGER NOT NULL DEFAULT 0,"
    "  quarantined INTEGER NOT NULL DEFAULT 0, quarantined_at INTEGER NOT NULL DEFAULT 0,"
    "  quarantine_reason TEXT NOT NULL DEFAULT '', problem TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE IF NOT EXISTS ledger("
    "  id INTEGER PRIMARY KEY, t INTEGER NOT NULL, account_id INTEGER NOT NULL,"
    "  node_id INTEGER NOT NULL DEFAULT 0, kind TEXT NOT NULL, amount INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS ledger_account ON ledger(account_id);"
    "CREATE INDEX IF NOT EXISTS ledger_node ON ledger(node_id);"
    "CREATE TABLE IF NOT EXISTS reports("
    "  id INTEGER PRIMARY KEY, t INTEGER NOT NULL, account_id INTEGER NOT NULL,"
    "  checked INTEGER NOT NULL, checker INTEGER NOT NULL,"
    "  layer_begin INTEGER NOT NULL, layer_end INTEGER NOT NULL,"
    "  position INTEGER NOT NULL, tokens INTEGER NOT NULL,"
    "  checked_hash TEXT NOT NULL, checker_hash TEXT NOT NULL,"
    "  checked_result TEXT NOT NULL, checker_result TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS reports_account ON reports(account_id, t);";

/* Columns of `nodes` newer than the first schema: added to older databases. */
static const struct {
    const char *name, *decl;
} added_node_columns[] = {
    {"quarantined", "INTEGER NOT NULL DEFAULT 0"},
    {"quarantined_at", "INTEGER NOT NULL DEFAULT 0"},
    {"quarantine_reason", "TEXT NOT NULL DEFAULT ''"},
    {"load_kv_bytes", "INTEGER NOT NULL DEFAULT 0"},
    {"load_ctx", "INTEGER NOT NULL DEFAULT 0"},
    {"load_max_sessions", "INTEGER NOT NULL DEFAULT 0"},
    {"problem", "TEXT NOT NULL DEFAULT ''"}, /* why it cannot serve its shard, "" = none */
    {"load_kv_budget", "INTEGER NOT NULL DEFAULT 0"},
    {"load_kv_used", "INTEGER NOT NULL DEFAULT 0"},
};

static bool node_has_column(mt_registry *r, const char *name) {
    sqlite3_stmt *st = reg_db_prepare(r, NULL,
                                      "SELECT 1 FROM pragma_table_info('nodes')"
                                      " WHERE name = ?");
    if (!st) return false;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    bool has = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return has;
}

static int migrate(mt_registry *r, mt_error *err) {
    for (size_t i = 0; i < sizeof added_node_columns / sizeof added_node_columns[0]; i++)
        if (!node_has_column(r, added_node_columns[i].name) &&
            reg_db_exec(r, err, "ALTER TABLE nodes ADD COLUMN %s %s", added_node_columns[i].name,
                        added_node_columns[i].decl))
            return -1;
    return 0;
}

int reg_db_open(mt_registry *r, const char *path, mt_error *err) {
    int rc = sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK)
        return mt_error_set(err, "registry database %s: cannot open: %s", path,
                            r->db ? sqlite3_errmsg(r->db) : sqlite3_errstr(rc));
    sqlite3_busy_timeout(r->db, 5000);
    if (reg_db_exec(r, err, "PRAGMA journal_mode=WAL") ||
        reg_db_exec(r, err, "PRAGMA synchronous=FULL") ||
        reg_db_exec(r, err, "PRAGMA foreign_keys=ON") || reg_db_exec(r, err, "%s", schema) ||
        migrate(r, err)) {
        mt_error_prefix(err, "registry database %s", path);
        return -1;
    }
    return 0;
}

void reg_db_close(mt_registry *r) {
    if (r->db) sqlite3_close(r->db);
    r->db = NULL;
}

int reg_db_exec(mt_registry *r, mt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    if (!sql) return mt_error_set(err, "out of memory");
    char *msg = NULL;
    int rc = sqlite3_exec(r->db, sql, NULL, NULL, &msg);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) {
        mt_error_set(err, "database: %s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

sqlite3_stmt *reg_db_prepare(mt_registry *r, mt_error *err, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) {
        mt_error_set(err, "database: %s (in: %.120s)", sqlite3_errmsg(r->db), sql);
        return NULL;
    }
    return st;
}

int reg_db_step_done(mt_registry *r, sqlite3_stmt *st, mt_error *err) {
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return mt_error_set(err, "database: %s", sqlite3_errmsg(r->db));
    return 0;
}

int reg_meta_get(mt_registry *r, const char *key, char *out, size_t cap) {
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT value FROM meta WHERE key = ?");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int found = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
        found = 0;
    }
    sqlite3_finalize(st);
    return found;
}

int reg_meta_set(mt_registry *r, const char *key, const char *value, mt_error *err) {
    sqlite3_stmt *st =
        reg_db_prepare(r, err, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    return reg_db_step_done(r, st, err);
}

int reg_ledger_add(mt_registry *r, int64_t t_ms, int64_t account, int64_t node, const char *kind,
                   int64_t amount, mt_error *err) {
    if (amount == 0) return 0;
    sqlite3_stmt *st = reg_db_prepare(
        r, err, "INSERT INTO ledger(t, account_id, node_id, kind, amount) VALUES(?, ?, ?, ?, ?)");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, t_ms);
    sqlite3_bind_int64(st, 2, account);
    sqlite3_bind_int64(st, 3, node);
    sqlite3_bind_text(st, 4, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, amount);
    return reg_db_step_done(r, st, err);
}

int64_t reg_ledger_sum(mt_registry *r, const char *where_col, int64_t id, const char *kind) {
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE %s = ? AND kind = ?", where_col);
    sqlite3_stmt *st = reg_db_prepare(r, NULL, sql);
    if (!st) return 0;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return v;
}

/* registry_nodes.c - node rows: loading them for the planner and the API,
 * saving assignments, and what state a node is in. */
#include "moontail/clock.h"
#include "moontail/schedule.h"
#include "registry_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NODE_COLUMNS                                                                               \
    "id, account_id, name, pubkey, addr, shard_addr, ram, disk, cores, simd, gpu, vram,"           \
    " capacity, speed, paused, schedule, joined, last_seen, uptime_ms, role, replica,"             \
    " layer_begin, layer_end, attention, expert_begin, expert_end, paired_with, ready_shard,"      \
    " served_token_layers, served_expert_rows, served_tokens, load_queue, load_sessions,"          \
    " tok_per_s, load_kv_bytes, load_ctx, load_max_sessions, load_kv_budget, load_kv_used,"        \
    " quarantined, quarantined_at, quarantine_reason, problem"

static void text(sqlite3_stmt *st, int col, char *out, size_t cap) {
    const unsigned char *s = sqlite3_column_text(st, col);
    snprintf(out, cap, "%s", s ? (const char *)s : "");
}

static void node_row(sqlite3_stmt *st, reg_node *n) {
    memset(n, 0, sizeof *n);
    int c = 0;
    n->id = sqlite3_column_int64(st, c++);
    n->account_id = sqlite3_column_int64(st, c++);
    text(st, c++, n->name, sizeof n->name);
    text(st, c++, n->pubkey, sizeof n->pubkey);
    text(st, c++, n->addr, sizeof n->addr);
    text(st, c++, n->shard_addr, sizeof n->shard_addr);
    n->ram = sqlite3_column_int64(st, c++);
    n->disk = sqlite3_column_int64(st, c++);
    n->cores = sqlite3_column_int(st, c++);
    text(st, c++, n->simd, sizeof n->simd);
    text(st, c++, n->gpu, sizeof n->gpu);
    n->vram = sqlite3_column_int64(st, c++);
    n->capacity = sqlite3_column_int64(st, c++);
    n->speed = sqlite3_column_double(st, c++);
    n->paused = sqlite3_column_int(st, c++) != 0;
    text(st, c++, n->schedule, sizeof n->schedule);
    n->joined = sqlite3_column_int64(st, c++);
    n->last_seen = sqlite3_column_int64(st, c++);
    n->uptime_ms = sqlite3_column_int64(st, c++);
    int role = sqlite3_column_int(st, c++); /* a number outside the enum: no role */
    n->a.role =
        role >= MT_PLACE_NONE && role <= MT_PLACE_SPARE ? (mt_place_role)role : MT_PLACE_NONE;
    n->a.replica = sqlite3_column_int(st, c++);
    n->a.layer_begin = sqlite3_column_int(st, c++);
    n->a.layer_end = sqlite3_column_int(st, c++);
    n->a.attention = sqlite3_column_int(st, c++) != 0;
    n->a.expert_begin = sqlite3_column_int(st, c++);
    n->a.expert_end = sqlite3_column_int(st, c++);
    n->a.paired_with = sqlite3_column_int64(st, c++);
    text(st, c++, n->ready_shard, sizeof n->ready_shard);
    n->served_token_layers = sqlite3_column_int64(st, c++);
    n->served_expert_rows = sqlite3_column_int64(st, c++);
    n->served_tokens = sqlite3_column_int64(st, c++);
    n->load_queue = sqlite3_column_int(st, c++);
    n->load_sessions = sqlite3_column_int(st, c++);
    n->tok_per_s = sqlite3_column_double(st, c++);
    n->load_kv_bytes = sqlite3_column_int64(st, c++);
    n->load_ctx = sqlite3_column_int(st, c++);
    n->load_max_sessions = sqlite3_column_int(st, c++);
    n->load_kv_budget = sqlite3_column_int64(st, c++);
    n->load_kv_used = sqlite3_column_int64(st, c++);
    n->quarantined = sqlite3_column_int(st, c++) != 0;
    n->quarantined_at = sqlite3_column_int64(st, c++);
    text(st, c++, n->quarantine_reason, sizeof n->quarantine_reason);
    text(st, c++, n->problem, sizeof n->problem);
}

int reg_nodes_load(mt_registry *r, reg_node **out, int32_t *n, mt_error *err) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = reg_db_prepare(r, err, "SELECT " NODE_COLUMNS " FROM nodes ORDER BY id");
    if (!st) return -1;
    int32_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            reg_node *p = realloc(*out, (size_t)cap * sizeof *p);
            if (!p) {
                sqlite3_finalize(st);
                free(*out);
                *out = NULL;
                *n = 0;
                return mt_error_set(err, "out of memory loading nodes");
            }
            *out = p;
        }
        node_row(st, &(*out)[(*n)++]);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        *n = 0;
        return mt_error_set(err, "database: %s", sqlite3_errmsg(r->db));
    }
    return 0;
}

int reg_node_get(mt_registry *r, int64_t id, reg_node *out) {
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT " NODE_COLUMNS " FROM nodes WHERE id = ?");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, id);
    int found = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        node_row(st, out);
        found = 0;
    }
    sqlite3_finalize(st);
    return found;
}

int reg_node_save_assign(mt_registry *r, int64_t id, const reg_assign *a, mt_error *err) {
    sqlite3_stmt *st =
        reg_db_prepare(r, err,
                       "UPDATE nodes SET role = ?, replica = ?, layer_begin = ?, layer_end = ?,"
                       " attention = ?, expert_begin = ?, expert_end = ?, paired_with = ?"
                       " WHERE id = ?");
    if (!st) return -1;
    sqlite3_bind_int(st, 1, a->role);
    sqlite3_bind_int(st, 2, a->replica);
    sqlite3_bind_int(st, 3, a->layer_begin);
    sqlite3_bind_int(st, 4, a->layer_end);
    sqlite3_bind_int(st, 5, a->attention);
    sqlite3_bind_int(st, 6, a->expert_begin);
    sqlite3_bind_int(st, 7, a->expert_end);
    sqlite3_bind_int64(st, 8, a->paired_with);
    sqlite3_bind_int64(st, 9, id);
    return reg_db_step_done(r, st, err);
}

bool reg_node_heard(const mt_registry *r, const reg_node *n, int64_t now_ms) {
    return n->last_seen > 0 && now_ms - n->last_seen <= r->cfg.dead_after_ms;
}

bool reg_node_alive(const mt_registry *r, const reg_node *n, int64_t now_ms) {
    if (reg_node_heard(r, n, now_ms)) return true;
    if (n->last_seen <= 0) return false;
    /* the time the registry was down is not silence: without this, a restart found every
     * node dead, unassigned them all and placed the shards anew as they checked in */
    if (n->last_seen >= r->grace_from && now_ms <= r->grace_until) return true;
    /* nor is the time it was too busy to answer heartbeats */
    int64_t grace = r->cfg.dead_after_ms * 12 > REG_OVERLOAD_GRACE_MIN_MS
                        ? r->cfg.dead_after_ms * 12
                        : REG_OVERLOAD_GRACE_MIN_MS;
    return n->last_seen >= atomic_load(&r->overload_from) &&
           now_ms <= atomic_load(&r->overload_until) && now_ms - n->last_seen <= grace;
}

void reg_check_stall(mt_registry *r) {
    /* the placement thread turns every 250 ms; when it has not for a second (the process
     * stalled, or the lock was held that long), heartbeats may have waited as long, so
     * their absence is not the nodes' doing */
    if (mt_mono_ms() - atomic_load(&r->turned_ms) > 1000)
        reg_note_overload(r, atomic_load(&r->turned_wall_ms));
}

void reg_note_overload(mt_registry *r, int64_t began_ms) {
    int64_t now = mt_wall_ms();
    pthread_mutex_lock(&r->grace_mu);
    int64_t until = atomic_load(&r->overload_until), next = now + r->cfg.dead_after_ms,
            from = began_ms - r->cfg.dead_after_ms;
    if (now > until) { /* a new episode: the nodes alive when it began are covered */
        atomic_store(&r->overload_from, from);
        atomic_fetch_add(&r->overloads, 1);
        atomic_fetch_add(&r->overload_ms, next - began_ms);
    } else {
        if (from < atomic_load(&r->overload_from)) atomic_store(&r->overload_from, from);
        if (next > until) atomic_fetch_add(&r->overload_ms, next - until);
    }
    if (next > until) atomic_store(&r->overload_until, next);
    pthread_mutex_unlock(&r->grace_mu);
}

/* Inside a pause window now (local time of the registry). */
static bool scheduled_pause(const reg_node *n, int64_t now_ms) {
    if (!n->schedule[0]) return false;
    mt_schedule s;
    if (mt_schedule_parse(n->schedule, &s, NULL)) return false;
    time_t t = (time_t)(now_ms / 1000);
    struct tm tm;
    mt_local_tm(t, &tm);
    return mt_schedule_active(&s, &tm);
}

bool reg_node_available(const mt_registry *r, const reg_node *n, int64_t now_ms) {
    return reg_node_alive(r, n, now_ms) && !n->paused && !n->quarantined &&
           !scheduled_pause(n, now_ms);
}

const char *reg_node_state(const mt_registry *r, const reg_node *n, int64_t now_ms) {
    if (n->quarantined) return "quarantined"; /* until an operator releases it, alive or not */
    if (!reg_node_alive(r, n, now_ms)) return n->last_seen ? "dead" : "joining";
    if (n->paused || scheduled_pause(n, now_ms)) return n->a.role ? "draining" : "paused";
    if (n->a.role == MT_PLACE_NONE) return "idle";
    if (n->a.role == MT_PLACE_SPARE) return "spare";
    char want[96];
    reg_shard_name(&n->a, want);
    if (strcmp(want, n->ready_shard) == 0) return "serving";
    /* it reports why it cannot serve (its fetch or its load failed): not merely loading */
    return n->problem[0] ? "failing" : "loading";
}

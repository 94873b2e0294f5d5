/* registry_accounts.c - accounts, their API tokens, and credits.
 *
 * Tokens are 32 random bytes in hex; the database keeps only their BLAKE2b
 * hash, so a copy of the database does not let anyone act as an account.
 *
 * Credits are counted in token-layers, from the ledger:
 *   earned = token-layers the account's nodes served as stages
 *          + expert rows they served / n_expert_used (the rows of one token
 *            in one layer);
 *   spent  = tokens the account used x n_layer (one token passes every layer).
 * An account has volunteered when one of its nodes serves a shard now or
 * ever served anything, or its balance is positive (credits can also be
 * granted: ledger kind "grant"). */
#include "registry_internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int reg_token_new(char out[65]) {
    uint8_t raw[32];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(out, 65, raw, sizeof raw);
    return 0;
}

void reg_token_hash(const char *token, char out[65]) {
    uint8_t h[32];
    crypto_generichash(h, sizeof h, (const uint8_t *)token, strlen(token), NULL, 0);
    sodium_bin2hex(out, 65, h, sizeof h);
}

int64_t reg_account_by_token(mt_registry *r, const char *token) {
    if (!token || !token[0]) return 0;
    char h[65];
    reg_token_hash(token, h);
    sqlite3_stmt *st = reg_db_prepare(r, NULL, "SELECT id FROM accounts WHERE token_hash = ?");
    if (!st) return 0;
    sqlite3_bind_text(st, 1, h, -1, SQLITE_STATIC);
    int64_t id = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return id;
}

int64_t reg_account_create(mt_registry *r, const char *name, char token[65], mt_error *err) {
    char h[65];
    reg_token_new(token);
    reg_token_hash(token, h);
    sqlite3_stmt *st =
        reg_db_prepare(r, err, "INSERT INTO accounts(name, token_hash, created) VALUES(?, ?, ?)");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, h, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, mt_wall_ms());
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc == SQLITE_CONSTRAINT)
        return mt_error_set(err, "an account named '%s' exists already; pick another name", name);
    if (rc != SQLITE_DONE) return mt_error_set(err, "database: %s", sqlite3_errmsg(r->db));
    return sqlite3_last_insert_rowid(r->db);
}

typedef struct credits {
    int64_t token_layers, expert_rows, grants, used_tokens;
    double earned, spent;
} credits;

static credits account_credits(mt_registry *r, int64_t account) {
    credits c;
    c.token_layers = reg_ledger_sum(r, "account_id", account, "served_token_layers");
    c.expert_rows = reg_ledger_sum(r, "account_id", account, "served_expert_rows");
    c.grants = reg_ledger_sum(r, "account_id", account, "grant");
    c.used_tokens = reg_ledger_sum(r, "account_id", account, "used_tokens");
    int32_t used = r->n_expert_used > 0 ? r->n_expert_used : 1;
    c.earned = (double)c.token_layers + (double)c.expert_rows / used + (double)c.grants;
    c.spent = (double)c.used_tokens * r->layout.n_layer;
    return c;
}

/* A node of the account that is serving its shard right now: alive, not
 * paused, and reporting ready the shard it was assigned (a shard name it
 * merely claims does not count). */
static bool serving_node(mt_registry *r, int64_t account) {
    reg_node *nodes;
    int32_t n;
    if (reg_nodes_load(r, &nodes, &n, NULL)) return false;
    int64_t now = mt_wall_ms();
    bool yes = false;
    for (int32_t i = 0; i < n && !yes; i++)
        yes = nodes[i].account_id == account &&
              strcmp(reg_node_state(r, &nodes[i], now), "serving") == 0;
    free(nodes);
    return yes;
}

bool reg_account_volunteered(mt_registry *r, int64_t account) {
    credits c = account_credits(r, account);
    return c.token_layers > 0 || c.expert_rows > 0 || c.earned - c.spent > 0 ||
           serving_node(r, account);
}

json_t *reg_account_credits(mt_registry *r, int64_t account) {
    credits c = account_credits(r, account);
    return json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:b}", "served_token_layers",
                     (json_int_t)c.token_layers, "served_expert_rows", (json_int_t)c.expert_rows,
                     "granted", (json_int_t)c.grants, "used_tokens", (json_int_t)c.used_tokens,
                     "earned", c.earned, "spent", c.spent, "balance", c.earned - c.spent,
                     "volunteered", reg_account_volunteered(r, account));
}

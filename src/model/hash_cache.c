/* hash_cache.c - content hashes of model files kept in SQLite across runs
 * (hash_cache.h).
 *
 * Tables:
 *   files   one row per file identity (device, inode) with the size and
 *           times its hashes are of, and its path as last seen
 *   hashes  (file, offset, nbytes, slice) -> 32-byte BLAKE2b-256
 * WAL mode and a busy timeout let a registry and `split` runs share one
 * cache; nothing in it is precious (losing it costs one read of a model),
 * so writes are not synced to disk one by one. */
#include "moontail/hash_cache.h"
#include "moontail/file.h"
#include "moontail/sysinfo.h"

#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_hash_cache {
    sqlite3 *db;
    char *path;
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS files("
    "  id INTEGER PRIMARY KEY, path TEXT NOT NULL, dev INTEGER NOT NULL, ino INTEGER NOT NULL,"
    "  size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,"
    "  UNIQUE(dev, ino));"
    "CREATE TABLE IF NOT EXISTS hashes("
    "  file INTEGER NOT NULL, offset INTEGER NOT NULL, nbytes INTEGER NOT NULL,"
    "  slice TEXT NOT NULL, hash BLOB NOT NULL,"
    "  PRIMARY KEY(file, offset, nbytes, slice)) WITHOUT ROWID;";

mt_hash_cache *mt_hash_cache_open(const char *path, mt_error *err) {
    mt_hash_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    char *msg = NULL;
    if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
            SQLITE_OK ||
        sqlite3_busy_timeout(c->db, 10000) != SQLITE_OK ||
        sqlite3_exec(c->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
        mt_error_set(err, "hash cache %s: %s; give another with --hash-cache PATH", path,
                     msg     ? msg
                     : c->db ? sqlite3_errmsg(c->db)
                             : "cannot open");
        sqlite3_free(msg);
        mt_hash_cache_close(c);
        return NULL;
    }
    return c;
}

void mt_hash_cache_close(mt_hash_cache *c) {
    if (!c) return;
    sqlite3_close(c->db);
    free(c->path);
    free(c);
}

const char *mt_hash_cache_path(const mt_hash_cache *c) {
    return c->path;
}

int mt_hash_cache_default_path(char *out, size_t cap, mt_error *err) {
    char dir[PATH_MAX];
    if (mt_sys_cache_dir(dir, sizeof dir) != 0)
        return mt_error_set(err, "no per-user cache directory (neither XDG_CACHE_HOME nor HOME is"
                                 " set); give --hash-cache PATH");
    if (mt_dir_make_all(dir, true) != 0)
        return mt_error_set(err, "%s: cannot make the cache directory: %s", dir, strerror(errno));
    if ((size_t)snprintf(out, cap, "%s/hashes.sqlite", dir) >= cap)
        return mt_error_set(err, "%s: path too long", dir);
    return 0;
}

static sqlite3_stmt *prepare(mt_hash_cache *c, const char *sql, mt_error *err) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK) {
        mt_error_set(err, "hash cache %s: %s", c->path, sqlite3_errmsg(c->db));
        return NULL;
    }
    return st;
}

/* Runs a statement that returns no rows; -1 naming the cache on failure. */
static int step_done(mt_hash_cache *c, sqlite3_stmt *st, mt_error *err) {
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return 0;
    return mt_error_set(err, "hash cache %s: %s", c->path, sqlite3_errmsg(c->db));
}

int64_t mt_hash_cache_file(mt_hash_cache *c, const char *path, const gguf_file_id *id,
                           mt_error *err) {
    char real[PATH_MAX];
    if (mt_path_real(path, real, sizeof real) != 0) snprintf(real, sizeof real, "%s", path);
    sqlite3_stmt *st =
        prepare(c, "SELECT id, size, mtime_ns, ctime_ns FROM files WHERE dev = ? AND ino = ?", err);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)id->dev);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)id->ino);
    int64_t row = 0;
    bool same = false;
    if (sqlite3_step(st) == SQLITE_ROW) {
        row = sqlite3_column_int64(st, 0);
        same = (uint64_t)sqlite3_column_int64(st, 1) == id->size &&
               sqlite3_column_int64(st, 2) == id->mtime_ns &&
               sqlite3_column_int64(st, 3) == id->ctime_ns;
    }
    sqlite3_finalize(st);
    if (row > 0 && same) return row;
    if (mt_hash_cache_begin(c, err)) return -1;
    if (row > 0) { /* written since: its hashes are of other bytes */
        st = prepare(c, "DELETE FROM hashes WHERE file = ?", err);
        if (!st) goto fail;
        sqlite3_bind_int64(st, 1, row);
        if (step_done(c, st, err)) goto fail;
        st = prepare(
            c, "UPDATE files SET path = ?, size = ?, mtime_ns = ?, ctime_ns = ? WHERE id = ?", err);
        if (!st) goto fail;
        sqlite3_bind_int64(st, 5, row);
    } else {
        /* another file at this path before (replaced): its rows are of no use now */
        st = prepare(c, "DELETE FROM hashes WHERE file IN (SELECT id FROM files WHERE path = ?)",
                     err);
        if (!st) goto fail;
        sqlite3_bind_text(st, 1, real, -1, SQLITE_TRANSIENT);
        if (step_done(c, st, err)) goto fail;
        st = prepare(c, "DELETE FROM files WHERE path = ?", err);
        if (!st) goto fail;
        sqlite3_bind_text(st, 1, real, -1, SQLITE_TRANSIENT);
        if (step_done(c, st, err)) goto fail;
        st = prepare(c,
                     "INSERT INTO files(path, size, mtime_ns, ctime_ns, dev, ino)"
                     " VALUES (?, ?, ?, ?, ?, ?)",
                     err);
        if (!st) goto fail;
        sqlite3_bind_int64(st, 5, (sqlite3_int64)id->dev);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)id->ino);
    }
    sqlite3_bind_text(st, 1, real, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)id->size);
    sqlite3_bind_int64(st, 3, id->mtime_ns);
    sqlite3_bind_int64(st, 4, id->ctime_ns);
    if (step_done(c, st, err)) goto fail;
    if (row <= 0) row = sqlite3_last_insert_rowid(c->db);
    if (mt_hash_cache_commit(c, err)) return -1;
    return row;
fail:
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

bool mt_hash_cache_get(mt_hash_cache *c, int64_t file, uint64_t offset, uint64_t nbytes,
                       const char *slice, uint8_t out[32]) {
    mt_error e = {{0}};
    sqlite3_stmt *st = prepare(
        c, "SELECT hash FROM hashes WHERE file = ? AND offset = ? AND nbytes = ? AND slice = ?",
        &e);
    if (!st) return false;
    sqlite3_bind_int64(st, 1, file);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)offset);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)nbytes);
    sqlite3_bind_text(st, 4, slice, -1, SQLITE_STATIC);
    bool found = false;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) == 32) {
        memcpy(out, sqlite3_column_blob(st, 0), 32);
        found = true;
    }
    sqlite3_finalize(st);
    return found;
}

int mt_hash_cache_put(mt_hash_cache *c, int64_t file, uint64_t offset, uint64_t nbytes,
                      const char *slice, const uint8_t hash[32], mt_error *err) {
    sqlite3_stmt *st = prepare(c,
                               "INSERT OR REPLACE INTO hashes(file, offset, nbytes, slice, hash)"
                               " VALUES (?, ?, ?, ?, ?)",
                               err);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, file);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)offset);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)nbytes);
    sqlite3_bind_text(st, 4, slice, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 5, hash, 32, SQLITE_STATIC);
    return step_done(c, st, err);
}

int mt_hash_cache_begin(mt_hash_cache *c, mt_error *err) {
    if (sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK) return 0;
    return mt_error_set(err, "hash cache %s: %s", c->path, sqlite3_errmsg(c->db));
}

int mt_hash_cache_commit(mt_hash_cache *c, mt_error *err) {
    if (sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) return 0;
    mt_error_set(err, "hash cache %s: %s", c->path, sqlite3_errmsg(c->db));
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

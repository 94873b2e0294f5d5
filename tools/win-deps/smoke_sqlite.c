/* win-deps smoke check: sqlite is threadsafe and runs create/insert/select in :memory:,
 * with a WITHOUT ROWID table as MoonTail's hash cache uses. */
#include <sqlite3.h>
#include <stdio.h>

int main(void) {
    sqlite3 *db;
    sqlite3_stmt *st;
    if (!sqlite3_threadsafe()) {
        puts("sqlite was built without thread safety");
        return 1;
    }
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK)
        return 1;
    char *msg = NULL;
    if (sqlite3_exec(db, "CREATE TABLE t(k TEXT, n INTEGER, PRIMARY KEY(k)) WITHOUT ROWID;", NULL,
                     NULL, &msg) != SQLITE_OK) {
        printf("create: %s\n", msg);
        return 1;
    }
    sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?, ?)", -1, &st, NULL);
    for (int i = 1; i <= 3; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        sqlite3_bind_text(st, 1, k, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)i * 10000000000LL);
        if (sqlite3_step(st) != SQLITE_DONE) {
            printf("insert: %s\n", sqlite3_errmsg(db));
            return 1;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db, "SELECT count(*), sum(n), group_concat(k, ',') FROM t", -1, &st, NULL);
    int good = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 3 &&
               sqlite3_column_int64(st, 1) == 60000000000LL;
    printf("%s: sqlite %s (threadsafe=%d): 3 rows, sum %lld, keys %s\n", good ? "ok" : "FAIL",
           sqlite3_libversion(), sqlite3_threadsafe(), (long long)sqlite3_column_int64(st, 1),
           (const char *)sqlite3_column_text(st, 2));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return good ? 0 : 1;
}

/* cli_shard_io.c - the hash cache, threads and progress bars of `split`
 * and `plan check` (cli_shard_io.h). */
#include "cli_shard_io.h"

#include <stdio.h>
#include <string.h>

/* A step that ends within this time shows no progress at all. */
#define QUIET_S 1.0

static void on_progress(void *ctx, const char *what, uint64_t done, uint64_t total) {
    cli_shard_io *c = ctx;
    if (strncmp(c->step, what, sizeof c->step - 1) != 0) {
        snprintf(c->step, sizeof c->step, "%s", what);
        mt_progress_init_quiet(&c->bar, stderr, what, QUIET_S);
    }
    mt_progress_bytes(&c->bar, done, total);
}

void cli_shard_io_open(cli_shard_io *c, const char *cmd, const char *cache_path, bool rehash,
                       int threads) {
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    c->io.threads = threads;
    c->io.rehash = rehash;
    c->io.progress = on_progress;
    c->io.progress_ctx = c;
    if (cache_path && strcmp(cache_path, "none") == 0) return;
    char path[4096];
    mt_error err = {{0}};
    if (!cache_path) {
        if (mt_hash_cache_default_path(path, sizeof path, &err)) {
            fprintf(stderr, "moontail %s: no hash cache (%s); hashing the whole model\n", cmd,
                    err.msg);
            return;
        }
        cache_path = path;
    }
    c->io.cache = mt_hash_cache_open(cache_path, &err);
    if (!c->io.cache) fprintf(stderr, "moontail %s: %s; hashing the whole model\n", cmd, err.msg);
}

void cli_shard_io_close(cli_shard_io *c) {
    const mt_shard_io *io = &c->io;
    if (io->cache_err.msg[0])
        fprintf(stderr, "moontail %s: the hash cache failed (%s); hashing went on without it\n",
                c->cmd, io->cache_err.msg);
    char speed[96] = "";
    if (io->bytes_hashed > 0 && io->hash_s > 0)
        snprintf(speed, sizeof speed, " in %.2f s (%.0f MB/s)", io->hash_s,
                 io->bytes_hashed / 1e6 / io->hash_s);
    if (io->cache && io->bytes_hashed + io->bytes_cached > 0)
        fprintf(stderr, "moontail %s: model hashes: %.1f MB read%s, %.1f MB from the cache %s\n",
                c->cmd, io->bytes_hashed / 1e6, speed, io->bytes_cached / 1e6,
                mt_hash_cache_path(io->cache));
    else if (io->bytes_hashed > 0)
        fprintf(stderr, "moontail %s: model hashes: %.1f MB read%s, no cache\n", c->cmd,
                io->bytes_hashed / 1e6, speed);
    mt_hash_cache_close(c->io.cache);
    c->io.cache = NULL;
}

/* cli_shard_io.h - how `split` and `plan check` read models: the hash
 * cache (--hash-cache, --rehash), the threads (-t) and progress on stderr. */
#ifndef MOONTAIL_CLI_SHARD_IO_H
#define MOONTAIL_CLI_SHARD_IO_H

#include "moontail/progress.h"
#include "moontail/shard.h"

typedef struct cli_shard_io {
    mt_shard_io io;
    mt_progress bar;
    char step[300]; /* the step the bar shows */
    const char *cmd;
} cli_shard_io;

/* Fills c for command cmd ("split"): the cache at cache_path, or the
 * per-user one when NULL ("none": no cache); a cache that cannot be opened
 * is reported on stderr and the command goes on without it. */
void cli_shard_io_open(cli_shard_io *c, const char *cmd, const char *cache_path, bool rehash,
                       int threads);
/* Says on stderr what the hashing read and what came from the cache, and
 * any cache failure; closes the cache. */
void cli_shard_io_close(cli_shard_io *c);

#endif

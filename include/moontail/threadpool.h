/* threadpool.h - a fixed set of worker threads running parallel-for loops.
 *
 * `mt_pool_run` splits [0, n) into contiguous ranges, one per thread, and
 * returns when all are done. Work items must not depend on which thread runs
 * them: that is how results stay bit-identical whatever the thread count. */
#ifndef MOONTAIL_THREADPOOL_H
#define MOONTAIL_THREADPOOL_H

#include <stdint.h>

typedef struct mt_pool mt_pool;

typedef void (*mt_pool_fn)(void *ctx, int64_t begin, int64_t end);

/* n_threads <= 0 picks the number of online CPUs. Returns NULL on failure. */
mt_pool *mt_pool_create(int n_threads);
void mt_pool_free(mt_pool *pool);
int mt_pool_size(const mt_pool *pool);

/* Runs fn over [0, n) split into ranges. A NULL pool runs fn(ctx, 0, n) inline. */
void mt_pool_run(mt_pool *pool, int64_t n, mt_pool_fn fn, void *ctx);

#endif

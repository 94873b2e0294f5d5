/* membw.h - the machine's memory bandwidth, measured the way STREAM does,
 * so `moontail bench` can put a decode rate in bytes per second next to
 * what the memory can deliver in the same run, with the same threads. */
#ifndef MOONTAIL_MEMBW_H
#define MOONTAIL_MEMBW_H

#include "moontail/threadpool.h"

#include <stddef.h>

typedef struct mt_membw {
    double triad_gbs; /* a[i] = b[i] + s * c[i]: 3 x 8 bytes per i (STREAM's count) */
    double read_gbs;  /* sum of one array: 8 bytes read per i */
    size_t array_bytes;
} mt_membw;

/* Runs STREAM's triad (and a read-only sum) over three arrays of
 * array_bytes each, split over the pool's threads the way matmuls are
 * (contiguous ranges; every thread touches its own pages first), and keeps
 * the best of `reps` passes, as STREAM does. Arrays should be several times
 * the last-level cache. Returns 0, or -1 if the arrays cannot be allocated. */
int mt_membw_measure(mt_pool *pool, size_t array_bytes, int reps, mt_membw *out);

#endif

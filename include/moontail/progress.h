/* progress.h - progress of long transfers (shard downloads) as people and
 * logs want it: on a terminal one bar redrawn in place
 *   "fetching L0-2A  [##########..........]  48%  12.3/25.6 MB  5.1 MB/s  3 s left"
 * elsewhere a plain line at most every 2 seconds and one at the end. */
#ifndef MOONTAIL_PROGRESS_H
#define MOONTAIL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct mt_progress {
    FILE *out;
    bool tty;      /* redraw in place */
    double last_s; /* when the last line was written */
    bool finished;
    char label[96];
} mt_progress;

/* Starts reporting on out (a terminal or not) under label. */
void mt_progress_init(mt_progress *p, FILE *out, const char *label);
/* Reports done of total bytes at rate bytes/s (eta_s < 0: unknown). */
void mt_progress_update(mt_progress *p, uint64_t done, uint64_t total, double rate, double eta_s);

/* Reads a file once, in order, so that the pages a model or shard maps are
 * in memory before its first request (the first token would otherwise wait
 * for the disk), reporting "label" progress on out (NULL: silently). Returns
 * 0, or -1 when the file cannot be read (nothing else depends on it). */
int mt_progress_warm(const char *path, const char *label, FILE *out);

#endif

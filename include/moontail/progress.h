/* progress.h - progress of long steps (shard downloads, hashing and cutting
 * models, loading them) as people and logs want it: on a terminal one bar
 * redrawn in place
 *   "fetching L0-2A  [##########..........]  48%  12.3/25.6 MB  5.1 MB/s  3 s left"
 * elsewhere a plain line at most every 2 seconds and one at the end: for the
 * parts that log (node, registry, requester; mt_progress_init_log) a line of
 * the process log, so that it follows --log-file, --log-format and
 * --log-level.
 * The environment variable MOONTAIL_PROGRESS=1 shows every step, even one
 * that ends quickly or whose command shows progress on terminals only (for
 * tests, and for logs that should show them); MOONTAIL_PROGRESS=0 shows
 * none. */
#ifndef MOONTAIL_PROGRESS_H
#define MOONTAIL_PROGRESS_H

#include "moontail/log.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct mt_progress {
    FILE *out;                /* NULL: nothing is shown */
    const mt_log_source *log; /* not NULL: the lines that are not redrawn are its log lines */
    bool tty;                 /* redraw in place */
    double last_s;            /* when the last line was written */
    double start_s;           /* when reporting started */
    double quiet_s;           /* nothing is shown before the step has run this long */
    bool shown;               /* a line was written */
    bool finished;
    char label[160];
} mt_progress;

/* Starts reporting on out (a terminal or not) under label. */
void mt_progress_init(mt_progress *p, FILE *out, const char *label);
/* The same for a step that is often quick: nothing is shown until it has
 * run quiet_s seconds, and a step that ended sooner shows nothing at all. */
void mt_progress_init_quiet(mt_progress *p, FILE *out, const char *label, double quiet_s);
/* The same for a part that logs as log (which outlives p): on a terminal
 * (stderr) the bar, its label after the source's component and name; else
 * each line is an info line of the log as log ("node: pc3: fetching L0-2A:
 * 12.3 of 25.6 MB (48%), ..."). A quiet source shows nothing. */
void mt_progress_init_log(mt_progress *p, const mt_log_source *log, const char *label,
                          double quiet_s);
/* Reports done of total bytes at the mean rate since the init, with the
 * time left that rate gives. */
void mt_progress_bytes(mt_progress *p, uint64_t done, uint64_t total);
/* Reports done of total bytes at rate bytes/s (eta_s < 0: unknown). */
void mt_progress_update(mt_progress *p, uint64_t done, uint64_t total, double rate, double eta_s);
/* Reports done of total things that are not bytes ("layers"). */
void mt_progress_count(mt_progress *p, uint64_t done, uint64_t total, const char *unit);

/* MOONTAIL_PROGRESS: 1 (show every step), -1 (show none) or 0 (unset: as above). */
int mt_progress_env(void);

/* Reads a file once, in order, so that the pages a model or shard maps are
 * in memory before its first request (the first token would otherwise wait
 * for the disk), reporting on p (set up by an mt_progress_init*). Returns 0,
 * or -1 when the file cannot be read (nothing else depends on it). */
int mt_progress_warm(const char *path, mt_progress *p);

/* Before a model or shard is loaded: a model (all the files of a split one)
 * of more than 256 MB that fits in half the available memory is read in
 * with mt_progress_warm, each file labelled "loading <file name>", so the
 * wait shows as loading and not as a slow first token. Smaller models load
 * fast enough; larger ones would only push themselves out of the page cache
 * again. out NULL: nothing is read. */
void mt_progress_preload(const char *path, FILE *out);

#endif

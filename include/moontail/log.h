/* log.h - the log of the long-running parts (node, registry, relay, tunnel,
 * serve, requester): one line per event, to stderr or a file, as text
 *   2025-06-01T12:00:00.123Z info registry: node 3 'pc3' joined from ...
 * or as JSON lines
 *   {"ts":"2025-06-01T12:00:00.123Z","level":"info","component":"registry","msg":"..."}
 * The time is UTC with milliseconds. Each line leaves in one write(2), so
 * lines of threads, and of processes appending to one file, never mix; any
 * thread may log. The settings are the process's (the command line's
 * --log-level, --log-file, --log-format); until set: info, text, stderr. */
#ifndef MOONTAIL_LOG_H
#define MOONTAIL_LOG_H

#include "moontail/error.h"

#include <stdarg.h>
#include <stdbool.h>

/* Most to least severe; a line is written when its level is at most the set one. */
typedef enum mt_log_level { MT_LOG_ERROR, MT_LOG_WARN, MT_LOG_INFO, MT_LOG_DEBUG } mt_log_level;
typedef enum mt_log_format { MT_LOG_TEXT, MT_LOG_JSON } mt_log_format;

/* "error", "warn", "info", "debug" -> *out; -1 with a message naming the choices. */
int mt_log_parse_level(const char *name, mt_log_level *out, mt_error *err);
/* "text", "json" -> *out; -1 with a message naming the choices. */
int mt_log_parse_format(const char *name, mt_log_format *out, mt_error *err);
const char *mt_log_level_name(mt_log_level level);

void mt_log_set_level(mt_log_level level);
void mt_log_set_format(mt_log_format format);
/* Lines go to path from now on, appended (the file is created with mode
 * 0600 if missing); NULL: to stderr. -1 with a message naming the file (the
 * lines keep going where they went). */
int mt_log_open_file(const char *path, mt_error *err);
/* Opens the file of mt_log_open_file again (after logrotate moved it; on
 * SIGHUP); nothing to do when the lines go to stderr. -1 with a message (the
 * lines keep going to the old file). */
int mt_log_reopen(mt_error *err);
/* Whether the lines go to a file (mt_log_open_file), not to stderr. */
bool mt_log_to_file(void);
/* Whether a line of this level would be written. */
bool mt_log_enabled(mt_log_level level);

/* Logs one line: component says which part speaks ("node", "registry"), the
 * message is printf-style. Control characters of a text line become spaces
 * (a message carrying a peer's words cannot forge lines); a message longer
 * than about 3 KB is cut, marked with "...". */
void mt_log(mt_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void mt_vlog(mt_log_level level, const char *component, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* One instance of a part that logs: its component, the name its messages
 * start with ("pc3" gives "node: pc3: joined ..."; "" none), and whether it
 * is silent (a command's --quiet, or the in-process parts of a test). */
typedef struct mt_log_source {
    const char *component; /* a string that outlives the source */
    char name[96];
    bool quiet;
} mt_log_source;

/* name may be NULL (no prefix); a longer one is cut. */
void mt_log_source_init(mt_log_source *s, const char *component, const char *name, bool quiet);
/* mt_log as s: nothing when s is quiet. */
void mt_log_as(const mt_log_source *s, mt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

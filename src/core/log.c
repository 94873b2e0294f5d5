/* log.c - the process's log (log.h): formats a line (text or a JSON object)
 * in memory and hands it to the kernel in one write(2). A file is opened
 * with O_APPEND, so every write lands whole at its end, whichever thread or
 * process makes it; a mutex keeps the descriptor from being swapped
 * (mt_log_reopen) under a write. */
#include "moontail/log.h"
#include "moontail/json_line.h"
#include "moontail/clock.h"
#include "moontail/file.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MSG_MAX = 3072, COMPONENT_MAX = 32 };

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static atomic_int log_level = MT_LOG_INFO;
static atomic_int log_format = MT_LOG_TEXT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = STDERR_FILENO; /* under log_lock */
static char *log_path;             /* under log_lock; NULL: stderr */

/* ---- settings --------------------------------------------------------------------------- */

int mt_log_parse_level(const char *name, mt_log_level *out, mt_error *err) {
    for (int i = 0; i <= MT_LOG_DEBUG; i++)
        if (name && strcmp(name, level_names[i]) == 0) {
            *out = (mt_log_level)i;
            return 0;
        }
    return mt_error_set(err, "log level '%s' is not one of error, warn, info, debug",
                        name ? name : "");
}

int mt_log_parse_format(const char *name, mt_log_format *out, mt_error *err) {
    if (name && strcmp(name, "text") == 0) {
        *out = MT_LOG_TEXT;
        return 0;
    }
    if (name && strcmp(name, "json") == 0) {
        *out = MT_LOG_JSON;
        return 0;
    }
    return mt_error_set(err, "log format '%s' is not one of text, json", name ? name : "");
}

const char *mt_log_level_name(mt_log_level level) {
    return level >= MT_LOG_ERROR && level <= MT_LOG_DEBUG ? level_names[level] : "info";
}

void mt_log_set_level(mt_log_level level) {
    atomic_store(&log_level, (int)level);
}

void mt_log_set_format(mt_log_format format) {
    atomic_store(&log_format, (int)format);
}

bool mt_log_enabled(mt_log_level level) {
    return (int)level <= atomic_load(&log_level);
}

static int open_append(const char *path, mt_error *err) {
    int fd = mt_file_open(path, MT_O_WRITE | MT_O_APPEND | MT_O_CREATE, 0600);
    if (fd < 0)
        mt_error_set(err, "cannot open the log file %s to append to it: %s", path, strerror(errno));
    return fd;
}

/* Makes fd (owned; STDERR_FILENO: stderr) and path (owned, may be NULL) the
 * destination, closing the file written so far. */
static void set_destination(int fd, char *path) {
    pthread_mutex_lock(&log_lock);
    int old_fd = log_fd;
    char *old_path = log_path;
    log_fd = fd;
    log_path = path;
    pthread_mutex_unlock(&log_lock);
    if (old_fd != STDERR_FILENO) mt_file_close(old_fd);
    free(old_path);
}

int mt_log_open_file(const char *path, mt_error *err) {
    if (!path) {
        set_destination(STDERR_FILENO, NULL);
        return 0;
    }
    char *copy = strdup(path);
    if (!copy) return mt_error_set(err, "log file %s: out of memory", path);
    int fd = open_append(path, err);
    if (fd < 0) {
        free(copy);
        return -1;
    }
    set_destination(fd, copy);
    return 0;
}

int mt_log_reopen(mt_error *err) {
    pthread_mutex_lock(&log_lock);
    char *path = log_path ? strdup(log_path) : NULL;
    bool to_file = log_path != NULL;
    pthread_mutex_unlock(&log_lock);
    if (!to_file) return 0;
    if (!path) return mt_error_set(err, "reopening the log file: out of memory");
    int fd = open_append(path, err);
    if (fd < 0) {
        free(path);
        return -1;
    }
    set_destination(fd, path);
    return 0;
}

bool mt_log_to_file(void) {
    pthread_mutex_lock(&log_lock);
    bool to_file = log_path != NULL;
    pthread_mutex_unlock(&log_lock);
    return to_file;
}

/* ---- lines ------------------------------------------------------------------------------ */

/* "2025-06-01T12:00:00.123Z" (UTC) into out[32]. */
static void format_time(char out[32]) {
    int64_t ms = mt_wall_ms();
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    mt_utc_tm(s, &tm);
    size_t k = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, 32 - k, ".%03dZ", (int)(ms % 1000));
}

/* The whole line in one write(2) (more only if the kernel takes part of it). */
static void write_line(const char *s, size_t n) {
    pthread_mutex_lock(&log_lock);
    while (n > 0) {
        ssize_t w = mt_file_write(log_fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break; /* nowhere to report it */
        s += w;
        n -= (size_t)w;
    }
    pthread_mutex_unlock(&log_lock);
}

/* {"ts":...,"level":...,"component":...,"msg":...} and a newline, or NULL
 * when out of memory. A message that is not UTF-8 has its bytes beyond
 * ASCII replaced by '?'. */
static char *json_line(const char *ts, const char *level, const char *component, char *msg) {
    json_t *m = json_string(msg);
    if (!m) {
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
        m = json_string(msg);
    }
    json_t *c = json_string(component);
    json_t *o = json_object();
    char *line = NULL;
    if (m && c && o && json_object_set_new(o, "ts", json_string(ts)) == 0 &&
        json_object_set_new(o, "level", json_string(level)) == 0 &&
        json_object_set(o, "component", c) == 0 && json_object_set(o, "msg", m) == 0)
        line = mt_json_line(o, JSON_PRESERVE_ORDER, NULL);
    json_decref(m);
    json_decref(c);
    json_decref(o);
    return line;
}

/* Formats into msg[cap] (cap >= 4); a message too long is cut at a
 * character boundary and ends with "...". */
static void format_message(char *msg, size_t cap, const char *fmt, va_list ap) {
    int n = vsnprintf(msg, cap, fmt, ap);
    if (n >= 0 && (size_t)n >= cap) {
        size_t cut = cap - 4;
        while (cut > 0 && ((unsigned char)msg[cut] & 0xC0) == 0x80) cut--;
        memcpy(msg + cut, "...", 4);
    }
}

/* Writes one line of msg (modified: control characters, bad UTF-8). */
static void emit(mt_log_level level, const char *component, char *msg) {
    char comp[COMPONENT_MAX + 1];
    snprintf(comp, sizeof comp, "%s", component ? component : "moontail");
    char ts[32];
    format_time(ts);
    const char *lname = mt_log_level_name(level);
    if (atomic_load(&log_format) == MT_LOG_JSON) {
        char *line = json_line(ts, lname, comp, msg);
        if (line) write_line(line, strlen(line));
        free(line);
        return;
    }
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t') *p = ' ';
    char line[MSG_MAX + COMPONENT_MAX + 64];
    int len = snprintf(line, sizeof line, "%s %s %s: %s\n", ts, lname, comp, msg);
    if (len > 0) write_line(line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
}

void mt_vlog(mt_log_level level, const char *component, const char *fmt, va_list ap) {
    if (!mt_log_enabled(level)) return;
    int saved_errno = errno; /* callers may log between a failure and reading errno */
    char msg[MSG_MAX];
    format_message(msg, sizeof msg, fmt, ap);
    emit(level, component, msg);
    errno = saved_errno;
}

void mt_log(mt_log_level level, const char *component, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mt_vlog(level, component, fmt, ap);
    va_end(ap);
}

/* ---- sources ---------------------------------------------------------------------------- */

void mt_log_source_init(mt_log_source *s, const char *component, const char *name, bool quiet) {
    s->component = component;
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    s->quiet = quiet;
}

void mt_log_as(const mt_log_source *s, mt_log_level level, const char *fmt, ...) {
    if (s->quiet || !mt_log_enabled(level)) return;
    int saved_errno = errno;
    char msg[MSG_MAX];
    size_t k = s->name[0] ? (size_t)snprintf(msg, sizeof msg, "%s: ", s->name) : 0;
    va_list ap;
    va_start(ap, fmt);
    format_message(msg + k, sizeof msg - k, fmt, ap); /* the name takes under 100 bytes */
    va_end(ap);
    emit(level, s->component, msg);
    errno = saved_errno;
}

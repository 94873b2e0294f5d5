/* test_log.c - the process log (log.h): level and format names, the level
 * filter, the text line's shape and its UTC time (against time(2)), JSON
 * lines that jansson parses back into exactly ts/level/component/msg with
 * the message intact (quotes, escapes, control characters, UTF-8; bad
 * UTF-8 replaced), control characters blanked in text lines, long messages
 * cut and marked, sources (name prefix, quiet), errno kept; lines from 8
 * threads and from two processes (each with its own opening of one file,
 * each with 4 threads) never mixed inside a line and none lost; the file
 * created 0600 and appended to (reopened, and reopened after a rename as
 * logrotate does); a file that cannot be opened is named and the log keeps
 * its destination. */
#include "check.h"
#include "moontail/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static bool has(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

/* The whole file (heap, NUL-terminated) or NULL. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

/* Splits text into lines in place (each '\n' ends one); returns how many. A
 * last line without its newline counts as a line too (a broken write). */
static int split_lines(char *text, char **lines, int cap) {
    int n = 0;
    for (char *p = text; *p && n < cap;) {
        char *nl = strchr(p, '\n');
        lines[n++] = p;
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    return n;
}

/* A text line "YYYY-MM-DDTHH:MM:SS.mmmZ LEVEL COMPONENT: MSG": its parts
 * (pointers into line) and the time in seconds since the epoch. */
typedef struct text_line {
    char level[16], component[40];
    const char *msg;
    time_t when;
    int ms;
} text_line;

static bool parse_text(const char *line, text_line *out) {
    int Y, M, D, h, m, s, ms, used = 0;
    if (sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ %15s %39[^:]: %n", &Y, &M, &D, &h, &m, &s, &ms,
               out->level, out->component, &used) != 9 ||
        used == 0)
        return false;
    /* the fixed-width stamp itself, character by character */
    if (strlen(line) < 25 || line[4] != '-' || line[7] != '-' || line[10] != 'T' ||
        line[13] != ':' || line[16] != ':' || line[19] != '.' || line[23] != 'Z' || line[24] != ' ')
        return false;
    struct tm tm = {
        .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m, .tm_sec = s};
    out->when = timegm(&tm);
    out->ms = ms;
    out->msg = line + used;
    return true;
}

/* ---- names ---------------------------------------------------------------------------------- */

static void test_names(void) {
    const char *names[] = {"error", "warn", "info", "debug"};
    const mt_log_level want[] = {MT_LOG_ERROR, MT_LOG_WARN, MT_LOG_INFO, MT_LOG_DEBUG};
    for (int i = 0; i < 4; i++) {
        mt_log_level l = MT_LOG_INFO;
        mt_error err = {{0}};
        CHECK(mt_log_parse_level(names[i], &l, &err) == 0 && l == want[i], "level %s", names[i]);
        CHECK(strcmp(mt_log_level_name(want[i]), names[i]) == 0, "name of level %d", i);
    }
    const char *bad[] = {"", "INFO", "warning", "verbose", "info "};
    for (int i = 0; i < 5; i++) {
        mt_log_level l;
        mt_error err = {{0}};
        CHECK(mt_log_parse_level(bad[i], &l, &err) < 0 && has(err.msg, bad[i]) &&
                  has(err.msg, "error, warn, info, debug"),
              "level '%s' refused: %s", bad[i], err.msg);
    }
    mt_log_format f;
    mt_error err = {{0}};
    CHECK(mt_log_parse_format("text", &f, &err) == 0 && f == MT_LOG_TEXT, "format text");
    CHECK(mt_log_parse_format("json", &f, &err) == 0 && f == MT_LOG_JSON, "format json");
    CHECK(mt_log_parse_format("xml", &f, &err) < 0 && has(err.msg, "'xml'") &&
              has(err.msg, "text, json"),
          "format xml refused: %s", err.msg);
}

/* ---- text lines and the level filter -------------------------------------------------------- */

static void test_text_and_levels(void) {
    const char *path = check_tmp(".log");
    unlink(path);
    mt_error err = {{0}};
    CHECK(mt_log_open_file(path, &err) == 0, "open %s: %s", path, err.msg);
    mt_log_set_format(MT_LOG_TEXT);
    mt_log_set_level(MT_LOG_WARN);
    CHECK(mt_log_enabled(MT_LOG_ERROR) && mt_log_enabled(MT_LOG_WARN) &&
              !mt_log_enabled(MT_LOG_INFO) && !mt_log_enabled(MT_LOG_DEBUG),
          "warn enables error and warn only");
    time_t before = time(NULL);
    mt_log(MT_LOG_ERROR, "registry", "an error %d", 1);
    mt_log(MT_LOG_WARN, "node", "a warning %s", "two");
    mt_log(MT_LOG_INFO, "relay", "info that must not show");
    mt_log(MT_LOG_DEBUG, "tunnel", "debug that must not show");
    mt_log_set_level(MT_LOG_DEBUG);
    mt_log(MT_LOG_INFO, "serve", "info %s", "shown");
    mt_log(MT_LOG_DEBUG, "tunnel", "debug shown");
    mt_log_set_level(MT_LOG_ERROR);
    mt_log(MT_LOG_WARN, "node", "warning hidden at error");
    mt_log(MT_LOG_ERROR, "node",
           "line\nbreak\rand\x01"
           "control\ttab");
    mt_log_set_level(MT_LOG_INFO);
    /* sources: a name prefix, and nothing at all when quiet */
    mt_log_source src, silent;
    mt_log_source_init(&src, "node", "pc3", false);
    mt_log_source_init(&silent, "node", "pc4", true);
    mt_log_as(&src, MT_LOG_INFO, "joined %s as node %d", "http://r", 7);
    mt_log_as(&silent, MT_LOG_ERROR, "a quiet source says nothing");
    mt_log_source anon;
    mt_log_source_init(&anon, "relay", NULL, false);
    mt_log_as(&anon, MT_LOG_WARN, "no prefix");
    mt_log_as(&src, MT_LOG_DEBUG, "below the level");
    /* errno survives logging */
    errno = ENOSPC;
    mt_log(MT_LOG_INFO, "node", "errno kept");
    CHECK(errno == ENOSPC, "errno changed by mt_log: %d", errno);
    errno = EACCES;
    mt_log_as(&src, MT_LOG_INFO, "errno kept");
    CHECK(errno == EACCES, "errno changed by mt_log_as: %d", errno);
    time_t after = time(NULL);

    char *text = slurp(path);
    CHECK(text != NULL, "read %s", path);
    if (!text) return;
    char *lines[32];
    int n = split_lines(text, lines, 32);
    const struct {
        const char *level, *component, *msg;
    } want[] = {
        {"error", "registry", "an error 1"},
        {"warn", "node", "a warning two"},
        {"info", "serve", "info shown"},
        {"debug", "tunnel", "debug shown"},
        {"error", "node", "line break and control\ttab"},
        {"info", "node", "pc3: joined http://r as node 7"},
        {"warn", "relay", "no prefix"},
        {"info", "node", "errno kept"},
        {"info", "node", "pc3: errno kept"},
    };
    int nw = (int)(sizeof want / sizeof want[0]);
    CHECK(n == nw, "%d lines, wanted %d:\n%s", n, nw, text);
    for (int i = 0; i < n && i < nw; i++) {
        text_line t;
        bool ok = parse_text(lines[i], &t);
        CHECK(ok, "line %d is not 'TIME LEVEL COMPONENT: MSG': '%s'", i, lines[i]);
        if (!ok) continue;
        CHECK(strcmp(t.level, want[i].level) == 0 && strcmp(t.component, want[i].component) == 0 &&
                  strcmp(t.msg, want[i].msg) == 0,
              "line %d: '%s' (wanted %s %s: %s)", i, lines[i], want[i].level, want[i].component,
              want[i].msg);
        CHECK(t.when >= before && t.when <= after && t.ms >= 0 && t.ms <= 999,
              "line %d: time %lld.%03d outside [%lld, %lld] (UTC from time(2))", i,
              (long long)t.when, t.ms, (long long)before, (long long)after);
    }
    free(text);
    mt_log_open_file(NULL, &err);
    unlink(path);
}

/* ---- JSON lines ----------------------------------------------------------------------------- */

static void test_json(void) {
    const char *path = check_tmp(".jsonl");
    unlink(path);
    mt_error err = {{0}};
    CHECK(mt_log_open_file(path, &err) == 0, "open %s: %s", path, err.msg);
    mt_log_set_format(MT_LOG_JSON);
    mt_log_set_level(MT_LOG_INFO);
    const char *msgs[] = {
        "plain",
        "quotes \" and \\ backslash",
        "newline\nand tab\t and \x01 control",
        "UTF-8: caf\xc3\xa9 \xe2\x9c\x93",
        "</script> {\"json\": [1,2]}",
    };
    int nm = (int)(sizeof msgs / sizeof msgs[0]);
    time_t before = time(NULL);
    for (int i = 0; i < nm; i++) mt_log(MT_LOG_WARN, "registry", "%s", msgs[i]);
    mt_log(MT_LOG_INFO, "node", "bad UTF-8 \xff\xfe here \xc3\xa9");
    mt_log(MT_LOG_DEBUG, "node", "filtered in JSON too");
    mt_log_source src;
    mt_log_source_init(&src, "relay", "node pc1", false);
    mt_log_as(&src, MT_LOG_ERROR, "connected to %s", "10.0.0.1:8471");
    time_t after = time(NULL);
    mt_log_set_format(MT_LOG_TEXT);

    char *text = slurp(path);
    CHECK(text != NULL, "read %s", path);
    if (!text) return;
    char *lines[16];
    int n = split_lines(text, lines, 16);
    CHECK(n == nm + 2, "%d JSON lines, wanted %d:\n%s", n, nm + 2, text);
    for (int i = 0; i < n; i++) {
        json_error_t je;
        json_t *o = json_loads(lines[i], 0, &je);
        CHECK(o && json_is_object(o), "line %d does not parse: %s: '%s'", i, je.text, lines[i]);
        if (!o) continue;
        CHECK(json_object_size(o) == 4, "line %d has %zu fields, wanted ts, level, component, msg",
              i, json_object_size(o));
        const char *ts = json_string_value(json_object_get(o, "ts"));
        const char *level = json_string_value(json_object_get(o, "level"));
        const char *comp = json_string_value(json_object_get(o, "component"));
        const char *msg = json_string_value(json_object_get(o, "msg"));
        CHECK(ts && level && comp && msg, "line %d: a field is missing or not a string: '%s'", i,
              lines[i]);
        if (!ts || !level || !comp || !msg) {
            json_decref(o);
            continue;
        }
        char probe[128];
        snprintf(probe, sizeof probe, "%s %s %s: x", ts, level, comp);
        text_line t;
        CHECK(parse_text(probe, &t) && t.when >= before && t.when <= after,
              "line %d: ts '%s' is not a UTC time with milliseconds between %lld and %lld", i, ts,
              (long long)before, (long long)after);
        const char *want_level = i < nm ? "warn" : i == nm ? "info" : "error";
        const char *want_comp = i < nm ? "registry" : i == nm ? "node" : "relay";
        const char *want_msg = i < nm    ? msgs[i]
                               : i == nm ? "bad UTF-8 ?? here ??"
                                         : "node pc1: connected to 10.0.0.1:8471";
        CHECK(strcmp(level, want_level) == 0 && strcmp(comp, want_comp) == 0 &&
                  strcmp(msg, want_msg) == 0,
              "line %d: %s %s '%s' (wanted %s %s '%s')", i, level, comp, msg, want_level, want_comp,
              want_msg);
        json_decref(o);
    }
    free(text);
    mt_log_open_file(NULL, &err);
    unlink(path);
}

/* ---- long messages -------------------------------------------------------------------------- */

/* Whether s is "é" repeated (at least min times) and then "...". */
static bool cut_e_acute(const char *s, size_t min) {
    size_t n = s ? strlen(s) : 0, k = 0;
    if (n < 3 || strcmp(s + n - 3, "...") != 0) return false;
    for (; k + 1 < n - 3; k += 2)
        if ((unsigned char)s[k] != 0xc3 || (unsigned char)s[k + 1] != 0xa9) return false;
    return k == n - 3 && k / 2 >= min;
}

static void test_long(void) {
    const char *path = check_tmp(".log");
    unlink(path);
    mt_error err = {{0}};
    CHECK(mt_log_open_file(path, &err) == 0, "open %s: %s", path, err.msg);
    /* 5000 two-byte characters: any cut not at a character boundary shows */
    size_t chars = 5000;
    char *m = malloc(2 * chars + 1);
    for (size_t i = 0; i < chars; i++) m[2 * i] = '\xc3', m[2 * i + 1] = '\xa9';
    m[2 * chars] = 0;
    mt_log(MT_LOG_INFO, "node", "%s", m);
    mt_log_set_format(MT_LOG_JSON);
    mt_log(MT_LOG_INFO, "node", "%s", m);
    mt_log_set_format(MT_LOG_TEXT);
    free(m);
    char *text = slurp(path);
    char *lines[4];
    int n = text ? split_lines(text, lines, 4) : 0;
    CHECK(n == 2, "a long message makes one line per format, got %d", n);
    if (n == 2) {
        text_line t;
        CHECK(parse_text(lines[0], &t) && strlen(t.msg) < 2 * chars && cut_e_acute(t.msg, 1000),
              "the text line is cut at a character boundary and marked: %zu bytes",
              strlen(lines[0]));
        json_t *o = json_loads(lines[1], 0, NULL);
        const char *msg = json_string_value(json_object_get(o, "msg"));
        CHECK(msg && strlen(msg) < 2 * chars && cut_e_acute(msg, 1000),
              "the JSON line is valid UTF-8, cut at a character boundary and marked");
        json_decref(o);
    }
    free(text);
    mt_log_open_file(NULL, &err);
    unlink(path);
}

/* ---- concurrent writers --------------------------------------------------------------------- */

enum { THREADS = 8, PROC_THREADS = 4, LINES = 1500, PAD = 700 };

typedef struct writer {
    int proc, id;
    pthread_barrier_t *go;
} writer;

/* Each line: "P<proc> T<id> <seq> " and PAD copies of one letter for (proc, id). */
static char pad_letter(int proc, int id) {
    return (char)('a' + (proc * THREADS + id) % 26);
}

static void *writer_main(void *arg) {
    writer *w = arg;
    char pad[PAD + 1];
    memset(pad, pad_letter(w->proc, w->id), PAD);
    pad[PAD] = 0;
    if (w->go) pthread_barrier_wait(w->go);
    for (int i = 0; i < LINES; i++)
        mt_log(MT_LOG_INFO, "node", "P%d T%d %d %s", w->proc, w->id, i, pad);
    return NULL;
}

static void run_writers(int proc, int n) {
    pthread_t t[THREADS];
    writer w[THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        w[i] = (writer){proc, i, &go};
        pthread_create(&t[i], NULL, writer_main, &w[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
}

/* Every line of path whole and in sequence per writer: procs x threads x LINES. */
static void check_writers(const char *path, int procs, int threads, const char *what) {
    char *text = slurp(path);
    CHECK(text != NULL, "%s: read %s", what, path);
    if (!text) return;
    int total = procs * threads * LINES;
    char **lines = malloc(sizeof *lines * (size_t)(total + 1));
    int n = split_lines(text, lines, total + 1);
    CHECK(n == total, "%s: %d lines, wanted %d", what, n, total);
    int next[2][THREADS] = {{0}}, whole[2][THREADS] = {{0}};
    int bad = 0;
    for (int i = 0; i < n; i++) {
        text_line t;
        int p = -1, id = -1, seq = -1, used = 0;
        bool ok = parse_text(lines[i], &t) && strcmp(t.component, "node") == 0 &&
                  sscanf(t.msg, "P%d T%d %d %n", &p, &id, &seq, &used) == 3 && p >= 0 &&
                  p < procs && id >= 0 && id < threads && seq >= next[p][id] &&
                  strlen(t.msg + used) == PAD;
        for (int k = 0; ok && k < PAD; k++) ok = t.msg[used + k] == pad_letter(p, id);
        if (!ok) {
            if (bad++ < 3)
                CHECK(false, "%s: line %d is broken or out of order: '%.120s...'", what, i,
                      lines[i]);
            continue;
        }
        next[p][id] = seq + 1;
        whole[p][id]++;
    }
    for (int p = 0; p < procs; p++)
        for (int id = 0; id < threads; id++)
            CHECK(whole[p][id] == LINES,
                  "%s: writer P%d T%d has %d whole lines in order, wanted %d", what, p, id,
                  whole[p][id], LINES);
    free(lines);
    free(text);
}

static void test_threads(void) {
    const char *path = check_tmp(".log");
    unlink(path);
    mt_error err = {{0}};
    CHECK(mt_log_open_file(path, &err) == 0, "open %s: %s", path, err.msg);
    run_writers(0, THREADS);
    mt_log_open_file(NULL, &err);
    check_writers(path, 1, THREADS, "8 threads");
    unlink(path);
}

/* Two processes, each opening the file itself (as two commands given the
 * same --log-file), write at once: a pipe starts them together. */
static void test_processes(void) {
    const char *path = check_tmp(".log");
    unlink(path);
    int go[2];
    CHECK(pipe(go) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(go[1]);
        mt_error e = {{0}};
        if (mt_log_open_file(path, &e) != 0) _exit(3);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(4);
        run_writers(1, PROC_THREADS);
        _exit(0);
    }
    close(go[0]);
    mt_error err = {{0}};
    CHECK(mt_log_open_file(path, &err) == 0, "open %s: %s", path, err.msg);
    CHECK(write(go[1], "g", 1) == 1, "start the child");
    close(go[1]);
    run_writers(0, PROC_THREADS);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child process failed: %d", status);
    mt_log_open_file(NULL, &err);
    check_writers(path, 2, PROC_THREADS, "2 processes x 4 threads");
    unlink(path);
}

/* ---- the file: created, appended to, reopened ----------------------------------------------- */

static void test_file(void) {
    const char *path = check_tmp(".log"), *moved = check_tmp(".log.1");
    unlink(path);
    unlink(moved);
    mt_error err = {{0}};
    mode_t old_mask = umask(0); /* the mode the log asks for, not the umask's */
    CHECK(mt_log_open_file(path, &err) == 0, "create %s: %s", path, err.msg);
    umask(old_mask);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600,
          "the new log file's mode is %o, wanted 600", (unsigned)(sb.st_mode & 0777));
    mt_log(MT_LOG_INFO, "registry", "first");
    /* opened again (a restart): appended, not truncated */
    CHECK(mt_log_open_file(path, &err) == 0, "open again: %s", err.msg);
    mt_log(MT_LOG_INFO, "registry", "second");
    CHECK(mt_log_reopen(&err) == 0, "reopen: %s", err.msg);
    mt_log(MT_LOG_INFO, "registry", "third");
    /* logrotate: the file moved away; reopening makes a new one */
    CHECK(rename(path, moved) == 0, "rename");
    mt_log(MT_LOG_INFO, "registry", "fourth, still to the moved file");
    CHECK(mt_log_reopen(&err) == 0, "reopen after the move: %s", err.msg);
    mt_log(MT_LOG_INFO, "registry", "fifth, in a new file");
    /* a file that cannot be opened: named, and the lines keep their destination */
    char bad[300];
    snprintf(bad, sizeof bad, "%s.no-such-dir/x.log", path);
    err.msg[0] = 0;
    CHECK(mt_log_open_file(bad, &err) < 0 && has(err.msg, bad) && has(err.msg, "No such file"),
          "an unopenable log file is refused naming it: '%s'", err.msg);
    mt_log(MT_LOG_INFO, "registry", "sixth, after the refusal");
    mt_log_open_file(NULL, &err);

    char *a = slurp(moved), *b = slurp(path);
    CHECK(a && has(a, "registry: first\n") && has(a, "registry: second\n") &&
              has(a, "registry: third\n") && has(a, "registry: fourth") && !has(a, "fifth"),
          "the moved file: '%s'", a ? a : "(none)");
    CHECK(b && has(b, "registry: fifth") && has(b, "registry: sixth") && !has(b, "first"),
          "the new file: '%s'", b ? b : "(none)");
    int na = 0;
    for (const char *p = a; p && (p = strchr(p, '\n')); p++) na++;
    CHECK(na == 4, "the moved file has %d lines, wanted 4", na);
    free(a);
    free(b);
    /* reopening while the lines go to stderr does nothing */
    CHECK(mt_log_reopen(&err) == 0, "reopen with stderr");
    unlink(path);
    unlink(moved);
}

int main(void) {
    test_names();
    test_text_and_levels();
    test_json();
    test_long();
    test_threads();
    test_processes();
    test_file();
    return check_report("test_log");
}

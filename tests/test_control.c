/* test_control.c - the control plane's building blocks, in one process
 * (the registry itself is tested in test_control_registry.c):
 *   - schedule.h: parse errors that name the bad part; whether a window is
 *     active, checked by hand at the edges and minute by minute over a
 *     week against intervals counted in minutes since Sunday 00:00;
 *   - http.h: a server with a test handler and the client: JSON round trip,
 *     bearer parsing, {"error"} passed into mt_error, 413 for big bodies
 *     (and the server keeps serving), files with every Range form, ranged
 *     GETs that get exactly len bytes or fail, a client timeout against a
 *     server that never answers, a stop with requests in flight, and the
 *     listen socket closed exactly once;
 *   - shard_fetch.h: manifests (piece hashes recomputed here), fetches from
 *     three servers (pieces spread over peers, the seed unused), a source
 *     with corrupt bytes, all sources bad, resume after an interruption,
 *     a .part whose map lies, and manifests that must be refused; a file
 *     size limit (RLIMIT_FSIZE, the stand-in for a full disk that needs no
 *     root) fails a fetch before any download, with an error naming the
 *     directory, and leaves no partial file, also over an earlier partial. */
#include "check.h"
#include "moontail/http.h"
#include "moontail/schedule.h"
#include "moontail/shard_fetch.h"
#include "moontail/transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ==== schedule ============================================================================ */

static bool active_at(const mt_schedule *s, int wday, int hour, int min) {
    struct tm tm = {.tm_wday = wday, .tm_hour = hour, .tm_min = min};
    return mt_schedule_active(s, &tm);
}

/* The reference: window w covers minutes [d*1440 + start, d*1440 + end) of the
 * week for each listed day d, with end + 1440 when it runs past midnight
 * (wrapping from Saturday night into Sunday morning). */
static bool reference_active(const mt_schedule *s, int minute_of_week) {
    for (int i = 0; i < s->n; i++) {
        const mt_schedule_window *w = &s->w[i];
        for (int d = 0; d < 7; d++) {
            if (!(w->days & (1 << d))) continue;
            int from = d * 1440 + w->start;
            int to = d * 1440 + w->end + (w->end <= w->start ? 1440 : 0);
            for (int shift = -10080; shift <= 0; shift += 10080)
                if (minute_of_week - shift >= from && minute_of_week - shift < to) return true;
        }
    }
    return false;
}

static void schedule_bad(const char *text, const char *want) {
    mt_schedule s;
    mt_error err = {{0}};
    int rc = mt_schedule_parse(text, &s, &err);
    CHECK(rc < 0, "schedule '%s' was accepted", text);
    CHECK(strstr(err.msg, want) != NULL, "schedule '%s': error '%s' does not name '%s'", text,
          err.msg, want);
}

static void test_schedule(void) {
    schedule_bad("", "empty");
    schedule_bad("  ; , ;", "empty");
    schedule_bad("Mon-Fri", "no time range");
    schedule_bad("Mox 09:00-10:00", "'Mox'");
    schedule_bad("Mon- 09:00-10:00", "'Mon-'");
    schedule_bad("-Fri 09:00-10:00", "'-Fri'");
    schedule_bad("Monday 09:00-10:00", "'Monday'");
    schedule_bad("Mon 9:00-10:00", "'9:00-10:00'");
    schedule_bad("24:01-10:00", "'24:01-10:00'");
    schedule_bad("10:00-24:01", "'10:00-24:01'");
    schedule_bad("10:60-11:00", "'10:60-11:00'");
    schedule_bad("10:00", "'10:00'");
    schedule_bad("10:00-", "'10:00-'");
    schedule_bad("10:00-11:00x", "'10:00-11:00x'");
    schedule_bad("Sat 10:00-10:00", "empty");
    schedule_bad("24:00-06:00", "24:00");
    /* the message names the window at fault, not the windows after it */
    mt_schedule s;
    mt_error err = {{0}};
    CHECK(mt_schedule_parse("Mon 09:00-10:00 11:00-12:00; Tue 01:00-02:00", &s, &err) < 0 &&
              strstr(err.msg, "two time ranges") && strstr(err.msg, "Mon 09:00-10:00") &&
              !strstr(err.msg, "Tue"),
          "two ranges: '%s'", err.msg);
    char many[400] = "";
    for (int i = 0; i < MT_SCHEDULE_MAX_WINDOWS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s%02d:00-%02d:30",
                 i ? "; " : "", i, i);
    CHECK(mt_schedule_parse(many, &s, &err) == 0 && s.n == MT_SCHEDULE_MAX_WINDOWS,
          "16 windows: %s", err.msg);
    strcat(many, ", 20:00-21:00");
    schedule_bad(many, "more than 16");

    /* what the parser keeps */
    CHECK(mt_schedule_parse("Fri-Mon 22:00-06:00", &s, &err) == 0 && s.n == 1 &&
              s.w[0].days == ((1 << 5) | (1 << 6) | (1 << 0) | (1 << 1)) &&
              s.w[0].start == 22 * 60 && s.w[0].end == 6 * 60,
          "Fri-Mon: %s days %x", err.msg, s.w[0].days);
    CHECK(mt_schedule_parse("mon wed FRI 00:00-24:00", &s, &err) == 0 &&
              s.w[0].days == ((1 << 1) | (1 << 3) | (1 << 5)) && s.w[0].end == 1440,
          "Mon Wed Fri: %s", err.msg);
    CHECK(mt_schedule_parse("07:15-07:45", &s, &err) == 0 && s.w[0].days == 0x7f,
          "no days = every day: %s", err.msg);
    CHECK(mt_schedule_parse("Sun-Sat 01:00-02:00", &s, &err) == 0 && s.w[0].days == 0x7f,
          "Sun-Sat: %s", err.msg);
    CHECK(mt_schedule_parse("Wed-Wed 01:00-02:00", &s, &err) == 0 && s.w[0].days == 1 << 3,
          "Wed-Wed: %s", err.msg);

    /* by hand: an ordinary window, start inclusive, end exclusive */
    mt_schedule_parse("Mon-Fri 09:00-18:00", &s, NULL);
    CHECK(!active_at(&s, 1, 8, 59) && active_at(&s, 1, 9, 0) && active_at(&s, 5, 17, 59) &&
              !active_at(&s, 5, 18, 0) && !active_at(&s, 6, 12, 0) && !active_at(&s, 0, 12, 0),
          "Mon-Fri 09:00-18:00");
    /* past midnight: the early morning belongs to the day after a listed day */
    mt_schedule_parse("Fri 22:00-06:00", &s, NULL);
    CHECK(active_at(&s, 5, 22, 0) && active_at(&s, 5, 23, 59) && active_at(&s, 6, 0, 0) &&
              active_at(&s, 6, 5, 59) && !active_at(&s, 6, 6, 0) && !active_at(&s, 5, 5, 0) &&
              !active_at(&s, 5, 21, 59) && !active_at(&s, 6, 22, 0),
          "Fri 22:00-06:00");
    /* a day range that wraps: Sat night -> Sun morning, Mon night -> Tue morning */
    mt_schedule_parse("Fri-Mon 22:00-06:00", &s, NULL);
    CHECK(active_at(&s, 0, 3, 0) && active_at(&s, 1, 23, 0) && active_at(&s, 2, 5, 0) &&
              !active_at(&s, 2, 23, 0) && !active_at(&s, 5, 3, 0) && active_at(&s, 6, 3, 0),
          "Fri-Mon 22:00-06:00");
    mt_schedule_parse("Sat 23:00-01:00", &s, NULL); /* Saturday night into Sunday */
    CHECK(active_at(&s, 0, 0, 30) && !active_at(&s, 0, 1, 0) && active_at(&s, 6, 23, 0),
          "Sat 23:00-01:00");
    mt_schedule_parse("daily 12:00-13:00; Sun 00:00-24:00, Wed 20:00-21:00", &s, NULL);
    CHECK(s.n == 3 && active_at(&s, 3, 12, 30) && active_at(&s, 0, 23, 59) &&
              active_at(&s, 3, 20, 0) && !active_at(&s, 3, 21, 0) && !active_at(&s, 4, 20, 30),
          "list with ';' and ','");

    /* minute by minute over a week, against the reference */
    const char *sweep[] = {"Mon-Fri 09:00-18:00",
                           "Fri-Mon 22:00-06:00",
                           "daily 23:30-00:15",
                           "Sat Sun 00:00-24:00; Tue 13:00-13:01",
                           "Thu-Tue 18:00-02:00, Wed 01:00-23:00",
                           "22:00-00:00; Sun 00:00-00:01"};
    for (size_t k = 0; k < sizeof sweep / sizeof *sweep; k++) {
        CHECK(mt_schedule_parse(sweep[k], &s, &err) == 0, "%s: %s", sweep[k], err.msg);
        int wrong = 0, on = 0;
        for (int t = 0; t < 10080; t++) {
            bool got = active_at(&s, t / 1440, t % 1440 / 60, t % 60);
            on += got;
            if (got != reference_active(&s, t) && wrong++ < 3)
                fprintf(stderr, "  %s at day %d %02d:%02d: %d\n", sweep[k], t / 1440, t % 1440 / 60,
                        t % 60, got);
        }
        CHECK(wrong == 0 && on > 0, "%s: %d minutes differ from the reference", sweep[k], wrong);
    }
}

/* ==== a test HTTP server ================================================================== */

typedef struct test_server {
    mt_http_server *s;
    char url[200];
    const char *file;      /* served at /file and /v1/shards/<anything> */
    int fail_after;        /* shard requests after which it answers 500 (< 0: never) */
    atomic_int shard_gets; /* shard requests answered with bytes */
    atomic_int in_slow;    /* handlers inside /slow */
    atomic_int slow_done;  /* handlers that finished /slow */
    char last_bearer[128]; /* what mt_http_bearer gave on /bearer ("(null)" for NULL) */
    pthread_mutex_t lock;
} test_server;

static void test_handler(void *ctx, const mt_http_request *req, mt_http_response *resp) {
    test_server *t = ctx;
    const char *p = req->path;
    if (strcmp(p, "/echo") == 0) {
        json_error_t je;
        json_t *body = json_loadb(req->body, req->body_len, 0, &je);
        if (!body) return mt_http_error(resp, 400, "not JSON: %s", je.text);
        const char *q = mt_http_query(req, "q");
        resp->json = json_pack("{s:s, s:o, s:s?}", "method", req->method, "got", body, "q", q);
    } else if (strcmp(p, "/bearer") == 0) {
        const char *b = mt_http_bearer(req);
        pthread_mutex_lock(&t->lock);
        snprintf(t->last_bearer, sizeof t->last_bearer, "%s", b ? b : "(null)");
        pthread_mutex_unlock(&t->lock);
        resp->json = json_pack("{s:s?}", "bearer", b);
    } else if (strcmp(p, "/missing") == 0) {
        mt_http_error(resp, 404, "nothing at %s", p);
    } else if (strcmp(p, "/invalid") == 0) {
        mt_http_error(resp, 400, "field \"x\" is wrong");
    } else if (strcmp(p, "/text500") == 0) {
        resp->status = 500;
        resp->text = strdup("plain trouble");
    } else if (strcmp(p, "/fewer") == 0 || strcmp(p, "/more") == 0) {
        /* a peer that answers a range with the wrong number of bytes */
        resp->status = 206;
        resp->text = strdup(strcmp(p, "/fewer") == 0 ? "0123456" : "0123456789abcdef");
        resp->content_type = "application/octet-stream";
    } else if (strcmp(p, "/slow") == 0) {
        atomic_fetch_add(&t->in_slow, 1);
        sleep_ms(400);
        atomic_fetch_add(&t->slow_done, 1);
        resp->json = json_pack("{s:b}", "slow", 1);
    } else if (strcmp(p, "/file") == 0) {
        resp->file = strdup(t->file);
    } else if (strncmp(p, "/v1/shards/", 11) == 0) {
        int k = atomic_fetch_add(&t->shard_gets, 1);
        if (t->fail_after >= 0 && k >= t->fail_after) {
            atomic_fetch_sub(&t->shard_gets, 1);
            return mt_http_error(resp, 500, "this source broke down");
        }
        resp->file = strdup(t->file);
    } else {
        mt_http_error(resp, 404, "no %s", p);
    }
}

static void server_start(test_server *t, const char *file, size_t max_body) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->file = file;
    t->fail_after = -1;
    mt_error err = {{0}};
    t->s = mt_http_server_start("127.0.0.1:0", 4, max_body, test_handler, t, &err);
    CHECK(t->s != NULL, "server: %s", err.msg);
    if (t->s) snprintf(t->url, sizeof t->url, "http://%s", mt_http_server_addr(t->s));
}

static void server_stop(test_server *t) {
    mt_http_server_stop(t->s);
    t->s = NULL;
    pthread_mutex_destroy(&t->lock);
}

/* A raw exchange: sends req, reads until the server closes (5 s at most).
 * Returns the whole answer (malloc'd, NUL-terminated), *n its length. */
static char *raw_http(const char *addr, const char *req, size_t req_len, size_t *n) {
    mt_error err = {{0}};
    int fd = mt_connect_tcp(addr, 2000, &err);
    *n = 0;
    if (fd < 0) return NULL;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (size_t off = 0; off < req_len;) {
        ssize_t k = send(fd, req + off, req_len - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += (size_t)k;
    }
    size_t cap = 1 << 16;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (*n == cap) buf = realloc(buf, (cap *= 2) + 1);
        ssize_t k = recv(fd, buf + *n, cap - *n, 0);
        if (k <= 0) break;
        *n += (size_t)k;
    }
    buf[*n] = 0;
    close(fd);
    return buf;
}

static int raw_status(const char *resp) {
    return resp && strncmp(resp, "HTTP/1.", 7) == 0 ? atoi(resp + 9) : -1;
}

/* The value of header `name` in a raw answer (static buffer, "" if absent). */
static const char *raw_header(const char *resp, const char *name) {
    static char v[256];
    v[0] = 0;
    const char *end = resp ? strstr(resp, "\r\n\r\n") : NULL;
    size_t k = strlen(name);
    for (const char *p = resp ? strstr(resp, "\r\n") : NULL; p && p < end;
         p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, k) == 0 && p[2 + k] == ':') {
            const char *s = p + 3 + k;
            while (*s == ' ') s++;
            size_t len = strcspn(s, "\r");
            snprintf(v, sizeof v, "%.*s", (int)len, s);
            break;
        }
    return v;
}

static const char *raw_body(const char *resp) {
    const char *end = resp ? strstr(resp, "\r\n\r\n") : NULL;
    return end ? end + 4 : NULL;
}

/* ==== files ================================================================================ */

static uint8_t *random_bytes(size_t n, uint64_t seed) {
    uint8_t *b = malloc(n);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (uint8_t)(x >> 24);
    }
    return b;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "writing %s", path);
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* A string member of a JSON object, "" when absent. */
static const char *jstr(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int count_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* ==== http ================================================================================= */

static void test_http_json(void) {
    test_server t;
    server_start(&t, NULL, 4096);
    if (!t.s) return;
    char url[300];
    mt_error err = {{0}};
    json_t *out = NULL;

    /* a JSON round trip, with a query argument */
    json_t *body = json_pack("{s:s, s:I, s:I, s:f, s:[i, [i, {}]], s:n, s:b}", "s",
                             "h\xc3\xa9llo \"quoted\" \\ / \t", "max", (json_int_t)INT64_MAX, "neg",
                             (json_int_t)-5, "f", 0.5, "arr", 1, 2, "null", "t", 1);
    snprintf(url, sizeof url, "%s/echo?q=a%%20b", t.url);
    int st = mt_http_json("POST", url, NULL, body, 5000, &out, &err);
    CHECK(st == 200 && json_equal(json_object_get(out, "got"), body), "round trip: %d %s", st,
          err.msg);
    CHECK(strcmp(jstr(out, "method"), "POST") == 0 && strcmp(jstr(out, "q"), "a b") == 0,
          "method and query");
    json_decref(out);
    json_decref(body);
    /* a handler's 400 with {"error"} reaches mt_error */
    st = mt_http_json("GET", url, NULL, NULL, 5000, &out, &err);
    CHECK(st == 400 && strstr(err.msg, "HTTP 400") && strstr(err.msg, "not JSON"),
          "empty body: %d %s", st, err.msg);
    json_decref(out);

    /* 404 and 400 pass their message through; out still gets the body */
    snprintf(url, sizeof url, "%s/missing", t.url);
    st = mt_http_json("GET", url, NULL, NULL, 5000, &out, &err);
    CHECK(st == 404 && strstr(err.msg, "nothing at /missing") &&
              json_is_string(json_object_get(out, "error")),
          "404: %d %s", st, err.msg);
    json_decref(out);
    snprintf(url, sizeof url, "%s/invalid", t.url);
    memset(&err, 0, sizeof err);
    st = mt_http_json("POST", url, "tok", NULL, 5000, NULL, &err);
    CHECK(st == 400 && strstr(err.msg, "field \"x\" is wrong"), "400: %d %s", st, err.msg);
    snprintf(url, sizeof url, "%s/text500", t.url);
    st = mt_http_json("GET", url, NULL, NULL, 5000, &out, &err);
    CHECK(st == 500 && out == NULL && strstr(err.msg, "plain trouble"), "text 500: %d %s", st,
          err.msg);

    /* bearer tokens */
    snprintf(url, sizeof url, "%s/bearer", t.url);
    st = mt_http_json("GET", url, "tok-123", NULL, 5000, &out, &err);
    CHECK(st == 200 && strcmp(jstr(out, "bearer"), "tok-123") == 0, "bearer: %d %s", st, err.msg);
    json_decref(out);
    const char *const auth[][2] = {{"Authorization: bearer   abc\r\n", "abc"},
                                   {"authorization: Bearer x y\r\n", "x y"},
                                   {"Authorization: Basic abc\r\n", "(null)"},
                                   {"Authorization: Bearer\r\n", "(null)"},
                                   {"Authorization: Bearer    \r\n", "(null)"},
                                   {"Authorization: Bearerabc\r\n", "(null)"},
                                   {"", "(null)"}};
    for (size_t i = 0; i < sizeof auth / sizeof *auth; i++) {
        char req[300];
        int k =
            snprintf(req, sizeof req,
                     "GET /bearer HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", auth[i][0]);
        size_t n;
        char *r = raw_http(mt_http_server_addr(t.s), req, (size_t)k, &n);
        pthread_mutex_lock(&t.lock);
        CHECK(raw_status(r) == 200 && strcmp(t.last_bearer, auth[i][1]) == 0,
              "bearer from '%s': '%s', want '%s'", auth[i][0], t.last_bearer, auth[i][1]);
        pthread_mutex_unlock(&t.lock);
        free(r);
    }

    /* a body over max_body: 413, and the server goes on */
    snprintf(url, sizeof url, "%s/echo", t.url);
    char *big = malloc(10001);
    memset(big, 'a', 10000);
    big[10000] = 0;
    body = json_pack("{s:s}", "big", big);
    st = mt_http_json("POST", url, NULL, body, 5000, &out, &err);
    CHECK(st == 413 && strstr(err.msg, "too large"), "big body: %d %s", st, err.msg);
    json_decref(out);
    json_decref(body);
    char head[200];
    int hk = snprintf(head, sizeof head,
                      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n"
                      "Connection: close\r\n\r\n");
    char *req = malloc((size_t)hk + 10000);
    memcpy(req, head, (size_t)hk);
    memcpy(req + hk, big, 10000);
    size_t n;
    char *r = raw_http(mt_http_server_addr(t.s), req, (size_t)hk + 10000, &n);
    CHECK(raw_status(r) == 413, "raw big body: %.60s", r ? r : "(none)");
    free(r), free(req), free(big);
    body = json_pack("{s:s}", "small", "yes");
    st = mt_http_json("POST", url, NULL, body, 5000, &out, &err);
    CHECK(st == 200 && json_equal(json_object_get(out, "got"), body), "after 413: %d %s", st,
          err.msg);
    json_decref(out);
    json_decref(body);
    server_stop(&t);

    /* nobody listening: -1 and a reason */
    st = mt_http_json("GET", url, NULL, NULL, 2000, &out, &err);
    CHECK(st == -1 && out == NULL && err.msg[0], "refused: %d %s", st, err.msg);
}

/* Range requests on a 10000-byte file, by a raw client. */
static void check_range(test_server *t, const uint8_t *file, const char *range, int want_status,
                        long from, long to) {
    char req[300];
    int k = snprintf(req, sizeof req,
                     "GET /file HTTP/1.1\r\nHost: x\r\n%s%s%sConnection: close\r\n\r\n",
                     range ? "Range: " : "", range ? range : "", range ? "\r\n" : "");
    size_t n;
    char *r = raw_http(mt_http_server_addr(t->s), req, (size_t)k, &n);
    int st = raw_status(r);
    CHECK(st == want_status, "Range '%s': status %d, want %d", range ? range : "-", st,
          want_status);
    const char *body = raw_body(r);
    if (st == 200 || st == 206) {
        size_t len = body ? n - (size_t)(body - r) : 0;
        CHECK(body && len == (size_t)(to - from + 1) && memcmp(body, file + from, len) == 0,
              "Range '%s': %zu bytes, want [%ld, %ld]", range ? range : "-", len, from, to);
    }
    char want[80];
    if (st == 206) {
        snprintf(want, sizeof want, "bytes %ld-%ld/10000", from, to);
        CHECK(strcmp(raw_header(r, "Content-Range"), want) == 0, "Range '%s': Content-Range '%s'",
              range, raw_header(r, "Content-Range"));
    } else if (st == 416) {
        CHECK(strcmp(raw_header(r, "Content-Range"), "bytes */10000") == 0,
              "Range '%s': 416 with Content-Range '%s'", range, raw_header(r, "Content-Range"));
    }
    free(r);
}

static void test_http_files(const char *dir) {
    char path[300], empty[300];
    snprintf(path, sizeof path, "%s/ten-k", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    uint8_t *file = random_bytes(10000, 1);
    write_file(path, file, 10000);
    write_file(empty, "", 0);
    test_server t;
    server_start(&t, path, 4096);
    if (!t.s) return;
    check_range(&t, file, NULL, 200, 0, 9999);
    check_range(&t, file, "bytes=100-199", 206, 100, 199);
    check_range(&t, file, "bytes=0-0", 206, 0, 0);
    check_range(&t, file, "bytes=9990-", 206, 9990, 9999);
    check_range(&t, file, "bytes=-16", 206, 9984, 9999);
    check_range(&t, file, "bytes=-20000", 206, 0, 9999);
    check_range(&t, file, "bytes=9000-20000", 206, 9000, 9999);
    check_range(&t, file, "bytes=10000-", 416, 0, 0);
    check_range(&t, file, "bytes=10000-10005", 416, 0, 0);
    check_range(&t, file, "bytes=-0", 416, 0, 0);
    /* not a usable range: ignored, the whole file */
    check_range(&t, file, "bytes=5-2", 200, 0, 9999);
    check_range(&t, file, "items=0-5", 200, 0, 9999);
    check_range(&t, file, "bytes=0-1,5-6", 200, 0, 9999);
    check_range(&t, file, "bytes=abc", 200, 0, 9999);
    check_range(&t, file, "bytes=1-2x", 200, 0, 9999);
    check_range(&t, file, "bytes=-5x", 200, 0, 9999);
    check_range(&t, file, "bytes= 1-2", 200, 0, 9999);
    check_range(&t, file, "bytes=+1-2", 200, 0, 9999);
    check_range(&t, file, "bytes=--5", 200, 0, 9999);

    /* ranged GETs: exactly len bytes, or an error */
    char url[300];
    snprintf(url, sizeof url, "%s/file", t.url);
    uint8_t *buf = malloc(10000);
    mt_error err = {{0}};
    CHECK(mt_http_get_range(url, 1234, 5000, buf, 5000, &err) == 0 &&
              memcmp(buf, file + 1234, 5000) == 0,
          "get_range: %s", err.msg);
    CHECK(mt_http_get_range(url, 0, 10000, buf, 5000, &err) == 0 && memcmp(buf, file, 10000) == 0,
          "get_range whole: %s", err.msg);
    CHECK(mt_http_get_range(url, 9999, 1, buf, 5000, &err) == 0 && buf[0] == file[9999],
          "get_range last byte: %s", err.msg);
    CHECK(mt_http_get_range(url, 9000, 2000, buf, 5000, &err) < 0 &&
              strstr(err.msg, "got 1000 bytes, expected 2000"),
          "get_range past the end: %s", err.msg);
    CHECK(mt_http_get_range(url, 10000, 10, buf, 5000, &err) < 0 && strstr(err.msg, "416"),
          "get_range unsatisfiable: %s", err.msg);
    snprintf(url, sizeof url, "%s/fewer", t.url);
    CHECK(mt_http_get_range(url, 0, 10, buf, 5000, &err) < 0 && strstr(err.msg, "got 7 bytes"),
          "fewer bytes: %s", err.msg);
    snprintf(url, sizeof url, "%s/more", t.url);
    CHECK(mt_http_get_range(url, 0, 10, buf, 5000, &err) < 0 && strstr(err.msg, "more than"),
          "more bytes: %s", err.msg);
    snprintf(url, sizeof url, "%s/missing", t.url);
    CHECK(mt_http_get_range(url, 0, 10, buf, 5000, &err) < 0 && strstr(err.msg, "404"), "404: %s",
          err.msg);
    /* a server that ignores the range: 200 is fine only for the whole thing from 0 */
    snprintf(url, sizeof url, "%s/bearer", t.url);
    CHECK(mt_http_get_range(url, 5, 3, buf, 5000, &err) < 0 && strstr(err.msg, "HTTP 200"),
          "200 for a range from 5: %s", err.msg);
    CHECK(mt_http_get_range(url, 0, 3, buf, 5000, &err) < 0 && strstr(err.msg, "more than"),
          "200 with more than asked: %s", err.msg);
    snprintf(url, sizeof url, "%s/file", t.url);
    CHECK(mt_http_get_range(url, 0, 0, buf, 5000, &err) == 0, "zero bytes: %s", err.msg);
    free(buf);

    /* an empty file */
    t.file = empty;
    size_t n;
    const char whole[] = "GET /file HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *r = raw_http(mt_http_server_addr(t.s), whole, sizeof whole - 1, &n);
    CHECK(raw_status(r) == 200 && raw_body(r) && !raw_body(r)[0], "empty file: %.40s", r);
    free(r);
    const char req[] =
        "GET /file HTTP/1.1\r\nHost: x\r\nRange: bytes=0-\r\nConnection: close\r\n\r\n";
    r = raw_http(mt_http_server_addr(t.s), req, sizeof req - 1, &n);
    CHECK(raw_status(r) == 416, "empty file, bytes=0-: %.40s", r);
    free(r);
    server_stop(&t);
    free(file);
}

/* A server that accepts and then says nothing. */
typedef struct mute_server {
    int fd;
    atomic_bool stop;
    pthread_t tid;
} mute_server;

static void *mute_main(void *arg) {
    mute_server *m = arg;
    int conns[8], n = 0;
    while (!atomic_load(&m->stop)) {
        int c = mt_accept_tcp(m->fd, 50, NULL, 0, NULL);
        if (c >= 0 && n < 8) conns[n++] = c;
    }
    for (int i = 0; i < n; i++) close(conns[i]);
    return NULL;
}

static void test_http_timeout(void) {
    mute_server m = {.fd = mt_listen_tcp("127.0.0.1:0", NULL)};
    CHECK(m.fd >= 0, "mute server");
    if (m.fd < 0) return;
    pthread_create(&m.tid, NULL, mute_main, &m);
    char url[100];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/anything", mt_listen_port(m.fd));
    mt_error err = {{0}};
    json_t *out = NULL;
    double t0 = now_ms();
    int st = mt_http_json("GET", url, NULL, NULL, 300, &out, &err);
    double dt = now_ms() - t0;
    CHECK(st == -1 && out == NULL && dt >= 250 && dt < 2000 && strstr(err.msg, "timed out"),
          "json timeout: %d after %.0f ms: %s", st, dt, err.msg);
    uint8_t buf[16];
    t0 = now_ms();
    st = mt_http_get_range(url, 0, 16, buf, 300, &err);
    dt = now_ms() - t0;
    CHECK(st == -1 && dt >= 250 && dt < 2000, "range timeout: %d after %.0f ms: %s", st, dt,
          err.msg);
    atomic_store(&m.stop, true);
    pthread_join(m.tid, NULL);
    close(m.fd);
}

typedef struct slow_call {
    const char *url;
    int status;
} slow_call;

static void *slow_main(void *arg) {
    slow_call *c = arg;
    c->status = mt_http_json("GET", c->url, NULL, NULL, 5000, NULL, NULL);
    return NULL;
}

static enum MHD_Result refuse(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)cls, (void)c, (void)url, (void)method, (void)version, (void)upload, (void)upload_size;
    (void)con_cls;
    return MHD_NO;
}

/* Stopping with requests in the handler and a body half sent: the handlers
 * finish, nothing leaks (ASan), the port and every descriptor are released. */
static void test_http_stop(void) {
    /* what http_server.c relies on: MHD closes a listen socket it was given */
    int fd = mt_listen_tcp("127.0.0.1:0", NULL);
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL, refuse,
                         NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_END);
    CHECK(d != NULL, "MHD with a listen socket");
    MHD_stop_daemon(d);
    errno = 0;
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF,
          "MHD_stop_daemon left the listen socket open; mt_http_server_stop must close it");

    int fds_before = count_open_fds();
    for (int round = 0; round < 3; round++) {
        test_server t;
        server_start(&t, NULL, 1 << 20);
        if (!t.s) return;
        char url[300], addr[200];
        snprintf(url, sizeof url, "%s/slow", t.url);
        snprintf(addr, sizeof addr, "%s", mt_http_server_addr(t.s));
        slow_call calls[3];
        pthread_t tid[3];
        for (int i = 0; i < 3; i++) {
            calls[i] = (slow_call){url, 0};
            pthread_create(&tid[i], NULL, slow_main, &calls[i]);
        }
        mt_error err = {{0}};
        int half = mt_connect_tcp(addr, 2000, &err);
        const char part[] =
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50000\r\n\r\n{\"a\":";
        CHECK(half >= 0 && send(half, part, sizeof part - 1, MSG_NOSIGNAL) > 0, "half: %s",
              err.msg);
        for (int i = 0; i < 200 && atomic_load(&t.in_slow) < 3; i++) sleep_ms(10);
        CHECK(atomic_load(&t.in_slow) >= 1, "no request reached the handler");
        double t0 = now_ms();
        server_stop(&t);
        double dt = now_ms() - t0;
        CHECK(dt < 3000, "stop took %.0f ms", dt);
        for (int i = 0; i < 3; i++) pthread_join(tid[i], NULL);
        CHECK(atomic_load(&t.slow_done) == atomic_load(&t.in_slow), "%d handlers began, %d ended",
              atomic_load(&t.in_slow), atomic_load(&t.slow_done));
        for (int i = 0; i < 3; i++)
            CHECK(calls[i].status == 200 || calls[i].status == -1, "a call in flight got %d",
                  calls[i].status);
        if (half >= 0) close(half);
        int c = mt_connect_tcp(addr, 1000, NULL);
        CHECK(c < 0, "%s still accepts connections after stop", addr);
        if (c >= 0) close(c);
    }
    CHECK(count_open_fds() == fds_before, "descriptors: %d before, %d after", fds_before,
          count_open_fds());
}

/* ==== shard manifests ====================================================================== */

enum { FILE_BYTES = 3 * 1024 * 1024 + 1234, PIECE = 32 * 1024 };
#define N_PIECES ((FILE_BYTES + PIECE - 1) / PIECE)

static void manifest_bad(const json_t *good, const char *key, json_t *value, const char *want) {
    json_t *m = json_deep_copy(good);
    if (value)
        json_object_set_new(m, key, value);
    else
        json_object_del(m, key);
    mt_error err = {{0}};
    CHECK(mt_shard_manifest_check(m, &err) < 0 && strstr(err.msg, want),
          "manifest with bad %s: '%s' (want '%s')", key, err.msg, want);
    json_decref(m);
}

static void test_manifests(const char *path, const uint8_t *data) {
    const uint32_t sizes[] = {4096, PIECE, 65536};
    for (size_t k = 0; k < 3; k++) {
        mt_error err = {{0}};
        json_t *m = mt_shard_manifest_of_file(path, "L0-2A-E0-4", sizes[k], &err);
        CHECK(m && mt_shard_manifest_check(m, &err) == 0, "manifest %u: %s", sizes[k], err.msg);
        if (!m) continue;
        size_t want = (FILE_BYTES + sizes[k] - 1) / sizes[k];
        json_t *pieces = json_object_get(m, "pieces");
        CHECK(json_integer_value(json_object_get(m, "bytes")) == FILE_BYTES &&
                  json_integer_value(json_object_get(m, "piece_bytes")) == sizes[k] &&
                  json_array_size(pieces) == want && strcmp(jstr(m, "name"), "L0-2A-E0-4") == 0,
              "manifest %u: fields", sizes[k]);
        int wrong = 0;
        for (size_t i = 0; i < json_array_size(pieces); i++) {
            size_t from = i * sizes[k],
                   len = FILE_BYTES - from < sizes[k] ? FILE_BYTES - from : sizes[k];
            uint8_t h[32];
            char hex[65];
            crypto_generichash(h, 32, data + from, len, NULL, 0);
            sodium_bin2hex(hex, sizeof hex, h, 32);
            wrong += strcmp(hex, json_string_value(json_array_get(pieces, i))) != 0;
        }
        uint8_t h[32];
        char hex[65];
        crypto_generichash(h, 32, data, FILE_BYTES, NULL, 0);
        sodium_bin2hex(hex, sizeof hex, h, 32);
        CHECK(wrong == 0 && strcmp(hex, jstr(m, "blake2b")) == 0,
              "manifest %u: %d piece hashes differ, whole hash %s", sizes[k], wrong,
              strcmp(hex, jstr(m, "blake2b")) == 0 ? "same" : "differs");
        CHECK(mt_shard_file_matches(path, m), "the file does not match its own manifest");
        json_decref(m);
    }
    mt_error err = {{0}};
    CHECK(mt_shard_manifest_of_file("/nonexistent/x", "x", 4096, &err) == NULL &&
              strstr(err.msg, "/nonexistent/x"),
          "manifest of a missing file: %s", err.msg);

    json_t *good = mt_shard_manifest_of_file(path, "head", PIECE, &err);
    if (!good) return;
    json_t *pieces = json_object_get(good, "pieces");
    json_t *fewer = json_deep_copy(pieces), *more = json_deep_copy(pieces);
    json_array_remove(fewer, json_array_size(fewer) - 1);
    json_array_append_new(more, json_string(jstr(good, "blake2b")));
    char want[120];
    snprintf(want, sizeof want, "%zu piece hashes for %d bytes", json_array_size(pieces) - 1,
             FILE_BYTES);
    manifest_bad(good, "pieces", fewer, want);
    manifest_bad(good, "pieces", more, "piece hashes for");
    json_t *upper = json_deep_copy(pieces);
    char h[65];
    snprintf(h, sizeof h, "%s", json_string_value(json_array_get(pieces, 3)));
    for (char *c = h; *c; c++)
        if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 'a' + 'A');
    json_array_set_new(upper, 3, json_string(h));
    manifest_bad(good, "pieces", upper, "piece hash 3");
    json_t *short_hex = json_deep_copy(pieces);
    json_array_set_new(short_hex, 7, json_string("abc"));
    manifest_bad(good, "pieces", short_hex, "piece hash 7");
    json_t *not_str = json_deep_copy(pieces);
    json_array_set_new(not_str, 0, json_integer(5));
    manifest_bad(good, "pieces", not_str, "piece hash 0");
    manifest_bad(good, "pieces", json_string("x"), "pieces");
    manifest_bad(good, "pieces", NULL, "pieces");
    manifest_bad(good, "blake2b", json_string("zz"), "blake2b");
    manifest_bad(good, "name", json_string("../etc/passwd"), "'../etc/passwd'");
    manifest_bad(good, "name", json_string("a b"), "'a b'");
    manifest_bad(good, "name", json_string(""), "name");
    manifest_bad(good, "name", json_integer(3), "name");
    manifest_bad(good, "bytes", json_integer(-1), "bytes");
    manifest_bad(good, "bytes", json_string("5"), "bytes");
    manifest_bad(good, "bytes", json_integer(FILE_BYTES + PIECE), "piece hashes for");
    manifest_bad(good, "piece_bytes", json_integer(1000), "piece_bytes");
    manifest_bad(good, "piece_bytes", json_integer(1LL << 31), "piece_bytes");
    json_t *arr = json_array();
    CHECK(mt_shard_manifest_check(arr, &err) < 0, "an array is not a manifest");
    json_decref(arr);
    json_t *empty = json_pack("{s:s, s:i, s:s, s:i, s:[]}", "name", "e", "bytes", 0, "blake2b",
                              jstr(good, "blake2b"), "piece_bytes", 4096, "pieces");
    CHECK(mt_shard_manifest_check(empty, &err) == 0, "an empty shard: %s", err.msg);
    json_decref(empty);
    json_decref(good);
}

/* ==== shard fetches ======================================================================== */

typedef struct progress_log {
    int calls;
    uint64_t last_done;
    bool monotonic;
} progress_log;

static void on_progress(void *ctx, const mt_fetch_progress *p) {
    progress_log *l = ctx;
    l->calls++;
    if (p->bytes_done < l->last_done || p->bytes_done > p->bytes_total) l->monotonic = false;
    l->last_done = p->bytes_done;
}

static int fetch(const json_t *m, test_server **srv, int n, int n_seeds, const char *out,
                 mt_fetch_progress *st, progress_log *log, mt_error *err) {
    char urls[4][200];
    const char *src[4];
    for (int i = 0; i < n; i++) {
        snprintf(urls[i], sizeof urls[i], "%s", srv[i]->url);
        src[i] = urls[i];
    }
    if (log) *log = (progress_log){0, 0, true};
    mt_fetch_config c = {.manifest = m,
                         .sources = src,
                         .n_sources = n,
                         .n_seeds = n_seeds,
                         .out = out,
                         .timeout_ms = 10000,
                         .progress = log ? on_progress : NULL,
                         .progress_ctx = log};
    memset(st, 0, sizeof *st);
    return mt_shard_fetch(&c, st, err);
}

static bool same_file(const char *path, const uint8_t *data, size_t n) {
    size_t k;
    uint8_t *got = read_file(path, &k);
    bool same = got && k == n && memcmp(got, data, n) == 0;
    free(got);
    return same;
}

static char *part_of(const char *out, const char *ext) {
    static char buf[2][400];
    static int k;
    snprintf(buf[k & 1], sizeof buf[0], "%s%s", out, ext);
    return buf[k++ & 1];
}

static void remove_outputs(const char *out) {
    unlink(out);
    unlink(part_of(out, ".part"));
    unlink(part_of(out, ".part.map"));
}

/* One of several fetches of the same file at once. */
typedef struct together {
    const json_t *m;
    test_server **srv;
    const char *out;
    int rc;
    mt_fetch_progress st;
    mt_error err;
} together;

static void *together_main(void *arg) {
    together *t = arg;
    t->rc = fetch(t->m, t->srv, 3, 1, t->out, &t->st, NULL, &t->err);
    return NULL;
}

static void test_fetch(const char *dir, const char *path, const uint8_t *data) {
    /* copies: every piece corrupt; and pieces from 40 on corrupt */
    char bad_all[300], bad_tail[300], out[300];
    snprintf(bad_all, sizeof bad_all, "%s/bad-all", dir);
    snprintf(bad_tail, sizeof bad_tail, "%s/bad-tail", dir);
    snprintf(out, sizeof out, "%s/fetched.gguf", dir);
    uint8_t *copy = malloc(FILE_BYTES);
    memcpy(copy, data, FILE_BYTES);
    for (size_t i = 40; i < N_PIECES; i++) copy[i * PIECE + 17] ^= 0x40;
    write_file(bad_tail, copy, FILE_BYTES);
    for (size_t i = 0; i < 40; i++) copy[i * PIECE + 17] ^= 0x40;
    write_file(bad_all, copy, FILE_BYTES);
    free(copy);

    mt_error err = {{0}};
    json_t *m = mt_shard_manifest_of_file(path, "L0-2A", PIECE, &err);
    CHECK(m != NULL, "manifest: %s", err.msg);
    if (!m) return;
    test_server s[3];
    for (int i = 0; i < 3; i++) server_start(&s[i], path, 4096);
    test_server *srv[3] = {&s[0], &s[1], &s[2]};
    mt_fetch_progress st;
    progress_log log;

    /* three good sources, the last a seed: identical file, pieces spread over the peers */
    int rc = fetch(m, srv, 3, 1, out, &st, &log, &err);
    CHECK(rc == 0 && same_file(out, data, FILE_BYTES), "fetch from 3: %s", err.msg);
    CHECK(!exists(part_of(out, ".part")) && !exists(part_of(out, ".part.map")),
          "the .part files stay after a finished fetch");
    int g0 = atomic_load(&s[0].shard_gets), g1 = atomic_load(&s[1].shard_gets),
        g2 = atomic_load(&s[2].shard_gets);
    CHECK(st.pieces_done == N_PIECES && st.pieces_total == N_PIECES &&
              st.pieces_from_peers == N_PIECES && st.pieces_from_seed == 0 &&
              st.bytes_done == FILE_BYTES && st.bytes_total == FILE_BYTES && st.bytes_reused == 0 &&
              st.bad_pieces == 0,
          "fetch from 3: %d/%d pieces, %d from peers, %d from the seed, %llu bytes", st.pieces_done,
          st.pieces_total, st.pieces_from_peers, st.pieces_from_seed,
          (unsigned long long)st.bytes_done);
    CHECK(g0 + g1 == N_PIECES && g0 >= N_PIECES / 4 && g1 >= N_PIECES / 4 && g2 == 0,
          "pieces per source: %d %d, seed %d", g0, g1, g2);
    CHECK(log.calls == N_PIECES && log.monotonic && log.last_done == FILE_BYTES,
          "progress: %d calls, last %llu", log.calls, (unsigned long long)log.last_done);
    remove_outputs(out);

    /* the peers fail: the seed serves everything */
    for (int i = 0; i < 3; i++) atomic_store(&s[i].shard_gets, 0);
    s[0].fail_after = s[1].fail_after = 0;
    rc = fetch(m, srv, 3, 1, out, &st, NULL, &err);
    CHECK(rc == 0 && same_file(out, data, FILE_BYTES) && st.pieces_from_seed == N_PIECES &&
              st.pieces_from_peers == 0 && atomic_load(&s[2].shard_gets) == N_PIECES,
          "peers down: %s; %d from the seed", err.msg, st.pieces_from_seed);
    remove_outputs(out);
    s[0].fail_after = s[1].fail_after = -1;

    /* a peer that sends corrupt bytes: rejected, fetched elsewhere */
    for (int i = 0; i < 3; i++) atomic_store(&s[i].shard_gets, 0);
    s[0].file = bad_all;
    rc = fetch(m, srv, 3, 1, out, &st, NULL, &err);
    CHECK(rc == 0 && same_file(out, data, FILE_BYTES), "corrupt peer: %s", err.msg);
    CHECK(st.bad_pieces >= 1 && st.bad_pieces == atomic_load(&s[0].shard_gets) &&
              st.pieces_from_peers == N_PIECES && atomic_load(&s[2].shard_gets) == 0,
          "corrupt peer: %d bad pieces, the bad peer answered %d, the seed %d", st.bad_pieces,
          atomic_load(&s[0].shard_gets), atomic_load(&s[2].shard_gets));
    remove_outputs(out);

    /* every source bad from piece 40 on: a clear error, the first 40 pieces kept */
    for (int i = 0; i < 3; i++) s[i].file = bad_tail;
    rc = fetch(m, srv, 3, 1, out, &st, NULL, &err);
    CHECK(rc < 0 && strstr(err.msg, "does not match its hash") &&
              strstr(err.msg, "kept for the next try") && st.pieces_done == 40 &&
              st.bad_pieces >= 6,
          "all bad: rc %d, %d pieces, %d bad: %s", rc, st.pieces_done, st.bad_pieces, err.msg);
    CHECK(!exists(out) && exists(part_of(out, ".part")) && exists(part_of(out, ".part.map")),
          "all bad: the partial is not kept");
    /* resume from good sources: only the missing pieces are downloaded */
    for (int i = 0; i < 3; i++) s[i].file = path, atomic_store(&s[i].shard_gets, 0);
    rc = fetch(m, srv, 3, 1, out, &st, NULL, &err);
    int gets = atomic_load(&s[0].shard_gets) + atomic_load(&s[1].shard_gets) +
               atomic_load(&s[2].shard_gets);
    CHECK(rc == 0 && same_file(out, data, FILE_BYTES) && st.bytes_reused == 40ull * PIECE &&
              gets == N_PIECES - 40 && st.pieces_done == N_PIECES,
          "resume after bad pieces: %s; reused %llu, %d downloads", err.msg,
          (unsigned long long)st.bytes_reused, gets);
    remove_outputs(out);

    /* a single source that breaks down after 25 pieces, then a fetch from the others */
    for (int i = 0; i < 3; i++) atomic_store(&s[i].shard_gets, 0);
    s[2].fail_after = 25;
    rc = fetch(m, srv + 2, 1, 1, out, &st, NULL, &err);
    CHECK(rc < 0 && strstr(err.msg, "broke down") && st.pieces_done == 25 &&
              exists(part_of(out, ".part")),
          "interrupted: rc %d, %d pieces: %s", rc, st.pieces_done, err.msg);
    s[2].fail_after = -1;
    rc = fetch(m, srv, 2, 0, out, &st, NULL, &err);
    gets = atomic_load(&s[0].shard_gets) + atomic_load(&s[1].shard_gets);
    CHECK(rc == 0 && same_file(out, data, FILE_BYTES) && st.bytes_reused == 25ull * PIECE &&
              gets == N_PIECES - 25 && st.pieces_from_peers == N_PIECES - 25,
          "resume: %s; reused %llu, %d downloads", err.msg, (unsigned long long)st.bytes_reused,
          gets);
    remove_outputs(out);

    /* a .part whose map claims pieces 0-9, piece 5 of them corrupt: re-verified, fetched again */
    uint8_t *part = calloc(1, FILE_BYTES);
    memcpy(part, data, 10 * PIECE);
    part[5 * PIECE + 100] ^= 1;
    write_file(part_of(out, ".part"), part, FILE_BYTES);
    uint8_t map[N_PIECES] = {0};
    memset(map, 1, 10);
    write_file(part_of(out, ".part.map"), map, N_PIECES);
    free(part);
    for (int i = 0; i < 3; i++) atomic_store(&s[i].shard_gets, 0);
    rc = fetch(m, srv, 3, 1, out, &st, NULL, &err);
    gets = atomic_load(&s[0].shard_gets) + atomic_load(&s[1].shard_gets) +
           atomic_load(&s[2].shard_gets);
    CHECK(rc == 0 && same_file(out, data, FILE_BYTES) && st.bytes_reused == 9ull * PIECE &&
              gets == N_PIECES - 9 && st.bad_pieces == 0,
          "lying map: %s; reused %llu, %d downloads", err.msg, (unsigned long long)st.bytes_reused,
          gets);
    remove_outputs(out);

    /* four fetches of one file at once (requesters sharing a cache): they take turns, all
     * succeed, and the ones that waited find the file fetched and download nothing */
    for (int i = 0; i < 3; i++) atomic_store(&s[i].shard_gets, 0);
    together t[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        t[k] = (together){.m = m, .srv = srv, .out = out};
        CHECK(pthread_create(&th[k], NULL, together_main, &t[k]) == 0, "thread %d", k);
    }
    int ok = 0, reused = 0;
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        ok += t[k].rc == 0;
        reused += t[k].st.bytes_reused == FILE_BYTES;
        if (t[k].rc) fprintf(stderr, "  fetch %d of 4 at once: %s\n", k, t[k].err.msg);
    }
    gets = atomic_load(&s[0].shard_gets) + atomic_load(&s[1].shard_gets) +
           atomic_load(&s[2].shard_gets);
    CHECK(ok == 4 && same_file(out, data, FILE_BYTES) && gets == N_PIECES && reused == 3 &&
              !exists(part_of(out, ".part")) && !exists(part_of(out, ".part.map")),
          "4 fetches at once: %d succeeded, %d found the file, %d pieces downloaded (wanted 4, 3,"
          " %d)",
          ok, reused, gets, N_PIECES);
    remove_outputs(out);

    /* no room for the shard (a file size limit of a third of it): refused before any piece
     * is downloaded, the directory named, no partial kept; also when an earlier fetch left
     * a partial file behind */
    struct rlimit was;
    getrlimit(RLIMIT_FSIZE, &was);
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_sa;
    sigaction(SIGXFSZ, &ign, &old_sa); /* the limit gives EFBIG instead of killing us */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* an earlier try's partial: 10 pieces and their map */
            write_file(part_of(out, ".part"), data, 10 * PIECE);
            uint8_t map10[N_PIECES] = {0};
            memset(map10, 1, 10);
            write_file(part_of(out, ".part.map"), map10, N_PIECES);
        }
        for (int i = 0; i < 3; i++) atomic_store(&s[i].shard_gets, 0);
        struct rlimit lim = {FILE_BYTES / 3, was.rlim_max};
        setrlimit(RLIMIT_FSIZE, &lim);
        rc = fetch(m, srv, 3, 1, out, &st, NULL, &err);
        setrlimit(RLIMIT_FSIZE, &was);
        gets = atomic_load(&s[0].shard_gets) + atomic_load(&s[1].shard_gets) +
               atomic_load(&s[2].shard_gets);
        char want[400];
        snprintf(want, sizeof want, "no space left in %s for its %d bytes", dir, FILE_BYTES);
        CHECK(rc < 0 && st.no_space && strstr(err.msg, want) && strstr(err.msg, "bytes free"),
              "no room (pass %d): rc %d, no_space %d: %s", pass, rc, st.no_space, err.msg);
        CHECK(gets == 0, "no room (pass %d): %d pieces downloaded for nothing", pass, gets);
        CHECK(!exists(out) && !exists(part_of(out, ".part")) && !exists(part_of(out, ".part.map")),
              "no room (pass %d): a partial file is left", pass);
    }
    sigaction(SIGXFSZ, &old_sa, NULL);
    rc = fetch(m, srv, 3, 1, out, &st, NULL, &err); /* with room again: fine */
    CHECK(rc == 0 && !st.no_space && same_file(out, data, FILE_BYTES), "after the limit: %s",
          err.msg);
    remove_outputs(out);

    /* no sources, and a manifest that is not one */
    rc = fetch(m, srv, 0, 0, out, &st, NULL, &err);
    CHECK(rc < 0 && strstr(err.msg, "no source"), "no sources: %s", err.msg);
    atomic_store(&s[0].shard_gets, 0);
    json_t *bad = json_deep_copy(m);
    json_object_set_new(bad, "name", json_string("../../x"));
    rc = fetch(bad, srv, 3, 1, out, &st, NULL, &err);
    CHECK(rc < 0 && strstr(err.msg, "name") && atomic_load(&s[0].shard_gets) == 0,
          "a bad manifest was fetched: %s", err.msg);
    json_decref(bad);
    for (int i = 0; i < 3; i++) server_stop(&s[i]);
    json_decref(m);
    unlink(bad_all);
    unlink(bad_tail);
}

int main(void) {
    if (sodium_init() < 0) return 1;
    char dir[] = "/tmp/mt-test-control-XXXXXX";
    const char *tmp = getenv("TMPDIR");
    char dirbuf[300];
    snprintf(dirbuf, sizeof dirbuf, "%s/mt-test-control-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *d = mkdtemp(tmp && *tmp ? dirbuf : dir);
    CHECK(d != NULL, "mkdtemp: %s", strerror(errno));
    if (!d) return check_report("test_control");

    test_schedule();
    test_http_json();
    test_http_files(d);
    test_http_timeout();
    test_http_stop();

    char path[400];
    snprintf(path, sizeof path, "%s/shard.gguf", d);
    uint8_t *data = random_bytes(FILE_BYTES, 7);
    write_file(path, data, FILE_BYTES);
    test_manifests(path, data);
    test_fetch(d, path, data);
    free(data);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", d);
    return check_report("test_control");
}

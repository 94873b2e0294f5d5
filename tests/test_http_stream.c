/* test_http_stream.c - answers written later (http.h streams) on a real
 * server over loopback: a body reaches the client while the producer is
 * still writing; a whole reply can come later, with its own status and
 * headers; a producer that drops a request gets the client a 500; a client
 * that hangs up turns mt_http_stream_gone() true; 24 slow streams on 2
 * server threads overlap (no thread waits for a producer); stopping the
 * server with parked connections neither hangs nor leaks; errors the server
 * answers itself (413) take the configured shape. The admit hook: a body
 * is limited per request (a large one only on the path it allows, with
 * the token it wants; elsewhere 413 naming the path), and a request it
 * refuses is answered from its headers without a byte of its body read
 * (mt_http_stats.refused_unread and body_bytes). */
#include "check.h"
#include "moontail/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- producers ------------------------------------------------------------------------------ */

static atomic_int live_producers;
static atomic_int first_read;  /* the client saw the first piece of /stream */
static atomic_int gone_seen;   /* /endless noticed its client left */
static atomic_int hang_result; /* what /hang's late write returned (+1: not yet) */
static atomic_int later_again; /* /later's second reply: 1 refused, -1 accepted, 0 not yet */

typedef struct job {
    mt_http_stream *st;
    char what[32];
} job;

static void *producer(void *arg) {
    job *j = arg;
    mt_http_stream *st = j->st;
    if (strcmp(j->what, "/stream") == 0) {
        mt_http_stream_begin(st, 200, "text/plain", json_pack("{s:s}", "X-Kind", "stream"));
        mt_http_stream_write(st, "one\n", 4);
        for (int i = 0; i < 500 && !atomic_load(&first_read); i++) sleep_ms(10);
        mt_http_stream_write(st, "two\n", 4);
        mt_http_stream_end(st);
    } else if (strcmp(j->what, "/later") == 0) {
        sleep_ms(50);
        mt_http_response r = {.status = 201,
                              .json = json_pack("{s:i}", "x", 1),
                              .headers = json_pack("{s:s}", "X-Test", "y")};
        mt_http_stream_reply(st, &r);
        mt_http_response again = {.status = 200, .json = json_object()};
        /* checked by main: CHECK's counters are not for other threads */
        atomic_store(&later_again, mt_http_stream_reply(st, &again) == -1 ? 1 : -1);
    } else if (strcmp(j->what, "/slow") == 0) {
        sleep_ms(200);
        mt_http_stream_begin(st, 200, "text/plain", NULL);
        mt_http_stream_write(st, "done", 4);
        mt_http_stream_end(st);
    } else if (strcmp(j->what, "/endless") == 0) {
        mt_http_stream_begin(st, 200, "text/plain", NULL);
        for (int i = 0; i < 1000; i++) {
            if (mt_http_stream_write(st, "tick\n", 5) != 0 || mt_http_stream_gone(st)) {
                atomic_store(&gone_seen, 1);
                break;
            }
            sleep_ms(5);
        }
        mt_http_stream_end(st);
    } else if (strcmp(j->what, "/hang") == 0) {
        for (int i = 0; i < 600 && !mt_http_stream_gone(st); i++) sleep_ms(5);
        atomic_store(&hang_result, mt_http_stream_begin(st, 200, "text/plain", NULL) == 0 &&
                                           mt_http_stream_write(st, "late", 4) == 0
                                       ? 0
                                       : -1);
    }
    /* "/drop": nothing at all */
    mt_http_stream_release(st);
    free(j);
    atomic_fetch_sub(&live_producers, 1);
    return NULL;
}

static void handler(void *ctx, const mt_http_request *req, mt_http_response *resp) {
    (void)ctx;
    if (strcmp(req->path, "/upload") == 0) {
        resp->json = json_pack("{s:I}", "len", (json_int_t)req->body_len);
        return;
    }
    if (strcmp(req->path, "/plain") == 0) {
        resp->json = json_pack("{s:b}", "ok", 1);
        resp->headers = json_pack("{s:s}", "X-Plain", "1");
        return;
    }
    mt_http_stream *st = mt_http_stream_new();
    job *j = malloc(sizeof *j);
    j->st = mt_http_stream_ref(st);
    snprintf(j->what, sizeof j->what, "%s", req->path);
    atomic_fetch_add(&live_producers, 1);
    pthread_t t;
    pthread_create(&t, NULL, producer, j);
    pthread_detach(t);
    resp->stream = st;
}

static json_t *error_body(int status, const char *message) {
    return json_pack("{s:{s:s, s:i}}", "error", "message", message, "status", status);
}

/* The admit hook of the second server: POST /upload takes 200,000 bytes with the token
 * "ok" and is refused (401) without it; every other request has the server's limit. */
static size_t admit(void *ctx, const mt_http_request *req, mt_http_response *resp) {
    (void)ctx;
    if (strcmp(req->path, "/upload") != 0) return 0;
    const char *t = mt_http_bearer(req);
    if (!t || strcmp(t, "ok") != 0) {
        resp->status = 401;
        resp->json = error_body(401, "no key");
        return 0;
    }
    return 200000;
}

/* ---- a raw client ------------------------------------------------------------------------- */

static int connect_to(const char *addr) {
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int get(const char *addr, const char *path) {
    int fd = connect_to(addr);
    char req[256];
    int n =
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (fd >= 0 && write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads into buf (NUL-terminated) until it holds want or the peer closes;
 * returns the length. */
static size_t read_until(int fd, char *buf, size_t cap, size_t len, const char *want) {
    while (len + 1 < cap && (!want || !strstr(buf, want))) {
        ssize_t k = read(fd, buf + len, cap - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
        buf[len] = 0;
    }
    return len;
}

typedef struct slow_arg {
    const char *addr;
    bool ok;
} slow_arg;

static void *slow_client(void *arg) {
    slow_arg *a = arg;
    char buf[2048] = "";
    int fd = get(a->addr, "/slow");
    read_until(fd, buf, sizeof buf, 0, NULL);
    close(fd);
    a->ok = strstr(buf, "HTTP/1.1 200") && strstr(buf, "done");
    return NULL;
}

/* Sends a POST of path announcing len body bytes (with the bearer token when given), then
 * up to 64 KiB of them while the server takes them; the answer's first bytes into buf. */
static void post_raw(const char *addr, const char *path, const char *token, size_t len, char *buf,
                     size_t cap) {
    int fd = connect_to(addr);
    buf[0] = 0;
    if (fd < 0) return;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n%s%s%s"
                     "Connection: close\r\n\r\n",
                     path, len, token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "");
    static char body[65536];
    memset(body, 'a', sizeof body);
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) == n) /* the server may close before the body */
        (void)!send(fd, body, len < sizeof body ? len : sizeof body, MSG_NOSIGNAL | MSG_DONTWAIT);
    read_until(fd, buf, cap, 0, NULL);
    close(fd);
}

/* Per-request body limits and refusals before the body (the admit hook). */
static void check_admit(void) {
    mt_error err = {{0}};
    mt_http_server_config c = {.addr = "127.0.0.1:0",
                               .threads = 2,
                               .max_body = 1000,
                               .admit = admit,
                               .handler = handler,
                               .error_body = error_body};
    mt_http_server *s = mt_http_server_start_cfg(&c, &err);
    CHECK(s, "server with an admit hook: %s", err.msg);
    if (!s) return;
    const char *addr = mt_http_server_addr(s);
    char url[256], buf[4096];
    mt_http_stats st0, st1;

    /* the path and token it allows: a body far over the server's limit goes through */
    snprintf(url, sizeof url, "http://%s/upload", addr);
    char *pad = malloc(150001);
    memset(pad, 'b', 150000);
    pad[150000] = 0;
    json_t *big = json_pack("{s:s}", "pad", pad), *out = NULL;
    int st = mt_http_json("POST", url, "ok", big, 5000, &out, &err);
    CHECK(st == 200 && json_integer_value(json_object_get(out, "len")) > 150000,
          "an allowed large upload: %d %s", st, err.msg);
    json_decref(out);

    /* the same body elsewhere: 413 naming the path and the limit */
    snprintf(url, sizeof url, "http://%s/plain", addr);
    out = NULL;
    st = mt_http_json("POST", url, "ok", big, 5000, &out, &err);
    const char *msg = json_string_value(json_object_get(json_object_get(out, "error"), "message"));
    CHECK(st == 413 && msg && strstr(msg, "POST /plain") && strstr(msg, "1000 bytes"),
          "a large body on another path: %d %s", st, msg ? msg : err.msg);
    json_decref(out);
    json_decref(big);
    free(pad);

    /* no token: 401 from the headers, not a byte of the body read */
    mt_http_server_stats(s, &st0);
    post_raw(addr, "/upload", NULL, 150000, buf, sizeof buf);
    mt_http_server_stats(s, &st1);
    CHECK(strstr(buf, "HTTP/1.1 401") && strstr(buf, "no key"),
          "an upload without its token: %.80s", buf);
    CHECK(st1.refused_unread == st0.refused_unread + 1 && st1.body_bytes == st0.body_bytes,
          "the refused upload's body was read: %llu bytes, %llu refused unread",
          (unsigned long long)(st1.body_bytes - st0.body_bytes),
          (unsigned long long)(st1.refused_unread - st0.refused_unread));
    /* announced too large for its path: 413, unread too */
    post_raw(addr, "/plain", "ok", 150000, buf, sizeof buf);
    mt_http_server_stats(s, &st0);
    CHECK(strstr(buf, "HTTP/1.1 413") && st0.refused_unread == st1.refused_unread + 1 &&
              st0.body_bytes == st1.body_bytes,
          "an announced large body: %.80s", buf);
    mt_http_server_stop(s);
}

int main(void) {
    check_admit();
    mt_error err = {{0}};
    mt_http_server_config c = {.addr = "127.0.0.1:0",
                               .threads = 2,
                               .max_body = 1000,
                               .handler = handler,
                               .error_body = error_body};
    mt_http_server *s = mt_http_server_start_cfg(&c, &err);
    CHECK(s, "server: %s", err.msg);
    if (!s) return check_report("test_http_stream");
    const char *addr = mt_http_server_addr(s);
    char url[256], buf[8192];

    /* a body that flows: "one" arrives while the producer waits to write "two" */
    int fd = get(addr, "/stream");
    size_t len = read_until(fd, buf, sizeof buf, 0, "one\n");
    CHECK(strstr(buf, "one\n") && !strstr(buf, "two\n"), "first piece alone: %s", buf);
    CHECK(strstr(buf, "HTTP/1.1 200") && strstr(buf, "X-Kind: stream") &&
              strstr(buf, "Transfer-Encoding: chunked"),
          "head of a streamed body: %s", buf);
    atomic_store(&first_read, 1);
    len = read_until(fd, buf, sizeof buf, len, "0\r\n\r\n");
    CHECK(strstr(buf, "two\n") && strstr(buf, "0\r\n\r\n"), "the rest and the last chunk: %s", buf);
    close(fd);

    /* a whole reply, later, with its own status and header */
    fd = get(addr, "/later");
    buf[0] = 0;
    read_until(fd, buf, sizeof buf, 0, NULL);
    close(fd);
    CHECK(strstr(buf, "HTTP/1.1 201") && strstr(buf, "X-Test: y") && strstr(buf, "{\"x\":1}"),
          "later reply: %s", buf);

    /* a producer that drops the request: 500 in the configured error shape */
    snprintf(url, sizeof url, "http://%s/drop", addr);
    json_t *out = NULL;
    int st = mt_http_json("GET", url, NULL, NULL, 5000, &out, &err);
    CHECK(st == 500 &&
              json_integer_value(json_object_get(json_object_get(out, "error"), "status")) == 500,
          "dropped request: %d", st);
    json_decref(out);

    /* plain responses keep working, with extra headers */
    fd = get(addr, "/plain");
    buf[0] = 0;
    read_until(fd, buf, sizeof buf, 0, NULL);
    close(fd);
    CHECK(strstr(buf, "HTTP/1.1 200") && strstr(buf, "X-Plain: 1"), "plain: %s", buf);

    /* the server's own 413, in the configured shape */
    snprintf(url, sizeof url, "http://%s/plain", addr);
    json_t *big = json_pack("{s:s}", "pad", "");
    char pad[2000];
    memset(pad, 'a', sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    json_object_set_new(big, "pad", json_string(pad));
    out = NULL;
    st = mt_http_json("POST", url, NULL, big, 5000, &out, &err);
    CHECK(st == 413 &&
              json_integer_value(json_object_get(json_object_get(out, "error"), "status")) == 413,
          "413 shape: %d", st);
    json_decref(out);
    json_decref(big);

    /* a client that hangs up: the producer learns it */
    fd = get(addr, "/endless");
    buf[0] = 0;
    read_until(fd, buf, sizeof buf, 0, "tick");
    close(fd);
    for (int i = 0; i < 400 && !atomic_load(&gone_seen); i++) sleep_ms(5);
    CHECK(atomic_load(&gone_seen), "the producer did not notice the client left");

    /* 24 streams that take 200 ms each, on 2 server threads: they overlap */
    enum { N = 24 };
    pthread_t th[N];
    slow_arg sa[N];
    double t0 = now_ms();
    for (int i = 0; i < N; i++) {
        sa[i] = (slow_arg){addr, false};
        pthread_create(&th[i], NULL, slow_client, &sa[i]);
    }
    int good = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        good += sa[i].ok;
    }
    double ms = now_ms() - t0;
    CHECK(good == N && ms < 2500, "%d of %d slow streams in %.0f ms (serial: %d ms)", good, N, ms,
          N * 200 / 2);
    printf("test_http_stream: %d streams of 200 ms each on 2 threads took %.0f ms\n", N, ms);

    /* stop while a connection is parked: no hang, the producer's writes fail */
    atomic_store(&hang_result, 1);
    fd = get(addr, "/hang");
    sleep_ms(100);
    t0 = now_ms();
    mt_http_server_stop(s);
    ms = now_ms() - t0;
    CHECK(ms < 2000, "stop took %.0f ms", ms);
    buf[0] = 0;
    read_until(fd, buf, sizeof buf, 0, NULL);
    close(fd);
    CHECK(!strstr(buf, "late"), "a parked request got an answer after stop: %s", buf);
    for (int i = 0; i < 400 && atomic_load(&hang_result) == 1; i++) sleep_ms(5);
    CHECK(atomic_load(&hang_result) == -1, "a write after stop succeeded (%d)",
          atomic_load(&hang_result));
    for (int i = 0; i < 400 && atomic_load(&live_producers) > 0; i++) sleep_ms(5);
    CHECK(atomic_load(&live_producers) == 0, "%d producers still running",
          atomic_load(&live_producers));
    CHECK(atomic_load(&later_again) == 1, "a second reply to /later was not refused (%d)",
          atomic_load(&later_again));
    return check_report("test_http_stream");
}

/* api_batch.c - the batch runner (api_batch.h): reads and checks a batch's JSONL input,
 * keeps its state directory, resumes from the results already written, and runs the rest
 * with many requests in flight, each result appended as one fsync'd line. Shared by
 * `moontail batch` and serve's /v1/batches; the requests themselves go through a submit
 * function (api_server.c's, the same checks and engine as /v1/chat/completions). */
#include "api_batch.h"
#include "moontail/clock.h"
#include "moontail/file.h"
#include "moontail/file_write.h"
#include "moontail/json_line.h"
#include "moontail/compat.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct batch_req {
    char *custom_id;
    api_kind kind;
    char *body;   /* compact JSON */
    char *result; /* the output line (with its '\n'), or NULL; guarded by b->mu */
    bool ok;      /* result's status_code is 200 */
    int tries;    /* submitted in this run (guarded by b->mu) */
} batch_req;

struct api_batch {
    char *dir;
    batch_req *req;
    int64_t n;
    int64_t *by_id;     /* indices of req sorted by custom_id */
    pthread_mutex_t mu; /* everything below, and req[].result/ok */
    pthread_cond_t cv;
    int out_fd; /* output.jsonl, O_APPEND */
    int inflight;
    bool stopping;         /* a copy of *stop once it turned true */
    const bool *stop;      /* api_batch_run's (may be NULL) */
    bool write_failed;     /* a result could not be written */
    char write_error[400]; /* why */
    api_batch_stats st;
    double t0;
    void (*progress)(void *, const api_batch_stats *);
    void *progress_ctx;
};

/* ---- small file helpers ------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) abort(); /* a path: too small to report */
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The whole file (NUL-terminated) into *out, its size into *len; -1 with err filled (naming
 * the file as name, or as its path when name is NULL). */
static int read_all(const char *path, const char *name, int64_t max_bytes, char **out, size_t *len,
                    mt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!name) name = path;
    if (!f) return mt_error_set(err, "%s: cannot open: %s", name, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return mt_error_set(err, "%s: not a regular file", name);
    }
    if (max_bytes > 0 && sb.st_size > max_bytes) {
        fclose(f);
        return mt_error_set(err, "%s: %lld bytes, more than the %lld allowed; split the batch",
                            name, (long long)sb.st_size, (long long)max_bytes);
    }
    char *p = malloc((size_t)sb.st_size + 1);
    if (!p) {
        fclose(f);
        return mt_error_set(err, "%s: out of memory for %lld bytes", name, (long long)sb.st_size);
    }
    size_t got = fread(p, 1, (size_t)sb.st_size, f);
    bool bad = ferror(f) || got != (size_t)sb.st_size;
    fclose(f);
    if (bad) {
        free(p);
        return mt_error_set(err, "%s: read error (the file changed while read?)", name);
    }
    p[got] = 0;
    *out = p;
    *len = got;
    return 0;
}

static int write_fully(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* ---- the input ---------------------------------------------------------------------------- */

static int cmp_id(const void *a, const void *b, void *ctx) {
    const batch_req *r = ctx;
    return strcmp(r[*(const int64_t *)a].custom_id, r[*(const int64_t *)b].custom_id);
}

/* The request whose custom_id is id, or -1. */
static int64_t find_id(const api_batch *b, const char *id) {
    int64_t lo = 0, hi = b->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(b->req[b->by_id[mid]].custom_id, id);
        if (c == 0) return b->by_id[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* One input line (NUL-terminated, n bytes) into r. */
static int parse_line(const char *name, int64_t line, const char *s, size_t n, const char *endpoint,
                      batch_req *r, mt_error *err) {
    json_error_t je;
    json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return mt_error_set(err,
                            "%s line %lld: not JSON: %s (column %d); each line must be one"
                            " request object",
                            name, (long long)line, je.text, je.column);
    int rc = -1;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (strcmp(k, "custom_id") && strcmp(k, "method") && strcmp(k, "url") &&
            strcmp(k, "body")) {
            mt_error_set(err,
                         "%s line %lld: unknown field '%.60s'; a line has custom_id, method,"
                         " url and body",
                         name, (long long)line, k);
            goto out;
        }
    }
    json_t *id = json_object_get(o, "custom_id"), *method = json_object_get(o, "method"),
           *url = json_object_get(o, "url"), *body = json_object_get(o, "body");
    if (!json_is_object(o)) {
        mt_error_set(err, "%s line %lld: not a JSON object", name, (long long)line);
    } else if (!json_is_string(id) || json_string_length(id) == 0 ||
               json_string_length(id) > API_BATCH_MAX_CUSTOM_ID ||
               strlen(json_string_value(id)) != json_string_length(id)) {
        mt_error_set(err, "%s line %lld: 'custom_id' must be a string of 1 to %d bytes", name,
                     (long long)line, API_BATCH_MAX_CUSTOM_ID);
    } else if (!json_is_string(method) || strcmp(json_string_value(method), "POST") != 0) {
        mt_error_set(err, "%s line %lld: 'method' must be \"POST\"", name, (long long)line);
    } else if (!json_is_string(url) ||
               (strcmp(json_string_value(url), "/v1/chat/completions") != 0 &&
                strcmp(json_string_value(url), "/v1/completions") != 0)) {
        mt_error_set(err,
                     "%s line %lld: 'url' must be \"/v1/chat/completions\" or"
                     " \"/v1/completions\"",
                     name, (long long)line);
    } else if (endpoint && strcmp(json_string_value(url), endpoint) != 0) {
        mt_error_set(err,
                     "%s line %lld: 'url' is %.60s, but the batch's endpoint is %s; every"
                     " line must use it",
                     name, (long long)line, json_string_value(url), endpoint);
    } else if (!json_is_object(body)) {
        mt_error_set(err, "%s line %lld: 'body' must be a JSON object (the request's body)", name,
                     (long long)line);
    } else {
        r->custom_id = strdup(json_string_value(id));
        r->kind = strcmp(json_string_value(url), "/v1/chat/completions") == 0 ? API_CHAT
                                                                              : API_COMPLETIONS;
        r->body = json_dumps(body, JSON_COMPACT);
        if (!r->custom_id || !r->body)
            mt_error_set(err, "%s: out of memory", name);
        else
            rc = 0;
    }
out:
    json_decref(o);
    return rc;
}

static int parse_input(api_batch *b, const char *name, char *data, size_t len, const char *endpoint,
                       mt_error *err) {
    int64_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += data[i] == '\n';
    if (len > 0 && data[len - 1] != '\n') lines++;
    if (lines == 0)
        return mt_error_set(err, "%s: the file is empty; give one request a line", name);
    if (lines > API_BATCH_MAX_LINES)
        return mt_error_set(err, "%s: %lld requests, more than %d in one batch; split the file",
                            name, (long long)lines, API_BATCH_MAX_LINES);
    if (!(b->req = calloc((size_t)lines, sizeof *b->req)) ||
        !(b->by_id = malloc((size_t)lines * sizeof *b->by_id)))
        return mt_error_set(err, "%s: out of memory", name);
    char *p = data, *end = data + len;
    for (int64_t line = 1; p < end; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        if (memchr(p, 0, (size_t)(e - p)))
            return mt_error_set(err, "%s line %lld: holds a NUL byte", name, (long long)line);
        size_t n = (size_t)(e - p);
        if (n > 0 && p[n - 1] == '\r') n--;
        char saved = p[n];
        p[n] = 0;
        bool blank = strspn(p, " \t") == n;
        int rc = blank ? mt_error_set(err, "%s line %lld: empty; give one request a line", name,
                                      (long long)line)
                       : parse_line(name, line, p, n, endpoint, &b->req[b->n], err);
        p[n] = saved;
        if (rc) return -1;
        b->by_id[b->n] = b->n;
        b->n++;
        p = nl ? nl + 1 : end;
    }
    mt_qsort_r(b->by_id, (size_t)b->n, sizeof *b->by_id, cmp_id, b->req);
    for (int64_t i = 1; i < b->n; i++) {
        const batch_req *x = &b->req[b->by_id[i - 1]], *y = &b->req[b->by_id[i]];
        if (strcmp(x->custom_id, y->custom_id) == 0) {
            int64_t l1 = b->by_id[i - 1] + 1, l2 = b->by_id[i] + 1;
            return mt_error_set(err,
                                "%s lines %lld and %lld: the custom_id '%.80s' is used twice;"
                                " each request needs its own",
                                name, (long long)(l1 < l2 ? l1 : l2),
                                (long long)(l1 < l2 ? l2 : l1), x->custom_id);
        }
    }
    return 0;
}

/* ---- the state directory ------------------------------------------------------------------ */

static void hash_hex(const char *p, size_t n, char out[65]) {
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)p, n, NULL, 0);
    sodium_bin2hex(out, 65, h, sizeof h);
}

int api_batch_private_dir(const char *dir, const char *what, mt_error *err) {
    if (mkdir(dir, 0700) && errno != EEXIST)
        return mt_error_set(err, "%s: cannot create the %s: %s", dir, what, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return mt_error_set(err, "%s: not a directory; give another %s", dir, what);
    if (sb.st_mode & 077)
        return mt_error_set(err, "%s: others may read this %s (mode %03o); chmod 700 it", dir, what,
                            (unsigned)(sb.st_mode & 0777));
    return 0;
}

/* Reads output.jsonl: each complete line naming an input custom_id not seen before is that
 * request's result; the rest is dropped, the file then rewritten with the kept lines. */
static int load_results(api_batch *b, const char *path, mt_error *err) {
    char *data = NULL;
    size_t len = 0;
    if (access(path, F_OK) != 0) return 0;
    if (read_all(path, NULL, 0, &data, &len, err)) return -1;
    size_t kept_bytes = 0;
    bool dropped = false;
    char *p = data, *end = data + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) { /* a line cut by a crash */
            dropped = true;
            break;
        }
        json_t *o = json_loadb(p, (size_t)(nl - p), 0, NULL);
        json_t *id = json_object_get(o, "custom_id"), *resp = json_object_get(o, "response");
        int64_t i = json_is_string(id) ? find_id(b, json_string_value(id)) : -1;
        if (i >= 0 && !b->req[i].result && json_is_object(resp)) {
            b->req[i].result = mt_strndup(p, (size_t)(nl - p + 1));
            if (!b->req[i].result) abort(); /* one line: too small to report */
            json_t *sc = json_object_get(resp, "status_code");
            b->req[i].ok = json_is_integer(sc) && json_integer_value(sc) == 200;
            b->st.done++;
            b->st.failed += !b->req[i].ok;
            kept_bytes += (size_t)(nl - p + 1);
        } else {
            dropped = true;
        }
        json_decref(o);
        p = nl + 1;
    }
    free(data);
    if (!dropped) return 0;
    /* rewrite with the kept lines only */
    char *keep = malloc(kept_bytes + 1), *q = keep;
    if (!keep) return mt_error_set(err, "%s: out of memory", path);
    for (int64_t i = 0; i < b->n; i++)
        if (b->req[i].result) {
            size_t n = strlen(b->req[i].result);
            memcpy(q, b->req[i].result, n);
            q += n;
        }
    int rc = mt_file_write_atomic(path, keep, kept_bytes, 0600, err);
    free(keep);
    return rc;
}

api_batch *api_batch_open(const char *dir, const char *input, const char *input_name,
                          const char *endpoint, int64_t max_bytes, mt_error *err) {
    api_batch *b = calloc(1, sizeof *b);
    if (!b) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    b->out_fd = -1;
    pthread_mutex_init(&b->mu, NULL);
    mt_cond_init_mono(&b->cv); /* wait_a_little's deadline is on the monotonic clock */
    char *in_copy = NULL, *state = NULL, *out = NULL, *data = NULL, *mine = NULL,
         *state_text = NULL;
    size_t len = 0, mine_len = 0;
    bool ok = false;
    if (!(b->dir = strdup(dir))) {
        mt_error_set(err, "out of memory");
        goto fail;
    }
    in_copy = path_join(dir, "input.jsonl");
    state = path_join(dir, "state.json");
    out = path_join(dir, "output.jsonl");
    bool have_state = access(state, F_OK) == 0;
    if (input) {
        if (read_all(input, input_name, max_bytes, &mine, &mine_len, err)) goto fail;
    }
    char hex[65];
    if (have_state) {
        /* the input is read and hashed once: with one given, its hash is compared with the
         * state's and it is parsed itself (the copy is not read); without, the copy is */
        if (api_batch_private_dir(dir, "state directory", err)) goto fail;
        if (!mine && read_all(in_copy, NULL, 0, &data, &len, err)) goto fail;
        char *text = mine ? mine : data;
        const size_t n = mine ? mine_len : len;
        hash_hex(text, n, hex);
        json_t *sj = json_load_file(state, 0, NULL);
        const char *want = json_string_value(json_object_get(sj, "input_blake2b"));
        json_t *bytes = json_object_get(sj, "input_bytes");
        bool same = want && strcmp(want, hex) == 0 && json_is_integer(bytes) &&
                    json_integer_value(bytes) == (json_int_t)n;
        json_decref(sj);
        if (!same && mine) {
            mt_error_set(err,
                         "%s holds the state of another input than %s; give the same"
                         " input to resume, or another --state directory for a new batch",
                         dir, input_name ? input_name : input);
            goto fail;
        }
        if (!same) {
            mt_error_set(err,
                         "%s: input.jsonl does not match state.json; the state directory"
                         " is damaged: remove it to start the batch again",
                         dir);
            goto fail;
        }
        if (parse_input(b,
                        !mine        ? in_copy
                        : input_name ? input_name
                                     : input,
                        text, n, endpoint, err))
            goto fail;
    } else {
        if (!mine) {
            mt_error_set(err, "%s: no batch state here (state.json is missing)", dir);
            goto fail;
        }
        /* check first: a refused file leaves no state behind */
        if (parse_input(b, input_name ? input_name : input, mine, mine_len, endpoint, err) ||
            api_batch_private_dir(dir, "state directory", err))
            goto fail;
        if (mt_file_write_atomic(in_copy, mine, mine_len, 0600, err)) goto fail;
        unlink(out); /* the results of an earlier, unfinished start */
        hash_hex(mine, mine_len, hex);
        json_t *sj = json_pack("{s:I, s:s, s:I}", "input_bytes", (json_int_t)mine_len,
                               "input_blake2b", hex, "requests", (json_int_t)b->n);
        state_text = sj ? json_dumps(sj, JSON_COMPACT) : NULL;
        json_decref(sj);
        if (!state_text) {
            mt_error_set(err, "out of memory");
            goto fail;
        }
        if (mt_file_write_atomic(state, state_text, strlen(state_text), 0600, err)) goto fail;
    }
    b->st.total = b->n;
    if (load_results(b, out, err)) goto fail;
    if ((b->out_fd = open(out, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        mt_error_set(err, "%s: cannot open for writing: %s", out, strerror(errno));
        goto fail;
    }
    mt_dir_sync(dir);
    ok = true;
fail: /* and the way out of success */
    free(in_copy);
    free(state);
    free(out);
    free(data);
    free(mine);
    free(state_text);
    if (ok) return b;
    api_batch_close(b);
    return NULL;
}

void api_batch_close(api_batch *b) {
    if (!b) return;
    for (int64_t i = 0; i < b->n; i++) {
        free(b->req[i].custom_id);
        free(b->req[i].body);
        free(b->req[i].result);
    }
    free(b->req);
    free(b->by_id);
    if (b->out_fd >= 0) close(b->out_fd);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b->dir);
    free(b);
}

/* ---- running ------------------------------------------------------------------------------ */

/* FOR TESTS ONLY (docs/testing.md): with MOONTAIL_TEST_BATCH_PAUSE_AFTER=N, the process stops
 * itself (SIGSTOP) once N results of this run are written, so a test can kill -9 it at that
 * point instead of after a sleep a fast run may outlast. Requests in flight then are lost
 * with the process, as in a real crash. */
static void test_pause(int64_t run_done) {
    const char *s = getenv("MOONTAIL_TEST_BATCH_PAUSE_AFTER");
    if (!s || !*s || strtoll(s, NULL, 10) != run_done) return;
    fflush(NULL);
    raise(SIGSTOP);
}

typedef struct batch_call {
    api_batch *b;
    int64_t i;
} batch_call;

/* A request's answer: one output line, written whole and fsync'd. */
static void collect(void *ctx, int status, json_t *body) {
    batch_call *c = ctx;
    api_batch *b = c->b;
    batch_req *r = &b->req[c->i];
    free(c);
    char id[48], rid[48];
    api_random_id(id, sizeof id, "batch_req_");
    api_random_id(rid, sizeof rid, "req_");
    json_int_t tokens =
        json_integer_value(json_object_get(json_object_get(body, "usage"), "completion_tokens"));
    json_t *line = json_pack("{s:s, s:s, s:{s:i, s:s, s:o}, s:n}", "id", id, "custom_id",
                             r->custom_id, "response", "status_code", status, "request_id", rid,
                             "body", body ? body : json_object(), "error");
    size_t n = 0; /* the line's bytes, its newline included */
    char *nl = line ? mt_json_line(line, 0, &n) : NULL;
    json_decref(line);
    pthread_mutex_lock(&b->mu);
    /* a request cut short because the work stops runs again next time; one the backend could
     * not serve (503: no route for now) runs again in the next pass, up to API_BATCH_TRIES */
    const bool stopping = b->stopping || (b->stop && __atomic_load_n(b->stop, __ATOMIC_RELAXED));
    bool keep = !(status == 503 && (stopping || r->tries < API_BATCH_TRIES));
    if (!keep && !stopping) b->st.retried++;
    if (keep && !nl) {
        b->write_failed = true;
        snprintf(b->write_error, sizeof b->write_error, "out of memory for a result");
    } else if (keep && !b->write_failed) {
        if (write_fully(b->out_fd, nl, n) || fdatasync(b->out_fd)) {
            b->write_failed = true;
            snprintf(b->write_error, sizeof b->write_error,
                     "%s/output.jsonl: cannot write a result: %s", b->dir, strerror(errno));
        } else {
            r->result = nl;
            nl = NULL;
            r->ok = status == 200;
            b->st.done++;
            b->st.run_done++;
            b->st.failed += status != 200;
            b->st.completion_tokens += tokens;
            b->st.seconds = now_s() - b->t0;
            if (b->progress) b->progress(b->progress_ctx, &b->st);
            test_pause(b->st.run_done);
        }
    }
    free(nl);
    b->inflight--;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Waits on b->cv for at most 0.2 s (b->mu held): *stop is polled. */
static void wait_a_little(api_batch *b) {
    struct timespec ts = mt_mono_after_ms(200);
    mt_cond_wait_until(&b->cv, &b->mu, &ts);
}

static bool should_stop(api_batch *b, const bool *stop) {
    if (stop && __atomic_load_n(stop, __ATOMIC_RELAXED)) b->stopping = true;
    return b->stopping || b->write_failed;
}

int api_batch_run(api_batch *b, api_batch_submit_fn submit, void *submit_ctx, const char *owner,
                  int parallel, const bool *stop,
                  void (*progress)(void *ctx, const api_batch_stats *st), void *progress_ctx,
                  mt_error *err) {
    if (parallel < 1) parallel = 1;
    pthread_mutex_lock(&b->mu);
    b->t0 = now_s();
    b->st.run_done = b->st.completion_tokens = b->st.retried = 0;
    b->st.seconds = 0;
    b->progress = progress;
    b->progress_ctx = progress_ctx;
    b->stopping = false;
    b->stop = stop;
    for (int64_t i = 0; i < b->n; i++) b->req[i].tries = 0;
    /* pass 2 and 3 run again what ended in 503 (a cell without a route for a while) */
    for (int pass = 0; pass < API_BATCH_TRIES && !should_stop(b, stop); pass++) {
        if (pass > 0) {
            while (b->inflight > 0) wait_a_little(b);
            if (b->st.done == b->n) break;
            /* a pause before the next pass: 2 s, then 4 s (the stop flag still polled) */
            for (int k = 0; k < 10 * pass && !should_stop(b, stop); k++) wait_a_little(b);
        }
        for (int64_t i = 0; i < b->n && !should_stop(b, stop); i++) {
            if (b->req[i].result) continue;
            for (;;) {
                while (!should_stop(b, stop) && b->inflight >= parallel) wait_a_little(b);
                if (should_stop(b, stop)) break;
                batch_call *c = malloc(sizeof *c);
                if (!c) abort(); /* two words: too small to report */
                *c = (batch_call){b, i};
                b->inflight++;
                b->req[i].tries++;
                pthread_mutex_unlock(&b->mu);
                int rc = submit(submit_ctx, owner, b->req[i].kind, b->req[i].body,
                                strlen(b->req[i].body), collect, c);
                pthread_mutex_lock(&b->mu);
                if (rc == 0) break;
                free(c); /* no room after all: try again shortly */
                b->inflight--;
                b->req[i].tries--;
                wait_a_little(b);
            }
        }
    }
    while (b->inflight > 0) {
        should_stop(b, stop); /* what arrives after a stop request counts as stopped */
        wait_a_little(b);
    }
    int rc = 0;
    if (b->write_failed)
        rc = mt_error_set(err, "%s", b->write_error);
    else if (b->st.done < b->n)
        rc = 1;
    b->progress = NULL;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

api_batch_stats api_batch_get_stats(api_batch *b) {
    pthread_mutex_lock(&b->mu);
    api_batch_stats st = b->st;
    if (b->t0 > 0) st.seconds = now_s() - b->t0;
    pthread_mutex_unlock(&b->mu);
    return st;
}

int64_t api_batch_write(api_batch *b, const char *path, api_batch_pick pick, mt_error *err) {
    pthread_mutex_lock(&b->mu);
    size_t bytes = 0;
    int64_t lines = 0;
    for (int64_t i = 0; i < b->n; i++) {
        const batch_req *r = &b->req[i];
        if (r->result && (pick == API_BATCH_ALL || r->ok == (pick == API_BATCH_OK))) {
            bytes += strlen(r->result);
            lines++;
        }
    }
    char *all = malloc(bytes + 1), *q = all;
    if (!all) {
        pthread_mutex_unlock(&b->mu);
        return mt_error_set(err, "out of memory for %zu bytes of results", bytes);
    }
    for (int64_t i = 0; i < b->n; i++) {
        const batch_req *r = &b->req[i];
        if (r->result && (pick == API_BATCH_ALL || r->ok == (pick == API_BATCH_OK))) {
            size_t n = strlen(r->result);
            memcpy(q, r->result, n);
            q += n;
        }
    }
    pthread_mutex_unlock(&b->mu);
    int rc = mt_file_write_atomic(path, all, bytes, 0600, err);
    free(all);
    return rc ? -1 : lines;
}

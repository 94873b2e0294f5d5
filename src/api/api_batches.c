/* api_batches.c - serve's Files and Batches endpoints (api_batches.h): uploads read with the
 * strict multipart reader (api_multipart.h), batch objects in OpenAI's shape kept in
 * batch.json files, and the thread that runs batches, oldest first, with the batch runner
 * (api_batch.h). */
#include "api_batches.h"
#include "api_batch.h"
#include "api_multipart.h"
#include "api_openai.h"
#include "moontail/file_write.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ID_RANDOM   24
#define MAX_BATCHES 100000

typedef struct batch_entry {
    char id[48];
    char owner[65];
    json_t *obj;        /* the batch object (OpenAI's fields) */
    bool stop;          /* cancel asked: the runner starts no more (atomic) */
    api_batch *running; /* while the runner has it open */
    api_batch *ready;   /* opened (read, hashed, checked) when created, kept for the runner */
} batch_entry;

struct api_batches {
    char *dir;
    int64_t max_file;
    api_batch_submit_fn submit;
    void *server; /* submit's context */
    int parallel;
    mt_log_source *log;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu; /* everything below and the entries' obj, running */
    pthread_cond_t cv;
    batch_entry **b; /* in creation order */
    int n, cap;
    int n_ready;   /* entries holding a ready batch: at most one, so that queued batches do not
                      all hold their input in memory (the others are read again on their turn) */
    bool stopping; /* atomic: read by the runner through batch_stop */
};

/* ---- helpers ------------------------------------------------------------------------------ */

static char *join(const char *a, const char *b, const char *c) {
    size_t n = strlen(a) + strlen(b) + (c ? strlen(c) + 1 : 0) + 2;
    char *p = malloc(n);
    if (!p) abort(); /* a path: too small to report */
    if (c)
        snprintf(p, n, "%s/%s/%s", a, b, c);
    else
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* id is prefix and ID_RANDOM letters or digits: nothing else may become a path. */
static bool valid_id(const char *id, const char *prefix) {
    size_t pn = strlen(prefix);
    if (strncmp(id, prefix, pn) != 0 || strlen(id) != pn + ID_RANDOM) return false;
    for (const char *p = id + pn; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return false;
    return true;
}

/* What a client is told of err, a failure of batch id: the message as it is when it is about
 * the client's input (it names the file by its id); one that names a path of the server's
 * (its batch directory: a disk full, a damaged state) goes to the log only, and the client
 * learns that the server failed. */
static void client_message(api_batches *m, const char *id, const mt_error *err, char *out,
                           size_t cap) {
    if (!strstr(err->msg, m->dir)) {
        snprintf(out, cap, "%s", err->msg);
        return;
    }
    mt_log_as(m->log, MT_LOG_WARN, "batch %s: %s", id, err->msg);
    snprintf(out, cap,
             "batch %s: the server could not keep the batch's state (a server error, in its"
             " log); create the batch again later or ask the server's operator",
             id);
}

static json_int_t now(void) {
    return (json_int_t)time(NULL);
}

static void respond_error(mt_http_response *resp, int status, const char *param, const char *code,
                          const char *msg) {
    api_error e;
    api_fail(&e, status, status >= 500 ? "server_error" : "invalid_request_error", param, code,
             "%s", msg);
    api_error_respond(&e, 0, resp);
}

static void not_found(mt_http_response *resp, const char *what, const char *id) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "No %s with id '%.80s' (ids are given by this server to the key"
             " that made them)",
             what, id);
    respond_error(resp, 404, NULL, NULL, msg);
}

/* ---- files -------------------------------------------------------------------------------- */

/* The file object without its owner. */
static json_t *file_public(const json_t *meta) {
    json_t *o = json_deep_copy(meta);
    json_object_del(o, "owner");
    return o;
}

/* meta.json of a file the owner may see, or NULL. */
static json_t *file_meta(api_batches *m, const char *id, const char *owner) {
    if (!valid_id(id, "file-")) return NULL;
    char *files = join(m->dir, "files", id);
    char *path = join(files, "meta.json", NULL);
    json_t *meta = json_load_file(path, 0, NULL);
    free(files);
    free(path);
    const char *o = json_string_value(json_object_get(meta, "owner"));
    if (!o || strcmp(o, owner) != 0) {
        json_decref(meta);
        return NULL;
    }
    return meta;
}

/* Stores data as a new file (files/ID/data, then meta.json: a file without meta.json does
 * not exist). Returns its meta, or NULL with err filled. */
static json_t *file_store(api_batches *m, const char *owner, const char *filename, size_t fn_len,
                          const char *purpose, const char *data, size_t len, const char *from_path,
                          mt_error *err) {
    char id[48];
    api_random_id(id, sizeof id, "file-");
    char *dir = join(m->dir, "files", id);
    char *dpath = join(dir, "data", NULL), *mpath = join(dir, "meta.json", NULL);
    json_t *meta = NULL;
    char *text = NULL;
    if (api_batch_private_dir(dir, "file's directory", err)) goto out;
    if (from_path) {
        if (rename(from_path, dpath)) {
            mt_error_set(err, "%s: cannot move into place: %s", dpath, strerror(errno));
            goto out;
        }
        struct stat sb;
        len = stat(dpath, &sb) ? 0 : (size_t)sb.st_size;
    } else if (mt_file_write_atomic(dpath, data, len, 0600, err)) {
        goto out;
    }
    meta = json_pack("{s:s, s:s, s:I, s:I, s:o, s:s, s:s, s:n, s:n, s:s}", "id", id, "object",
                     "file", "bytes", (json_int_t)len, "created_at", now(), "filename",
                     api_text_json(filename, fn_len), "purpose", purpose, "status", "processed",
                     "expires_at", "status_details", "owner", owner);
    text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    if (!text) {
        mt_error_set(err, "out of memory");
        json_decref(meta);
        meta = NULL;
        goto out;
    }
    if (mt_file_write_atomic(mpath, text, strlen(text), 0600, err)) {
        json_decref(meta);
        meta = NULL;
    }
out:
    free(text);
    free(dir);
    free(dpath);
    free(mpath);
    return meta;
}

static void upload(api_batches *m, const char *owner, const mt_http_request *req,
                   mt_http_response *resp) {
    api_part parts[API_MULTIPART_MAX_PARTS];
    mt_error err = {{0}};
    char msg[700];
    int n = api_multipart_parse(mt_http_header(req, "Content-Type"), req->body, req->body_len,
                                parts, API_MULTIPART_MAX_PARTS, &err);
    if (n < 0) {
        snprintf(msg, sizeof msg, "The upload is not a form this server reads: %s", err.msg);
        return respond_error(resp, 400, NULL, "invalid_multipart", msg);
    }
    const api_part *file = api_multipart_find(parts, n, "file"),
                   *purpose = api_multipart_find(parts, n, "purpose");
    for (int i = 0; i < n; i++)
        if (&parts[i] != file && &parts[i] != purpose) {
            snprintf(msg, sizeof msg, "Unknown form field '%.*s'; give file and purpose",
                     (int)(parts[i].name_len > 60 ? 60 : parts[i].name_len), parts[i].name);
            return respond_error(resp, 400, NULL, NULL, msg);
        }
    if (!purpose)
        return respond_error(resp, 400, "purpose", NULL,
                             "Missing required parameter: 'purpose' (\"batch\")");
    if (purpose->len != 5 || memcmp(purpose->data, "batch", 5) != 0)
        return respond_error(resp, 400, "purpose", NULL,
                             "Invalid 'purpose': this server takes files for batches only"
                             " (purpose \"batch\")");
    if (!file || !file->has_filename)
        return respond_error(resp, 400, "file", NULL,
                             "Missing required parameter: 'file' (a file part with a filename)");
    if (file->filename_len == 0 || file->filename_len > 255)
        return respond_error(resp, 400, "file", NULL, "The file's name must have 1 to 255 bytes");
    if ((int64_t)file->len > m->max_file) {
        snprintf(msg, sizeof msg,
                 "The file has %zu bytes, more than the %lld this server takes (--max-file-mb);"
                 " split the batch",
                 file->len, (long long)m->max_file);
        return respond_error(resp, 413, "file", NULL, msg);
    }
    json_t *meta = file_store(m, owner, file->filename, file->filename_len, "batch", file->data,
                              file->len, NULL, &err);
    if (!meta) {
        mt_log_as(m->log, MT_LOG_WARN, "upload: %s", err.msg);
        return respond_error(resp, 500, NULL, NULL, "The file could not be stored");
    }
    mt_log_as(m->log, MT_LOG_INFO, "%s uploaded %s (%zu bytes)", owner,
              json_string_value(json_object_get(meta, "id")), file->len);
    resp->json = file_public(meta);
    json_decref(meta);
}

static void get_file(api_batches *m, const char *owner, const char *id, bool content,
                     mt_http_response *resp) {
    json_t *meta = file_meta(m, id, owner);
    if (!meta) return not_found(resp, "file", id);
    if (content) {
        char *dir = join(m->dir, "files", id);
        resp->file = join(dir, "data", NULL);
        free(dir);
        json_decref(meta);
        return;
    }
    resp->json = file_public(meta);
    json_decref(meta);
}

/* ---- batch objects ------------------------------------------------------------------------ */

static const char *status_of(const batch_entry *e) {
    return json_string_value(json_object_get(e->obj, "status"));
}

static bool is_status(const batch_entry *e, const char *s) {
    const char *st = status_of(e);
    return st && strcmp(st, s) == 0;
}

/* Writes batch.json (m->mu held). */
static int save(api_batches *m, const batch_entry *e) {
    char *dir = join(m->dir, "batches", e->id);
    char *path = join(dir, "batch.json", NULL);
    json_t *f = json_pack("{s:s, s:O}", "owner", e->owner, "batch", e->obj);
    char *text = f ? json_dumps(f, JSON_COMPACT) : NULL;
    json_decref(f);
    mt_error err = {{0}};
    int rc = text ? mt_file_write_atomic(path, text, strlen(text), 0600, &err)
                  : mt_error_set(&err, "out of memory");
    if (rc) mt_log_as(m->log, MT_LOG_WARN, "batch %s: cannot save its state: %s", e->id, err.msg);
    free(text);
    free(dir);
    free(path);
    return rc;
}

static void set_counts(json_t *obj, int64_t total, int64_t done, int64_t failed) {
    json_object_set_new(obj, "request_counts",
                        json_pack("{s:I, s:I, s:I}", "total", (json_int_t)total, "completed",
                                  (json_int_t)(done - failed), "failed", (json_int_t)failed));
}

/* The object as answered (m->mu held): counts of a running batch are the runner's now. */
static json_t *batch_public(const batch_entry *e) {
    json_t *o = json_deep_copy(e->obj);
    if (e->running) {
        api_batch_stats st = api_batch_get_stats(e->running);
        set_counts(o, st.total, st.done, st.failed);
    }
    return o;
}

static batch_entry *find_batch(api_batches *m, const char *id, const char *owner) {
    if (!valid_id(id, "batch_")) return NULL;
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->b[i]->id, id) == 0 && strcmp(m->b[i]->owner, owner) == 0) return m->b[i];
    return NULL;
}

static int add_entry(api_batches *m, batch_entry *e) {
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 16;
        batch_entry **b = realloc(m->b, (size_t)cap * sizeof *b);
        if (!b) return -1;
        m->b = b;
        m->cap = cap;
    }
    m->b[m->n++] = e;
    return 0;
}

static void free_entry(batch_entry *e) {
    if (!e) return;
    api_batch_close(e->ready);
    json_decref(e->obj);
    free(e);
}

/* POST /v1/batches */
static void create_batch(api_batches *m, const char *owner, const mt_http_request *req,
                         mt_http_response *resp) {
    char msg[900];
    json_error_t je;
    json_t *body = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(body)) {
        json_decref(body);
        return respond_error(resp, 400, NULL, "invalid_json",
                             "The body must be a JSON object with input_file_id, endpoint and"
                             " completion_window");
    }
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        if (strcmp(k, "input_file_id") && strcmp(k, "endpoint") && strcmp(k, "completion_window") &&
            strcmp(k, "metadata")) {
            snprintf(msg, sizeof msg, "Unrecognized request argument supplied: %.60s", k);
            json_decref(body);
            return respond_error(resp, 400, k, NULL, msg);
        }
    }
    const char *fid = json_string_value(json_object_get(body, "input_file_id")),
               *endpoint = json_string_value(json_object_get(body, "endpoint")),
               *window = json_string_value(json_object_get(body, "completion_window"));
    json_t *metadata = json_object_get(body, "metadata");
    const char *bad = NULL, *why = NULL;
    if (!fid) {
        bad = "input_file_id";
        why = "Missing required parameter: 'input_file_id' (a string)";
    } else if (!endpoint || (strcmp(endpoint, "/v1/chat/completions") != 0 &&
                             strcmp(endpoint, "/v1/completions") != 0)) {
        bad = "endpoint";
        why = "Invalid 'endpoint': this server runs /v1/chat/completions or /v1/completions";
    } else if (!window || strcmp(window, "24h") != 0) {
        bad = "completion_window";
        why = "Invalid 'completion_window': it must be \"24h\"";
    } else if (metadata && !json_is_null(metadata) &&
               (!json_is_object(metadata) || json_object_size(metadata) > 16)) {
        bad = "metadata";
        why = "Invalid 'metadata': an object of at most 16 strings";
    }
    if (!bad && metadata && json_is_object(metadata)) json_object_foreach(metadata, k, v) {
            if (!json_is_string(v) || strlen(k) > 64 || json_string_length(v) > 512) {
                bad = "metadata";
                why = "Invalid 'metadata': keys of at most 64 bytes, values strings of at most"
                      " 512";
                break;
            }
        }
    if (bad) {
        respond_error(resp, 400, bad, NULL, why);
        json_decref(body);
        return;
    }
    json_t *meta = file_meta(m, fid, owner);
    if (!meta) {
        not_found(resp, "file", fid);
        json_decref(body);
        return;
    }
    json_decref(meta);
    batch_entry *e = calloc(1, sizeof *e);
    if (!e) abort(); /* a small struct: too small to report */
    api_random_id(e->id, sizeof e->id, "batch_");
    snprintf(e->owner, sizeof e->owner, "%s", owner);
    const json_int_t t = now();
    e->obj =
        json_pack("{s:s, s:s, s:s, s:n, s:s, s:s, s:s, s:n, s:n, s:I, s:n, s:I, s:n, s:n, "
                  "s:n, s:n, s:n, s:n, s:O}",
                  "id", e->id, "object", "batch", "endpoint", endpoint, "errors", "input_file_id",
                  fid, "completion_window", "24h", "status", "validating", "output_file_id",
                  "error_file_id", "created_at", t, "in_progress_at", "expires_at", t + 24 * 3600,
                  "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
                  "cancelled_at", "metadata", metadata ? metadata : json_null());
    /* validate now: the runner copies and checks the input */
    mt_error err = {{0}};
    char *bdir = join(m->dir, "batches", e->id), *fdir = join(m->dir, "files", fid);
    char *data = join(fdir, "data", NULL);
    api_batch *ab = NULL;
    if (!api_batch_private_dir(bdir, "batch's directory", &err))
        ab = api_batch_open(bdir, data, fid, endpoint, 0, &err);
    const bool valid = ab != NULL;
    if (ab) {
        api_batch_stats st = api_batch_get_stats(ab);
        set_counts(e->obj, st.total, 0, 0);
        json_object_set_new(e->obj, "status", json_string("in_progress"));
        json_object_set_new(e->obj, "in_progress_at", json_integer(now()));
    } else {
        char clean[600];
        client_message(m, e->id, &err, clean, sizeof clean);
        json_object_set_new(e->obj, "errors",
                            json_pack("{s:s, s:[{s:s, s:s, s:n, s:n}]}", "object", "list", "data",
                                      "code", "invalid_request", "message", clean, "param",
                                      "line"));
        json_object_set_new(e->obj, "status", json_string("failed"));
        json_object_set_new(e->obj, "failed_at", json_integer(now()));
        set_counts(e->obj, 0, 0, 0);
    }
    free(bdir);
    free(fdir);
    free(data);
    pthread_mutex_lock(&m->mu);
    if (ab && m->n_ready == 0) { /* the runner takes it as it is: the input is read once */
        e->ready = ab;
        m->n_ready++;
        ab = NULL;
    }
    if (add_entry(m, e)) {
        if (e->ready) m->n_ready--;
        pthread_mutex_unlock(&m->mu);
        free_entry(e);
        api_batch_close(ab);
        json_decref(body);
        return respond_error(resp, 500, NULL, NULL, "out of memory");
    }
    save(m, e);
    resp->json = batch_public(e);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    api_batch_close(ab); /* not kept: read again when its turn comes */
    mt_log_as(m->log, MT_LOG_INFO, "%s created %s from %s: %s", owner, e->id, fid,
              valid ? "in progress" : "failed validation");
    json_decref(body); /* fid and endpoint point into it */
}

static void list_batches(api_batches *m, const char *owner, const mt_http_request *req,
                         mt_http_response *resp) {
    const char *ls = mt_http_query(req, "limit"), *after = mt_http_query(req, "after");
    long limit = 20;
    if (ls) {
        char *end;
        limit = strtol(ls, &end, 10);
        if (*end || end == ls || limit < 1 || limit > 100)
            return respond_error(resp, 400, "limit", NULL,
                                 "Invalid 'limit': a whole number from 1 to 100");
    }
    json_t *data = json_array();
    pthread_mutex_lock(&m->mu);
    int i = m->n - 1;
    if (after) { /* newest first: those created before it */
        while (i >= 0 && strcmp(m->b[i]->id, after) != 0) i--;
        i--;
    }
    bool more = false;
    for (; i >= 0; i--) {
        if (strcmp(m->b[i]->owner, owner) != 0) continue;
        if ((long)json_array_size(data) == limit) {
            more = true;
            break;
        }
        json_array_append_new(data, batch_public(m->b[i]));
    }
    pthread_mutex_unlock(&m->mu);
    size_t n = json_array_size(data);
    json_t *first = n ? json_object_get(json_array_get(data, 0), "id") : NULL,
           *last = n ? json_object_get(json_array_get(data, n - 1), "id") : NULL;
    resp->json = json_pack("{s:s, s:o, s:O?, s:O?, s:b}", "object", "list", "data", data,
                           "first_id", first, "last_id", last, "has_more", more);
}

static void get_batch(api_batches *m, const char *owner, const char *id, bool cancel,
                      mt_http_response *resp) {
    pthread_mutex_lock(&m->mu);
    batch_entry *e = find_batch(m, id, owner);
    if (!e) {
        pthread_mutex_unlock(&m->mu);
        return not_found(resp, "batch", id);
    }
    if (cancel) {
        if (!is_status(e, "in_progress") && !is_status(e, "validating")) {
            char msg[200];
            snprintf(msg, sizeof msg, "Cannot cancel a batch with status '%s'", status_of(e));
            pthread_mutex_unlock(&m->mu);
            return respond_error(resp, 409, NULL, NULL, msg);
        }
        __atomic_store_n(&e->stop, true, __ATOMIC_RELAXED);
        json_object_set_new(e->obj, "status", json_string("cancelling"));
        json_object_set_new(e->obj, "cancelling_at", json_integer(now()));
        save(m, e);
        pthread_cond_broadcast(&m->cv);
        mt_log_as(m->log, MT_LOG_INFO, "%s cancels %s", owner, e->id);
    }
    resp->json = batch_public(e);
    pthread_mutex_unlock(&m->mu);
}

/* ---- the runner thread -------------------------------------------------------------------- */

/* Writes a batch's results as its output and error files and marks it final_status. ab: the
 * batch as the runner has it open (taken and closed), or NULL (read from its directory). */
static void finish(api_batches *m, batch_entry *e, api_batch *ab, const char *final_status) {
    mt_error err = {{0}};
    char *bdir = join(m->dir, "batches", e->id);
    if (!ab) ab = api_batch_open(bdir, NULL, NULL, NULL, 0, &err);
    pthread_mutex_lock(&m->mu);
    json_object_set_new(e->obj, "finalizing_at", json_integer(now()));
    pthread_mutex_unlock(&m->mu);
    json_t *ids[2] = {NULL, NULL};
    if (ab) {
        api_batch_stats st = api_batch_get_stats(ab);
        const api_batch_pick picks[2] = {API_BATCH_OK, API_BATCH_FAILED};
        const char *names[2] = {"output.jsonl", "errors.jsonl"};
        for (int k = 0; k < 2 && ab; k++) {
            if ((k == 0 ? st.done - st.failed : st.failed) == 0) continue;
            char *tmp = join(bdir, k == 0 ? "result.tmp" : "errors.tmp", NULL);
            json_t *meta = NULL;
            if (api_batch_write(ab, tmp, picks[k], &err) >= 0)
                meta = file_store(m, e->owner, names[k], strlen(names[k]), "batch_output", NULL, 0,
                                  tmp, &err);
            free(tmp);
            if (!meta) {
                mt_log_as(m->log, MT_LOG_WARN, "batch %s: cannot write its results: %s", e->id,
                          err.msg);
                break;
            }
            ids[k] = json_incref(json_object_get(meta, "id"));
            json_decref(meta);
        }
        pthread_mutex_lock(&m->mu);
        set_counts(e->obj, st.total, st.done, st.failed);
        pthread_mutex_unlock(&m->mu);
        api_batch_close(ab);
    } else {
        mt_log_as(m->log, MT_LOG_WARN, "batch %s: %s", e->id, err.msg);
        final_status = "failed";
    }
    pthread_mutex_lock(&m->mu);
    json_object_set_new(e->obj, "output_file_id", ids[0] ? ids[0] : json_null());
    json_object_set_new(e->obj, "error_file_id", ids[1] ? ids[1] : json_null());
    json_object_set_new(e->obj, "status", json_string(final_status));
    json_object_set_new(e->obj,
                        strcmp(final_status, "completed") == 0   ? "completed_at"
                        : strcmp(final_status, "cancelled") == 0 ? "cancelled_at"
                                                                 : "failed_at",
                        json_integer(now()));
    save(m, e);
    pthread_mutex_unlock(&m->mu);
    free(bdir);
    mt_log_as(m->log, MT_LOG_INFO, "batch %s: %s", e->id, final_status);
}

/* The next batch with work (m->mu held), or NULL: one to finish (cancelled or finalizing)
 * first, so that a cancel of a waiting batch does not wait for the batches before it; then
 * the oldest in progress. */
static batch_entry *next_work(api_batches *m) {
    for (int i = 0; i < m->n; i++)
        if (is_status(m->b[i], "cancelling") || is_status(m->b[i], "finalizing")) return m->b[i];
    for (int i = 0; i < m->n; i++)
        if (is_status(m->b[i], "in_progress")) return m->b[i];
    return NULL;
}

static void *runner_main(void *arg) {
    api_batches *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        batch_entry *e = NULL;
        while (!__atomic_load_n(&m->stopping, __ATOMIC_RELAXED) && !(e = next_work(m)))
            pthread_cond_wait(&m->cv, &m->mu);
        if (__atomic_load_n(&m->stopping, __ATOMIC_RELAXED)) break;
        /* the batch as it was opened when created, or read from its directory now */
        api_batch *ab = e->ready;
        if (ab) {
            e->ready = NULL;
            m->n_ready--;
        }
        if (!is_status(e, "in_progress")) { /* cancelled or cut while finalizing */
            const bool cancelled = is_status(e, "cancelling");
            if (!cancelled) json_object_set_new(e->obj, "status", json_string("finalizing"));
            pthread_mutex_unlock(&m->mu);
            finish(m, e, ab, cancelled ? "cancelled" : "completed");
            pthread_mutex_lock(&m->mu);
            continue;
        }
        mt_error err = {{0}};
        char *bdir = join(m->dir, "batches", e->id);
        pthread_mutex_unlock(&m->mu);
        if (!ab) ab = api_batch_open(bdir, NULL, NULL, NULL, 0, &err);
        free(bdir);
        int rc = -1;
        if (ab) {
            pthread_mutex_lock(&m->mu);
            /* api_batches_stopping sets the stop flag of a running batch: set running first */
            const bool go = !__atomic_load_n(&m->stopping, __ATOMIC_RELAXED);
            if (go) e->running = ab;
            pthread_mutex_unlock(&m->mu);
            rc = go ? api_batch_run(ab, m->submit, m->server, e->owner, m->parallel, &e->stop, NULL,
                                    NULL, &err)
                    : 1;
            pthread_mutex_lock(&m->mu);
            e->running = NULL;
            pthread_mutex_unlock(&m->mu);
        }
        pthread_mutex_lock(&m->mu);
        if (__atomic_load_n(&m->stopping, __ATOMIC_RELAXED) && rc == 1) { /* resumes */
            api_batch_close(ab);
            break;
        }
        if (rc < 0) {
            api_batch_close(ab);
            char clean[600];
            client_message(m, e->id, &err, clean, sizeof clean);
            json_object_set_new(e->obj, "errors",
                                json_pack("{s:s, s:[{s:s, s:s, s:n, s:n}]}", "object", "list",
                                          "data", "code", "server_error", "message", clean, "param",
                                          "line"));
            json_object_set_new(e->obj, "status", json_string("failed"));
            json_object_set_new(e->obj, "failed_at", json_integer(now()));
            save(m, e);
            continue;
        }
        if (rc == 0 && is_status(e, "in_progress")) {
            json_object_set_new(e->obj, "status", json_string("finalizing"));
            save(m, e);
        }
        if (!__atomic_load_n(&m->stopping, __ATOMIC_RELAXED) &&
            (is_status(e, "finalizing") || is_status(e, "cancelling"))) { /* with its results */
            const bool cancelled = is_status(e, "cancelling");
            pthread_mutex_unlock(&m->mu);
            finish(m, e, ab, cancelled ? "cancelled" : "completed");
            pthread_mutex_lock(&m->mu);
            continue;
        }
        api_batch_close(ab); /* not over: the loop's next turn takes it again */
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------------------- */

/* Creation order (qsort's, of batch_entry *): created_at, then the id (ids are unique). */
static int by_creation(const void *pa, const void *pb) {
    const batch_entry *a = *(batch_entry *const *)pa, *b = *(batch_entry *const *)pb;
    json_int_t ta = json_integer_value(json_object_get(a->obj, "created_at")),
               tb = json_integer_value(json_object_get(b->obj, "created_at"));
    if (ta != tb) return ta < tb ? -1 : 1;
    return strcmp(a->id, b->id);
}

static void load_batches(api_batches *m, const char *bdir) {
    DIR *d = opendir(bdir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) && m->n < MAX_BATCHES) {
        if (!valid_id(de->d_name, "batch_")) continue;
        char *p = join(bdir, de->d_name, "batch.json");
        json_t *f = json_load_file(p, 0, NULL);
        free(p);
        const char *owner = json_string_value(json_object_get(f, "owner"));
        json_t *obj = json_object_get(f, "batch");
        const char *id = json_string_value(json_object_get(obj, "id"));
        if (!owner || !json_is_object(obj) || !id || strcmp(id, de->d_name) != 0 ||
            !json_is_string(json_object_get(obj, "status"))) {
            mt_log_as(m->log, MT_LOG_WARN, "%s/%s: no readable batch.json; left alone", bdir,
                      de->d_name);
            json_decref(f);
            continue;
        }
        batch_entry *e = calloc(1, sizeof *e);
        if (!e) abort(); /* a small struct: too small to report */
        snprintf(e->id, sizeof e->id, "%s", id);
        snprintf(e->owner, sizeof e->owner, "%s", owner);
        e->obj = json_incref(obj);
        json_decref(f);
        if (is_status(e, "validating")) { /* cut before it was checked */
            json_object_set_new(e->obj, "status", json_string("failed"));
            save(m, e);
        }
        if (is_status(e, "cancelling")) e->stop = true;
        if (add_entry(m, e)) {
            free_entry(e);
            break;
        }
    }
    closedir(d);
    if (m->n > 1) qsort(m->b, (size_t)m->n, sizeof *m->b, by_creation);
}

api_batches *api_batches_start(const char *dir, int64_t max_file, api_batch_submit_fn submit,
                               void *server, int parallel, mt_log_source *log, mt_error *err) {
    api_batches *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    m->max_file = max_file;
    m->submit = submit;
    m->server = server;
    m->parallel = parallel;
    m->log = log;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    char *files = join(dir, "files", NULL), *batches = join(dir, "batches", NULL);
    int rc = api_batch_private_dir(dir, "batch directory", err) ||
             api_batch_private_dir(files, "batch directory's files/", err) ||
             api_batch_private_dir(batches, "batch directory's batches/", err);
    if (rc) mt_error_prefix(err, "--batch-dir");
    if (!rc) load_batches(m, batches);
    free(files);
    free(batches);
    if (rc) {
        api_batches_stop(m);
        return NULL;
    }
    if (pthread_create(&m->thread, NULL, runner_main, m) != 0) {
        mt_error_set(err, "cannot start the batch thread");
        api_batches_stop(m);
        return NULL;
    }
    m->thread_started = true;
    mt_log_as(log, MT_LOG_INFO, "batches in %s: %d known, %d requests at once", dir, m->n,
              parallel);
    return m;
}

void api_batches_stopping(api_batches *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    __atomic_store_n(&m->stopping, true, __ATOMIC_RELAXED);
    for (int i = 0; i < m->n; i++)
        if (m->b[i]->running) __atomic_store_n(&m->b[i]->stop, true, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void api_batches_stop(api_batches *m) {
    if (!m) return;
    api_batches_stopping(m);
    if (m->thread_started) pthread_join(m->thread, NULL);
    for (int i = 0; i < m->n; i++) free_entry(m->b[i]);
    free(m->b);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->dir);
    free(m);
}

/* ---- routing ------------------------------------------------------------------------------ */

bool api_batches_path(const char *path) {
    return strcmp(path, "/v1/files") == 0 || strncmp(path, "/v1/files/", 10) == 0 ||
           strcmp(path, "/v1/batches") == 0 || strncmp(path, "/v1/batches/", 12) == 0;
}

static void method_not_allowed(mt_http_response *resp, const char *m, const char *path,
                               const char *allow) {
    char msg[400];
    snprintf(msg, sizeof msg, "Method %.16s is not allowed on %.200s; use %s", m, path, allow);
    respond_error(resp, 405, NULL, "method_not_allowed", msg);
    resp->headers = json_pack("{s:s}", "Allow", allow);
}

void api_batches_handle(api_batches *m, const char *owner, const mt_http_request *req,
                        mt_http_response *resp) {
    const char *path = req->path, *meth = req->method;
    const bool get = strcmp(meth, "GET") == 0 || strcmp(meth, "HEAD") == 0;
    const bool post = strcmp(meth, "POST") == 0;
    char id[64];
    if (strcmp(path, "/v1/files") == 0) {
        if (post) return upload(m, owner, req, resp);
        return method_not_allowed(resp, meth, path, "POST");
    }
    if (strcmp(path, "/v1/batches") == 0) {
        if (post) return create_batch(m, owner, req, resp);
        if (get) return list_batches(m, owner, req, resp);
        return method_not_allowed(resp, meth, path, "GET, POST");
    }
    const bool files = strncmp(path, "/v1/files/", 10) == 0;
    const char *rest = path + (files ? 10 : 12);
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *tail = slash ? slash : "";
    if (n == 0 || n >= sizeof id) return not_found(resp, files ? "file" : "batch", rest);
    memcpy(id, rest, n);
    id[n] = 0;
    if (files && (!*tail || strcmp(tail, "/content") == 0)) {
        if (get) return get_file(m, owner, id, *tail != 0, resp);
        return method_not_allowed(resp, meth, path, "GET");
    }
    if (!files && !*tail) {
        if (get) return get_batch(m, owner, id, false, resp);
        return method_not_allowed(resp, meth, path, "GET");
    }
    if (!files && strcmp(tail, "/cancel") == 0) {
        if (post) return get_batch(m, owner, id, true, resp);
        return method_not_allowed(resp, meth, path, "POST");
    }
    char msg[300];
    snprintf(msg, sizeof msg, "Unknown request URL: %.16s %.200s (see docs/api.md, \"Batches\")",
             meth, path);
    respond_error(resp, 404, NULL, "unknown_url", msg);
}

/* shard_hash.c - content hashes of models and shards (moontail/shard.h):
 * of tensors, of expert slices, the model's source_id and whole files.
 *
 * Whole models are read with pread (gguf_reader), never through their
 * mapping, in GGUF_STREAM_CHUNK pieces: memory stays a chunk per thread.
 * BLAKE2b is sequential within one hash, so the parallelism is across
 * tensors: each thread takes the largest tensor nobody has taken yet.
 * Hashes of the model's bytes go through the hash cache (hash_cache.h) when
 * the caller gives one: looked up first, stored once computed. */
#include "shard_internal.h"
#include "moontail/clock.h"
#include "moontail/compat.h"
#include "moontail/file.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Picks the fastest BLAKE2b code; safe to call again and from any thread. */
static void hash_init(void) {
    if (sodium_init() < 0) {
        /* only the random generator can fail to start; hashing still works */
    }
}

/* ------------------------------------------------------- from the mapping */

void mt_shard_hash_bytes(const void *data, size_t n, char out[MT_SHARD_HASH_HEX]) {
    uint8_t raw[32];
    hash_init();
    crypto_generichash(raw, 32, data, n, NULL, 0);
    sodium_bin2hex(out, MT_SHARD_HASH_HEX, raw, 32);
}

void mt_shard_tensor_hash(const gguf_tensor *t, const int32_t *experts, int32_t n_experts,
                          char out[MT_SHARD_HASH_HEX]) {
    uint8_t raw[32];
    hash_init();
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    if (n_experts < 0) {
        crypto_generichash_update(&st, t->data, t->nbytes);
    } else {
        for (int32_t j = 0; j < n_experts; j++)
            crypto_generichash_update(&st, (const uint8_t *)t->data + (size_t)experts[j] * t->nb[2],
                                      t->nb[2]);
    }
    crypto_generichash_final(&st, raw, 32);
    sodium_bin2hex(out, MT_SHARD_HASH_HEX, raw, 32);
}

/* ----------------------------------------------------------------- slices */

uint64_t shard_slice_bytes(const gguf_file *f, const shard_slice *s) {
    const gguf_tensor *t = &f->tensors[s->tensor];
    return s->n_experts < 0 ? t->nbytes : (uint64_t)s->n_experts * t->nb[2];
}

int shard_slice_ranges(const gguf_file *f, const shard_slice *s, gguf_range **out, uint32_t *n,
                       mt_error *err) {
    const gguf_tensor *t = &f->tensors[s->tensor];
    uint64_t base = gguf_tensor_file_offset(f, t);
    *out = malloc((s->n_experts > 0 ? (size_t)s->n_experts : 1) * sizeof **out);
    *n = 0;
    if (!*out) return mt_error_set(err, "out of memory");
    if (s->n_experts < 0) {
        (*out)[(*n)++] = (gguf_range){base, t->nbytes};
        return 0;
    }
    if (t->n_dims != 3) {
        free(*out);
        *out = NULL;
        return mt_error_set(err, "tensor '%s' is not 3-D; it has no expert slices", t->name);
    }
    for (int32_t j = 0; j < s->n_experts; j++) {
        int32_t e = s->experts[j];
        if (e < 0 || e >= t->ne[2] || (j > 0 && e <= s->experts[j - 1])) {
            free(*out);
            *out = NULL;
            return mt_error_set(err, "tensor '%s': expert %d is out of order or not below %lld",
                                t->name, e, (long long)t->ne[2]);
        }
        uint64_t at = base + (uint64_t)e * t->nb[2];
        if (*n > 0 && (*out)[*n - 1].offset + (*out)[*n - 1].nbytes == at)
            (*out)[*n - 1].nbytes += t->nb[2]; /* the next expert of a run */
        else
            (*out)[(*n)++] = (gguf_range){at, t->nb[2]};
    }
    return 0;
}

/* The cache's name of a slice: "" for a whole tensor, else "x" and the
 * expert ids as runs ("x0-20", "x0,3,5-9"). Heap string; NULL: no memory. */
static char *slice_key(const shard_slice *s) {
    size_t cap = 2 + (s->n_experts > 0 ? (size_t)s->n_experts * 24 : 0);
    char *k = malloc(cap);
    if (!k) return NULL;
    size_t n = 0;
    k[0] = 0;
    if (s->n_experts < 0) return k;
    k[n++] = 'x';
    for (int32_t j = 0; j < s->n_experts;) {
        int32_t a = s->experts[j], b = a;
        while (j + 1 < s->n_experts && s->experts[j + 1] == b + 1) b++, j++;
        j++;
        n += (size_t)snprintf(k + n, cap - n, b > a ? "%s%d-%d" : "%s%d", n > 1 ? "," : "", a, b);
    }
    k[n] = 0;
    return k;
}

/* ---------------------------------------------------------------- io */

mt_pool *shard_io_pool(mt_shard_io *io, bool *owned, mt_error *err) {
    *owned = false;
    if (io && io->pool) return io->pool;
    mt_pool *p = mt_pool_create(io ? io->threads : 0);
    if (!p) mt_error_set(err, "cannot start the hashing threads");
    *owned = p != NULL;
    return p;
}

void shard_progress(mt_shard_io *io, const char *what, uint64_t done, uint64_t total) {
    if (io && io->progress && total > 0) io->progress(io->progress_ctx, what, done, total);
}

static void cache_failed(mt_shard_io *io, const mt_error *e) {
    if (!io->cache_err.msg[0]) io->cache_err = *e;
}

/* Each part's row in the cache (0 where it has none: a model in memory, or
 * the cache failed). NULL when there is no cache to use. */
static int64_t *cache_rows(gguf_reader *rd, mt_shard_io *io) {
    if (!io || !io->cache) return NULL;
    const gguf_file *f = gguf_reader_file(rd);
    uint32_t np = f->n_parts ? f->n_parts : 1;
    int64_t *rows = calloc(np, sizeof *rows);
    for (uint32_t p = 0; rows && p < np; p++) {
        gguf_file_id id;
        mt_error e = {{0}};
        if (!gguf_reader_file_id(rd, p, &id)) continue;
        rows[p] = mt_hash_cache_file(io->cache, f->parts[p].path, &id, &e);
        if (rows[p] < 0) {
            cache_failed(io, &e);
            rows[p] = 0;
        }
    }
    return rows;
}

void shard_cached(gguf_reader *rd, const shard_slice *s, size_t n, mt_shard_io *io,
                  uint8_t (*out)[32], bool *found) {
    memset(found, 0, n * sizeof *found);
    if (!io || !io->cache || io->rehash) return;
    const gguf_file *f = gguf_reader_file(rd);
    int64_t *rows = cache_rows(rd, io);
    for (size_t i = 0; rows && i < n; i++) {
        const gguf_tensor *t = &f->tensors[s[i].tensor];
        char *key = slice_key(&s[i]);
        if (key && rows[t->part] > 0)
            found[i] = mt_hash_cache_get(io->cache, rows[t->part], gguf_tensor_file_offset(f, t),
                                         t->nbytes, key, out[i]);
        free(key);
    }
    free(rows);
}

void shard_cache_store(gguf_reader *rd, const shard_slice *s, size_t n, mt_shard_io *io,
                       const uint8_t (*hashes)[32]) {
    if (!io || !io->cache || n == 0) return;
    const gguf_file *f = gguf_reader_file(rd);
    int64_t *rows = cache_rows(rd, io);
    mt_error e = {{0}};
    if (!rows || mt_hash_cache_begin(io->cache, &e)) {
        if (e.msg[0]) cache_failed(io, &e);
        free(rows);
        return;
    }
    int rc = 0;
    uint32_t np = f->n_parts ? f->n_parts : 1;
    for (uint32_t p = 0; p < np; p++) /* written to while read: its hashes may be of neither */
        if (!gguf_reader_unchanged(rd, p)) rows[p] = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const gguf_tensor *t = &f->tensors[s[i].tensor];
        char *key = slice_key(&s[i]);
        if (key && rows[t->part] > 0)
            rc = mt_hash_cache_put(io->cache, rows[t->part], gguf_tensor_file_offset(f, t),
                                   t->nbytes, key, hashes[i], &e);
        free(key);
    }
    if (rc || mt_hash_cache_commit(io->cache, &e)) cache_failed(io, &e);
    free(rows);
}

/* --------------------------------------------------------- parallel hashing */

typedef struct hash_job {
    gguf_reader *rd;
    const shard_slice *s;
    const size_t *todo; /* slice indices to read, largest first */
    size_t n_todo;
    atomic_size_t next;
    uint8_t (*out)[32];
    mt_shard_io *io;
    const char *what;
    uint64_t done, total; /* bytes, for progress */
    pthread_mutex_t lock; /* err, done and progress */
    atomic_bool failed;
    mt_error *err;
} hash_job;

static void job_fail(hash_job *j, const mt_error *e) {
    pthread_mutex_lock(&j->lock);
    if (!atomic_exchange(&j->failed, true) && j->err) *j->err = *e;
    pthread_mutex_unlock(&j->lock);
}

/* Counts n bytes done; under the lock, so that reports never go backwards. */
static void job_advance(hash_job *j, uint64_t n) {
    if (!j->io || !j->io->progress) return;
    pthread_mutex_lock(&j->lock);
    j->done += n;
    shard_progress(j->io, j->what, j->done, j->total);
    pthread_mutex_unlock(&j->lock);
}

static int hash_one(hash_job *j, const shard_slice *s, uint8_t **buf, uint8_t out[32],
                    mt_error *e) {
    const gguf_file *f = gguf_reader_file(j->rd);
    const gguf_tensor *t = &f->tensors[s->tensor];
    gguf_range *r;
    uint32_t nr;
    if (shard_slice_ranges(f, s, &r, &nr, e)) return -1;
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    int rc = 0;
    for (uint32_t i = 0; i < nr && !rc; i++)
        for (uint64_t k = 0; k < r[i].nbytes && !rc; k += GGUF_STREAM_CHUNK) {
            size_t n = r[i].nbytes - k < GGUF_STREAM_CHUNK ? (size_t)(r[i].nbytes - k)
                                                           : (size_t)GGUF_STREAM_CHUNK;
            const uint8_t *p = gguf_reader_memory(j->rd, t->part, r[i].offset + k);
            if (!p) {
                if (!*buf && !(*buf = malloc(GGUF_STREAM_CHUNK))) {
                    rc = mt_error_set(e, "out of memory");
                    break;
                }
                rc = gguf_reader_read(j->rd, t->part, r[i].offset + k, *buf, n, e);
                p = *buf;
            }
            if (rc) break;
            crypto_generichash_update(&st, p, n);
            job_advance(j, n);
            if (atomic_load(&j->failed)) rc = 1; /* another slice failed: stop early */
        }
    free(r);
    if (rc) return rc < 0 ? -1 : 0;
    crypto_generichash_final(&st, out, 32);
    return 0;
}

static void hash_worker(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    hash_job *j = ctx;
    uint8_t *buf = NULL;
    mt_error e = {{0}};
    for (;;) {
        size_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->n_todo || atomic_load(&j->failed)) break;
        size_t i = j->todo[k];
        if (hash_one(j, &j->s[i], &buf, j->out[i], &e)) {
            job_fail(j, &e);
            break;
        }
    }
    free(buf);
}

static int by_bytes_desc(const void *a, const void *b, void *ctx) {
    const uint64_t *bytes = ctx;
    uint64_t x = bytes[*(const size_t *)a], y = bytes[*(const size_t *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

int shard_hash_slices(gguf_reader *rd, const shard_slice *s, size_t n, mt_shard_io *io,
                      bool of_model, const char *what, uint8_t (*out)[32], mt_error *err) {
    const gguf_file *f = gguf_reader_file(rd);
    size_t cap = n ? n : 1;
    bool *found = calloc(cap, sizeof *found);
    size_t *todo = malloc(cap * sizeof *todo);
    uint64_t *bytes = malloc(cap * sizeof *bytes);
    uint8_t(*fresh)[32] = malloc(cap * sizeof *fresh);
    shard_slice *stored = malloc(cap * sizeof *stored);
    int rc = -1;
    bool owned = false;
    mt_pool *pool = NULL;
    hash_job j = {.rd = rd, .s = s, .out = out, .io = io, .what = what, .err = err};
    pthread_mutex_init(&j.lock, NULL);
    if (!found || !todo || !bytes || !fresh || !stored) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    hash_init();
    if (of_model) shard_cached(rd, s, n, io, out, found);
    uint64_t cached = 0;
    for (size_t i = 0; i < n; i++) {
        bytes[i] = shard_slice_bytes(f, &s[i]);
        if (found[i])
            cached += bytes[i];
        else
            todo[j.n_todo++] = i, j.total += bytes[i];
    }
    mt_qsort_r(todo, j.n_todo, sizeof *todo, by_bytes_desc, bytes);
    j.todo = todo;
    double t0 = mt_mono_s();
    if (j.n_todo > 0) {
        if (!(pool = shard_io_pool(io, &owned, err))) goto done;
        shard_progress(io, what, 0, j.total);
        mt_pool_run(pool, mt_pool_size(pool), hash_worker, &j);
        if (atomic_load(&j.failed)) goto done;
    }
    if (io && of_model) {
        io->bytes_hashed += j.total, io->bytes_cached += cached;
        if (j.n_todo > 0) io->hash_s += mt_mono_s() - t0;
    }
    if (of_model && j.n_todo > 0) {
        for (size_t k = 0; k < j.n_todo; k++) {
            stored[k] = s[todo[k]];
            memcpy(fresh[k], out[todo[k]], 32);
        }
        shard_cache_store(rd, stored, j.n_todo, io, (const uint8_t(*)[32])fresh);
    }
    rc = 0;
done:
    if (owned) mt_pool_free(pool);
    pthread_mutex_destroy(&j.lock);
    free(found);
    free(todo);
    free(bytes);
    free(fresh);
    free(stored);
    return rc;
}

/* ---------------------------------------------------------------- source id */

typedef struct named {
    const char *name;
    uint64_t index;
} named;

static int by_name(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

int mt_shard_source_id_from(const gguf_file *f, const uint8_t (*raw)[32],
                            char out[MT_SHARD_HASH_HEX], mt_error *err) {
    uint64_t n = f->n_tensors;
    named *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return mt_error_set(err, "out of memory sorting %llu tensor names", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) order[i] = (named){f->tensors[i].name, i};
    qsort(order, n, sizeof *order, by_name);
    hash_init();
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    for (uint64_t k = 0; k < n; k++) {
        crypto_generichash_update(&st, (const uint8_t *)order[k].name,
                                  strlen(order[k].name) + 1); /* with its NUL */
        crypto_generichash_update(&st, raw[order[k].index], 32);
    }
    uint8_t id[32];
    crypto_generichash_final(&st, id, 32);
    sodium_bin2hex(out, MT_SHARD_HASH_HEX, id, 32);
    free(order);
    return 0;
}

int shard_model_hashes(gguf_reader *rd, mt_shard_io *io, uint8_t (*raw)[32],
                       char source_id[MT_SHARD_HASH_HEX], mt_error *err) {
    const gguf_file *f = gguf_reader_file(rd);
    uint64_t n = f->n_tensors;
    shard_slice *s = malloc((n ? n : 1) * sizeof *s);
    if (!s) return mt_error_set(err, "out of memory hashing %llu tensors", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) s[i] = (shard_slice){i, NULL, -1};
    const char *base = strrchr(f->path, '/');
    char what[300];
    snprintf(what, sizeof what, "hashing %s", base ? base + 1 : f->path);
    int rc = shard_hash_slices(rd, s, n, io, true, what, raw, err);
    free(s);
    return rc ? rc : mt_shard_source_id_from(f, (const uint8_t(*)[32])raw, source_id, err);
}

int mt_shard_source_id_io(const gguf_file *f, mt_shard_io *io, char out[MT_SHARD_HASH_HEX],
                          char (*tensor_hashes)[MT_SHARD_HASH_HEX], mt_error *err) {
    gguf_reader *rd = gguf_reader_open(f, err);
    if (!rd) return -1;
    uint8_t(*raw)[32] = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *raw);
    int rc = raw ? shard_model_hashes(rd, io, raw, out, err) : mt_error_set(err, "out of memory");
    for (uint64_t i = 0; rc == 0 && tensor_hashes && i < f->n_tensors; i++)
        sodium_bin2hex(tensor_hashes[i], MT_SHARD_HASH_HEX, raw[i], 32);
    free(raw);
    gguf_reader_close(rd);
    return rc;
}

int mt_shard_source_id(const gguf_file *f, char out[MT_SHARD_HASH_HEX],
                       char (*tensor_hashes)[MT_SHARD_HASH_HEX], mt_error *err) {
    return mt_shard_source_id_io(f, NULL, out, tensor_hashes, err);
}

/* ------------------------------------------------------------------ files */

/* Hashes one file in chunks, adding to *done for progress. */
static int hash_file(const char *path, uint8_t *buf, uint8_t out[32],
                     void (*advance)(void *ctx, uint64_t n), void *ctx, mt_error *err) {
    int fd = mt_file_open(path, MT_O_READ | MT_O_SEQUENTIAL, 0);
    if (fd < 0) return mt_error_set(err, "%s: cannot open: %s", path, strerror(errno));
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    ssize_t k;
    while ((k = mt_file_read(fd, buf, GGUF_STREAM_CHUNK)) != 0) {
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            mt_file_close(fd);
            return mt_error_set(err, "%s: read error: %s", path, strerror(e));
        }
        crypto_generichash_update(&st, buf, (size_t)k);
        if (advance) advance(ctx, (uint64_t)k);
    }
    mt_file_close(fd);
    crypto_generichash_final(&st, out, 32);
    return 0;
}

int mt_shard_hash_file(const char *path, char out[MT_SHARD_HASH_HEX], mt_error *err) {
    uint8_t *buf = malloc(GGUF_STREAM_CHUNK), raw[32];
    if (!buf) return mt_error_set(err, "out of memory");
    hash_init();
    int rc = hash_file(path, buf, raw, NULL, NULL, err);
    free(buf);
    if (rc == 0) sodium_bin2hex(out, MT_SHARD_HASH_HEX, raw, 32);
    return rc;
}

typedef struct files_job {
    const char *const *paths;
    size_t n;
    char (*out)[MT_SHARD_HASH_HEX];
    hash_job h; /* next, progress and errors */
} files_job;

static void files_advance(void *ctx, uint64_t n) {
    job_advance(ctx, n);
}

static void files_worker(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    files_job *fj = ctx;
    uint8_t *buf = malloc(GGUF_STREAM_CHUNK), raw[32];
    mt_error e = {{0}};
    if (!buf) {
        mt_error_set(&e, "out of memory");
        job_fail(&fj->h, &e);
        return;
    }
    for (;;) {
        size_t k = atomic_fetch_add(&fj->h.next, 1);
        if (k >= fj->n || atomic_load(&fj->h.failed)) break;
        if (hash_file(fj->paths[k], buf, raw, files_advance, &fj->h, &e)) {
            job_fail(&fj->h, &e);
            break;
        }
        sodium_bin2hex(fj->out[k], MT_SHARD_HASH_HEX, raw, 32);
    }
    free(buf);
}

int shard_hash_files(const char *const *paths, size_t n, mt_shard_io *io, const char *what,
                     char (*out)[MT_SHARD_HASH_HEX], mt_error *err) {
    files_job fj = {.paths = paths, .n = n, .out = out};
    fj.h.io = io;
    fj.h.what = what;
    fj.h.err = err;
    for (size_t i = 0; i < n; i++) {
        mt_file_info sb;
        if (mt_file_stat(paths[i], &sb) == 0) fj.h.total += sb.size;
    }
    bool owned;
    mt_pool *pool = shard_io_pool(io, &owned, err);
    if (!pool) return -1;
    hash_init();
    pthread_mutex_init(&fj.h.lock, NULL);
    mt_pool_run(pool, mt_pool_size(pool), files_worker, &fj);
    pthread_mutex_destroy(&fj.h.lock);
    if (owned) mt_pool_free(pool);
    return atomic_load(&fj.h.failed) ? -1 : 0;
}

/* gguf_write.c - writes GGUF files: metadata and tensor infos built in
 * memory, tensor data either copied in (gguf_writer_add_tensor, for
 * synthetic models) or streamed from another model's files at write time
 * (gguf_writer_add_tensor_ranges, for shards; gguf_stream.h).
 *
 * Keys keep insertion order; setting an existing key replaces its value.
 * Tensor data starts aligned to GGUF_DEFAULT_ALIGNMENT and each tensor's
 * offset is the running sum of the padded sizes before it, the layout
 * ggml's own reader insists on. Since every offset is known before any
 * byte is written, tensors are copied independently (on a pool's threads,
 * each with pwrite at its own offset), and the header goes last: it may
 * carry the tensors' hashes, known only once their bytes have passed. */
#include "moontail/gguf.h"
#include "moontail/gguf_stream.h"
#include "moontail/compat.h"
#include "moontail/file.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- buffers */

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void bytes_put(bytes *b, const void *src, size_t n) {
    if (n == 0) return; /* src may be NULL for an empty array */
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) abort(); /* writer buffers are small next to the model; OOM here is fatal */
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(bytes *b, uint32_t v) {
    bytes_put(b, &v, 4);
}
static void put_u64(bytes *b, uint64_t v) {
    bytes_put(b, &v, 8);
}
static void put_str(bytes *b, const char *s, size_t len) {
    put_u64(b, len);
    bytes_put(b, s, len);
}

typedef struct wkv {
    char *key;
    bytes val; /* encoded type + value */
} wkv;

typedef struct wtensor {
    char *name;
    mt_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    size_t nbytes;
    void *data; /* an owned copy, or NULL: the bytes are `ranges` of src's part */
    gguf_reader *src;
    uint32_t part, n_ranges;
    gguf_range *ranges;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

gguf_writer *gguf_writer_new(void) {
    return calloc(1, sizeof(gguf_writer));
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
        free(w->t[i].ranges);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

/* Returns the (cleared) value buffer for key, adding the key if new. */
static bytes *slot(gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            w->kv[i].val.n = 0;
            return &w->kv[i].val;
        }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 32;
        w->kv = realloc(w->kv, w->cap_kv * sizeof *w->kv);
        if (!w->kv) abort();
    }
    wkv *kv = &w->kv[w->n_kv++];
    kv->key = strdup(key);
    if (!kv->key) abort();
    memset(&kv->val, 0, sizeof kv->val);
    return &kv->val;
}

/* ------------------------------------------------------------ metadata */

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    bytes *b = slot(w, key);
    put_u32(b, GGUF_TYPE_UINT32);
    put_u32(b, v);
}

void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    bytes *b = slot(w, key);
    put_u32(b, GGUF_TYPE_INT32);
    bytes_put(b, &v, 4);
}

void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    bytes *b = slot(w, key);
    put_u32(b, GGUF_TYPE_UINT64);
    put_u64(b, v);
}

void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    bytes *b = slot(w, key);
    put_u32(b, GGUF_TYPE_FLOAT32);
    bytes_put(b, &v, 4);
}

void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    bytes *b = slot(w, key);
    uint8_t x = v ? 1 : 0;
    put_u32(b, GGUF_TYPE_BOOL);
    bytes_put(b, &x, 1);
}

void gguf_writer_set_string(gguf_writer *w, const char *key, const char *v) {
    bytes *b = slot(w, key);
    put_u32(b, GGUF_TYPE_STRING);
    put_str(b, v, strlen(v));
}

void gguf_writer_set_array(gguf_writer *w, const char *key, gguf_value_type type, const void *data,
                           uint64_t n) {
    bytes *b = slot(w, key);
    put_u32(b, GGUF_TYPE_ARRAY);
    put_u32(b, type);
    put_u64(b, n);
    bytes_put(b, data, (size_t)n * gguf_type_size(type));
}

void gguf_writer_set_string_array(gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n) {
    bytes *b = slot(w, key);
    put_u32(b, GGUF_TYPE_ARRAY);
    put_u32(b, GGUF_TYPE_STRING);
    put_u64(b, n);
    for (uint64_t i = 0; i < n; i++) put_str(b, v[i], strlen(v[i]));
}

void gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    bytes *b = slot(w, key);
    put_u32(b, v->type);
    if (v->type == GGUF_TYPE_STRING) {
        put_str(b, v->str.ptr, v->str.len);
    } else if (v->type == GGUF_TYPE_ARRAY) {
        put_u32(b, v->arr.type);
        put_u64(b, v->arr.n);
        if (v->arr.type == GGUF_TYPE_STRING)
            for (uint64_t i = 0; i < v->arr.n; i++)
                put_str(b, v->arr.strs[i].ptr, v->arr.strs[i].len);
        else
            bytes_put(b, v->arr.data, (size_t)v->arr.n * gguf_type_size(v->arr.type));
    } else {
        /* Re-encode the scalar at its own width, little-endian. */
        uint64_t raw = v->type == GGUF_TYPE_FLOAT32 ? 0 : v->type == GGUF_TYPE_FLOAT64 ? 0 : v->u;
        if (v->type == GGUF_TYPE_FLOAT32) {
            float f = (float)v->f;
            memcpy(&raw, &f, 4);
        } else if (v->type == GGUF_TYPE_FLOAT64) {
            memcpy(&raw, &v->f, 8);
        }
        bytes_put(b, &raw, gguf_type_size(v->type));
    }
}

/* A key of the model's files rather than of the model: their split
 * bookkeeping, or an alignment this writer does not use. */
static bool file_key(const gguf_kv *kv) {
    if (strcmp(kv->key, "general.alignment") == 0)
        return !(kv->value.type == GGUF_TYPE_UINT32 && kv->value.u == GGUF_DEFAULT_ALIGNMENT);
    return strncmp(kv->key, "split.", 6) == 0 || strcmp(kv->key, GGUF_SPLIT_SOURCE_ID_KEY) == 0;
}

void gguf_writer_copy_metadata(gguf_writer *w, const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (!file_key(&f->kv[i])) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
}

uint64_t gguf_writer_value_offset(const gguf_writer *w, const char *key) {
    uint64_t at = 4 + 4 + 8 + 8; /* magic, version, tensor and key counts */
    for (size_t i = 0; i < w->n_kv; i++) {
        at += 8 + strlen(w->kv[i].key);
        if (strcmp(w->kv[i].key, key) == 0) return at;
        at += w->kv[i].val.n;
    }
    return 0;
}

/* -------------------------------------------------------------- tensors */

size_t gguf_writer_n_tensors(const gguf_writer *w) {
    return w->n_t;
}

/* Checks a new tensor and fills the next slot (name, type, shape, size);
 * the caller says where its bytes come from, then counts it in n_t. */
static wtensor *new_tensor(gguf_writer *w, const char *name, mt_type type, uint32_t n_dims,
                           const int64_t *ne, mt_error *err) {
    const mt_type_traits *tr = mt_type_traits_get(type);
    if (!tr) {
        mt_error_set(err, "tensor '%s': unknown type %d", name, (int)type);
        return NULL;
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        mt_error_set(err, "tensor '%s': %u dimensions (1-4 allowed)", name, n_dims);
        return NULL;
    }
    if (strlen(name) >= 64) {
        mt_error_set(err, "tensor '%s': name is %zu bytes; ggml allows at most 63", name,
                     strlen(name));
        return NULL;
    }
    if (ne[0] % tr->blck) {
        mt_error_set(err, "tensor '%s': row length %lld is not a multiple of %s's block %d", name,
                     (long long)ne[0], tr->name, tr->blck);
        return NULL;
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            mt_error_set(err, "tensor '%s' added twice", name);
            return NULL;
        }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->t, cap * sizeof *w->t);
        if (!t) {
            mt_error_set(err, "out of memory");
            return NULL;
        }
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->n_dims = n_dims;
    t->nbytes = mt_type_row_size(type, ne[0]);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        if (d > 0) t->nbytes *= (size_t)t->ne[d];
    }
    t->name = strdup(name);
    if (!t->name) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    return t;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, mt_type type, uint32_t n_dims,
                           const int64_t *ne, const void *data, mt_error *err) {
    wtensor *t = new_tensor(w, name, type, n_dims, ne, err);
    if (!t) return -1;
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->data) {
        free(t->name);
        return mt_error_set(err, "out of memory for tensor '%s' (%zu bytes)", name, t->nbytes);
    }
    memcpy(t->data, data, t->nbytes);
    w->n_t++;
    return 0;
}

int gguf_writer_add_tensor_ranges(gguf_writer *w, const char *name, mt_type type, uint32_t n_dims,
                                  const int64_t *ne, gguf_reader *src, uint32_t part,
                                  const gguf_range *ranges, uint32_t n_ranges, mt_error *err) {
    const gguf_file *f = gguf_reader_file(src);
    if (part >= f->n_parts) return mt_error_set(err, "tensor '%s': no part %u", name, part);
    wtensor *t = new_tensor(w, name, type, n_dims, ne, err);
    if (!t) return -1;
    uint64_t sum = 0, size = f->parts[part].size;
    for (uint32_t i = 0; i < n_ranges; i++) {
        if (ranges[i].offset > size || ranges[i].nbytes > size - ranges[i].offset) {
            free(t->name);
            return mt_error_set(err, "tensor '%s': range %u lies outside %s", name, i,
                                f->parts[part].path);
        }
        sum += ranges[i].nbytes;
    }
    if (sum != t->nbytes) {
        free(t->name);
        return mt_error_set(err, "tensor '%s': its ranges hold %llu bytes, its shape %zu", name,
                            (unsigned long long)sum, t->nbytes);
    }
    t->ranges = malloc((n_ranges ? n_ranges : 1) * sizeof *t->ranges);
    if (!t->ranges) {
        free(t->name);
        return mt_error_set(err, "out of memory");
    }
    memcpy(t->ranges, ranges, n_ranges * sizeof *ranges);
    t->src = src;
    t->part = part;
    t->n_ranges = n_ranges;
    w->n_t++;
    return 0;
}

/* ---------------------------------------------------------------- header */

static size_t pad_to(size_t n, size_t a) {
    return (a - n % a) % a;
}

static const uint8_t zeros[64];

/* Where the strings of the value of key (an array of one 64-character
 * string per tensor) start in a header whose kv value begins at `base`. */
static int hash_slots(const gguf_writer *w, const bytes *val, const char *key, size_t base,
                      uint64_t *at, mt_error *err) {
    const uint8_t *p = val->p;
    uint32_t type, etype;
    uint64_t n;
    if (val->n < 16) goto bad;
    memcpy(&type, p, 4);
    memcpy(&etype, p + 4, 4);
    memcpy(&n, p + 8, 8);
    if (type != GGUF_TYPE_ARRAY || etype != GGUF_TYPE_STRING || n != w->n_t) goto bad;
    size_t pos = 16;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        if (pos + 8 > val->n) goto bad;
        memcpy(&len, p + pos, 8);
        if (len != 64 || pos + 8 + len > val->n) goto bad;
        at[i] = base + pos + 8;
        pos += 8 + 64;
    }
    return 0;
bad:
    return mt_error_set(err,
                        "key '%s' must be an array of one 64-character placeholder per tensor"
                        " (%zu), to receive their hashes",
                        key, w->n_t);
}

/* Magic, counts, metadata, tensor infos and padding into h; each tensor's
 * offset from the start of the data into off; with hash_key, where each
 * tensor's hash string goes into hash_at. */
static int header_bytes(const gguf_writer *w, const char *hash_key, bytes *h, uint64_t *off,
                        uint64_t *hash_at, mt_error *err) {
    const size_t align = GGUF_DEFAULT_ALIGNMENT;
    bool found = hash_key == NULL;
    put_u32(h, GGUF_MAGIC);
    put_u32(h, 3);
    put_u64(h, w->n_t);
    put_u64(h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(h, w->kv[i].key, strlen(w->kv[i].key));
        if (hash_key && strcmp(w->kv[i].key, hash_key) == 0) {
            if (hash_slots(w, &w->kv[i].val, hash_key, h->n, hash_at, err)) return -1;
            found = true;
        }
        bytes_put(h, w->kv[i].val.p, w->kv[i].val.n);
    }
    if (!found) return mt_error_set(err, "key '%s' (for the tensors' hashes) is not set", hash_key);
    uint64_t o = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(h, t->name, strlen(t->name));
        put_u32(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(h, (uint64_t)t->ne[d]);
        put_u32(h, t->type);
        put_u64(h, o);
        off[i] = o;
        o += t->nbytes + pad_to(t->nbytes, align);
    }
    bytes_put(h, zeros, pad_to(h->n, align));
    return 0;
}

/* ------------------------------------------------------------------ data */

/* One write: tensors are handed out largest first to whichever thread asks. */
typedef struct copy_job {
    const gguf_writer *w;
    const gguf_write_opts *o;
    const char *path;
    int fd;
    uint64_t data_start;
    const uint64_t *off; /* (n_t) from data_start */
    const size_t *order; /* (n_t) tensor indices, largest first */
    atomic_size_t next;
    bool hash;
    uint8_t (*hashes)[32]; /* (n_t) */
    uint64_t done, total;  /* bytes, for progress */
    pthread_mutex_t lock;  /* err, done and the progress callback */
    atomic_bool failed;
    mt_error *err;
} copy_job;

static void job_fail(copy_job *j, const mt_error *e) {
    pthread_mutex_lock(&j->lock);
    if (!atomic_exchange(&j->failed, true) && j->err) *j->err = *e;
    pthread_mutex_unlock(&j->lock);
}

static int pwrite_all(copy_job *j, const void *src, size_t n, uint64_t at, mt_error *e) {
    const uint8_t *p = src;
    while (n > 0) {
        ssize_t k = mt_file_pwrite(j->fd, p, n, at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return mt_error_set(e, "%s: write failed: %s", j->path,
                                k < 0 ? strerror(errno) : "no progress");
        p += k, n -= (size_t)k, at += (uint64_t)k;
    }
    return 0;
}

/* Counts n bytes done; under the lock, so that reports never go backwards. */
static void advance(copy_job *j, size_t n) {
    if (!j->o->progress) return;
    pthread_mutex_lock(&j->lock);
    j->done += n;
    j->o->progress(j->o->progress_ctx, j->done, j->total);
    pthread_mutex_unlock(&j->lock);
}

/* Writes n bytes at `at` (from memory p, or read from the tensor's source
 * into buf when p is NULL), hashing them. */
static int copy_piece(copy_job *j, const wtensor *t, const uint8_t *p, uint64_t src_off, size_t n,
                      uint64_t at, uint8_t *buf, crypto_generichash_state *st, mt_error *e) {
    if (!p) {
        if (gguf_reader_read(t->src, t->part, src_off, buf, n, e)) return -1;
        p = buf;
    }
    if (j->hash) crypto_generichash_update(st, p, n);
    if (pwrite_all(j, p, n, at, e)) return -1;
    /* a file to be flushed anyway: start writing it out now (a hint, without waiting),
     * so that the disk works while we read, and the final fsync has little left to do */
    if (j->o->sync) mt_file_start_writeback(j->fd, at, n);
    advance(j, n);
    return 0;
}

static int copy_tensor(copy_job *j, size_t i, uint8_t **buf, mt_error *e) {
    const wtensor *t = &j->w->t[i];
    uint64_t at = j->data_start + j->off[i];
    crypto_generichash_state st;
    if (j->hash) crypto_generichash_init(&st, NULL, 0, 32);
    if (t->data) {
        for (size_t k = 0; k < t->nbytes; k += GGUF_STREAM_CHUNK) {
            size_t n = t->nbytes - k < GGUF_STREAM_CHUNK ? t->nbytes - k : GGUF_STREAM_CHUNK;
            if (copy_piece(j, t, (const uint8_t *)t->data + k, 0, n, at, NULL, &st, e)) return -1;
            at += n;
        }
    }
    for (uint32_t r = 0; r < t->n_ranges; r++) {
        const gguf_range *rg = &t->ranges[r];
        for (uint64_t k = 0; k < rg->nbytes; k += GGUF_STREAM_CHUNK) {
            size_t n = rg->nbytes - k < GGUF_STREAM_CHUNK ? (size_t)(rg->nbytes - k)
                                                          : (size_t)GGUF_STREAM_CHUNK;
            const uint8_t *mem = gguf_reader_memory(t->src, t->part, rg->offset + k);
            if (!mem && !*buf && !(*buf = malloc(GGUF_STREAM_CHUNK)))
                return mt_error_set(e, "out of memory");
            if (copy_piece(j, t, mem, rg->offset + k, n, at, *buf, &st, e)) return -1;
            at += n;
            if (atomic_load(&j->failed)) return 0; /* another tensor failed: stop early */
        }
    }
    size_t pad = pad_to(t->nbytes, GGUF_DEFAULT_ALIGNMENT);
    if (pwrite_all(j, zeros, pad, at, e)) return -1;
    if (!j->hash) return 0;
    crypto_generichash_final(&st, j->hashes[i], 32);
    const gguf_write_opts *o = j->o;
    if (o->expect && o->expect_set && o->expect_set[i] &&
        memcmp(o->expect[i], j->hashes[i], 32) != 0) {
        char got[65], want[65];
        sodium_bin2hex(got, sizeof got, j->hashes[i], 32);
        sodium_bin2hex(want, sizeof want, o->expect[i], 32);
        return mt_error_set(e,
                            "tensor '%s': its bytes hash to %.16s... but %.16s... was expected:"
                            " the model changed while it was read; start again",
                            t->name, got, want);
    }
    return 0;
}

/* A pool thread: copies tensors until none are left or one failed. */
static void copy_worker(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    copy_job *j = ctx;
    uint8_t *buf = NULL;
    mt_error e = {{0}};
    for (;;) {
        size_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->w->n_t || atomic_load(&j->failed)) break;
        if (copy_tensor(j, j->order[k], &buf, &e)) {
            job_fail(j, &e);
            break;
        }
    }
    free(buf);
}

static int by_size_desc(const void *a, const void *b, void *ctx) {
    const gguf_writer *w = ctx;
    size_t x = w->t[*(const size_t *)a].nbytes, y = w->t[*(const size_t *)b].nbytes;
    if (x != y) return x < y ? 1 : -1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* ----------------------------------------------------------------- write */

int gguf_writer_write_opts(gguf_writer *w, const char *path, const gguf_write_opts *opts,
                           mt_error *err) {
    static const gguf_write_opts none = {0};
    const gguf_write_opts *o = opts ? opts : &none;
    size_t n = w->n_t ? w->n_t : 1;
    bytes h = {0};
    uint64_t *off = malloc(n * sizeof *off), *hash_at = malloc(n * sizeof *hash_at);
    size_t *order = malloc(n * sizeof *order);
    uint8_t(*hashes)[32] = o->hashes ? o->hashes : malloc(n * sizeof *hashes);
    int rc = -1, fd = -1;
    copy_job j = {.w = w, .o = o, .path = path, .err = err};
    pthread_mutex_init(&j.lock, NULL);
    if (!off || !hash_at || !order || !hashes) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (header_bytes(w, o->hash_key, &h, off, hash_at, err)) {
        mt_error_prefix(err, "%s", path);
        goto done;
    }
    fd = mt_file_open(path, MT_O_WRITE | MT_O_CREATE | MT_O_TRUNC, 0666);
    if (fd < 0) {
        mt_error_set(err, "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        order[i] = i;
        j.total += w->t[i].nbytes;
    }
    mt_qsort_r(order, w->n_t, sizeof *order, by_size_desc, w);
    j.fd = fd;
    j.data_start = h.n;
    j.off = off;
    j.order = order;
    j.hash = o->hash_key || o->hashes || o->expect;
    j.hashes = hashes;
    if (j.hash && sodium_init() < 0) {
        /* only the random generator can fail to start; hashing still works */
    }
    mt_pool_run(o->pool, o->pool ? mt_pool_size(o->pool) : 1, copy_worker, &j);
    if (atomic_load(&j.failed)) goto done;
    if (o->hash_key)
        for (size_t i = 0; i < w->n_t; i++) {
            char hex[65];
            sodium_bin2hex(hex, sizeof hex, hashes[i], 32);
            memcpy(h.p + hash_at[i], hex, 64);
        }
    if (pwrite_all(&j, h.p, h.n, 0, err)) goto done;
    if (o->sync && mt_file_sync(fd, false) != 0) {
        mt_error_set(err, "%s: cannot flush to disk: %s", path, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (fd >= 0 && mt_file_close(fd) != 0 && rc == 0)
        rc = mt_error_set(err, "%s: write failed: %s", path, strerror(errno));
    pthread_mutex_destroy(&j.lock);
    free(h.p);
    free(off);
    free(hash_at);
    free(order);
    if (hashes != o->hashes) free(hashes);
    return rc;
}

int gguf_writer_write(gguf_writer *w, const char *path, mt_error *err) {
    return gguf_writer_write_opts(w, path, NULL, err);
}

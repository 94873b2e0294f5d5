/* gguf_write.c - builds a GGUF file in memory and writes it out.
 *
 * Used by `moontail mkmodel` (synthetic test models) and, later, by the shard
 * cutter. Keys keep insertion order; setting an existing key replaces its
 * value. Tensor data starts aligned to GGUF_DEFAULT_ALIGNMENT and each
 * tensor's offset is the running sum of the padded sizes before it, the
 * layout ggml's own reader insists on. */
#include "moontail/gguf.h"

#include <errno.h>
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
    void *data;
    size_t nbytes;
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

/* -------------------------------------------------------------- tensors */

int gguf_writer_add_tensor(gguf_writer *w, const char *name, mt_type type, uint32_t n_dims,
                           const int64_t *ne, const void *data, mt_error *err) {
    const mt_type_traits *tr = mt_type_traits_get(type);
    if (!tr) return mt_error_set(err, "tensor '%s': unknown type %d", name, (int)type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return mt_error_set(err, "tensor '%s': %u dimensions (1-4 allowed)", name, n_dims);
    if (strlen(name) >= 64)
        return mt_error_set(err, "tensor '%s': name is %zu bytes; ggml allows at most 63", name,
                            strlen(name));
    if (ne[0] % tr->blck)
        return mt_error_set(err, "tensor '%s': row length %lld is not a multiple of %s's block %d",
                            name, (long long)ne[0], tr->name, tr->blck);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return mt_error_set(err, "tensor '%s' added twice", name);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        w->t = realloc(w->t, w->cap_t * sizeof *w->t);
        if (!w->t) return mt_error_set(err, "out of memory");
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
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return mt_error_set(err, "out of memory for tensor '%s' (%zu bytes)", name, t->nbytes);
    }
    memcpy(t->data, data, t->nbytes);
    w->n_t++;
    return 0;
}

/* ---------------------------------------------------------------- write */

static size_t pad_to(size_t n, size_t a) {
    return (a - n % a) % a;
}

int gguf_writer_write(gguf_writer *w, const char *path, mt_error *err) {
    const size_t align = GGUF_DEFAULT_ALIGNMENT;
    bytes h = {0};
    put_u32(&h, GGUF_MAGIC);
    put_u32(&h, 3);
    put_u64(&h, w->n_t);
    put_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&h, w->kv[i].key, strlen(w->kv[i].key));
        bytes_put(&h, w->kv[i].val.p, w->kv[i].val.n);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, t->type);
        put_u64(&h, off);
        off += t->nbytes + pad_to(t->nbytes, align);
    }
    static const uint8_t zeros[64];
    bytes_put(&h, zeros, pad_to(h.n, align));

    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(h.p);
        return mt_error_set(err, "%s: cannot create: %s", path, strerror(errno));
    }
    int ok = fwrite(h.p, 1, h.n, fp) == h.n;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        ok = fwrite(t->data, 1, t->nbytes, fp) == t->nbytes &&
             fwrite(zeros, 1, pad_to(t->nbytes, align), fp) == pad_to(t->nbytes, align);
    }
    free(h.p);
    if (fclose(fp) != 0) ok = 0;
    if (!ok) return mt_error_set(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

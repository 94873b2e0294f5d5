/* gguf_split_write.c - writes a model as the files of a split set, in the
 * layout llama.cpp's gguf-split writes (gguf.h describes the keys), one
 * tensor at a time straight from the source's mapping.
 *
 * Each part is: the header (magic, version 3, tensor and key counts), its
 * metadata (all of the model's in the first part, only the split keys in
 * the others), its tensor infos with offsets that are the running sum of
 * the tensors' sizes padded to 32 bytes, zeros up to a multiple of 32, then
 * each tensor's bytes followed by zeros to the next multiple of 32. Only
 * the metadata is built in memory. */
#include "moontail/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN      GGUF_DEFAULT_ALIGNMENT
#define COPY_CHUNK ((size_t)16 << 20) /* bytes per write, so progress moves within a tensor */

/* ------------------------------------------------------------- metadata */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u16(buf *b, uint16_t v) {
    put(b, &v, 2);
}
static void put_u32(buf *b, uint32_t v) {
    put(b, &v, 4);
}
static void put_u64(buf *b, uint64_t v) {
    put(b, &v, 8);
}
static void put_str(buf *b, const char *s, uint64_t len) {
    put_u64(b, len);
    put(b, s, (size_t)len);
}

/* One scalar at its own width, little-endian. */
static void put_scalar(buf *b, const gguf_value *v) {
    uint64_t raw = v->u;
    if (v->type == GGUF_TYPE_FLOAT32) {
        float f = (float)v->f;
        memcpy(&raw, &f, 4);
    } else if (v->type == GGUF_TYPE_FLOAT64) {
        memcpy(&raw, &v->f, 8);
    }
    put(b, &raw, gguf_type_size(v->type));
}

static void put_kv(buf *b, const gguf_kv *kv) {
    const gguf_value *v = &kv->value;
    put_str(b, kv->key, strlen(kv->key));
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
            put(b, v->arr.data, (size_t)v->arr.n * gguf_type_size(v->arr.type));
    } else {
        put_scalar(b, v);
    }
}

/* Keys the parts get anew (split bookkeeping), and an alignment the parts
 * would not have. */
static bool skip_key(const gguf_kv *kv) {
    if (strcmp(kv->key, "general.alignment") == 0)
        return !(kv->value.type == GGUF_TYPE_UINT32 && kv->value.u == ALIGN);
    return strncmp(kv->key, "split.", 6) == 0 || strcmp(kv->key, GGUF_SPLIT_SOURCE_ID_KEY) == 0;
}

static uint64_t padded(uint64_t n) {
    return n + (ALIGN - n % ALIGN) % ALIGN;
}

/* ggml's dimension count: trailing dimensions of 1 are not written. */
static uint32_t n_dims_of(const gguf_tensor *t) {
    uint32_t n = GGUF_MAX_DIMS;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

/* Header, metadata and tensor infos of part k (tensors [a, b)), padded. */
static void part_header(buf *h, const gguf_file *src, uint32_t k, uint32_t n_parts, uint64_t a,
                        uint64_t b, const char *source_id) {
    uint64_t n_kv = 3 + (source_id ? 1 : 0);
    if (k == 0)
        for (uint64_t i = 0; i < src->n_kv; i++) n_kv += !skip_key(&src->kv[i]);
    put_u32(h, GGUF_MAGIC);
    put_u32(h, 3);
    put_u64(h, b - a);
    put_u64(h, n_kv);
    if (k == 0)
        for (uint64_t i = 0; i < src->n_kv; i++)
            if (!skip_key(&src->kv[i])) put_kv(h, &src->kv[i]);
    /* gguf-split's order: split.no, split.tensors.count, then split.count */
    put_str(h, "split.no", 8);
    put_u32(h, GGUF_TYPE_UINT16);
    put_u16(h, (uint16_t)k);
    put_str(h, "split.tensors.count", 19);
    put_u32(h, GGUF_TYPE_INT32);
    put_u32(h, (uint32_t)src->n_tensors);
    put_str(h, "split.count", 11);
    put_u32(h, GGUF_TYPE_UINT16);
    put_u16(h, (uint16_t)n_parts);
    if (source_id) {
        put_str(h, GGUF_SPLIT_SOURCE_ID_KEY, strlen(GGUF_SPLIT_SOURCE_ID_KEY));
        put_u32(h, GGUF_TYPE_STRING);
        put_str(h, source_id, strlen(source_id));
    }
    uint64_t off = 0;
    for (uint64_t i = a; i < b; i++) {
        const gguf_tensor *t = &src->tensors[i];
        uint32_t nd = n_dims_of(t);
        put_str(h, t->name, strlen(t->name));
        put_u32(h, nd);
        for (uint32_t d = 0; d < nd; d++) put_u64(h, (uint64_t)t->ne[d]);
        put_u32(h, (uint32_t)t->type);
        put_u64(h, off);
        off += padded(t->nbytes);
    }
    static const uint8_t zeros[ALIGN];
    put(h, zeros, (size_t)(padded(h->n) - h->n));
}

/* ------------------------------------------------------------ the cuts */

/* start[k] = first tensor of part k: cut where the running byte count is
 * nearest k/N of the total, keeping every part non-empty. */
static void plan_parts(const gguf_file *src, uint32_t n_parts, uint64_t *start) {
    uint64_t n = src->n_tensors, total = 0;
    for (uint64_t i = 0; i < n; i++) total += padded(src->tensors[i].nbytes);
    start[0] = 0;
    start[n_parts] = n;
    uint64_t j = 0, before = 0; /* bytes of tensors [0, j) */
    for (uint32_t k = 1; k < n_parts; k++) {
        uint64_t target = total / n_parts * k + total % n_parts * k / n_parts;
        while (j < n && before + padded(src->tensors[j].nbytes) <= target)
            before += padded(src->tensors[j++].nbytes);
        /* cut at j, or after tensor j when that lands nearer the target */
        uint64_t cut = j;
        if (j < n && before + padded(src->tensors[j].nbytes) - target < target - before)
            cut = j + 1;
        uint64_t lo = start[k - 1] + 1, hi = n - (n_parts - k);
        start[k] = cut < lo ? lo : cut > hi ? hi : cut;
    }
}

/* --------------------------------------------------------------- write */

typedef struct progress {
    gguf_split_progress_fn fn;
    void *ctx;
    uint64_t done, total;
} progress;

static int write_part(const char *path, const gguf_file *src, uint32_t k, uint32_t n_parts,
                      uint64_t a, uint64_t b, const char *source_id, progress *pr, mt_error *err) {
    buf h = {0};
    part_header(&h, src, k, n_parts, a, b, source_id);
    if (h.oom) {
        free(h.p);
        return mt_error_set(err, "%s: out of memory for the metadata", path);
    }
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(h.p);
        return mt_error_set(err, "%s: cannot create: %s", path, strerror(errno));
    }
    static const uint8_t zeros[ALIGN];
    bool ok = fwrite(h.p, 1, h.n, fp) == h.n;
    free(h.p);
    for (uint64_t i = a; ok && i < b; i++) {
        const gguf_tensor *t = &src->tensors[i];
        const uint8_t *p = t->data;
        for (size_t at = 0; ok && at < t->nbytes; at += COPY_CHUNK) {
            size_t n = t->nbytes - at < COPY_CHUNK ? t->nbytes - at : COPY_CHUNK;
            ok = fwrite(p + at, 1, n, fp) == n;
            pr->done += n;
            if (ok && pr->fn) pr->fn(pr->ctx, pr->done, pr->total);
        }
        size_t pad = (size_t)(padded(t->nbytes) - t->nbytes);
        ok = ok && fwrite(zeros, 1, pad, fp) == pad;
    }
    int e = errno;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) return mt_error_set(err, "%s: write failed: %s", path, strerror(e));
    return 0;
}

int gguf_split_write(const gguf_file *src, uint32_t n_parts, const char *prefix,
                     const char *source_id, uint64_t *part_tensors, gguf_split_progress_fn fn,
                     void *fn_ctx, mt_error *err) {
    uint64_t n = src->n_tensors;
    if (n_parts < 1 || n_parts > GGUF_SPLIT_MAX_PARTS || n_parts > n)
        return mt_error_set(err,
                            "%s: cannot be written as %u parts: it has %llu tensors and every part"
                            " needs one (at most %d parts)",
                            src->path, n_parts, (unsigned long long)n, GGUF_SPLIT_MAX_PARTS);
    if (n > INT32_MAX)
        return mt_error_set(err, "%s: %llu tensors do not fit split.tensors.count (int32)",
                            src->path, (unsigned long long)n);
    size_t cap = strlen(prefix) + 32;
    uint64_t *start = malloc((n_parts + 1) * sizeof *start);
    char *final = malloc(cap), *tmp = malloc(cap + 4);
    if (!start || !final || !tmp) {
        free(start);
        free(final);
        free(tmp);
        return mt_error_set(err, "out of memory");
    }
    plan_parts(src, n_parts, start);
    progress pr = {fn, fn_ctx, 0, 0};
    for (uint64_t i = 0; i < n; i++) pr.total += src->tensors[i].nbytes;

    int rc = 0;
    uint32_t written = 0;
    for (uint32_t k = 0; k < n_parts && rc == 0; k++, written++) {
        gguf_split_path(final, cap, prefix, k, n_parts);
        snprintf(tmp, cap + 4, "%s.tmp", final);
        rc = write_part(tmp, src, k, n_parts, start[k], start[k + 1], source_id, &pr, err);
        if (rc) unlink(tmp);
    }
    /* every part is complete: only now do they take their names */
    for (uint32_t k = 0; k < written; k++) {
        gguf_split_path(final, cap, prefix, k, n_parts);
        snprintf(tmp, cap + 4, "%s.tmp", final);
        if (rc == 0 && rename(tmp, final) != 0)
            rc = mt_error_set(err, "%s: cannot rename from '%s': %s", final, tmp, strerror(errno));
        if (rc) unlink(tmp);
    }
    if (rc == 0 && part_tensors) memcpy(part_tensors, start, (n_parts + 1) * sizeof *start);
    free(start);
    free(final);
    free(tmp);
    return rc;
}

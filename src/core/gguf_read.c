/* gguf_read.c - a bounds-checked GGUF reader over a read-only mapping.
 *
 * Nothing in the file is trusted: a cursor refuses every read that would go
 * past the end, counts are checked against the bytes left before anything is
 * allocated, and tensor shapes, types and offsets are validated so that every
 * tensor view lies inside the file and the tensors are laid out as ggml lays
 * them out, none overlapping another (gguf_layout.c). Errors read
 * "<file>: <what> ...". */
#include "gguf_internal.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Keys and names longer than this are rejected as corrupt (ggml itself caps
 * tensor names at 63 bytes; keys are short dotted paths). */
#define GGUF_MAX_KEY_LEN 65535

/* ---------------------------------------------------------------- cursor */

typedef struct cursor {
    const uint8_t *base;
    size_t size;
    size_t pos;
    const char *name;
    mt_error *err;
} cursor;

static size_t cur_left(const cursor *c) {
    return c->size - c->pos;
}

static int cur_read(cursor *c, void *dst, size_t n, const char *what) {
    if (n > cur_left(c)) {
        // -1 rather than mt_error_set's value: the compiler then sees that a
        // failed read never returns 0 with *dst unwritten (gcc -O3 warned)
        mt_error_set(c->err,
                     "%s: file ends inside %s (needs %zu bytes at offset %zu, file has %zu);"
                     " the file is truncated or corrupt",
                     c->name, what, n, c->pos, c->size);
        return -1;
    }
    memcpy(dst, c->base + c->pos, n);
    c->pos += n;
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what) {
    return cur_read(c, v, 4, what);
}
static int cur_u64(cursor *c, uint64_t *v, const char *what) {
    return cur_read(c, v, 8, what);
}

/* Reads a gguf string (u64 length + bytes) as a view. */
static int cur_str(cursor *c, gguf_str *s, uint64_t max_len, const char *what) {
    uint64_t len = 0;
    if (cur_u64(c, &len, what)) return -1;
    if (len > cur_left(c))
        return mt_error_set(c->err,
                            "%s: %s at offset %zu claims %llu bytes but only %zu remain;"
                            " the file is truncated or corrupt",
                            c->name, what, c->pos - 8, (unsigned long long)len, cur_left(c));
    if (len > max_len)
        return mt_error_set(c->err, "%s: %s at offset %zu is %llu bytes long (limit %llu)", c->name,
                            what, c->pos - 8, (unsigned long long)len, (unsigned long long)max_len);
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

static char *str_dup(gguf_str s) {
    char *p = malloc(s.len + 1);
    if (!p) return NULL;
    memcpy(p, s.ptr, s.len);
    p[s.len] = 0;
    return p;
}

/* ----------------------------------------------------------- name index */

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

int gguf_index_init(gguf_name_index *ix, uint64_t n) {
    ix->cap = 16;
    while (ix->cap < 2 * n) ix->cap *= 2;
    ix->slots = calloc(ix->cap, sizeof *ix->slots);
    return ix->slots ? 0 : -1;
}

typedef const char *(*name_of_fn)(const gguf_file *f, uint32_t i);
static const char *kv_name(const gguf_file *f, uint32_t i) {
    return f->kv[i].key;
}
static const char *tensor_name(const gguf_file *f, uint32_t i) {
    return f->tensors[i].name;
}

/* Returns the index of `name`, or -1; with insert >= 0, inserts it unless present. */
static int64_t index_lookup(const gguf_name_index *ix, const gguf_file *f, name_of_fn name_of,
                            const char *name, int64_t insert) {
    if (!ix->slots) return -1;
    uint64_t mask = ix->cap - 1;
    for (uint64_t h = hash_name(name) & mask;; h = (h + 1) & mask) {
        uint32_t s = ix->slots[h];
        if (s == 0) {
            if (insert >= 0) ix->slots[h] = (uint32_t)insert + 1;
            return -1;
        }
        if (strcmp(name_of(f, s - 1), name) == 0) return s - 1;
    }
}

int64_t gguf_index_add_tensor(gguf_file *f, uint64_t i) {
    gguf_file_priv *fp = (gguf_file_priv *)f;
    return index_lookup(&fp->tensor_ix, f, tensor_name, f->tensors[i].name, (int64_t)i);
}

/* --------------------------------------------------------------- values */

size_t gguf_type_size(gguf_value_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL:
        return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
        return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32:
        return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *gguf_type_name(gguf_value_type t) {
    static const char *names[GGUF_TYPE_COUNT] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                 "int32",  "float32", "bool",   "string", "array",
                                                 "uint64", "int64",   "float64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "invalid";
}

/* Decodes one scalar at p into v (type already validated). */
static int decode_scalar(gguf_value_type t, const uint8_t *p, gguf_value *v) {
    v->type = t;
    switch (t) {
    case GGUF_TYPE_UINT8:
        v->u = p[0];
        break;
    case GGUF_TYPE_INT8:
        v->i = (int8_t)p[0];
        break;
    case GGUF_TYPE_BOOL:
        if (p[0] > 1) return -1;
        v->u = p[0];
        break;
    case GGUF_TYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v->u = x;
    } break;
    case GGUF_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        v->i = x;
    } break;
    case GGUF_TYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        v->u = x;
    } break;
    case GGUF_TYPE_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        v->i = x;
    } break;
    case GGUF_TYPE_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        v->f = x;
    } break;
    case GGUF_TYPE_UINT64:
        memcpy(&v->u, p, 8);
        break;
    case GGUF_TYPE_INT64:
        memcpy(&v->i, p, 8);
        break;
    case GGUF_TYPE_FLOAT64:
        memcpy(&v->f, p, 8);
        break;
    default:
        return -1;
    }
    return 0;
}

static int read_value(cursor *c, gguf_value *v, const char *key) {
    uint32_t t = 0;
    if (cur_u32(c, &t, "a value type")) return -1;
    if (t >= GGUF_TYPE_COUNT)
        return mt_error_set(c->err, "%s: key '%s' has unknown value type %u (valid: 0-12)", c->name,
                            key, t);
    v->type = (gguf_value_type)t;
    if (t == GGUF_TYPE_STRING) return cur_str(c, &v->str, UINT64_MAX, "a string value");
    if (t != GGUF_TYPE_ARRAY) {
        uint8_t buf[8];
        size_t sz = gguf_type_size(v->type);
        if (cur_read(c, buf, sz, "a scalar value")) return -1;
        if (decode_scalar(v->type, buf, v))
            return mt_error_set(c->err, "%s: key '%s' holds bool byte %u (must be 0 or 1)", c->name,
                                key, buf[0]);
        return 0;
    }
    uint32_t et = 0; /* set by cur_u32; initialized for gcc -O3's maybe-uninitialized */
    uint64_t n = 0;
    if (cur_u32(c, &et, "an array element type") || cur_u64(c, &n, "an array length")) return -1;
    if (et >= GGUF_TYPE_COUNT || et == GGUF_TYPE_ARRAY)
        return mt_error_set(c->err,
                            "%s: key '%s' is an array of %s (type %u), which is not allowed",
                            c->name, key, et == GGUF_TYPE_ARRAY ? "arrays" : "an unknown type", et);
    v->arr.type = (gguf_value_type)et;
    v->arr.n = n;
    v->arr.strs = NULL;
    if (et == GGUF_TYPE_STRING) {
        if (n > cur_left(c) / 8)
            return mt_error_set(c->err,
                                "%s: key '%s' claims %llu strings but only %zu bytes remain;"
                                " the file is truncated or corrupt",
                                c->name, key, (unsigned long long)n, cur_left(c));
        v->arr.data = c->base + c->pos;
        v->arr.strs = malloc((n ? n : 1) * sizeof *v->arr.strs);
        if (!v->arr.strs) return mt_error_set(c->err, "%s: out of memory", c->name);
        for (uint64_t i = 0; i < n; i++)
            if (cur_str(c, &v->arr.strs[i], UINT64_MAX, "an array string")) return -1;
        return 0;
    }
    size_t esz = gguf_type_size(v->arr.type);
    if (n > cur_left(c) / esz)
        return mt_error_set(c->err,
                            "%s: key '%s' claims %llu elements of %s but only %zu bytes remain;"
                            " the file is truncated or corrupt",
                            c->name, key, (unsigned long long)n, gguf_type_name(v->arr.type),
                            cur_left(c));
    v->arr.data = c->base + c->pos;
    if (et == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (v->arr.data[i] > 1)
                return mt_error_set(c->err,
                                    "%s: key '%s' element %llu is bool byte %u (must be 0/1)",
                                    c->name, key, (unsigned long long)i, v->arr.data[i]);
    c->pos += n * esz;
    return 0;
}

/* --------------------------------------------------------------- tensors */

static int read_tensor_info(cursor *c, gguf_tensor *t, uint64_t idx) {
    gguf_str name;
    if (cur_str(c, &name, 255, "a tensor name")) return -1;
    if (!(t->name = str_dup(name))) return mt_error_set(c->err, "%s: out of memory", c->name);
    if (memchr(name.ptr, 0, name.len))
        return mt_error_set(c->err, "%s: tensor %llu name contains a NUL byte", c->name,
                            (unsigned long long)idx);
    if (cur_u32(c, &t->n_dims, "a tensor's dimension count")) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return mt_error_set(c->err, "%s: tensor '%s' has %u dimensions (must be 1-%d)", c->name,
                            t->name, t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne = 0;
        if (cur_u64(c, &ne, "a tensor dimension")) return -1;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return mt_error_set(c->err, "%s: tensor '%s' dimension %u is %llu (must be >= 1)",
                                c->name, t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if (cur_u32(c, &type, "a tensor type") || cur_u64(c, &t->offset, "a tensor offset")) return -1;
    const mt_type_traits *tr = mt_type_traits_get(type);
    if (!tr)
        return mt_error_set(c->err, "%s: tensor '%s' has unknown type id %u", c->name, t->name,
                            type);
    t->type = (mt_type)type;
    if (t->ne[0] % tr->blck != 0)
        return mt_error_set(c->err,
                            "%s: tensor '%s' row length %lld is not a multiple of the %s block"
                            " size %d",
                            c->name, t->name, (long long)t->ne[0], tr->name, tr->blck);
    /* Size with overflow checks: every product must stay below the file size. */
    size_t limit = c->size;
    uint64_t row = (uint64_t)(t->ne[0] / tr->blck) * (uint64_t)tr->type_size;
    if ((uint64_t)(t->ne[0] / tr->blck) > limit / (uint64_t)tr->type_size) goto too_big;
    t->nb[0] = (size_t)tr->type_size;
    t->nb[1] = (size_t)row;
    uint64_t total = row;
    for (int d = 1; d < GGUF_MAX_DIMS; d++) {
        if (total != 0 && (uint64_t)t->ne[d] > limit / total) goto too_big;
        total *= (uint64_t)t->ne[d];
        if (d + 1 < GGUF_MAX_DIMS) t->nb[d + 1] = (size_t)total;
    }
    t->nbytes = (size_t)total;
    return 0;
too_big:
    return mt_error_set(c->err,
                        "%s: tensor '%s' shape [%lld, %lld, %lld, %lld] of %s needs more bytes"
                        " than the whole file (%zu); the file is truncated or corrupt",
                        c->name, t->name, (long long)t->ne[0], (long long)t->ne[1],
                        (long long)t->ne[2], (long long)t->ne[3], tr->name, c->size);
}

/* ------------------------------------------------------------------ open */

static int parse(gguf_file_priv *fp, mt_error *err) {
    gguf_file *f = &fp->pub;
    cursor c = {f->base, f->size, 0, f->path, err};
    uint32_t magic;
    if (f->size < 4 || cur_u32(&c, &magic, "the magic"))
        return mt_error_set(err, "%s: file is %zu bytes, too short to be GGUF", f->path, f->size);
    if (magic != GGUF_MAGIC)
        return mt_error_set(err,
                            "%s: not a GGUF file (magic bytes %02x %02x %02x %02x, want 'GGUF')",
                            f->path, f->base[0], f->base[1], f->base[2], f->base[3]);
    if (cur_u32(&c, &f->version, "the version")) return -1;
    if ((f->version & 0xffff) == 0)
        return mt_error_set(err, "%s: big-endian GGUF files are not supported", f->path);
    if (f->version != 2 && f->version != 3)
        return mt_error_set(err, "%s: GGUF version %u is not supported (2 and 3 are)", f->path,
                            f->version);
    if (cur_u64(&c, &f->n_tensors, "the tensor count") || cur_u64(&c, &f->n_kv, "the key count"))
        return -1;
    /* A key/value record takes at least 8+4+1 bytes and a tensor info 8+4+8+4+8. */
    if (f->n_kv > cur_left(&c) / 13)
        return mt_error_set(err,
                            "%s: header claims %llu metadata keys, more than the file can hold",
                            f->path, (unsigned long long)f->n_kv);
    if (f->n_kv >= UINT32_MAX || f->n_tensors >= UINT32_MAX)
        return mt_error_set(err,
                            "%s: header counts (%llu keys, %llu tensors) are implausibly large",
                            f->path, (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
    if (f->n_tensors > cur_left(&c) / 32)
        return mt_error_set(err, "%s: header claims %llu tensors, more than the file can hold",
                            f->path, (unsigned long long)f->n_tensors);
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors || gguf_index_init(&fp->kv_ix, f->n_kv) ||
        gguf_index_init(&fp->tensor_ix, f->n_tensors))
        return mt_error_set(err, "%s: out of memory", f->path);

    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_str key;
        if (cur_str(&c, &key, GGUF_MAX_KEY_LEN, "a metadata key")) return -1;
        if (memchr(key.ptr, 0, key.len))
            return mt_error_set(err, "%s: metadata key %llu contains a NUL byte", f->path,
                                (unsigned long long)i);
        if (!(f->kv[i].key = str_dup(key))) return mt_error_set(err, "%s: out of memory", f->path);
        if (read_value(&c, &f->kv[i].value, f->kv[i].key)) {
            f->n_kv = i + 1; /* so gguf_close frees what was read */
            return -1;
        }
        if (index_lookup(&fp->kv_ix, f, kv_name, f->kv[i].key, (int64_t)i) >= 0)
            return mt_error_set(err, "%s: metadata key '%s' appears twice", f->path, f->kv[i].key);
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->value.type != GGUF_TYPE_UINT32)
            return mt_error_set(err, "%s: general.alignment is %s, must be uint32", f->path,
                                gguf_type_name(al->value.type));
        uint64_t a = al->value.u;
        if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20))
            return mt_error_set(err, "%s: general.alignment %llu is not a power of two <= 1 MiB",
                                f->path, (unsigned long long)a);
        f->alignment = (uint32_t)a;
    }

    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (read_tensor_info(&c, t, i)) return -1;
        if (index_lookup(&fp->tensor_ix, f, tensor_name, t->name, (int64_t)i) >= 0)
            return mt_error_set(err, "%s: tensor '%s' appears twice", f->path, t->name);
    }

    size_t a = f->alignment;
    f->data_offset = c.pos + (a - c.pos % a) % a;
    if (f->n_tensors > 0 && f->data_offset > f->size)
        return mt_error_set(err, "%s: file ends before its data section (offset %zu); truncated",
                            f->path, f->data_offset);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % a != 0)
            return mt_error_set(
                err, "%s: tensor '%s' offset %llu is not a multiple of the alignment %zu", f->path,
                t->name, (unsigned long long)t->offset, a);
        size_t room = f->size - f->data_offset;
        if (t->offset > room || t->nbytes > room - t->offset)
            return mt_error_set(err,
                                "%s: tensor '%s' data [%llu, %llu) lies past the end of the data"
                                " section (%zu bytes); the file is truncated or corrupt",
                                f->path, t->name, (unsigned long long)t->offset,
                                (unsigned long long)t->offset + (unsigned long long)t->nbytes,
                                room);
        t->data = f->base + f->data_offset + t->offset;
    }
    return gguf_check_layout(f, err);
}

static gguf_file *open_common(gguf_file_priv *fp, mt_error *err) {
    fp->part0 = (gguf_part){fp->pub.path, fp->pub.base, fp->pub.size};
    fp->pub.parts = &fp->part0;
    fp->pub.n_parts = 1;
    if (parse(fp, err)) {
        gguf_close(&fp->pub);
        return NULL;
    }
    return &fp->pub;
}

gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, mt_error *err) {
    gguf_file_priv *fp = calloc(1, sizeof *fp);
    if (!fp || !(fp->pub.path = strdup(name ? name : "<buffer>"))) {
        free(fp);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    fp->pub.base = buf;
    fp->pub.size = size;
    return open_common(fp, err);
}

gguf_file *gguf_open_single(const char *path, mt_error *err) {
    int fd = mt_file_open(path, MT_O_READ, 0);
    if (fd < 0) {
        mt_error_set(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    mt_file_info st;
    if (mt_file_fstat(fd, &st) != 0 || !st.regular) {
        mt_error_set(err, "%s: not a regular file", path);
        mt_file_close(fd);
        return NULL;
    }
    if (st.size == 0) {
        mt_error_set(err, "%s: file is empty, not a GGUF model", path);
        mt_file_close(fd);
        return NULL;
    }
    if (st.size > SIZE_MAX) {
        mt_error_set(err, "%s: %llu bytes do not fit this machine's address space", path,
                     (unsigned long long)st.size);
        mt_file_close(fd);
        return NULL;
    }
    const void *map = mt_map_file(fd, st.size);
    mt_file_close(fd);
    if (!map) {
        mt_error_set(err, "%s: cannot map: %s", path, strerror(errno));
        return NULL;
    }
    gguf_file_priv *fp = calloc(1, sizeof *fp);
    if (!fp || !(fp->pub.path = strdup(path))) {
        free(fp);
        mt_map_release(map, st.size);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    fp->pub.base = map;
    fp->pub.size = (size_t)st.size;
    fp->pub.mapped = true;
    return open_common(fp, err);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    gguf_file_priv *fp = (gguf_file_priv *)f;
    if (fp->sub) { /* a split set: the parts own everything but the joined lists */
        for (uint32_t i = 0; i < fp->n_sub; i++) gguf_close(fp->sub[i]);
        free(fp->sub);
        free(f->tensors);
        free(f->parts);
        free(fp->tensor_ix.slots);
        free(f->path);
        free(fp);
        return;
    }
    for (uint64_t i = 0; f->kv && i < f->n_kv; i++) {
        free(f->kv[i].key);
        if (f->kv[i].value.type == GGUF_TYPE_ARRAY) free(f->kv[i].value.arr.strs);
    }
    for (uint64_t i = 0; f->tensors && i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    free(fp->kv_ix.slots);
    free(fp->tensor_ix.slots);
    if (f->mapped) mt_map_release(f->base, f->size);
    free(f->path);
    free(fp);
}

uint64_t gguf_total_size(const gguf_file *f) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < f->n_parts; i++) n += f->parts[i].size;
    return n;
}

/* --------------------------------------------------------------- look-up */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    int64_t i = index_lookup(&((const gguf_file_priv *)f)->kv_ix, f, kv_name, key, -1);
    return i >= 0 ? &f->kv[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = index_lookup(&((const gguf_file_priv *)f)->tensor_ix, f, tensor_name, name, -1);
    return i >= 0 ? &f->tensors[i] : NULL;
}

static bool is_unsigned(gguf_value_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_BOOL;
}

static bool is_signed(gguf_value_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

static const gguf_kv *find_clear(const gguf_file *f, const char *key, mt_error *err) {
    if (err) err->msg[0] = 0;
    return gguf_find_kv(f, key);
}

bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, mt_error *err) {
    const gguf_kv *kv = find_clear(f, key, err);
    if (!kv) return false;
    const gguf_value *v = &kv->value;
    if (is_unsigned(v->type) && v->type != GGUF_TYPE_BOOL) {
        *out = v->u;
        return true;
    }
    if (is_signed(v->type) && v->i >= 0) {
        *out = (uint64_t)v->i;
        return true;
    }
    mt_error_set(err, "%s: key '%s' is %s, expected a non-negative integer", f->path, key,
                 gguf_type_name(v->type));
    return false;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, mt_error *err) {
    uint64_t v;
    if (!gguf_get_u64(f, key, &v, err)) return false;
    if (v > UINT32_MAX) {
        mt_error_set(err, "%s: key '%s' value %llu does not fit in 32 bits", f->path, key,
                     (unsigned long long)v);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out, mt_error *err) {
    const gguf_kv *kv = find_clear(f, key, err);
    if (!kv) return false;
    const gguf_value *v = &kv->value;
    if (v->type == GGUF_TYPE_FLOAT32 || v->type == GGUF_TYPE_FLOAT64) {
        *out = (float)v->f;
        return true;
    }
    if (is_unsigned(v->type) || is_signed(v->type)) {
        *out = is_signed(v->type) ? (float)v->i : (float)v->u;
        return true;
    }
    mt_error_set(err, "%s: key '%s' is %s, expected a number", f->path, key,
                 gguf_type_name(v->type));
    return false;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out, mt_error *err) {
    const gguf_kv *kv = find_clear(f, key, err);
    if (!kv) return false;
    if (kv->value.type != GGUF_TYPE_BOOL) {
        mt_error_set(err, "%s: key '%s' is %s, expected bool", f->path, key,
                     gguf_type_name(kv->value.type));
        return false;
    }
    *out = kv->value.u != 0;
    return true;
}

char *gguf_get_string(const gguf_file *f, const char *key, mt_error *err) {
    const gguf_kv *kv = find_clear(f, key, err);
    if (!kv) return NULL;
    if (kv->value.type != GGUF_TYPE_STRING) {
        mt_error_set(err, "%s: key '%s' is %s, expected string", f->path, key,
                     gguf_type_name(kv->value.type));
        return NULL;
    }
    char *s = str_dup(kv->value.str);
    if (!s) mt_error_set(err, "out of memory");
    return s;
}

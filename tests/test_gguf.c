/* test_gguf.c - the GGUF reader and writer.
 *
 * A file written by gguf_writer reads back with every value and tensor
 * intact. Hostile files - built byte by byte here, independently of the
 * writer - are refused with an error that names the problem: every
 * truncation, huge counts and lengths, bad offsets, tensors whose data
 * overlaps, is out of order or has gaps (ggml's layout rule), unknown or
 * removed types, overflowing shapes, duplicates, bad magic/version/alignment. A
 * deterministic byte-flip sweep must never crash (ASan watches) and must
 * either parse or explain why not.
 *
 * Split models: a 3-part set built here byte by byte in gguf-split's
 * layout opens from any part as one model; gguf_split_write writes the
 * same bytes (cut where the byte counts put it, worked out by hand), with
 * the source-id key given or computed from the tensors' hashes (checked
 * against their bytes), and leaves no file when that fails; every
 * broken set (a part missing, from another split or model, renamed or
 * copied, truncated, of another version, a tensor in two parts, a wrong
 * total, overlapping tensors in one part) is refused with a message naming the file. */
#include "check.h"
#include "moontail/gguf.h"

#include <sodium.h>
#include <stdint.h>
#include <unistd.h>

/* ------------------------------------------------------- raw file builder */

typedef struct raw {
    uint8_t b[8192];
    size_t n;
} raw;

static void put(raw *r, const void *p, size_t n) {
    memcpy(r->b + r->n, p, n);
    r->n += n;
}
static void u32(raw *r, uint32_t v) {
    put(r, &v, 4);
}
static void u64(raw *r, uint64_t v) {
    put(r, &v, 8);
}
static void str(raw *r, const char *s) {
    u64(r, strlen(s));
    put(r, s, strlen(s));
}
static void header(raw *r, uint64_t n_tensors, uint64_t n_kv) {
    r->n = 0;
    put(r, "GGUF", 4);
    u32(r, 3);
    u64(r, n_tensors);
    u64(r, n_kv);
}
static void tensor_info(raw *r, const char *name, uint32_t n_dims, const uint64_t *ne,
                        uint32_t type, uint64_t offset) {
    str(r, name);
    u32(r, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) u64(r, ne[i]);
    u32(r, type);
    u64(r, offset);
}
static void pad(raw *r) {
    while (r->n % 32) r->b[r->n++] = 0;
}

/* Opens r and expects failure with `want` in the message. */
static void expect_error(const raw *r, const char *want, const char *what) {
    mt_error err = {{0}};
    gguf_file *f = gguf_open_buffer(r->b, r->n, "hostile.gguf", &err);
    CHECK(f == NULL, "%s: accepted", what);
    if (f) gguf_close(f);
    CHECK(strstr(err.msg, "hostile.gguf") != NULL, "%s: message does not name the file: %s", what,
          err.msg);
    CHECK(strstr(err.msg, want) != NULL, "%s: message lacks '%s': %s", what, want, err.msg);
}

/* ------------------------------------------------------------ round trip */

static void test_round_trip(void) {
    const char *path = check_tmp(".gguf");
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_string(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "a.u32", 4000000000u);
    gguf_writer_set_i32(w, "a.i32", -7);
    gguf_writer_set_u64(w, "a.u64", 1ull << 40);
    gguf_writer_set_f32(w, "a.f32", 0.25f);
    gguf_writer_set_bool(w, "a.bool", true);
    int32_t arr[5] = {1, -2, 3, -4, 5};
    gguf_writer_set_array(w, "a.arr", GGUF_TYPE_INT32, arr, 5);
    const char *strs[3] = {"x", "", "héllo"};
    gguf_writer_set_string_array(w, "a.strs", strs, 3);
    gguf_writer_set_u32(w, "a.u32", 17); /* replaces the earlier value */
    float t1[6] = {1, 2, 3, 4, 5, 6};
    int64_t ne1[2] = {3, 2};
    mt_error err = {{0}};
    CHECK(gguf_writer_add_tensor(w, "t.f32", MT_TYPE_F32, 2, ne1, t1, &err) == 0, "%s", err.msg);
    uint8_t q8[2 * 34];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7);
    int64_t ne2[1] = {64};
    CHECK(gguf_writer_add_tensor(w, "t.q8", MT_TYPE_Q8_0, 1, ne2, q8, &err) == 0, "%s", err.msg);
    CHECK(gguf_writer_add_tensor(w, "t.q8", MT_TYPE_Q8_0, 1, ne2, q8, &err) != 0,
          "duplicate tensor accepted");
    int64_t bad[1] = {33};
    CHECK(gguf_writer_add_tensor(w, "t.bad", MT_TYPE_Q8_0, 1, bad, q8, &err) != 0,
          "row 33 of Q8_0 accepted");
    CHECK(gguf_writer_write(w, path, &err) == 0, "write: %s", err.msg);
    gguf_writer_free(w);

    gguf_file *f = gguf_open(path, &err);
    CHECK(f != NULL, "open: %s", err.msg);
    if (!f) return;
    uint32_t u;
    uint64_t u6;
    float fl;
    bool b;
    CHECK(f->n_kv == 8 && f->n_tensors == 2, "counts %llu %llu", (unsigned long long)f->n_kv,
          (unsigned long long)f->n_tensors);
    CHECK(gguf_get_u32(f, "a.u32", &u, NULL) && u == 17, "u32 %u", u);
    CHECK(gguf_get_u64(f, "a.u64", &u6, NULL) && u6 == (1ull << 40), "u64");
    CHECK(!gguf_get_u32(f, "a.u64", &u, &err) && strstr(err.msg, "32 bits"), "u64 into u32: %s",
          err.msg);
    CHECK(!gguf_get_u64(f, "a.i32", &u6, &err) && strstr(err.msg, "non-negative"),
          "negative as u64");
    CHECK(gguf_get_f32(f, "a.f32", &fl, NULL) && fl == 0.25f, "f32");
    CHECK(gguf_get_bool(f, "a.bool", &b, NULL) && b, "bool");
    CHECK(!gguf_get_bool(f, "a.f32", &b, &err) && strstr(err.msg, "expected bool"), "f32 as bool");
    CHECK(!gguf_get_u32(f, "absent", &u, &err) && err.msg[0] == 0, "absent key reported as error");
    char *arch = gguf_get_string(f, "general.architecture", NULL);
    CHECK(arch && strcmp(arch, "llama") == 0, "string");
    free(arch);
    const gguf_kv *kv = gguf_find_kv(f, "a.arr");
    CHECK(kv && kv->value.type == GGUF_TYPE_ARRAY && kv->value.arr.type == GGUF_TYPE_INT32 &&
              kv->value.arr.n == 5 && memcmp(kv->value.arr.data, arr, sizeof arr) == 0,
          "int array");
    kv = gguf_find_kv(f, "a.strs");
    CHECK(kv && kv->value.arr.n == 3 && kv->value.arr.strs[2].len == strlen("héllo") &&
              memcmp(kv->value.arr.strs[2].ptr, "héllo", kv->value.arr.strs[2].len) == 0 &&
              kv->value.arr.strs[1].len == 0,
          "string array");
    const gguf_tensor *t = gguf_find_tensor(f, "t.f32");
    CHECK(t && t->ne[0] == 3 && t->ne[1] == 2 && t->nbytes == 24 && t->nb[1] == 12 &&
              memcmp(t->data, t1, 24) == 0,
          "f32 tensor");
    t = gguf_find_tensor(f, "t.q8");
    CHECK(t && t->type == MT_TYPE_Q8_0 && t->nbytes == 68 && memcmp(t->data, q8, 68) == 0 &&
              ((const uint8_t *)t->data - f->base) % 32 == 0,
          "q8 tensor (aligned data)");
    CHECK(gguf_find_tensor(f, "t.none") == NULL, "absent tensor found");

    /* Copying every value through gguf_writer_set_value reproduces them. */
    gguf_writer *w2 = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w2, f->kv[i].key, &f->kv[i].value);
    const char *path2 = check_tmp(".gguf");
    CHECK(gguf_writer_write(w2, path2, &err) == 0, "%s", err.msg);
    gguf_writer_free(w2);
    gguf_file *g = gguf_open(path2, &err);
    CHECK(g && g->n_kv == f->n_kv, "copy: %s", err.msg);
    for (uint64_t i = 0; g && i < f->n_kv; i++) {
        const gguf_kv *a = &f->kv[i], *c = gguf_find_kv(g, a->key);
        CHECK(c && c->value.type == a->value.type, "copied key %s", a->key);
    }
    CHECK(g && gguf_get_u32(g, "a.u32", &u, NULL) && u == 17, "copied u32");
    CHECK(g && gguf_get_f32(g, "a.f32", &fl, NULL) && fl == 0.25f, "copied f32");
    gguf_close(g);
    unlink(path2);

    /* Every truncation before the end of the last tensor's data is refused;
     * dropping only the final padding is harmless. */
    const gguf_tensor *last = gguf_find_tensor(f, "t.q8");
    size_t need = (size_t)((const uint8_t *)last->data - f->base) + last->nbytes;
    int wrong = 0;
    for (size_t len = 0; len < f->size; len++) {
        mt_error e = {{0}};
        gguf_file *h = gguf_open_buffer(f->base, len, "cut.gguf", &e);
        bool ok = h != NULL;
        if (ok != (len >= need) || (!ok && strstr(e.msg, "cut.gguf") == NULL)) wrong++;
        gguf_close(h);
    }
    CHECK(wrong == 0, "%d truncations handled wrongly (file %zu bytes, data ends at %zu)", wrong,
          f->size, need);

    /* Byte flips anywhere: parse or explain, never crash. */
    uint8_t *copy = malloc(f->size);
    uint64_t st = 12345;
    int silent = 0;
    for (int it = 0; it < 4000; it++) {
        memcpy(copy, f->base, f->size);
        for (int k = 0; k < 3; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            copy[(st >> 33) % f->size] ^= (uint8_t)(1u << ((st >> 20) & 7));
        }
        mt_error e = {{0}};
        gguf_file *h = gguf_open_buffer(copy, f->size, "flip.gguf", &e);
        if (!h && e.msg[0] == 0) silent++;
        gguf_close(h);
    }
    CHECK(silent == 0, "%d corrupt files failed without a message", silent);
    free(copy);
    gguf_close(f);
    unlink(path);

    CHECK(gguf_open("/nonexistent/x.gguf", &err) == NULL && strstr(err.msg, "/nonexistent/x.gguf"),
          "missing file: %s", err.msg);
}

/* --------------------------------------------------------------- hostile */

static void test_hostile(void) {
    raw r;
    uint64_t ne[4] = {32, 2, 1, 1};

    r.n = 0;
    put(&r, "GGML", 4), u32(&r, 3), u64(&r, 0), u64(&r, 0);
    expect_error(&r, "not a GGUF file", "bad magic");
    header(&r, 0, 0);
    memcpy(r.b + 4, (uint32_t[]){1}, 4);
    expect_error(&r, "version 1", "version 1");
    memcpy(r.b + 4, (uint32_t[]){0x03000000}, 4);
    expect_error(&r, "big-endian", "byte-swapped");
    r.n = 3;
    expect_error(&r, "too short", "3 bytes");

    header(&r, 0, 1000000000ull);
    expect_error(&r, "metadata keys", "huge kv count");
    header(&r, 1ull << 62, 0);
    expect_error(&r, "tensors", "huge tensor count");

    header(&r, 0, 1);
    u64(&r, 1ull << 60);
    expect_error(&r, "claims", "huge key length");
    header(&r, 0, 1);
    str(&r, "k"), u32(&r, 8), u64(&r, 1000);
    put(&r, "short", 5);
    expect_error(&r, "truncated", "string value past end");
    header(&r, 0, 1);
    str(&r, "k"), u32(&r, 9), u32(&r, GGUF_TYPE_UINT32), u64(&r, 1ull << 61);
    expect_error(&r, "claims", "huge array");
    header(&r, 0, 1);
    str(&r, "k"), u32(&r, 9), u32(&r, GGUF_TYPE_STRING), u64(&r, 1ull << 40);
    expect_error(&r, "strings", "huge string array");
    header(&r, 0, 1);
    str(&r, "k"), u32(&r, 9), u32(&r, GGUF_TYPE_ARRAY), u64(&r, 1);
    expect_error(&r, "arrays", "nested array");
    header(&r, 0, 1);
    str(&r, "k"), u32(&r, 13), u32(&r, 0);
    expect_error(&r, "unknown value type 13", "bad value type");
    header(&r, 0, 1);
    str(&r, "k"), u32(&r, GGUF_TYPE_BOOL);
    r.b[r.n++] = 2;
    expect_error(&r, "bool", "bool 2");
    header(&r, 0, 2);
    str(&r, "k"), u32(&r, GGUF_TYPE_UINT32), u32(&r, 1);
    str(&r, "k"), u32(&r, GGUF_TYPE_UINT32), u32(&r, 2);
    expect_error(&r, "appears twice", "duplicate key");
    header(&r, 0, 1);
    str(&r, "general.alignment"), u32(&r, GGUF_TYPE_UINT32), u32(&r, 48);
    expect_error(&r, "power of two", "alignment 48");
    header(&r, 0, 1);
    str(&r, "general.alignment"), u32(&r, GGUF_TYPE_STRING), str(&r, "32");
    expect_error(&r, "must be uint32", "alignment as string");

    header(&r, 1, 0);
    tensor_info(&r, "t", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0);
    expect_error(&r, "dimensions", "5 dims");
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, (uint64_t[]){32, 0}, 0, 0);
    expect_error(&r, "dimension 1 is 0", "zero dim");
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, (uint64_t[]){1ull << 40, 1ull << 40}, 0, 0);
    pad(&r);
    expect_error(&r, "more bytes than the whole file", "overflowing shape");
    header(&r, 1, 0);
    tensor_info(&r, "t", 4, (uint64_t[]){1ull << 62, 1ull << 62, 1ull << 62, 1ull << 62}, 0, 0);
    pad(&r);
    expect_error(&r, "more bytes than the whole file", "shape product overflow");
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, ne, 99, 0);
    expect_error(&r, "unknown type id 99", "type 99");
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, ne, 4, 0);
    expect_error(&r, "unknown type id 4", "removed type Q4_2");
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, (uint64_t[]){33, 1}, MT_TYPE_Q8_0, 0);
    expect_error(&r, "multiple of the Q8_0 block", "partial block");
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, ne, 0, 8);
    pad(&r);
    memset(r.b + r.n, 0, 512), r.n += 512;
    expect_error(&r, "not a multiple of the alignment", "misaligned offset");
    uint64_t row[2] = {32, 1}; /* 128 bytes of F32 */
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, row, 0, 0);
    pad(&r);
    memset(r.b + r.n, 0, 100), r.n += 100;
    expect_error(&r, "past the end", "data past EOF");
    header(&r, 1, 0);
    tensor_info(&r, "t", 2, row, 0, 1ull << 63);
    pad(&r);
    memset(r.b + r.n, 0, 200), r.n += 200;
    expect_error(&r, "past the end", "offset 2^63");
    header(&r, 2, 0);
    tensor_info(&r, "t", 2, row, 0, 0);
    tensor_info(&r, "t", 2, row, 0, 128);
    pad(&r);
    memset(r.b + r.n, 0, 256), r.n += 256;
    expect_error(&r, "appears twice", "duplicate tensor");
    /* Tensor data must lie as ggml lays it out (llama.cpp refuses anything
     * else): overlaps name both tensors and their byte ranges. */
    header(&r, 2, 0);
    tensor_info(&r, "a", 2, row, 0, 0);
    tensor_info(&r, "b", 2, row, 0, 64);
    pad(&r);
    memset(r.b + r.n, 0, 256), r.n += 256;
    expect_error(&r, "tensors 'a' (data bytes [0, 128)) and 'b' (data bytes [64, 192)) overlap",
                 "overlapping tensors");
    expect_error(&r, "damaged or was written wrongly", "overlap: what it means");
    header(&r, 3, 0);
    tensor_info(&r, "a", 2, row, 0, 0);
    tensor_info(&r, "b", 2, row, 0, 128);
    tensor_info(&r, "c", 2, row, 0, 0); /* the same bytes as a, listed after b */
    pad(&r);
    memset(r.b + r.n, 0, 384), r.n += 384;
    expect_error(&r, "tensors 'a' (data bytes [0, 128)) and 'c' (data bytes [0, 128)) overlap",
                 "a tensor aliasing an earlier one");
    header(&r, 2, 0);
    tensor_info(&r, "a", 2, row, 0, 128);
    tensor_info(&r, "b", 2, row, 0, 0);
    pad(&r);
    memset(r.b + r.n, 0, 256), r.n += 256;
    expect_error(&r, "tensor 'a' (data bytes [128, 256)) should start at 0", "out of order");
    header(&r, 2, 0);
    tensor_info(&r, "a", 2, (uint64_t[]){5, 1}, 0, 0); /* 20 bytes, padded to 32 */
    tensor_info(&r, "b", 2, row, 0, 64);
    pad(&r);
    memset(r.b + r.n, 0, 192), r.n += 192;
    expect_error(&r, "tensor 'b' (data bytes [64, 192)) should start at 32, right after", "a gap");
    expect_error(&r, "'a' (data bytes [0, 20)) padded to the alignment 32", "a gap: the previous");
    header(&r, 2, 0);
    tensor_info(&r, "a", 2, (uint64_t[]){5, 1}, 0, 0);
    tensor_info(&r, "b", 2, row, 0, 32);
    pad(&r);
    memset(r.b + r.n, 0, 160), r.n += 160;
    mt_error lerr = {{0}};
    gguf_file *lf = gguf_open_buffer(r.b, r.n, "packed.gguf", &lerr);
    CHECK(lf != NULL, "tensors back to back with padding refused: %s", lerr.msg);
    gguf_close(lf);

    header(&r, 1, 0);
    u64(&r, 3), put(&r, "a\0b", 3);
    memset(r.b + r.n, 0, 64), r.n += 64;
    expect_error(&r, "NUL", "NUL in tensor name");

    /* A valid hand-built file is accepted, and its view is where it should be. */
    header(&r, 1, 1);
    str(&r, "general.alignment"), u32(&r, GGUF_TYPE_UINT32), u32(&r, 64);
    tensor_info(&r, "t", 2, ne, 0, 0);
    while (r.n % 64) r.b[r.n++] = 0;
    size_t data_at = r.n;
    for (int i = 0; i < 64; i++) {
        float v = (float)i;
        put(&r, &v, 4);
    }
    mt_error err = {{0}};
    gguf_file *f = gguf_open_buffer(r.b, r.n, "valid.gguf", &err);
    CHECK(f != NULL, "valid hand-built file refused: %s", err.msg);
    if (f) {
        const gguf_tensor *t = gguf_find_tensor(f, "t");
        CHECK(t && (const uint8_t *)t->data == r.b + data_at &&
                  ((const float *)t->data)[63] == 63.0f,
              "tensor view");
        gguf_close(f);
    }
}

/* ------------------------------------------------------------ split sets */

/* A tensor of the split tests: F32, its bytes are floats i + 100 * index. */
typedef struct ref_tensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[2];
} ref_tensor;

/* Five tensors of 32, 256, 32, 32 and 32 bytes (padded sizes equal). */
static const ref_tensor split_src[5] = {
    {"a.weight", 1, {8, 1}}, {"b.weight", 2, {16, 4}}, {"c.weight", 1, {8, 1}},
    {"d.weight", 1, {8, 1}}, {"e.weight", 1, {8, 1}},
};

static uint64_t ref_elems(const ref_tensor *t) {
    return t->ne[0] * (t->n_dims > 1 ? t->ne[1] : 1);
}

static void ref_data(raw *r, int index) {
    for (uint64_t i = 0; i < ref_elems(&split_src[index]); i++) {
        float v = (float)i + 100.0f * (float)index;
        put(r, &v, 4);
    }
}

/* How a part deviates from what gguf-split writes (all zero: a faithful part). */
typedef struct ref_opts {
    int count;           /* split.count written (0 = the real count) */
    int no;              /* split.no written + 1 (0 = the real index) */
    int tensors_count;   /* split.tensors.count written (0 = 5) */
    uint32_t version;    /* 0 = 3 */
    const char *id;      /* moontail.split.source_id, NULL = none */
    const char *rename0; /* the first tensor's name instead of its own */
    bool overlap;        /* the second tensor's data at the first's offset */
} ref_opts;

static void kv_u16(raw *r, const char *key, uint16_t v) {
    str(r, key), u32(r, GGUF_TYPE_UINT16), put(r, &v, 2);
}

/* Part k of `count` holding source tensors [a, b), as gguf-split lays it out:
 * header, the model's metadata (first part only), split.no (u16),
 * split.tensors.count (i32), split.count (u16), tensor infos with offsets
 * the running sum of 32-byte padded sizes, zeros to 32, each tensor's data
 * padded to 32. */
static void ref_part(raw *r, int k, int count, int a, int b, const ref_opts *o) {
    uint64_t n_kv = 3 + (k == 0 ? 3 : 0) + (o->id ? 1 : 0);
    r->n = 0;
    put(r, "GGUF", 4);
    u32(r, o->version ? o->version : 3);
    u64(r, (uint64_t)(b - a));
    u64(r, n_kv);
    if (k == 0) {
        str(r, "general.architecture"), u32(r, GGUF_TYPE_STRING), str(r, "llama");
        str(r, "t.answer"), u32(r, GGUF_TYPE_UINT32), u32(r, 42);
        int32_t arr[3] = {1, -2, 3};
        str(r, "t.arr"), u32(r, GGUF_TYPE_ARRAY), u32(r, GGUF_TYPE_INT32), u64(r, 3),
            put(r, arr, sizeof arr);
    }
    kv_u16(r, "split.no", (uint16_t)(o->no ? o->no - 1 : k));
    int32_t tc = o->tensors_count ? o->tensors_count : 5;
    str(r, "split.tensors.count"), u32(r, GGUF_TYPE_INT32), put(r, &tc, 4);
    kv_u16(r, "split.count", (uint16_t)(o->count ? o->count : count));
    if (o->id) str(r, "moontail.split.source_id"), u32(r, GGUF_TYPE_STRING), str(r, o->id);
    uint64_t off = 0;
    for (int i = a; i < b; i++) {
        const ref_tensor *t = &split_src[i];
        tensor_info(r, i == a && o->rename0 ? o->rename0 : t->name, t->n_dims, t->ne, 0,
                    o->overlap && i == a + 1 ? 0 : off);
        off += (ref_elems(t) * 4 + 31) / 32 * 32;
    }
    pad(r);
    for (int i = a; i < b; i++) {
        ref_data(r, i);
        pad(r);
    }
}

/* The cut worked out by hand for 3 parts: totals 384 bytes, targets 128
 * and 256. Cut 1 at tensor 1 (32 bytes before it, 96 from the target; after
 * b.weight it would be 288, 160 away); cut 2 after b.weight (288, 32 away). */
static const int ref_cut[4] = {0, 1, 2, 5};

static void write_raw(const char *path, const raw *r) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(r->b, 1, r->n, fp) == r->n, "cannot write %s", path);
    if (fp) fclose(fp);
}

static void part_path(char *out, size_t cap, const char *prefix, int k, int count) {
    CHECK(gguf_split_path(out, cap, prefix, (uint32_t)k, (uint32_t)count) > 0, "split path");
}

/* Writes the faithful 3-part set at prefix (with the id when non-NULL). */
static void write_ref_set(const char *prefix, const char *id) {
    raw r;
    char path[300];
    for (int k = 0; k < 3; k++) {
        ref_part(&r, k, 3, ref_cut[k], ref_cut[k + 1], &(ref_opts){.id = id});
        part_path(path, sizeof path, prefix, k, 3);
        write_raw(path, &r);
    }
}

/* The set opens from `path` as the 5-tensor model. */
static void expect_ref_model(const char *path, const char *prefix) {
    mt_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    CHECK(f != NULL, "opening a split set from %s: %s", path, err.msg);
    if (!f) return;
    char first[300];
    part_path(first, sizeof first, prefix, 0, 3);
    CHECK(strcmp(f->path, first) == 0, "a split model's path is its first part: %s", f->path);
    CHECK(f->n_parts == 3 && f->n_tensors == 5, "parts %u tensors %llu", f->n_parts,
          (unsigned long long)f->n_tensors);
    uint64_t total = 0;
    for (uint32_t k = 0; k < f->n_parts; k++) {
        char want[300];
        part_path(want, sizeof want, prefix, (int)k, 3);
        CHECK(strcmp(f->parts[k].path, want) == 0, "part %u is %s", k, f->parts[k].path);
        total += f->parts[k].size;
    }
    CHECK(gguf_total_size(f) == total && f->size == f->parts[0].size, "sizes");
    uint32_t u = 0;
    char *arch = gguf_get_string(f, "general.architecture", NULL);
    CHECK(arch && strcmp(arch, "llama") == 0 && gguf_get_u32(f, "t.answer", &u, NULL) && u == 42,
          "metadata of the first part");
    free(arch);
    for (int i = 0; i < 5; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint32_t part = i == 0 ? 0 : i == 1 ? 1 : 2;
        CHECK(strcmp(t->name, split_src[i].name) == 0 && t->part == part &&
                  gguf_find_tensor(f, split_src[i].name) == t,
              "tensor %d is '%s' in part %u", i, t->name, t->part);
        const uint8_t *d = t->data, *pb = f->parts[part].base;
        CHECK(d >= pb && d + t->nbytes <= pb + f->parts[part].size, "tensor %d lies in its part",
              i);
        raw want;
        want.n = 0;
        ref_data(&want, i);
        CHECK(t->nbytes == want.n && memcmp(d, want.b, want.n) == 0, "tensor %d bytes", i);
    }
    gguf_close(f);
}

/* Replaces part k of the faithful set by r, opens the set from part `from`
 * and expects failure naming `file` (a part index, or -1: any) with `want`. */
static void expect_set_error(const char *prefix, int k, const raw *r, int from, int file,
                             const char *want, const char *what) {
    char path[300], open_at[300], named[300];
    write_ref_set(prefix, NULL);
    part_path(path, sizeof path, prefix, k, 3);
    if (r)
        write_raw(path, r);
    else
        unlink(path);
    part_path(open_at, sizeof open_at, prefix, from, 3);
    part_path(named, sizeof named, prefix, file < 0 ? 0 : file, 3);
    mt_error err = {{0}};
    gguf_file *f = gguf_open(open_at, &err);
    CHECK(f == NULL, "%s: accepted", what);
    gguf_close(f);
    CHECK(strstr(err.msg, want) != NULL, "%s: message lacks '%s': %s", what, want, err.msg);
    CHECK(file < 0 || strstr(err.msg, named) != NULL, "%s: message does not name %s: %s", what,
          named, err.msg);
}

/* Writes r to path, opens it with gguf_open and expects `want`. */
static void expect_open_error(const char *path, const raw *r, const char *want, const char *what) {
    write_raw(path, r);
    mt_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    CHECK(f == NULL, "%s: accepted", what);
    gguf_close(f);
    CHECK(strstr(err.msg, want) && strstr(err.msg, path), "%s: message lacks '%s' or the file: %s",
          what, want, err.msg);
    unlink(path);
}

/* source_id_of for the test: checks each hash is the BLAKE2b-256 of that
 * tensor's bytes in the source, then gives `id`. */
typedef struct id_from_hashes {
    const gguf_file *f;
    const char *id;
    int calls;
} id_from_hashes;

static int check_hashes_give_id(void *ctx, const uint8_t (*hashes)[32], char *out, mt_error *err) {
    id_from_hashes *h = ctx;
    h->calls++;
    for (uint64_t i = 0; i < h->f->n_tensors; i++) {
        const gguf_tensor *t = &h->f->tensors[i];
        uint8_t want[32];
        crypto_generichash(want, 32, t->data, t->nbytes, NULL, 0);
        CHECK(memcmp(want, hashes[i], 32) == 0, "hash of tensor %s is not its bytes'", t->name);
    }
    (void)err;
    strcpy(out, h->id);
    return 0;
}

static int fail_id(void *ctx, const uint8_t (*hashes)[32], char *out, mt_error *err) {
    (void)ctx, (void)hashes, (void)out;
    return mt_error_set(err, "no identity for this test");
}

static void test_split(void) {
    char prefix[256], path[300];
    snprintf(prefix, sizeof prefix, "%s", check_tmp("-model"));
    char ours[256];
    snprintf(ours, sizeof ours, "%s", check_tmp("-ours"));

    /* opens from any part; one part alone is just that file */
    write_ref_set(prefix, NULL);
    for (int k = 0; k < 3; k++) {
        part_path(path, sizeof path, prefix, k, 3);
        expect_ref_model(path, prefix);
    }
    mt_error err = {{0}};
    part_path(path, sizeof path, prefix, 2, 3);
    gguf_file *one = gguf_open_single(path, &err);
    CHECK(one && one->n_parts == 1 && one->n_tensors == 3 &&
              strcmp(one->tensors[0].name, "c.weight") == 0,
          "gguf_open_single: %s", err.msg);
    gguf_close(one);

    /* gguf_split_write of the same model writes gguf-split's bytes, cut by hand's numbers */
    raw src;
    ref_part(&src, 0, 1, 0, 5, &(ref_opts){0}); /* one file holding all (split keys dropped) */
    gguf_file *f = gguf_open_buffer(src.b, src.n, "source.gguf", &err);
    CHECK(f != NULL, "source: %s", err.msg);
    static const char id[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    /* no id, the id given, the id computed from the tensors' hashes as they are copied */
    for (int how = 0; f && how < 3; how++) {
        uint64_t first[4] = {9, 9, 9, 9};
        id_from_hashes idh = {f, id, 0};
        gguf_split_opts o = {.source_id = how == 1 ? id : NULL,
                             .source_id_of = how == 2 ? check_hashes_give_id : NULL,
                             .source_id_ctx = &idh,
                             .part_tensors = first};
        CHECK(gguf_split_write(f, 3, ours, &o, &err) == 0, "gguf_split_write: %s", err.msg);
        CHECK(how < 2 || idh.calls == 1, "source_id_of called %d times, want once", idh.calls);
        CHECK(first[0] == 0 && first[1] == 1 && first[2] == 2 && first[3] == 5,
              "cut at %llu %llu %llu %llu, by hand 0 1 2 5", (unsigned long long)first[0],
              (unsigned long long)first[1], (unsigned long long)first[2],
              (unsigned long long)first[3]);
        for (int k = 0; k < 3; k++) {
            raw want;
            ref_part(&want, k, 3, ref_cut[k], ref_cut[k + 1], &(ref_opts){.id = how ? id : NULL});
            part_path(path, sizeof path, ours, k, 3);
            size_t len = 0;
            FILE *fp = fopen(path, "rb");
            uint8_t got[8192];
            if (fp) {
                len = fread(got, 1, sizeof got, fp);
                fclose(fp);
            }
            CHECK(len == want.n && memcmp(got, want.b, len) == 0,
                  "part %d (id %d) differs from gguf-split's layout (%zu bytes, want %zu)", k, how,
                  len, want.n);
        }
    }
    /* an id that cannot be computed fails the write, and no part is left behind */
    char gone[256];
    snprintf(gone, sizeof gone, "%s", check_tmp("-gone"));
    gguf_split_opts fail = {.source_id_of = fail_id};
    CHECK(f && gguf_split_write(f, 3, gone, &fail, &err) != 0 && strstr(err.msg, "no identity"),
          "a failing source_id_of: %s", err.msg);
    for (int k = 0; k < 3; k++) {
        char tmp[320];
        part_path(path, sizeof path, gone, k, 3);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) != 0, "%s left after a failed write",
              path);
    }
    /* the written set opens, and writing it again from the set gives it back */
    part_path(path, sizeof path, ours, 1, 3);
    expect_ref_model(path, ours);
    gguf_close(f);
    f = gguf_open(path, &err);
    CHECK(f && gguf_split_write(f, 1, ours, NULL, &err) == 0, "merging the set into one file: %s",
          err.msg);
    gguf_close(f);
    part_path(path, sizeof path, ours, 0, 1);
    f = gguf_open(path, &err);
    CHECK(f && f->n_parts == 1 && f->n_tensors == 5, "merged file: %s", err.msg);
    CHECK(!f || gguf_split_write(f, 6, ours, NULL, &err) != 0, "6 parts of 5 tensors");
    CHECK(strstr(err.msg, "every part needs one"), "6 parts: %s", err.msg);
    gguf_close(f);
    unlink(path);

    /* broken sets */
    raw r;
    expect_set_error(prefix, 1, NULL, 0, 1, "is missing", "part 2 missing");
    expect_set_error(prefix, 0, NULL, 2, 0, "is missing", "part 1 missing, opened from part 3");
    ref_part(&r, 1, 2, 1, 2, &(ref_opts){0});
    expect_set_error(prefix, 1, &r, 0, 1, "another split", "a part of a 2-part set");
    ref_part(&r, 1, 3, 1, 2, &(ref_opts){.no = 3});
    expect_set_error(prefix, 1, &r, 0, 1, "copied over another part", "part 3 under part 2's name");
    ref_part(&r, 2, 3, 2, 5, &(ref_opts){.no = 2});
    expect_set_error(prefix, 2, &r, 2, 2, "its name says part 3", "opened from a renamed part");
    ref_part(&r, 2, 3, 2, 5, &(ref_opts){.rename0 = "b.weight"});
    expect_set_error(prefix, 2, &r, 0, 2, "is in both", "a tensor in two parts");
    ref_part(&r, 2, 3, 2, 5, &(ref_opts){.overlap = true});
    expect_set_error(prefix, 2, &r, 0, 2, "tensors 'c.weight' (data bytes [0, 32)) and 'd.weight'",
                     "overlapping tensors in a part");
    ref_part(&r, 1, 3, 1, 2, &(ref_opts){.tensors_count = 6});
    expect_set_error(prefix, 1, &r, 0, 1, "another model", "another model's tensor count");
    ref_part(&r, 2, 3, 2, 4, &(ref_opts){0}); /* e.weight left out */
    expect_set_error(prefix, 2, &r, 1, 0, "hold 4 tensors, but split.tensors.count says 5",
                     "a wrong total");
    ref_part(&r, 2, 3, 2, 5, &(ref_opts){.id = id});
    expect_set_error(prefix, 2, &r, 0, 2, "part of another model", "another model's id");
    ref_part(&r, 1, 3, 1, 2, &(ref_opts){.version = 2});
    expect_set_error(prefix, 1, &r, 0, 1, "version 2", "another GGUF version");
    ref_part(&r, 2, 3, 2, 5, &(ref_opts){0});
    r.n -= 40; /* the last tensor's data cut short */
    expect_set_error(prefix, 2, &r, 0, 2, "truncated", "a truncated part");
    ref_part(&r, 1, 1, 1, 2, &(ref_opts){0}); /* not a part: split.count 1 */
    expect_set_error(prefix, 1, &r, 0, 1, "is not a part", "a single file under a part's name");

    /* the given file's own keys and name */
    write_ref_set(prefix, NULL);
    part_path(path, sizeof path, prefix, 0, 3);
    char odd[300];
    snprintf(odd, sizeof odd, "%s.gguf", prefix);
    CHECK(rename(path, odd) == 0, "rename");
    f = gguf_open(odd, &err);
    CHECK(f == NULL && strstr(err.msg, "cannot be found") && strstr(err.msg, odd),
          "a part without its name: %s", err.msg);
    gguf_close(f);
    unlink(odd);
    header(&r, 0, 2);
    kv_u16(&r, "split.count", 65535);
    kv_u16(&r, "split.no", 0);
    snprintf(odd, sizeof odd, "%s-00001-of-65535.gguf", prefix);
    write_raw(odd, &r);
    f = gguf_open(odd, &err);
    CHECK(f == NULL && strstr(err.msg, "part 2 of 65535") && strstr(err.msg, "missing"),
          "65535 parts, the second missing: %s", err.msg);
    gguf_close(f);
    unlink(odd);
    snprintf(odd, sizeof odd, "%s-00001-of-00003.gguf", prefix);
    header(&r, 0, 1);
    kv_u16(&r, "split.count", 3);
    expect_open_error(odd, &r, "split.no is missing", "split.count without split.no");
    header(&r, 0, 2);
    kv_u16(&r, "split.count", 3);
    kv_u16(&r, "split.no", 3);
    expect_open_error(odd, &r, "not below split.count", "split.no past the count");
    header(&r, 0, 1);
    str(&r, "split.count"), u32(&r, GGUF_TYPE_STRING), str(&r, "3");
    expect_open_error(odd, &r, "'split.count' is string", "split.count as a string");

    for (int k = 0; k < 3; k++) {
        part_path(path, sizeof path, prefix, k, 3);
        unlink(path);
        part_path(path, sizeof path, ours, k, 3);
        unlink(path);
    }
}

int main(void) {
    test_round_trip();
    test_hostile();
    test_split();
    return check_report("test_gguf");
}

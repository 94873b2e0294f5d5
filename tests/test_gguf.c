/* test_gguf.c - the GGUF reader and writer.
 *
 * A file written by gguf_writer reads back with every value and tensor
 * intact. Hostile files - built byte by byte here, independently of the
 * writer - are refused with an error that names the problem: every
 * truncation, huge counts and lengths, bad offsets, unknown or removed
 * types, overflowing shapes, duplicates, bad magic/version/alignment. A
 * deterministic byte-flip sweep must never crash (ASan watches) and must
 * either parse or explain why not. */
#include "check.h"
#include "moontail/gguf.h"

#include <stdint.h>

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

int main(void) {
    test_round_trip();
    test_hostile();
    return check_report("test_gguf");
}

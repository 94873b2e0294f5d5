/* test_shard_stream.c - shards written by streaming (gguf_stream.h) and the
 * hash cache (hash_cache.h).
 *
 * Every shard the streaming writer makes, of every architecture and kind of
 * selection, on 1 or 2 threads, is byte for byte the file the previous
 * writer made: that writer (which assembled the shard in memory, hashing
 * each tensor through the mapping) is kept below as the reference. The
 * source_id equals its definition computed here from the mapping. Reading
 * a model to hash it does not make its pages resident. A model seen in
 * several files (parts) gives the same hashes and shards. The hash cache:
 * a second hashing reads nothing, a touched file or a byte changed under a
 * restored modification time is read again, --rehash reads again, expert
 * slices come from the cache in a plan check, a wrong cached hash fails the
 * write naming the tensor. Writer errors name the file and leave nothing. */
#include "check.h"
#include "moontail/gguf_stream.h"
#include "moontail/hash_cache.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"

#include <fcntl.h>
#include <sodium.h>
#include <sqlite3.h>
#include <sys/stat.h>

/* ------------------------------------------------------------- helpers */

static const char *make_model(const char *arch, uint64_t seed, int32_t n_layer, int32_t n_embd) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.type = MT_TYPE_Q8_0;
    p.seed = seed;
    p.n_layer = n_layer;
    p.n_embd = n_embd;
    p.n_head = 4;
    p.head_dim = 32;
    p.n_ff = 128;
    p.n_ff_exp = 64;
    if (strncmp(arch, "kimi", 4) == 0) {
        p.mla_layers = "1,3";
        p.n_expert = 8;
        p.n_expert_used = 2;
        p.expert_type = MT_TYPE_Q8_0;
        p.kv_lora = 64;
    } else if (strcmp(arch, "deepseek2") == 0) {
        p.q_lora = 64;
        p.kv_lora = 64;
        p.qk_nope = 32;
        p.qk_rope = 16;
        p.v_dim = 32;
    } else if (strcmp(arch, "llama") == 0) {
        p.rope_freqs = true;
    }
    const char *path = check_tmp(".gguf");
    static char keep[16][256];
    static int k;
    snprintf(keep[k & 15], sizeof keep[0], "%s", path);
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, keep[k & 15], &err) == 0, "mkmodel %s: %s", arch, err.msg);
    return keep[k++ & 15];
}

/* The whole file, or NULL. */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(sz > 0 ? (size_t)sz : 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static bool same_file(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* ------------------------------------------- the previous writer (reference) */

static bool ref_selects(const mt_shard_layout *l, const mt_shard_spec *s, uint64_t i) {
    int32_t il = l->layer[i];
    bool in_range = il >= s->layer_begin && il < s->layer_end;
    switch (l->part[i]) {
    case MT_SHARD_PART_HEAD:
        return s->head;
    case MT_SHARD_PART_SHARED:
        return s->head || (s->attention && s->layer_begin < s->layer_end);
    case MT_SHARD_PART_FINAL:
        return mt_shard_spec_has_final(l->n_layer, s->head, s->attention, s->layer_begin,
                                       s->layer_end);
    case MT_SHARD_PART_ATTENTION:
        return s->attention && in_range;
    case MT_SHARD_PART_EXPERTS:
        return s->n_experts != 0 && in_range;
    }
    return false;
}

static bool ref_skip_key(const gguf_kv *kv) {
    if (strcmp(kv->key, "general.alignment") == 0)
        return !(kv->value.type == GGUF_TYPE_UINT32 && kv->value.u == GGUF_DEFAULT_ALIGNMENT);
    return strncmp(kv->key, "split.", 6) == 0;
}

/* The shard as the writer before streaming made it: everything copied into
 * an in-memory GGUF writer, each tensor hashed through the mapping. */
static int ref_write(const gguf_file *f, const mt_shard_layout *l, const char *source_id,
                     const mt_shard_spec *s, const char *out, mt_error *err) {
    uint64_t n = f->n_tensors;
    const char **names = calloc(n, sizeof *names), **hp = calloc(n, sizeof *hp);
    char(*hashes)[MT_SHARD_HASH_HEX] = calloc(n, sizeof *hashes);
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (!ref_skip_key(&f->kv[i])) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    gguf_writer_set_u32(w, "moontail.shard.version", MT_SHARD_VERSION);
    gguf_writer_set_u32(w, "moontail.shard.layer_begin", (uint32_t)s->layer_begin);
    gguf_writer_set_u32(w, "moontail.shard.layer_end", (uint32_t)s->layer_end);
    gguf_writer_set_bool(w, "moontail.shard.attention", s->attention);
    gguf_writer_set_bool(w, "moontail.shard.head", s->head);
    if (s->n_experts >= 0) {
        static const int32_t none = 0;
        gguf_writer_set_array(w, "moontail.shard.experts", GGUF_TYPE_UINT32,
                              s->experts ? s->experts : &none, (uint64_t)s->n_experts);
    }
    gguf_writer_set_u32(w, "moontail.shard.source_n_expert", (uint32_t)l->n_expert);
    gguf_writer_set_string(w, "moontail.shard.source_id", source_id);
    uint64_t k = 0;
    int rc = 0;
    for (uint64_t i = 0; i < n && !rc; i++) {
        if (!ref_selects(l, s, i)) continue;
        const gguf_tensor *t = &f->tensors[i];
        if (l->part[i] == MT_SHARD_PART_EXPERTS && s->n_experts > 0) {
            size_t eb = t->nb[2];
            uint8_t *buf = malloc(eb * (size_t)s->n_experts);
            for (int32_t j = 0; j < s->n_experts; j++)
                memcpy(buf + (size_t)j * eb, (const uint8_t *)t->data + (size_t)s->experts[j] * eb,
                       eb);
            int64_t ne[3] = {t->ne[0], t->ne[1], s->n_experts};
            rc = gguf_writer_add_tensor(w, t->name, t->type, 3, ne, buf, err);
            free(buf);
            mt_shard_tensor_hash(t, s->experts, s->n_experts, hashes[k]);
        } else {
            rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, err);
            mt_shard_tensor_hash(t, NULL, -1, hashes[k]);
        }
        names[k] = t->name;
        hp[k] = hashes[k];
        k++;
    }
    gguf_writer_set_string_array(w, "moontail.shard.tensor_names", names, k);
    gguf_writer_set_string_array(w, "moontail.shard.tensor_hashes", hp, k);
    if (!rc) rc = gguf_writer_write(w, out, err);
    gguf_writer_free(w);
    free(names);
    free(hp);
    free(hashes);
    return rc;
}

/* source_id by its definition (shard.h), hashing through the mapping. */
static void ref_source_id(const gguf_file *f, char out[MT_SHARD_HASH_HEX]) {
    uint64_t n = f->n_tensors;
    uint64_t *order = malloc(n * sizeof *order);
    for (uint64_t i = 0; i < n; i++) order[i] = i;
    for (uint64_t i = 1; i < n; i++) /* insertion sort by strcmp of the names */
        for (uint64_t j = i;
             j > 0 && strcmp(f->tensors[order[j - 1]].name, f->tensors[order[j]].name) > 0; j--) {
            uint64_t x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    for (uint64_t k = 0; k < n; k++) {
        const gguf_tensor *t = &f->tensors[order[k]];
        uint8_t h[32];
        crypto_generichash(h, 32, t->data, t->nbytes, NULL, 0);
        crypto_generichash_update(&st, (const uint8_t *)t->name, strlen(t->name) + 1);
        crypto_generichash_update(&st, h, 32);
    }
    uint8_t id[32];
    crypto_generichash_final(&st, id, 32);
    sodium_bin2hex(out, MT_SHARD_HASH_HEX, id, 32);
    free(order);
}

/* ----------------------------------------------------- same bytes as before */

static void test_same_bytes(void) {
    static const char *const archs[] = {"qwen3moe", "deepseek2", "kimi-k3", "llama"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        const char *path = make_model(archs[a], 7 + a, 4, 128);
        mt_error err = {{0}};
        gguf_file *f = gguf_open(path, &err);
        CHECK(f, "%s: %s", archs[a], err.msg);
        if (!f) continue;
        mt_shard_layout l;
        CHECK(mt_shard_layout_read(f, &l, &err) == 0, "%s layout: %s", archs[a], err.msg);
        char id[MT_SHARD_HASH_HEX], want_id[MT_SHARD_HASH_HEX];
        ref_source_id(f, want_id);
        for (int threads = 1; threads <= 2; threads++) {
            mt_shard_io io = {.threads = threads};
            CHECK(mt_shard_source_id_io(f, &io, id, NULL, &err) == 0 && strcmp(id, want_id) == 0,
                  "%s: source_id on %d threads %.16s, by its definition %.16s (%s)", archs[a],
                  threads, id, want_id, err.msg);
        }
        bool moe = l.n_expert > 0;
        static const int32_t some[] = {0, 3, 4, 5, 7}, range[] = {2, 3, 4};
        const mt_shard_spec specs[] = {
            {0, 0, false, true, NULL, 0},                          /* the head alone */
            {1, 3, true, false, NULL, moe ? -1 : 0},               /* a stage */
            {0, 4, true, true, NULL, moe ? -1 : 0},                /* everything */
            {0, 4, true, true, NULL, 0},                           /* a swarm backbone */
            {1, 4, false, false, moe ? some : NULL, moe ? 5 : 0},  /* scattered experts */
            {0, 4, false, false, moe ? range : NULL, moe ? 3 : 0}, /* an expert range */
            {3, 4, true, false, moe ? range : NULL, moe ? 3 : 0},  /* the last layer, some */
        };
        for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
            if (mt_shard_spec_check(&l, &specs[k], NULL) != 0) continue; /* dense: no experts */
            const char *want = check_tmp("-ref.gguf"), *got = check_tmp("-new.gguf");
            CHECK(ref_write(f, &l, want_id, &specs[k], want, &err) == 0, "%s ref %zu: %s", archs[a],
                  k, err.msg);
            for (int threads = 1; threads <= 2; threads++) {
                mt_shard_io io = {.threads = threads};
                CHECK(mt_shard_write_io(f, &l, want_id, &specs[k], got, &io, &err) == 0,
                      "%s spec %zu: %s", archs[a], k, err.msg);
                CHECK(same_file(want, got),
                      "%s spec %zu on %d threads: the streamed shard differs from the"
                      " in-memory one",
                      archs[a], k, threads);
                struct stat sb;
                CHECK(stat(got, &sb) == 0 && io.bytes_written == (uint64_t)sb.st_size,
                      "%s spec %zu: %llu bytes written, the file has %lld", archs[a], k,
                      (unsigned long long)io.bytes_written, (long long)sb.st_size);
            }
            /* the plain entry point computes the source_id itself */
            CHECK(mt_shard_write(f, &specs[k], got, &err) == 0 && same_file(want, got),
                  "%s spec %zu: mt_shard_write differs (%s)", archs[a], k, err.msg);
            char part[300];
            snprintf(part, sizeof part, "%s.part", got);
            CHECK(access(part, F_OK) != 0, "%s left behind", part);
            unlink(want);
            unlink(got);
        }
        mt_shard_layout_free(&l);
        gguf_close(f);
        unlink(path);
    }
}

/* ---------------------------------------------------------- bounded memory */

/* Hashing and cutting read with pread: the model's pages do not become the
 * process's (the reference, which hashes through the mapping, does). */
static void test_resident(void) {
    mt_synth_params p = mt_synth_default_params("qwen3moe");
    p.type = MT_TYPE_Q8_0;
    p.n_layer = 8;
    p.n_embd = 1024;
    p.n_ff_exp = 512;
    p.n_expert = 8;
    const char *path = check_tmp("-resident.gguf"); /* about 115 MB */
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, path, &err) == 0, "mkmodel: %s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    CHECK(f, "%s", err.msg);
    if (!f) return;
    long before = rss_kb();
    char id[MT_SHARD_HASH_HEX];
    mt_shard_io io = {.threads = 2};
    CHECK(mt_shard_source_id_io(f, &io, id, NULL, &err) == 0, "%s", err.msg);
    mt_shard_spec all = {0, 8, true, true, NULL, -1};
    const char *out = check_tmp("-all.gguf");
    mt_shard_layout l;
    CHECK(mt_shard_layout_read(f, &l, &err) == 0 &&
              mt_shard_write_io(f, &l, id, &all, out, &io, &err) == 0,
          "%s", err.msg);
    long after = rss_kb();
    char ref[MT_SHARD_HASH_HEX];
    ref_source_id(f, ref); /* touches every page of the mapping */
    long touched = rss_kb();
    printf("resident: %.1f MB model; RSS %ld kB before, %ld kB after hashing and writing it, %ld"
           " kB after hashing through the mapping\n",
           f->size / 1e6, before, after, touched);
    CHECK(strcmp(id, ref) == 0, "source_id %.16s, by definition %.16s", id, ref);
#ifdef __SANITIZE_ADDRESS__
    printf("resident: not judged under AddressSanitizer (its allocator keeps freed buffers"
           " resident)\n");
#else
    CHECK(after - before < 32 * 1024, "RSS grew by %ld kB reading a %.0f MB model", after - before,
          f->size / 1e6);
#endif
    CHECK(touched - after > (long)(f->size / 2048),
          "hashing through the mapping grew RSS by only %ld kB: the measure is broken",
          touched - after);
    mt_shard_layout_free(&l);
    gguf_close(f);

    /* a model whose file is gone is read through its mapping, one piece resident at a time */
    f = gguf_open(path, &err);
    CHECK(f, "%s", err.msg);
    if (!f) return;
    unlink(path);
    before = rss_kb();
    char gone[MT_SHARD_HASH_HEX];
    CHECK(mt_shard_source_id_io(f, &io, gone, NULL, &err) == 0 && strcmp(gone, ref) == 0,
          "unlinked model: %.16s, want %.16s (%s)", gone, ref, err.msg);
    after = rss_kb();
    printf("resident: the same model unlinked, read through its mapping: RSS %ld kB before, %ld"
           " kB after\n",
           before, after);
#if defined(__SANITIZE_THREAD__)
    printf("resident: not judged under ThreadSanitizer (its shadow of the mapping stays"
           " resident)\n");
#elif !defined(__SANITIZE_ADDRESS__)
    CHECK(after - before < 32 * 1024, "RSS grew by %ld kB reading an unlinked %.0f MB model",
          after - before, f->size / 1e6);
#endif
    gguf_close(f);
    unlink(out);
}

/* ------------------------------------------------------------------ parts */

/* A model seen as two files: its odd tensors read from a byte-identical
 * copy of the file. The hashes, the shards and the cache rows follow each
 * tensor's part. */
static void test_parts(void) {
    const char *path = make_model("qwen3moe", 5, 2, 128);
    const char *copy = check_tmp("-copy.gguf");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, copy);
    CHECK(system(cmd) == 0, "cp");
    mt_error err = {{0}};
    gguf_file *f = gguf_open(path, &err), *g = gguf_open(copy, &err);
    CHECK(f && g, "%s", err.msg);
    if (!f || !g) return;
    gguf_file two = *f;
    gguf_part parts[2] = {f->parts[0], g->parts[0]};
    two.parts = parts;
    two.n_parts = 2;
    two.tensors = malloc(f->n_tensors * sizeof *two.tensors);
    memcpy(two.tensors, f->tensors, f->n_tensors * sizeof *two.tensors);
    for (uint64_t i = 1; i < f->n_tensors; i += 2) {
        two.tensors[i].part = 1;
        two.tensors[i].data = g->base + ((const uint8_t *)f->tensors[i].data - f->base);
    }
    char id1[MT_SHARD_HASH_HEX], id2[MT_SHARD_HASH_HEX];
    const char *cache_path = check_tmp("-parts.sqlite");
    mt_hash_cache *c = mt_hash_cache_open(cache_path, &err);
    CHECK(c, "%s", err.msg);
    mt_shard_io io = {.cache = c};
    CHECK(mt_shard_source_id(f, id1, NULL, &err) == 0 &&
              mt_shard_source_id_io(&two, &io, id2, NULL, &err) == 0 && strcmp(id1, id2) == 0,
          "source_id of one file %.16s, of two %.16s (%s)", id1, id2, err.msg);
    mt_shard_io again = {.cache = c};
    CHECK(mt_shard_source_id_io(&two, &again, id2, NULL, &err) == 0 && again.bytes_hashed == 0 &&
              strcmp(id1, id2) == 0,
          "two files, cached: %llu bytes read", (unsigned long long)again.bytes_hashed);
    mt_shard_layout l;
    CHECK(mt_shard_layout_read(f, &l, &err) == 0, "%s", err.msg);
    static const int32_t some[] = {1, 2, 6};
    mt_shard_spec spec = {0, 2, true, true, some, 3};
    const char *a = check_tmp("-one.gguf"), *b = check_tmp("-two.gguf");
    CHECK(mt_shard_write_with(f, &l, id1, &spec, a, &err) == 0 &&
              mt_shard_write_io(&two, &l, id1, &spec, b, &io, &err) == 0 && same_file(a, b),
          "a shard of two files differs from the one of one file (%s)", err.msg);
    sqlite3 *db;
    int files = -1;
    if (sqlite3_open(cache_path, &db) == SQLITE_OK) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM files", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            files = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    CHECK(files == 2, "the cache knows %d files, want both parts", files);
    mt_hash_cache_close(c);
    mt_shard_layout_free(&l);
    free(two.tensors);
    gguf_close(f);
    gguf_close(g);
    unlink(a);
    unlink(b);
    unlink(copy);
    unlink(path);
    unlink(cache_path);
}

/* ------------------------------------------------------------------ cache */

static uint64_t tensor_bytes(const gguf_file *f) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) n += f->tensors[i].nbytes;
    return n;
}

/* source_id through the cache; io's figures for this call. */
static int cached_id(const char *path, mt_hash_cache *c, bool rehash, char id[MT_SHARD_HASH_HEX],
                     mt_shard_io *io, uint64_t *total) {
    mt_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    memset(io, 0, sizeof *io);
    io->cache = c;
    io->rehash = rehash;
    int rc = f ? mt_shard_source_id_io(f, io, id, NULL, &err) : -1;
    CHECK(rc == 0, "%s", err.msg);
    if (f) *total = tensor_bytes(f);
    gguf_close(f);
    return rc;
}

typedef struct seen_progress {
    int calls;
    char what[300];
    uint64_t last_done, last_total;
    bool backwards;
} seen_progress;

static void on_progress(void *ctx, const char *what, uint64_t done, uint64_t total) {
    seen_progress *p = ctx;
    bool same_step = p->calls++ && strcmp(p->what, what) == 0;
    if (same_step && (done < p->last_done || total != p->last_total)) p->backwards = true;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->last_done = done;
    p->last_total = total;
}

static void test_cache(void) {
    const char *path = make_model("qwen3moe", 11, 3, 128);
    const char *cache_path = check_tmp("-hashes.sqlite");
    mt_error err = {{0}};
    mt_hash_cache *c = mt_hash_cache_open(cache_path, &err);
    CHECK(c, "%s", err.msg);
    if (!c) return;
    char id0[MT_SHARD_HASH_HEX], id[MT_SHARD_HASH_HEX];
    mt_shard_io io;
    uint64_t total = 0;
    cached_id(path, c, false, id0, &io, &total);
    CHECK(io.bytes_hashed == total && io.bytes_cached == 0,
          "first hashing: %llu read, %llu cached of %llu", (unsigned long long)io.bytes_hashed,
          (unsigned long long)io.bytes_cached, (unsigned long long)total);
    cached_id(path, c, false, id, &io, &total);
    CHECK(io.bytes_hashed == 0 && io.bytes_cached == total && strcmp(id, id0) == 0,
          "second hashing: %llu read, %llu cached of %llu", (unsigned long long)io.bytes_hashed,
          (unsigned long long)io.bytes_cached, (unsigned long long)total);
    cached_id(path, c, true, id, &io, &total);
    CHECK(io.bytes_hashed == total && strcmp(id, id0) == 0, "rehash: %llu read of %llu",
          (unsigned long long)io.bytes_hashed, (unsigned long long)total);

    /* touched: a new modification time, the same bytes */
    struct stat sb;
    CHECK(stat(path, &sb) == 0, "stat");
    struct timespec later[2] = {sb.st_atim, {sb.st_mtim.tv_sec + 5, sb.st_mtim.tv_nsec}};
    CHECK(utimensat(AT_FDCWD, path, later, 0) == 0, "utimensat");
    cached_id(path, c, false, id, &io, &total);
    CHECK(io.bytes_hashed == total && strcmp(id, id0) == 0, "touched: %llu read of %llu",
          (unsigned long long)io.bytes_hashed, (unsigned long long)total);

    /* one byte of the last tensor changed, size and modification time put back */
    CHECK(stat(path, &sb) == 0, "stat");
    gguf_file *f = gguf_open(path, &err);
    uint64_t at = f ? gguf_tensor_file_offset(f, &f->tensors[f->n_tensors - 1]) : 0;
    gguf_close(f);
    int fd = open(path, O_RDWR);
    uint8_t byte = 0;
    CHECK(fd >= 0 && pread(fd, &byte, 1, (off_t)at) == 1, "read");
    byte ^= 0x40;
    CHECK(pwrite(fd, &byte, 1, (off_t)at) == 1, "write");
    close(fd);
    struct timespec same[2] = {sb.st_atim, sb.st_mtim};
    CHECK(utimensat(AT_FDCWD, path, same, 0) == 0, "utimensat");
    struct stat sb2;
    CHECK(stat(path, &sb2) == 0 && sb2.st_size == sb.st_size &&
              sb2.st_mtim.tv_sec == sb.st_mtim.tv_sec && sb2.st_mtim.tv_nsec == sb.st_mtim.tv_nsec,
          "size and mtime restored");
    cached_id(path, c, false, id, &io, &total);
    f = gguf_open(path, &err);
    char want[MT_SHARD_HASH_HEX] = "";
    if (f) ref_source_id(f, want);
    CHECK(io.bytes_hashed == total && strcmp(id, id0) != 0 && strcmp(id, want) == 0,
          "a changed byte under the same mtime: %llu read, id %.16s (before %.16s, now by"
          " definition %.16s)",
          (unsigned long long)io.bytes_hashed, id, id0, want);

    /* a plan written through the cache, then checked: the model is not read again,
     * its expert slices included */
    mt_plan plan;
    char manifest[4096], *report = NULL;
    const char *dir = check_tmp("-plan");
    seen_progress prog = {0};
    mt_shard_io pio = {.cache = c, .progress = on_progress, .progress_ctx = &prog};
    CHECK(f && mt_plan_swarm(f, 3, &plan, &err) == 0 &&
              mt_plan_write_io(f, &plan, dir, manifest, sizeof manifest, &pio, &err) == 0,
          "swarm plan: %s", err.msg);
    CHECK(pio.bytes_hashed == 0 && prog.calls > 0 && !prog.backwards &&
              prog.last_done == prog.last_total,
          "plan write: %llu model bytes read, %d progress calls%s, last %llu of %llu",
          (unsigned long long)pio.bytes_hashed, prog.calls, prog.backwards ? " going back" : "",
          (unsigned long long)prog.last_done, (unsigned long long)prog.last_total);
    mt_shard_io cio = {.cache = c};
    int rc = mt_plan_check_io(path, manifest, &report, &cio, &err);
    CHECK(rc == 0 && cio.bytes_hashed == 0 && cio.bytes_cached > total,
          "plan check through the cache: rc %d, %llu read, %llu cached (%s%s)", rc,
          (unsigned long long)cio.bytes_hashed, (unsigned long long)cio.bytes_cached, err.msg,
          report ? report : "");
    free(report);
    report = NULL;
    mt_shard_io nio = {0};
    rc = mt_plan_check_io(path, manifest, &report, &nio, &err);
    CHECK(rc == 0 && nio.bytes_hashed > total, "plan check without a cache: rc %d, %llu read", rc,
          (unsigned long long)nio.bytes_hashed);
    free(report);

    /* a wrong hash in the cache (as if the file had changed unnoticed) fails the write */
    sqlite3 *db;
    CHECK(sqlite3_open(cache_path, &db) == SQLITE_OK &&
              sqlite3_exec(db, "UPDATE hashes SET hash = zeroblob(32) WHERE slice = ''", NULL, NULL,
                           NULL) == SQLITE_OK,
          "poke the cache");
    sqlite3_close(db);
    mt_shard_layout l;
    mt_shard_spec stage = {0, 3, true, false, NULL, -1};
    const char *out = check_tmp("-bad.gguf");
    mt_shard_io bio = {.cache = c};
    CHECK(f && mt_shard_layout_read(f, &l, &err) == 0, "%s", err.msg);
    rc = mt_shard_write_io(f, &l, id, &stage, out, &bio, &err);
    CHECK(rc != 0 && strstr(err.msg, "changed while it was read") && access(out, F_OK) != 0,
          "a wrong cached hash: rc %d, '%s'", rc, err.msg);
    mt_shard_layout_free(&l);
    mt_plan_free(&plan);
    gguf_close(f);
    snprintf(manifest, sizeof manifest, "rm -rf '%s'", dir);
    CHECK(system(manifest) == 0, "rm");
    mt_hash_cache_close(c);
    unlink(cache_path);
    unlink(path);
}

/* ---------------------------------------------------------------- errors */

static void test_errors(void) {
    const char *path = make_model("qwen3moe", 13, 2, 128);
    mt_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    CHECK(f, "%s", err.msg);
    if (!f) return;
    mt_shard_layout l;
    CHECK(mt_shard_layout_read(f, &l, &err) == 0, "%s", err.msg);
    mt_shard_spec head = {0, 0, false, true, NULL, 0};
    int rc = mt_shard_write(f, &head, "/nonexistent-dir/x.gguf", &err);
    CHECK(rc != 0 && strstr(err.msg, "/nonexistent-dir/x.gguf.part") &&
              strstr(err.msg, "cannot create"),
          "no directory: '%s'", err.msg);

    /* the writer's own checks */
    gguf_reader *rd = gguf_reader_open(f, &err);
    CHECK(rd, "%s", err.msg);
    const gguf_tensor *t = &f->tensors[0];
    gguf_range r = {gguf_tensor_file_offset(f, t), t->nbytes - 1};
    gguf_writer *w = gguf_writer_new();
    CHECK(gguf_writer_add_tensor_ranges(w, t->name, t->type, t->n_dims, t->ne, rd, 0, &r, 1,
                                        &err) != 0 &&
              strstr(err.msg, "its ranges hold"),
          "short ranges: '%s'", err.msg);
    r = (gguf_range){f->size - 10, t->nbytes};
    CHECK(gguf_writer_add_tensor_ranges(w, t->name, t->type, t->n_dims, t->ne, rd, 0, &r, 1,
                                        &err) != 0 &&
              strstr(err.msg, "outside"),
          "range past the end: '%s'", err.msg);
    r = (gguf_range){gguf_tensor_file_offset(f, t), t->nbytes};
    CHECK(gguf_writer_add_tensor_ranges(w, t->name, t->type, t->n_dims, t->ne, rd, 0, &r, 1,
                                        &err) == 0,
          "%s", err.msg);
    const char *two[2] = {"x", "y"};
    gguf_writer_set_string_array(w, "hashes", two, 2);
    gguf_write_opts o = {.hash_key = "hashes"};
    const char *out = check_tmp("-w.gguf");
    CHECK(gguf_writer_write_opts(w, out, &o, &err) != 0 && strstr(err.msg, "placeholder"),
          "bad placeholders: '%s'", err.msg);
    o.hash_key = "missing";
    CHECK(gguf_writer_write_opts(w, out, &o, &err) != 0 && strstr(err.msg, "is not set"),
          "missing hash key: '%s'", err.msg);
    gguf_writer_free(w);
    unlink(out);

    /* a model file that changed since it was opened is read through its mapping (the
     * bytes that were parsed), and not through the cache, which cannot name it */
    char want[MT_SHARD_HASH_HEX], id[MT_SHARD_HASH_HEX];
    ref_source_id(f, want);
    CHECK(rd && gguf_reader_unchanged(rd, 0), "an untouched file counts as changed");
    int fd = open(path, O_WRONLY | O_APPEND);
    CHECK(fd >= 0 && write(fd, "xx", 2) == 2, "append");
    close(fd);
    /* what a reader read before the write is not cached (shard_cache_store asks this) */
    CHECK(rd && !gguf_reader_unchanged(rd, 0), "a file written while open counts as unchanged");
    gguf_reader_close(rd);
    const char *cache_path = check_tmp("-grown.sqlite");
    mt_hash_cache *c = mt_hash_cache_open(cache_path, &err);
    for (int k = 0; k < 2; k++) {
        mt_shard_io io = {.cache = c};
        rc = mt_shard_source_id_io(f, &io, id, NULL, &err);
        CHECK(rc == 0 && strcmp(id, want) == 0 && io.bytes_cached == 0,
              "grown file, pass %d: rc %d, id %.16s (want %.16s), %llu bytes cached (%s)", k, rc,
              id, want, (unsigned long long)io.bytes_cached, err.msg);
    }
    mt_hash_cache_close(c);
    unlink(cache_path);
    mt_shard_layout_free(&l);
    gguf_close(f);
    unlink(path);
}

int main(void) {
    test_same_bytes();
    test_resident();
    test_parts();
    test_cache();
    test_errors();
    return check_report("test_shard_stream");
}

/* split_ref.c - writes a split model with llama.cpp's own GGUF library
 * (libggml-base.so from the node-llama-cpp package, loaded at run time),
 * for tests/golden/split.json: the reference bytes that `moontail split
 * --parts` must reproduce. Used by split_regen.sh; not part of the build.
 *
 *   split_ref LIBGGML_BASE_SO MODEL.gguf OUTPREFIX SOURCE_ID N0 N1 ...
 *
 * Part k holds the next Nk tensors of MODEL in order. Each part is made the
 * way gguf-split makes one: an empty GGUF context; for the first part every
 * key of MODEL; split.no (u16), a placeholder split.count (u16) and
 * split.tensors.count (i32); the part's tensors; then split.count set to the
 * real count (ggml moves a key it sets again to the end). MoonTail's
 * moontail.split.source_id (a string, SOURCE_ID; "-" = none) follows. The
 * metadata is ggml's serialization; each tensor's bytes are copied from
 * MODEL and padded with zeros to 32 bytes. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ggml's public GGUF API (ggml/include/gguf.h), declared here so that no
 * ggml header is needed */
struct gguf_context;
struct ggml_context;
struct ggml_tensor;
struct gguf_init_params {
    bool no_alloc;
    struct ggml_context **ctx;
};

static struct {
    struct gguf_context *(*init_from_file)(const char *, struct gguf_init_params);
    struct gguf_context *(*init_empty)(void);
    void (*free_ctx)(struct gguf_context *);
    void (*set_kv)(struct gguf_context *, const struct gguf_context *);
    void (*set_u16)(struct gguf_context *, const char *, uint16_t);
    void (*set_i32)(struct gguf_context *, const char *, int32_t);
    void (*set_str)(struct gguf_context *, const char *, const char *);
    void (*add_tensor)(struct gguf_context *, const struct ggml_tensor *);
    size_t (*meta_size)(const struct gguf_context *);
    void (*meta_data)(const struct gguf_context *, void *);
    int64_t (*n_tensors)(const struct gguf_context *);
    const char *(*tensor_name)(const struct gguf_context *, int64_t);
    int64_t (*find_tensor)(const struct gguf_context *, const char *);
    size_t (*data_offset)(const struct gguf_context *);
    size_t (*tensor_offset)(const struct gguf_context *, int64_t);
    struct ggml_tensor *(*get_tensor)(struct ggml_context *, const char *);
    size_t (*nbytes)(const struct ggml_tensor *);
} g;

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "split_ref: %s not found: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

#define LOAD(field, name) *(void **)&g.field = sym(lib, name)

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: split_ref LIBGGML_BASE_SO MODEL OUTPREFIX SOURCE_ID N0 N1 ...\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "split_ref: %s\n", dlerror());
        return 1;
    }
    LOAD(init_from_file, "gguf_init_from_file");
    LOAD(init_empty, "gguf_init_empty");
    LOAD(free_ctx, "gguf_free");
    LOAD(set_kv, "gguf_set_kv");
    LOAD(set_u16, "gguf_set_val_u16");
    LOAD(set_i32, "gguf_set_val_i32");
    LOAD(set_str, "gguf_set_val_str");
    LOAD(add_tensor, "gguf_add_tensor");
    LOAD(meta_size, "gguf_get_meta_size");
    LOAD(meta_data, "gguf_get_meta_data");
    LOAD(n_tensors, "gguf_get_n_tensors");
    LOAD(tensor_name, "gguf_get_tensor_name");
    LOAD(find_tensor, "gguf_find_tensor");
    LOAD(data_offset, "gguf_get_data_offset");
    LOAD(tensor_offset, "gguf_get_tensor_offset");
    LOAD(get_tensor, "ggml_get_tensor");
    LOAD(nbytes, "ggml_nbytes");

    struct ggml_context *meta = NULL;
    struct gguf_context *src = g.init_from_file(argv[2], (struct gguf_init_params){true, &meta});
    FILE *in = fopen(argv[2], "rb");
    if (!src || !in) {
        fprintf(stderr, "split_ref: cannot read %s\n", argv[2]);
        return 1;
    }
    const char *id = strcmp(argv[4], "-") == 0 ? NULL : argv[4];
    int n_split = argc - 5;
    int64_t n = g.n_tensors(src), next = 0;
    for (int k = 0; k < n_split; k++) {
        int64_t count = atoll(argv[5 + k]);
        struct gguf_context *out = g.init_empty();
        if (k == 0) g.set_kv(out, src);
        g.set_u16(out, "split.no", (uint16_t)k);
        g.set_u16(out, "split.count", 0);
        g.set_i32(out, "split.tensors.count", (int32_t)n);
        for (int64_t i = next; i < next + count && i < n; i++)
            g.add_tensor(out, g.get_tensor(meta, g.tensor_name(src, i)));
        g.set_u16(out, "split.count", (uint16_t)n_split);
        if (id) g.set_str(out, "moontail.split.source_id", id);

        char path[4096];
        snprintf(path, sizeof path, "%s-%05d-of-%05d.gguf", argv[3], k + 1, n_split);
        FILE *fo = fopen(path, "wb");
        size_t ms = g.meta_size(out);
        char *mb = malloc(ms);
        g.meta_data(out, mb);
        if (!fo || fwrite(mb, 1, ms, fo) != ms) {
            fprintf(stderr, "split_ref: cannot write %s\n", path);
            return 1;
        }
        free(mb);
        for (int64_t i = next; i < next + count && i < n; i++) {
            const char *name = g.tensor_name(src, i);
            size_t nb = g.nbytes(g.get_tensor(meta, name));
            size_t at = g.data_offset(src) + g.tensor_offset(src, g.find_tensor(src, name));
            char *buf = malloc(nb + 32);
            memset(buf, 0, nb + 32);
            if (fseek(in, (long)at, SEEK_SET) != 0 || fread(buf, 1, nb, in) != nb) {
                fprintf(stderr, "split_ref: cannot read tensor %s\n", name);
                return 1;
            }
            fwrite(buf, 1, (nb + 31) / 32 * 32, fo);
            free(buf);
        }
        fclose(fo);
        g.free_ctx(out);
        next += count;
    }
    if (next != n) {
        fprintf(stderr, "split_ref: the counts add up to %lld of %lld tensors\n", (long long)next,
                (long long)n);
        return 1;
    }
    fclose(in);
    g.free_ctx(src);
    return 0;
}

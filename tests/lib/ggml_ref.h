/* ggml_ref.h - llama.cpp's own block decoders as an independent oracle for
 * tests and tools: the libggml-base.so of the node-llama-cpp release pinned
 * in tools/golden (installed by `./dev test`), opened with dlopen. Only its
 * plain C entry points are used (dequantize_row_<type>, quantize_row_<type>_ref),
 * whose signatures are (const void *src, float *dst, int64_t n) and
 * (const float *src, void *dst, int64_t n). Header-only: a test includes it. */
#ifndef MOONTAIL_TEST_GGML_REF_H
#define MOONTAIL_TEST_GGML_REF_H

#include <ctype.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*ggml_ref_dequantize_fn)(const void *src, float *dst, int64_t n);
typedef void (*ggml_ref_quantize_fn)(const float *src, void *dst, int64_t n);

#define GGML_REF_DIR "tools/golden/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"

/* Opens libggml-base.so under `root` (the source tree; MT_SRC in tests).
 * On failure prints what is missing and how to install it, returns NULL. */
static inline void *ggml_ref_open(const char *root) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/libggml-base.so", root && *root ? root : ".", GGML_REF_DIR);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr,
                "ggml_ref: cannot load llama.cpp's ggml library %s (%s); install the pinned "
                "node-llama-cpp with `./dev test` or `cd tools/golden && "
                "NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts`\n",
                path, dlerror());
    return h;
}

/* ggml's spelling of a type in its function names: lower case, except the
 * K of the K-quants ("Q4_K" -> "q4_K", "IQ2_XXS" -> "iq2_xxs"). */
static inline void ggml_ref_type_name(const char *name, char *out, size_t cap) {
    size_t i = 0, n = strlen(name);
    for (; i < n && i + 1 < cap; i++) out[i] = (char)tolower((unsigned char)name[i]);
    out[i] = 0;
    if (i >= 2 && out[i - 2] == '_' && out[i - 1] == 'k') out[i - 1] = 'K';
}

/* The library's function `prefix`<type>`suffix` (as a data pointer), or
 * NULL if it has none. */
static inline void *ggml_ref_sym(void *h, const char *prefix, const char *type_name,
                                 const char *suffix) {
    char t[32], sym[64];
    ggml_ref_type_name(type_name, t, sizeof t);
    snprintf(sym, sizeof sym, "%s%s%s", prefix, t, suffix);
    return dlsym(h, sym);
}

/* dequantize_row_<type> of the library, or NULL if it has none. */
static inline ggml_ref_dequantize_fn ggml_ref_dequantize(void *h, const char *type_name) {
    void *p = ggml_ref_sym(h, "dequantize_row_", type_name, "");
    ggml_ref_dequantize_fn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

/* quantize_row_<type>_ref of the library, or NULL if it has none. */
static inline ggml_ref_quantize_fn ggml_ref_quantize(void *h, const char *type_name) {
    void *p = ggml_ref_sym(h, "quantize_row_", type_name, "_ref");
    ggml_ref_quantize_fn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

#endif

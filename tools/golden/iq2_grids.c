/* iq2_grids.c - measures the codebooks ("grids") of the i-quants IQ2_XXS,
 * IQ2_XS and IQ2_S from llama.cpp's own decoder and prints
 * src/core/quant_iq2_grids.c, MoonTail's copy of them in its own encoding.
 * A tool, not part of the build.
 *
 * The grids are format data: tables of 256 / 512 / 1024 entries of 8
 * magnitudes that the GGUF i-quant formats define (chosen from real model
 * data in llama.cpp PRs #4773 and #5196); no rule generates them. This tool
 * learns each entry by decoding crafted blocks with dequantize_row_iq2_*
 * of the pinned libggml-base.so (tools/golden/NOTES.md: node-llama-cpp
 * 3.21.1, llama.cpp release v0.4.0): block scale d = 1, every 4-bit
 * sub-block scale 0 (so an element decodes as 0.125 * magnitude, exactly),
 * no sign bits, and grid index i at element group i. Every decoded value
 * must be one of three magnitudes (it checks this and stops otherwise); the
 * output stores, per entry, 2 bits per element: the index of its magnitude
 * in the measured set, element j in bits 2j..2j+1.
 *
 * Build and run from the repository root:
 *   cc -O1 -Wall -o /tmp/iq2_grids tools/golden/iq2_grids.c -ldl
 *   /tmp/iq2_grids
 * tools/golden/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so \ >
 * src/core/quant_iq2_grids.c && clang-format -i src/core/quant_iq2_grids.c */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*dequant_fn)(const void *src, float *dst, int64_t n);

enum { GROUPS = 32 }; /* 8-element groups per 256-element block */

static float levels[3];
static int n_levels;

/* index of v in the measured magnitude set, adding it if new */
static int level_code(float v) {
    if (!(v >= 1.0f && v <= 255.0f) || v != (float)(int)v) {
        fprintf(stderr, "iq2_grids: magnitude %g is not a byte\n", (double)v);
        exit(1);
    }
    for (int k = 0; k < n_levels; k++)
        if (levels[k] == v) return k;
    if (n_levels == 3) {
        fprintf(stderr, "iq2_grids: a fourth magnitude %g: not a 2-bit grid\n", (double)v);
        exit(1);
    }
    levels[n_levels] = v;
    return n_levels++;
}

/* Writes grid index `idx` at group g (0..31) of a block of the kind. */
static void put_index(const char *kind, uint8_t *b, int g, int idx) {
    if (strcmp(kind, "iq2_xxs") == 0) { /* qs: per 32: 4 index bytes, then signs+scale u32 (0) */
        b[2 + 8 * (g / 4) + g % 4] = (uint8_t)idx;
    } else if (strcmp(kind, "iq2_xs") == 0) { /* qs[g] u16: 9 index bits, 7 sign bits */
        uint16_t v = (uint16_t)idx;
        memcpy(b + 2 + 2 * g, &v, 2);
    } else { /* iq2_s: qs[g] low 8 bits; qh[g/4] bits 2(g%4)..+1 the top 2 */
        b[2 + g] = (uint8_t)(idx & 0xFF);
        b[2 + 64 + g / 4] |= (uint8_t)((idx >> 8) << (2 * (g % 4)));
    }
}

static void measure(void *lib, const char *kind, int block_bytes, int entries, uint16_t *out) {
    char sym[64];
    snprintf(sym, sizeof sym, "dequantize_row_%s", kind);
    void *p = dlsym(lib, sym);
    if (!p) {
        fprintf(stderr, "iq2_grids: %s not found\n", sym);
        exit(1);
    }
    dequant_fn deq;
    memcpy(&deq, &p, sizeof deq);
    for (int first = 0; first < entries; first += GROUPS) {
        uint8_t b[128];
        float y[256];
        memset(b, 0, sizeof b);
        b[0] = 0x00, b[1] = 0x3C; /* d = 1.0 (f16) */
        for (int g = 0; g < GROUPS; g++) put_index(kind, b, g, first + g);
        deq(b, y, 256);
        (void)block_bytes;
        for (int g = 0; g < GROUPS; g++) {
            uint16_t code = 0;
            for (int j = 0; j < 8; j++) {
                const float v = y[8 * g + j] * 8.0f; /* 0.125 * magnitude */
                code |= (uint16_t)(level_code(v) << (2 * j));
            }
            out[first + g] = code;
        }
    }
}

static void print_table(const char *name, const uint16_t *t, int n) {
    printf("const uint16_t %s[%d] = {\n", name, n);
    for (int i = 0; i < n; i++) printf("0x%04x,%s", t[i], i % 12 == 11 || i == n - 1 ? "\n" : " ");
    printf("};\n\n");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: iq2_grids LIBGGML_BASE_SO > src/core/quant_iq2_grids.c\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "iq2_grids: %s\n", dlerror());
        return 1;
    }
    static uint16_t xxs[256], xs[512], s[1024];
    measure(lib, "iq2_xxs", 66, 256, xxs);
    measure(lib, "iq2_xs", 74, 512, xs);
    measure(lib, "iq2_s", 82, 1024, s);
    if (n_levels != 3) {
        fprintf(stderr, "iq2_grids: only %d magnitudes seen\n", n_levels);
        return 1;
    }
    /* codes in increasing order of magnitude */
    int order[3] = {0, 1, 2}, rank[3];
    for (int a = 0; a < 3; a++)
        for (int c = a + 1; c < 3; c++)
            if (levels[order[c]] < levels[order[a]]) {
                int tmp = order[a];
                order[a] = order[c], order[c] = tmp;
            }
    for (int k = 0; k < 3; k++) rank[order[k]] = k;
    uint16_t *tabs[3] = {xxs, xs, s};
    const int sizes[3] = {256, 512, 1024};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < sizes[t]; i++) {
            uint16_t c = 0;
            for (int j = 0; j < 8; j++)
                c |= (uint16_t)(rank[(tabs[t][i] >> (2 * j)) & 3] << (2 * j));
            tabs[t][i] = c;
        }

    printf("/* quant_iq2_grids.c - GENERATED by tools/golden/iq2_grids.c; do not edit.\n"
           " *\n"
           " * The codebooks (\"grids\") of the GGUF / ggml i-quants IQ2_XXS (256 entries),\n"
           " * IQ2_XS (512) and IQ2_S (1024): format data that the formats define (empirical\n"
           " * tables chosen from real model data in llama.cpp, MIT-licensed ggml; origin\n"
           " * llama.cpp PRs #4773 and #5196), not code. Each entry holds the magnitudes of\n"
           " * 8 consecutive elements; here element j of entry i is\n"
           " * quant_iq2_levels[(grid[i] >> 2j) & 3].\n"
           " *\n"
           " * Measured, not copied: the tool decodes crafted blocks (d = 1, sub-block\n"
           " * scale 0, no sign bits, every grid index) with dequantize_row_iq2_xxs / _xs /\n"
           " * _s of the pinned llama.cpp build (node-llama-cpp 3.21.1, llama.cpp release\n"
           " * v0.4.0; tools/golden/NOTES.md) and records the magnitude of every element.\n"
           " * tests/test_quant_iq2.c decodes every grid index with our kernels and with\n"
           " * llama.cpp's decoder and compares them bit for bit (test_quant_ggml does the\n"
           " * same on random blocks). */\n"
           "#include \"quant_kernels.h\"\n\n");
    printf("const uint8_t quant_iq2_levels[3] = {%d, %d, %d};\n\n", (int)levels[order[0]],
           (int)levels[order[1]], (int)levels[order[2]]);
    printf("// clang-format off\n");
    print_table("quant_iq2xxs_grid", xxs, 256);
    print_table("quant_iq2xs_grid", xs, 512);
    print_table("quant_iq2s_grid", s, 1024);
    printf("// clang-format on\n");
    dlclose(lib);
    return 0;
}

/* iq3_iq1_grids.c - measures the codebooks ("grids") of the GGUF i-quants
 * IQ3_XXS, IQ3_S and IQ1_S / IQ1_M from llama.cpp's own decoder and prints
 * them as src/core/quant_iq3_iq1_grids.c in MoonTail's compact encoding.
 * Not part of the build; run it again only if the pinned release changes.
 *
 *   cc -O1 -Wall -Wextra -I tests -o /tmp/iq3_iq1_grids tools/golden/iq3_iq1_grids.c -ldl
 *   /tmp/iq3_iq1_grids . > src/core/quant_iq3_iq1_grids.c && clang-format -i \
 *       src/core/quant_iq3_iq1_grids.c
 *
 * (the argument is the source tree holding tools/golden/node_modules; see
 * tests/lib/ggml_ref.h for the library it opens).
 *
 * The grids are empirical tables that the format defines (chosen from real
 * model weights when the i-quants were designed); no rule generates them.
 * So they are read off the decoder, never copied from source: blocks are
 * crafted so that every grid index appears once with a sub-block scale of
 * exactly 1 and no sign flips, and the decoded floats are the grid values.
 *   IQ3_XXS (98 bytes): d = 4 (f16), scale nibble 0 and sign index 0 in every
 *     32-element word, so d * (0.5 + 0) * 0.5 = 1; qs[k] = index of group k.
 *   IQ3_S (110 bytes): d = 1, scale nibbles 0 (1 + 2 * 0 = 1), signs 0; the
 *     9-bit index of group k is qs[k] plus bit k % 8 of qh[k / 8].
 *   IQ1_S (50 bytes): d = 1, qh scale bits 0 (2 * 0 + 1 = 1), delta sign bit
 *     clear (+1/8): the decoded value is grid + 1/8; the 11-bit index of
 *     group l of sub-block s is qs[4s + l] plus bits 3l..3l+2 of qh[s].
 * Every decoded value is checked to be exactly what the encoding can hold
 * (3-bit levels for IQ3, {-1, 0, 1} for IQ1), or the tool fails. */
#include "lib/ggml_ref.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what) {
    fprintf(stderr, "iq3_iq1_grids: %s\n", what);
    exit(1);
}

static void put16(uint8_t *p, uint16_t v) {
    memcpy(p, &v, 2);
}

/* Levels of an IQ3 grid: the distinct magnitudes, ascending (at most 8). */
static int add_level(int *levels, int *n, int v) {
    for (int i = 0; i < *n; i++)
        if (levels[i] == v) return 0;
    if (*n == 8) die("an IQ3 grid has more than 8 distinct values");
    levels[(*n)++] = v;
    return 0;
}

static int level_code(const int *levels, int n, int v) {
    for (int i = 0; i < n; i++)
        if (levels[i] == v) return i;
    die("value not among the levels");
    return -1;
}

static void sort_levels(int *l, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && l[j - 1] > l[j]; j--) {
            int t = l[j];
            l[j] = l[j - 1];
            l[j - 1] = t;
        }
}

/* Prints an IQ3 grid: levels[8] and one 12-bit code per entry (value j of
 * entry i is levels[(code >> 3j) & 7]). */
static void print_iq3(const char *name, const char *type, int n_entries, const int (*vals)[4]) {
    int levels[8], nl = 0;
    for (int i = 0; i < n_entries; i++)
        for (int j = 0; j < 4; j++) add_level(levels, &nl, vals[i][j]);
    sort_levels(levels, nl);
    printf("\n/* %s: the %d magnitudes, ascending */\n", type, nl);
    printf("const uint8_t quant_%s_levels[8] = {", name);
    for (int i = 0; i < 8; i++) printf("%s%d", i ? ", " : "", i < nl ? levels[i] : 0);
    printf(
        "};\n\n/* %s: %d entries; value j (0..3) of entry i is\n * quant_%s_levels[(code >> 3j) & "
        "7] */\n",
        type, n_entries, name);
    printf("// clang-format off\nconst uint16_t quant_%s_grid[%d] = {\n", name, n_entries);
    for (int i = 0; i < n_entries; i++) {
        int c = 0;
        for (int j = 0; j < 4; j++) c |= level_code(levels, nl, vals[i][j]) << (3 * j);
        printf("%s0x%03x,%s", i % 12 ? " " : "    ", c,
               i % 12 == 11 || i == n_entries - 1 ? "\n" : "");
    }
    printf("};\n// clang-format on\n");
}

int main(int argc, char **argv) {
    void *lib = ggml_ref_open(argc > 1 ? argv[1] : ".");
    if (!lib) return 1;
    ggml_ref_dequantize_fn deq_xxs = ggml_ref_dequantize(lib, "IQ3_XXS");
    ggml_ref_dequantize_fn deq_s = ggml_ref_dequantize(lib, "IQ3_S");
    ggml_ref_dequantize_fn deq_1s = ggml_ref_dequantize(lib, "IQ1_S");
    if (!deq_xxs || !deq_s || !deq_1s) die("the library lacks a dequantize_row function");

    static int xxs[256][4], s3[512][4];
    static int s1[2048][8];
    float y[256];

    /* IQ3_XXS: 4 blocks of 64 groups */
    for (int b = 0; b < 4; b++) {
        uint8_t blk[98] = {0};
        put16(blk, 0x4400); /* 4.0 */
        for (int k = 0; k < 64; k++) blk[2 + k] = (uint8_t)(64 * b + k);
        deq_xxs(blk, y, 256);
        for (int k = 0; k < 64; k++)
            for (int j = 0; j < 4; j++) {
                float v = y[4 * k + j];
                if (v != floorf(v) || v < 0 || v > 255) die("IQ3_XXS: a value is not a byte");
                xxs[64 * b + k][j] = (int)v;
            }
    }
    /* IQ3_S: 8 blocks of 64 groups */
    for (int b = 0; b < 8; b++) {
        uint8_t blk[110] = {0};
        put16(blk, 0x3C00); /* 1.0 */
        for (int k = 0; k < 64; k++) {
            const int idx = 64 * b + k;
            blk[2 + k] = (uint8_t)(idx & 255);
            if (idx & 256) blk[66 + k / 8] |= (uint8_t)(1 << (k % 8));
        }
        deq_s(blk, y, 256);
        for (int k = 0; k < 64; k++)
            for (int j = 0; j < 4; j++) {
                float v = y[4 * k + j];
                if (v != floorf(v) || v < 0 || v > 255) die("IQ3_S: a value is not a byte");
                s3[64 * b + k][j] = (int)v;
            }
    }
    /* IQ1_S: 64 blocks of 32 groups of 8 */
    for (int b = 0; b < 64; b++) {
        uint8_t blk[50] = {0};
        put16(blk, 0x3C00);
        for (int g = 0; g < 32; g++) {
            const int idx = 32 * b + g, s = g / 4, l = g % 4;
            blk[2 + g] = (uint8_t)(idx & 255);
            uint16_t qh;
            memcpy(&qh, blk + 34 + 2 * s, 2);
            qh |= (uint16_t)((idx >> 8) << (3 * l));
            put16(blk + 34 + 2 * s, qh);
        }
        deq_1s(blk, y, 256);
        for (int g = 0; g < 32; g++)
            for (int j = 0; j < 8; j++) {
                const float v = y[8 * g + j] - 0.125f;
                if (v != -1.0f && v != 0.0f && v != 1.0f) die("IQ1_S: a value is not -1, 0 or 1");
                s1[32 * b + g][j] = (int)v;
            }
    }

    printf("/* quant_iq3_iq1_grids.c - GENERATED by tools/golden/iq3_iq1_grids.c; do not edit.\n"
           " *\n"
           " * The codebooks (\"grids\") of the GGUF / ggml i-quants IQ3_XXS, IQ3_S and\n"
           " * IQ1_S / IQ1_M: format data (like a file format's magic numbers) that\n"
           " * every IQ3/IQ1 tensor refers to by index. The format is ggml's\n"
           " * (MIT-licensed, origin llama.cpp, PRs #5196 and after); its tables are\n"
           " * empirical, chosen from real model weights, and no rule generates them.\n"
           " *\n"
           " * How they were obtained: the tool dlopens libggml-base.so of the pinned\n"
           " * llama.cpp release (v0.4.0 as shipped by node-llama-cpp 3.21.1, see\n"
           " * tools/golden/NOTES.md) and calls its dequantize_row_iq3_xxs, _iq3_s and\n"
           " * _iq1_s on crafted blocks that hold every grid index once with a\n"
           " * sub-block scale of exactly 1 and no sign flips; the decoded values are\n"
           " * the grid entries. Nothing is copied from ggml's source.\n"
           " *\n"
           " * Encoding (MoonTail's own): an IQ3 entry (4 magnitudes) is a 12-bit code\n"
           " * of four 3-bit indices into the type's 8 levels; an IQ1 entry (8 values\n"
           " * in {-1, 0, 1}) is a 16-bit code of eight 2-bit fields holding value + 1.\n"
           " * quant_iq3_iq1.c expands them into the tables the kernels use.\n"
           " *\n"
           " * Checked: test_quant_ggml decodes random-byte blocks (so every index)\n"
           " * with our kernels and llama.cpp's and requires equal bits, and\n"
           " * test_quant_iq3 decodes every grid index against llama.cpp's decoder. */\n"
           "#include \"quant_kernels.h\"\n");
    print_iq3("iq3xxs", "IQ3_XXS", 256, (const int(*)[4])xxs);
    print_iq3("iq3s", "IQ3_S", 512, (const int(*)[4])s3);
    printf("\n/* IQ1_S and IQ1_M: 2048 entries; value j (0..7) of entry i is\n"
           " * ((code >> 2j) & 3) - 1 */\n// clang-format off\n"
           "const uint16_t quant_iq1s_grid[2048] = {\n");
    for (int i = 0; i < 2048; i++) {
        int c = 0;
        for (int j = 0; j < 8; j++) c |= (s1[i][j] + 1) << (2 * j);
        printf("%s0x%04x,%s", i % 10 ? " " : "    ", c, i % 10 == 9 || i == 2047 ? "\n" : "");
    }
    printf("};\n// clang-format on\n");
    dlclose(lib);
    return 0;
}

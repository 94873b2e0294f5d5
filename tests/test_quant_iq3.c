/* test_quant_iq3.c - the grid i-quants IQ3_XXS, IQ3_S, IQ1_S and IQ1_M
 * (quant_iq3_iq1.c, quant_x86_iq3.inc) beyond what test_quant checks for
 * every type:
 *   - every grid index, every IQ3_XXS sign index and every scale code of each
 *     type decodes bit for bit as llama.cpp's own decoder does (the pinned
 *     libggml-base.so, tests/lib/ggml_ref.h), and the sign-parity rule holds;
 *   - hand-built blocks decode to the values the layout says;
 *   - the dot products follow the stated reduction order exactly: the order
 *     is re-derived here from the element decoding alone (a copy of each
 *     block with d = 1 decodes to sc * w * k, so its integers are known) and
 *     compared bit for bit with quant_vec_dot and quant_tile on every kernel
 *     set, for random-byte blocks and activations (-128 included);
 *   - the quantizers: zero blocks, extreme and tiny values (finite output),
 *     and an rms error within a stated factor of llama.cpp's own quantizer
 *     on the same data. */
#include "check.h"
#include "lib/ggml_ref.h"
#include "lib/quant_random.h"
#include "moontail/quant.h"
#include "moontail/tensor_type.h"
#include "moontail/vecops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x1A3C0FFEEull;

static const mt_type types[] = {MT_TYPE_IQ3_XXS, MT_TYPE_IQ3_S, MT_TYPE_IQ1_S, MT_TYPE_IQ1_M};
static const char *const sets[] = {"reference", "avx2", "avx512"};
enum { N_TYPES = 4 };

static int block_bytes(mt_type t) {
    return mt_type_traits_get((uint32_t)t)->type_size;
}

/* Sets the f16 super-block scale of a block to h (IQ1_M: its nibbles). */
static void set_d(mt_type t, uint8_t *b, uint16_t h) {
    if (t != MT_TYPE_IQ1_M) {
        memcpy(b, &h, 2);
        return;
    }
    for (int w = 0; w < 4; w++) {
        uint16_t v;
        memcpy(&v, b + 48 + 2 * w, 2);
        v = (uint16_t)((v & 0x0fff) | (((h >> (4 * w)) & 0xF) << 12));
        memcpy(b + 48 + 2 * w, &v, 2);
    }
}

/* ------------------------------------------------- grids against llama.cpp */

/* Random-byte blocks in which group k of block i holds grid index
 * (i * groups + k) mod n_grid, so every index appears; scales and signs
 * stay random. */
static void index_blocks(mt_type t, uint8_t *row, int nblk) {
    quant_random_blocks(t, row, (int64_t)nblk * 256, &rng);
    const int bb = block_bytes(t);
    for (int i = 0; i < nblk; i++) {
        uint8_t *b = row + i * bb;
        if (t == MT_TYPE_IQ3_XXS)
            for (int k = 0; k < 64; k++) b[2 + k] = (uint8_t)(64 * i + k);
        if (t == MT_TYPE_IQ3_S)
            for (int k = 0; k < 64; k++) {
                const int idx = (64 * i + k) % 512;
                b[2 + k] = (uint8_t)idx;
                b[66 + k / 8] =
                    (uint8_t)((b[66 + k / 8] & ~(1 << (k % 8))) | ((idx >> 8) << (k % 8)));
            }
        if (t == MT_TYPE_IQ1_S)
            for (int k = 0; k < 32; k++) {
                const int idx = (32 * i + k) % 2048, s = k / 4, l = k % 4;
                uint16_t qh;
                b[2 + k] = (uint8_t)idx;
                memcpy(&qh, b + 34 + 2 * s, 2);
                qh = (uint16_t)((qh & ~(7 << (3 * l))) | ((idx >> 8) << (3 * l)));
                memcpy(b + 34 + 2 * s, &qh, 2);
            }
        if (t == MT_TYPE_IQ1_M)
            for (int k = 0; k < 32; k++) {
                const int idx = (32 * i + k) % 2048, sh = 4 * (k % 2);
                b[k] = (uint8_t)idx;
                b[32 + k / 2] = (uint8_t)((b[32 + k / 2] & ~(7 << sh)) | ((idx >> 8) << sh));
            }
    }
}

static void test_against_llama(void *lib) {
    enum { NBLK = 64 }; /* 64 blocks x 32 groups = 2048 IQ1 indices */
    uint8_t *row = malloc(NBLK * 110);
    float *ours = malloc(NBLK * 256 * sizeof(float)), *theirs = malloc(NBLK * 256 * sizeof(float));
    for (int ti = 0; ti < N_TYPES; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get((uint32_t)t)->name;
        ggml_ref_dequantize_fn ref = ggml_ref_dequantize(lib, name);
        CHECK(ref != NULL, "%s: llama.cpp has no decoder", name);
        if (!ref) continue;
        int bad = 0;
        for (int pass = 0; pass < 8; pass++) {
            index_blocks(t, row, NBLK);
            quant_dequantize_row(t, row, ours, NBLK * 256);
            ref(row, theirs, NBLK * 256);
            for (int i = 0; i < NBLK * 256; i++)
                if (quant_f32_bits(ours[i]) != quant_f32_bits(theirs[i]) && bad++ < 3)
                    fprintf(stderr, "%s pass %d: element %d is %a here, %a in llama.cpp\n", name,
                            pass, i, (double)ours[i], (double)theirs[i]);
        }
        CHECK(bad == 0, "%s: %d elements of every-index blocks differ from llama.cpp", name, bad);
    }
    /* IQ3_XXS: each sign index (the parity rule) with each scale code, one
     * block per sign index: d = 1, grid index 255 everywhere */
    ggml_ref_dequantize_fn ref = ggml_ref_dequantize(lib, "IQ3_XXS");
    if (ref) {
        int bad = 0;
        for (int si = 0; si < 128; si++) {
            uint8_t b[98];
            memset(b, 0xFF, 98);
            set_d(MT_TYPE_IQ3_XXS, b, 0x3C00);
            for (int s = 0; s < 8; s++) {
                uint32_t aux = (uint32_t)(2 * s + (si & 1)) << 28;
                for (int l = 0; l < 4; l++) aux |= (uint32_t)si << (7 * l);
                memcpy(b + 66 + 4 * s, &aux, 4);
            }
            float y1[256], y2[256];
            quant_dequantize_row(MT_TYPE_IQ3_XXS, b, y1, 256);
            ref(b, y2, 256);
            if (memcmp(y1, y2, sizeof y1) != 0) bad++;
            /* the rule: bits 0-6 are the index, element 7 makes the count
             * of negatives even */
            int neg = 0;
            for (int j = 0; j < 8; j++) neg += y2[j] < 0;
            for (int j = 0; j < 7; j++) bad += (y2[j] < 0) != ((si >> j) & 1);
            bad += neg % 2 != 0;
            bad += (y2[7] < 0) != (__builtin_popcount((unsigned)si) & 1);
        }
        CHECK(bad == 0, "IQ3_XXS sign indices: %d mismatches (decoder or parity rule)", bad);
    }
    free(row);
    free(ours);
    free(theirs);
}

/* ------------------------------------------------------ hand-built blocks */

/* The magnitudes (IQ3) or values (IQ1) of grid entry idx as llama.cpp
 * decodes them: a block with that entry in group 0, scale 1, no signs. */
static void ref_entry(void *lib, mt_type t, int idx, float g[8]) {
    uint8_t b[110] = {0};
    float y[256];
    ggml_ref_dequantize_fn ref = ggml_ref_dequantize(lib, mt_type_traits_get((uint32_t)t)->name);
    if (t == MT_TYPE_IQ3_XXS) set_d(t, b, 0x4400), b[2] = (uint8_t)idx; /* d = 4: db = 1 */
    if (t == MT_TYPE_IQ3_S) set_d(t, b, 0x3C00), b[2] = (uint8_t)idx, b[66] = (uint8_t)(idx >> 8);
    if (t == MT_TYPE_IQ1_S) {
        set_d(t, b, 0x3C00);
        b[2] = (uint8_t)idx;
        b[34] = (uint8_t)(idx >> 8);
    }
    ref(b, y, 256);
    for (int j = 0; j < 8; j++) g[j] = t == MT_TYPE_IQ1_S ? y[j] - 0.125f : y[j];
}

static void test_hand_blocks(void *lib) {
    float y[256], g[8];
    /* IQ3_XXS: d = 2, sub-block 1 has scale code 3 (db = 2 * 3.5 * 0.5 = 3.5)
     * and sign index 5 for its group 0 (elements 32, 34 negative; two, so
     * element 39 positive); group 0 of sub-block 1 is qs[8] */
    {
        uint8_t b[98] = {0};
        set_d(MT_TYPE_IQ3_XXS, b, 0x4000);
        b[2 + 8] = 17;
        const uint32_t aux = (3u << 28) | 5u;
        memcpy(b + 66 + 4, &aux, 4);
        quant_dequantize_row(MT_TYPE_IQ3_XXS, b, y, 256);
        int bad = 0;
        ref_entry(lib, MT_TYPE_IQ3_XXS, 17, g);
        for (int j = 0; j < 4; j++) bad += y[32 + j] != ((j == 0 || j == 2) ? -3.5f : 3.5f) * g[j];
        ref_entry(lib, MT_TYPE_IQ3_XXS, 0, g);
        for (int j = 0; j < 4; j++) bad += y[36 + j] != 3.5f * g[j] || y[j] != 0.5f * g[j];
        CHECK(bad == 0, "IQ3_XXS hand block decodes wrongly");
    }
    /* IQ3_S: d = 0.5, sub-block 3 scale code 2 (high nibble of scales[1]:
     * db = 0.5 * 5), group 25 (sub-block 3, group 1) index 300 (qs 44, bit 1
     * of qh[3]); element 101 (bit 5 of signs[12]) negative */
    {
        uint8_t b[110] = {0};
        set_d(MT_TYPE_IQ3_S, b, 0x3800);
        b[2 + 25] = 300 & 255;
        b[66 + 3] = 1 << 1;
        b[74 + 12] = 1 << 5;
        b[106 + 1] = 2 << 4;
        quant_dequantize_row(MT_TYPE_IQ3_S, b, y, 256);
        ref_entry(lib, MT_TYPE_IQ3_S, 300, g);
        int bad = 0;
        for (int j = 0; j < 4; j++) bad += y[100 + j] != (j == 1 ? -2.5f : 2.5f) * g[j];
        CHECK(bad == 0, "IQ3_S hand block decodes wrongly");
    }
    /* IQ1_S: d = 1, sub-block 2: code 5 (dl = 11), delta negative; its group
     * 3 takes index 1027 (qs 3, high bits 4 at bits 9-11) */
    {
        uint8_t b[50] = {0};
        set_d(MT_TYPE_IQ1_S, b, 0x3C00);
        b[2 + 4 * 2 + 3] = 3;
        const uint16_t qh = (uint16_t)(0x8000 | (5 << 12) | (4 << 9));
        memcpy(b + 34 + 4, &qh, 2);
        quant_dequantize_row(MT_TYPE_IQ1_S, b, y, 256);
        ref_entry(lib, MT_TYPE_IQ1_S, 1027, g);
        int bad = 0;
        for (int j = 0; j < 8; j++) bad += y[88 + j] != 11.0f * (g[j] - 0.125f);
        CHECK(bad == 0, "IQ1_S hand block decodes wrongly");
    }
    /* IQ1_M: d = 2 (f16 0x4000 in the top nibbles), half 5 (elements 80-95)
     * has code 6 (word 1, bits 3-5: dl = 2 * 13); group 11 (elements 88-95)
     * index 0x5AA (qs 0xAA, high bits 5 in qh[5]'s high nibble) with delta
     * negative (bit 3 of that nibble) */
    {
        uint8_t b[56] = {0};
        b[11] = 0xAA;
        b[32 + 5] = (uint8_t)((5 | 8) << 4);
        const uint16_t w1 = 6 << 3;
        memcpy(b + 48 + 2, &w1, 2);
        set_d(MT_TYPE_IQ1_M, b, 0x4000);
        quant_dequantize_row(MT_TYPE_IQ1_M, b, y, 256);
        ref_entry(lib, MT_TYPE_IQ1_S, 0x5AA, g); /* IQ1_M shares IQ1_S's grid */
        int bad = 0;
        for (int j = 0; j < 8; j++) bad += y[88 + j] != 26.0f * (g[j] - 0.125f);
        CHECK(bad == 0, "IQ1_M hand block decodes wrongly");
    }
}

/* ------------------------------------------------------ reduction order */

/* The stated order, from the element decoding alone: the integers
 * sc * w of a block are its decoding with d = 1 divided by k. */
static float order_dot(mt_type t, int64_t n, const uint8_t *w, const uint8_t *x) {
    const float k = t == MT_TYPE_IQ3_XXS ? 0.25f : t == MT_TYPE_IQ3_S ? 1.0f : 0.125f;
    const int bb = block_bytes(t);
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t b[110];
        memcpy(b, w + i * bb, (size_t)bb);
        float d;
        if (t == MT_TYPE_IQ1_M) {
            uint16_t sc[4];
            memcpy(sc, b + 48, 8);
            const uint16_t h = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) |
                                          ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000));
            d = mt_f16_to_f32(h);
        } else {
            uint16_t h;
            memcpy(&h, b, 2);
            d = mt_f16_to_f32(h);
        }
        set_d(t, b, 0x3C00);
        float y[256];
        quant_dequantize_row(t, b, y, 256);
        const uint8_t *xb = x + i * 292;
        float dx;
        memcpy(&dx, xb, 4);
        int32_t acc[8] = {0};
        for (int e = 0; e < 256; e++) {
            const int32_t sw = (int32_t)(y[e] / k); /* exact: y is k times an integer */
            acc[(e % 32) / 4] += sw * (int8_t)xb[4 + e];
        }
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d * dx, lanes[l]);
    }
    const float h = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
                    ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    return k * h;
}

static void test_order(void) {
    enum { N = 2048, ROWS = 41, TOK = 5 };
    uint8_t *w = malloc((size_t)ROWS * N), *x = malloc((size_t)TOK * 292 * (N / 256));
    float want[ROWS * TOK], got[ROWS * TOK];
    const size_t xrow = (size_t)292 * (N / 256);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get((uint32_t)t)->name;
        const size_t wrow = mt_type_row_size(t, N);
        int bad = 0, cases = 0;
        for (int trial = 0; trial < 6; trial++) {
            for (int r = 0; r < ROWS; r++) quant_random_blocks(t, w + r * wrow, N, &rng);
            for (int k = 0; k < TOK; k++) {
                uint8_t *xk = x + k * xrow;
                for (size_t i = 0; i < xrow; i++) xk[i] = (uint8_t)quant_random_u64(&rng);
                if (trial == 1) /* extreme activations: every quant -128 or 127 */
                    for (int b = 0; b < N / 256; b++)
                        for (int e = 0; e < 256; e++) xk[b * 292 + 4 + e] = e % 3 ? 0x80 : 0x7F;
                for (int b = 0; b < N / 256; b++) {
                    const float d = quant_random_gauss(&rng);
                    memcpy(xk + b * 292, &d, 4);
                }
            }
            for (int r = 0; r < ROWS; r++)
                for (int k = 0; k < TOK; k++)
                    want[k * ROWS + r] = order_dot(t, N, w + r * wrow, x + k * xrow);
            for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                for (int r = 0; r < ROWS; r++) {
                    const float v = quant_vec_dot(t, N, w + r * wrow, x);
                    cases++;
                    if (quant_f32_bits(v) != quant_f32_bits(want[r]) &&
                        !(isnan(v) && isnan(want[r])) && bad++ < 3)
                        fprintf(stderr, "%s %s row %d: dot %a, the order gives %a\n", name, sets[s],
                                r, (double)v, (double)want[r]);
                }
                for (int nt = 1; nt <= TOK; nt++) {
                    memset(got, 0, sizeof got);
                    quant_tile(t, N, w, wrow, ROWS, x, xrow, nt, got, ROWS);
                    cases++;
                    for (int i = 0; i < ROWS * nt; i++)
                        if (quant_f32_bits(got[i]) != quant_f32_bits(want[i]) &&
                            !(isnan(got[i]) && isnan(want[i]))) {
                            if (bad++ < 3)
                                fprintf(stderr, "%s %s tile %d x %d: element %d differs\n", name,
                                        sets[s], ROWS, nt, i);
                            break;
                        }
                }
            }
            quant_kernels_select("reference");
        }
        CHECK(bad == 0, "%s: %d of %d dots / tiles differ from the stated reduction order", name,
              bad, cases);
        printf("%-8s %d dots and tiles follow the stated order bit for bit\n", name, cases);
    }
    free(w);
    free(x);
}

/* ------------------------------------------------------------ quantizers */

typedef size_t (*ggml_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                int64_t n_per_row, const float *imatrix);

static double rel_rms(mt_type t, const float *x, const float *y, int64_t n) {
    (void)t;
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    return sqrt(se / sx);
}

static void test_quantizers(void *lib) {
    enum { N = 256 * 64 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    float *ones = malloc(N * sizeof(float));
    uint8_t *q = malloc(N), *q2 = malloc(N);
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    ggml_chunk_fn chunk = NULL;
    if (lib) {
        void *p = dlsym(lib, "ggml_quantize_chunk");
        memcpy(&chunk, &p, sizeof chunk);
    }
    /* worst ratio allowed: our simple search against llama.cpp's */
    static const double max_ratio[N_TYPES] = {1.3, 1.3, 1.3, 1.3};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get((uint32_t)t)->name;
        const size_t bytes = mt_type_row_size(t, N);
        /* zero input: zero bytes, zero output */
        memset(x, 0, N * sizeof(float));
        memset(q, 0xA5, bytes);
        CHECK(quant_quantize_row(t, x, q, N) == bytes, "%s: quantize size", name);
        int nz = 0;
        for (size_t i = 0; i < bytes; i++) nz += q[i] != 0;
        CHECK(nz == 0, "%s: a zero row quantizes to %d non-zero bytes", name, nz);
        /* extreme and tiny values (block 0 of every 4: near the top of the
         * f32 range, some elements overflowing to +-inf): finite output,
         * and deterministic */
        for (int i = 0; i < N; i++) {
            const int blk = i / 256;
            const float v = quant_random_gauss(&rng);
            x[i] = blk % 4 == 0   ? v * 3e38f
                   : blk % 4 == 1 ? v * 1e-40f /* f32 subnormal */
                   : blk % 4 == 2 ? (i % 256 == 7 ? -3.4e38f : v)
                                  : (i % 2 ? 65504.0f * 40 : -1e-7f);
        }
        quant_quantize_row(t, x, q, N);
        quant_quantize_row(t, x, q2, N);
        CHECK(memcmp(q, q2, bytes) == 0, "%s: quantizing twice gives different bytes", name);
        quant_dequantize_row(t, q, y, N);
        int inf = 0;
        for (int i = 0; i < N; i++) inf += !isfinite(y[i]);
        CHECK(inf == 0, "%s: %d extreme inputs decode to inf or NaN", name, inf);
        /* error against llama.cpp's own quantizer (no importance: IQ3 without
         * an imatrix; IQ1, which requires one, with equal weights) */
        for (int i = 0; i < N; i++) x[i] = quant_random_gauss(&rng) * (i % 61 == 3 ? 4.0f : 1.0f);
        quant_quantize_row(t, x, q, N);
        quant_dequantize_row(t, q, y, N);
        const double ours = rel_rms(t, x, y, N);
        if (!chunk) {
            CHECK(0, "llama.cpp's ggml_quantize_chunk is missing");
            continue;
        }
        const bool is_iq1 = t == MT_TYPE_IQ1_S || t == MT_TYPE_IQ1_M;
        chunk((int)t, x, q2, 0, N / 256, 256, is_iq1 ? ones : NULL);
        quant_dequantize_row(t, q2, y, N);
        const double theirs = rel_rms(t, x, y, N);
        CHECK(ours <= max_ratio[ti] * theirs, "%s: rms error %.4f, llama.cpp's %.4f", name, ours,
              theirs);
        printf("%-8s quantizer: rms error %.4f of rms (llama.cpp's own: %.4f)\n", name, ours,
               theirs);
    }
    free(x);
    free(y);
    free(ones);
    free(q);
    free(q2);
}

int main(void) {
    void *lib = ggml_ref_open(getenv("MT_SRC"));
    CHECK(lib != NULL, "llama.cpp's ggml library is needed as the oracle (see the message above)");
    if (lib) {
        test_against_llama(lib);
        test_hand_blocks(lib);
    }
    test_order();
    test_quantizers(lib);
    if (lib) dlclose(lib);
    return check_report("test_quant_iq3");
}

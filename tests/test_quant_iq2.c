/* test_quant_iq2.c - the 2-bit grid i-quants IQ2_XXS, IQ2_XS and IQ2_S:
 *   - hand-built blocks whose values follow from the layout
 *     (docs/engine-reference.md): the block and sub-block scales, the 7-bit
 *     sign index with its parity bit (XXS, XS), IQ2_S's sign bytes and the
 *     high index bits in qh;
 *   - every grid index, every sign index / byte and every 4-bit scale
 *     decoded by our kernels and by llama.cpp's dequantize_row_iq2_* (the
 *     pinned libggml-base.so, tests/lib/ggml_ref.h) bit for bit: the check
 *     of the grid data in src/core/quant_iq2_grids.c;
 *   - the dot product's reduction order (quant_kernels.h) re-derived from
 *     llama.cpp's element decoding (a block decoded at d = 1 gives
 *     ls * w / 8 exactly), compared bit for bit with quant_vec_dot and with
 *     quant_tile under every kernel set, on random-byte blocks (any index,
 *     sign, scale; activations with -128) and on blocks with extreme and
 *     negative scales;
 *   - the quantizer: zero blocks stay zero, extreme values give finite
 *     output, it is deterministic, and its error is reported. */
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

static uint64_t rng = 0x1A2B3C4D5E6F7081ull;

static const mt_type types[3] = {MT_TYPE_IQ2_XXS, MT_TYPE_IQ2_XS, MT_TYPE_IQ2_S};
static const char *const sets[3] = {"reference", "avx2", "avx512"};

static int block_size(mt_type t) {
    return (int)mt_type_traits_get((uint32_t)t)->type_size;
}

static void put16(uint8_t *p, uint16_t v) {
    memcpy(p, &v, 2);
}

/* ------------------------------------------------------ hand-built blocks */

/* Writes grid index idx, sign pattern sg (XXS/XS: a 7-bit index; S: a byte)
 * and 4-bit scale sc at group g of a zeroed block. */
static void set_group(mt_type t, uint8_t *b, int g, int idx, int sg, int sc) {
    const int s = g / 4, k = g % 4;
    if (t == MT_TYPE_IQ2_XXS) {
        uint32_t aux;
        b[2 + 8 * s + k] = (uint8_t)idx;
        memcpy(&aux, b + 2 + 8 * s + 4, 4);
        aux =
            (aux & ~(127u << (7 * k)) & 0x0FFFFFFFu) | (uint32_t)sg << (7 * k) | (uint32_t)sc << 28;
        memcpy(b + 2 + 8 * s + 4, &aux, 4);
    } else if (t == MT_TYPE_IQ2_XS) {
        put16(b + 2 + 2 * g, (uint16_t)(idx | sg << 9));
        b[66 + s] = (uint8_t)((b[66 + s] & (k < 2 ? 0xF0 : 0x0F)) | sc << (k < 2 ? 0 : 4));
    } else {
        b[2 + g] = (uint8_t)idx;
        b[66 + s] = (uint8_t)((b[66 + s] & ~(3 << (2 * k))) | (idx >> 8) << (2 * k));
        b[34 + g] = (uint8_t)sg;
        b[74 + s] = (uint8_t)((b[74 + s] & (k < 2 ? 0xF0 : 0x0F)) | sc << (k < 2 ? 0 : 4));
    }
}

static void test_hand_built(void) {
    /* grid index 0 is the pattern of eight smallest magnitudes in all three
     * grids (llama.cpp's first entry, 8 8 8 8 8 8 8 8; checked against its
     * decoder below); d = 2, scale 3: db = 2 * 3.5 / 4 = 1.75, y = +-14 */
    for (int ti = 0; ti < 3; ti++) {
        const mt_type t = types[ti];
        uint8_t b[82] = {0};
        float y[256];
        put16(b, 0x4000); /* 2.0 */
        for (int g = 0; g < 32; g++) set_group(t, b, g, 0, 0, 3);
        /* group 5: one minus sign (element 0); with the parity rule (XXS,
         * XS) the index 1 also flips element 7; IQ2_S's byte 0x81 does */
        set_group(t, b, 5, 0, t == MT_TYPE_IQ2_S ? 0x81 : 0x01, 3);
        /* group 9: sign index 0x03 (two minus signs: element 7 stays +) */
        set_group(t, b, 9, 0, 0x03, 3);
        /* group 12: scale 0 -> db = 0.25, y = 2 (it is the scale of groups
         * 12-13, the first half of sub-block 3, in XS and S; of the whole
         * sub-block, groups 12-15, in XXS) */
        set_group(t, b, 12, 0, 0, 0);
        quant_dequantize_row(t, b, y, 256);
        int bad = 0;
        for (int e = 0; e < 256; e++) {
            const int g = e / 8, j = e % 8;
            float want = 14.0f;
            if (g == 5 && (j == 0 || j == 7)) want = -14.0f;
            if (g == 9 && (j == 0 || j == 1)) want = -14.0f;
            if (t == MT_TYPE_IQ2_XXS ? g / 4 == 3 : g / 2 == 6) want = 2.0f;
            bad += quant_f32_bits(y[e]) != quant_f32_bits(want);
        }
        CHECK(bad == 0, "%s hand-built block: %d elements differ from the layout's values",
              mt_type_traits_get((uint32_t)t)->name, bad);
    }
    printf("hand-built blocks: scales, sign parity, sign bytes decode as the layout says\n");
}

/* ---------------------------------------------- every index vs llama.cpp */

static void test_every_index(void *lib) {
    for (int ti = 0; ti < 3; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get((uint32_t)t)->name;
        ggml_ref_dequantize_fn ref = ggml_ref_dequantize(lib, name);
        CHECK(ref != NULL, "llama.cpp has no dequantize_row for %s", name);
        if (!ref) continue;
        const int entries = t == MT_TYPE_IQ2_XXS ? 256 : t == MT_TYPE_IQ2_XS ? 512 : 1024;
        const int nsign = t == MT_TYPE_IQ2_S ? 256 : 128;
        const int bs = block_size(t);
        /* every index, with every sign pattern and scale cycling through */
        const int nblocks = (entries > nsign ? entries : nsign) / 32 * 4;
        uint8_t *q = calloc((size_t)nblocks, (size_t)bs);
        float *ours = malloc(sizeof(float) * 256 * (size_t)nblocks);
        float *theirs = malloc(sizeof(float) * 256 * (size_t)nblocks);
        for (int i = 0; i < nblocks * 32; i++) {
            uint8_t *b = q + (size_t)(i / 32) * (size_t)bs;
            put16(b, (uint16_t)(0x3C00 + (i / 32) * 0x0111)); /* various d */
            set_group(t, b, i % 32, i % entries, (i / 3) % nsign, (i / 7) % 16);
        }
        quant_dequantize_row(t, q, ours, 256 * nblocks);
        ref(q, theirs, 256 * nblocks);
        int bad = 0;
        for (int e = 0; e < 256 * nblocks; e++)
            bad += quant_f32_bits(ours[e]) != quant_f32_bits(theirs[e]);
        CHECK(bad == 0, "%s: %d elements of the every-index blocks differ from llama.cpp", name,
              bad);
        printf("%-8s every grid index (%d), sign pattern (%d) and scale (16): equal to "
               "llama.cpp\n",
               name, entries, nsign);
        free(q);
        free(ours);
        free(theirs);
    }
}

/* ------------------------------------------------- the reduction order */

/* The dot of quant_kernels.h, from llama.cpp's decoding: block b decoded
 * with its d replaced by 1 gives (2 sc + 1) * w / 8 per element, exactly. */
static float order_dot(ggml_ref_dequantize_fn ref, mt_type t, int64_t n, const uint8_t *w,
                       const uint8_t *x) {
    const int bs = block_size(t);
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t b[82];
        float y[256];
        memcpy(b, w + i * bs, (size_t)bs);
        put16(b, 0x3C00);
        ref(b, y, 256);
        const uint8_t *xb = x + i * 292;
        int32_t acc[8] = {0};
        for (int e = 0; e < 256; e++) {
            const int32_t lw = (int32_t)(y[e] * 8.0f); /* ls * w, an exact integer */
            acc[(e % 32) / 4] += lw * (int8_t)xb[4 + e];
        }
        uint16_t h;
        memcpy(&h, w + i * bs, 2);
        float dx;
        memcpy(&dx, xb, 4);
        const float d = (0.125f * mt_f16_to_f32(h)) * dx;
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
    }
    return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
           ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

static void random_q8k(uint8_t *x, int64_t n, int mode) {
    for (int64_t i = 0; i < n / 256 * 292; i++) x[i] = (uint8_t)quant_random_u64(&rng);
    for (int64_t b = 0; b < n / 256; b++) {
        float d = (float)((double)(int32_t)quant_random_u64(&rng) * 0x1p-31);
        if (mode == 1 && b % 3 == 0) d = 0.0f;
        if (mode == 2 && b % 2 == 0) d = 1e-38f;
        memcpy(x + b * 292, &d, 4);
        if (mode == 3)
            for (int e = 0; e < 256; e++) x[b * 292 + 4 + e] = 0x80; /* every x = -128 */
    }
}

static void test_order(void *lib) {
    enum { N = 2048, ROWS = 37, TOK = 5 };
    for (int ti = 0; ti < 3; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get((uint32_t)t)->name;
        ggml_ref_dequantize_fn ref = ggml_ref_dequantize(lib, name);
        if (!ref) continue;
        const size_t wrow = mt_type_row_size(t, N), xrow = mt_type_row_size(MT_TYPE_Q8_K, N);
        uint8_t *w = malloc(wrow * ROWS), *x = malloc(xrow * TOK);
        float want[ROWS * TOK], y[ROWS * TOK];
        int bad_dot = 0, bad_tile = 0, cases = 0, sets_run = 0;
        for (int trial = 0; trial < 12; trial++) {
            quant_random_blocks(t, w, N * ROWS, &rng);
            for (int r = 0; r < ROWS; r++) { /* extreme and negative block scales */
                uint8_t *row = w + wrow * (size_t)r;
                for (int b = 0; b < N / 256; b++) {
                    const uint16_t ext[6] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000, 0xC000};
                    if ((trial + r + b) % 5 == 0)
                        put16(row + (size_t)b * (size_t)block_size(t), ext[(r + b) % 6]);
                }
            }
            for (int k = 0; k < TOK; k++) random_q8k(x + xrow * (size_t)k, N, (trial + k) % 4);
            for (int r = 0; r < ROWS; r++)
                for (int k = 0; k < TOK; k++)
                    want[k * ROWS + r] =
                        order_dot(ref, t, N, w + wrow * (size_t)r, x + xrow * (size_t)k);
            sets_run = 0;
            for (int s = 0; s < 3; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                sets_run++;
                for (int r = 0; r < ROWS; r++)
                    for (int k = 0; k < TOK; k++) {
                        const float d =
                            quant_vec_dot(t, N, w + wrow * (size_t)r, x + xrow * (size_t)k);
                        cases++;
                        if (quant_f32_bits(d) != quant_f32_bits(want[k * ROWS + r]) &&
                            !(isnan(d) && isnan(want[k * ROWS + r])) && bad_dot++ < 3)
                            fprintf(stderr, "%s %s row %d tok %d: %a, order %a\n", name, sets[s], r,
                                    k, (double)d, (double)want[k * ROWS + r]);
                    }
                /* tiles of 1, 2, 3 (decoding: the spread rows) and 5 tokens */
                for (int nt = 1; nt <= TOK; nt++) {
                    if (nt == 4) continue;
                    quant_tile(t, N, w, wrow, ROWS, x, xrow, nt, y, ROWS);
                    for (int i = 0; i < ROWS * nt; i++)
                        bad_tile += quant_f32_bits(y[i]) != quant_f32_bits(want[i]) &&
                                    !(isnan(y[i]) && isnan(want[i]));
                }
            }
            quant_kernels_select("reference");
        }
        CHECK(bad_dot == 0, "%s: %d dots differ from the reduction order", name, bad_dot);
        CHECK(bad_tile == 0, "%s: %d tile results differ from the reduction order", name, bad_tile);
        printf("%-8s %d dots and tiles (37 rows x 1-5 tokens) on %d kernel sets: the "
               "reduction order bit for bit\n",
               name, cases, sets_run);
        free(w);
        free(x);
    }
}

/* ------------------------------------------------------------ quantizer */

static void test_quantizer(void) {
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N), *q2 = malloc(N);
    for (int ti = 0; ti < 3; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get((uint32_t)t)->name;
        const size_t row = mt_type_row_size(t, N);
        /* zeros: every byte zero, every value zero */
        memset(x, 0, N * sizeof *x);
        memset(q, 0xAB, row);
        quant_quantize_row(t, x, q, N);
        int nz = 0;
        for (size_t i = 0; i < row; i++) nz += q[i] != 0;
        CHECK(nz == 0, "%s: a zero row quantizes to %d nonzero bytes", name, nz);
        /* gaussian: relative RMS error, and the same bytes twice */
        double se = 0, ss = 0;
        for (int i = 0; i < N; i++) {
            x[i] = quant_random_gauss(&rng);
        }
        quant_quantize_row(t, x, q, N);
        quant_quantize_row(t, x, q2, N);
        CHECK(memcmp(q, q2, row) == 0, "%s: quantizing twice gives different bytes", name);
        quant_dequantize_row(t, q, y, N);
        for (int i = 0; i < N; i++) se += (y[i] - x[i]) * (double)(y[i] - x[i]), ss += x[i] * x[i];
        const double rms = sqrt(se / ss);
        /* 2-bit levels: a rounding of about a third of the range per element
         * would give ~0.5; anything near 1 means the search is broken */
        CHECK(rms < 0.5, "%s: relative RMS error %.3f on gaussian data", name, rms);
        /* extreme values: huge (d saturates at the f16 maximum), tiny (d
         * rounds to zero: a zero block), one outlier per block */
        int nonfinite = 0;
        const float scales[3] = {1e9f, 1e-30f, 1.0f};
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < N; i++) x[i] = scales[k] * (float)((i * 7919) % 13 - 6);
            if (k == 2)
                for (int i = 0; i < N; i += 256) x[i] = 3e4f;
            quant_quantize_row(t, x, q, N);
            quant_dequantize_row(t, q, y, N);
            for (int i = 0; i < N; i++) nonfinite += !isfinite(y[i]);
        }
        CHECK(nonfinite == 0, "%s: %d nonfinite values from extreme inputs", name, nonfinite);
        printf("%-8s quantizer: zero rows stay zero, deterministic, relative RMS error %.3f "
               "(gaussian), extreme inputs finite\n",
               name, rms);
    }
    free(x);
    free(y);
    free(q);
    free(q2);
}

int main(void) {
    void *lib = ggml_ref_open(getenv("MT_SRC"));
    CHECK(lib != NULL, "llama.cpp's ggml library is needed as the oracle (see the message above)");
    test_hand_built();
    if (lib) {
        test_every_index(lib);
        test_order(lib);
    }
    test_quantizer();
    if (lib) dlclose(lib);
    return check_report("test_quant_iq2");
}

/* test_quant_legacy.c - the 32-element formats Q4_1, Q5_0, Q5_1 and the
 * Q8_1 activations, checked against expectations derived independently of
 * the kernels:
 *   - hand-built blocks (every quant value, positive, negative, zero,
 *     subnormal and the largest f16 scales and mins) decode as the format
 *     defines (docs/engine-reference.md);
 *   - our quantizers give back grid values exactly, and sane, finite values
 *     for zero, constant, tiny and extreme blocks;
 *   - the reduction order of quant_kernels.h, re-derived here from the
 *     element decoding, equals quant_vec_dot bit for bit on every kernel set
 *     (quantized and random-byte blocks, random-byte activations);
 *   - llama.cpp's own x86 code as an oracle (libggml-cpu-haswell.so of the
 *     pinned release, tests/lib/ggml_ref.h): our Q8_1 conversion equals its
 *     AVX2 quantize_row_q8_1 byte for byte, and our dots are within 1e-5 of
 *     sum |w*x| of its ggml_vec_dot_q4_1_q8_1 / _q5_0_q8_0 / _q5_1_q8_1.
 * Prints the measured figures; returns nonzero on any failure. */
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

static uint64_t rng = 0x1E6AC7ull;

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return mt_f16_to_f32(h);
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = mt_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static const char *const sets[] = {"reference", "avx2", "avx512"};
enum { N_SETS = 3 };

/* ------------------------------------------------------------ layouts */

/* Byte offsets from the format (docs/engine-reference.md): m (-1: none),
 * qh (-1: none), qs, block size. */
typedef struct {
    mt_type t;
    const char *name;
    int m, qh, qs, bytes, bits;
} layout;

static const layout L[3] = {
    {MT_TYPE_Q4_1, "Q4_1", 2, -1, 4, 20, 4},
    {MT_TYPE_Q5_0, "Q5_0", -1, 2, 6, 22, 5},
    {MT_TYPE_Q5_1, "Q5_1", 2, 4, 8, 24, 5},
};

/* Writes quants q[32] into block b as the format places them: element j < 16
 * in the low nibble of qs[j], j + 16 in its high nibble, bit 4 of element j
 * in bit j of the little-endian 32-bit qh. */
static void place(const layout *l, uint8_t *b, const int q[32]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        b[l->qs + j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        qh |= (uint32_t)((q[j] >> 4) & 1) << j | (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    if (l->qh >= 0) memcpy(b + l->qh, &qh, 4);
}

/* Quant of element j of block b, read back by the same rule. */
static int quant_of(const layout *l, const uint8_t *b, int j) {
    int q = j < 16 ? b[l->qs + j] & 15 : b[l->qs + j - 16] >> 4;
    if (l->qh >= 0) {
        uint32_t qh;
        memcpy(&qh, b + l->qh, 4);
        q |= (int)((qh >> j) & 1) << 4;
    }
    return q;
}

/* ------------------------------------------------------------ decoding */

static void test_decode(void) {
    /* (d, m): exact powers of two, negative, zero, subnormal, the largest */
    static const float dm[][2] = {{0.25f, -1.5f},          {-2.0f, 0.5f},         {0.0f, 3.0f},
                                  {0x1p-24f, -0x1p-24f},   {65504.0f, -65504.0f}, {-0.0f, -0.0f},
                                  {0.0009765625f, 1000.0f}};
    int n = 0;
    for (int li = 0; li < 3; li++) {
        const layout *l = &L[li];
        const int top = (1 << l->bits) - 1;
        for (size_t k = 0; k < sizeof dm / sizeof dm[0]; k++)
            for (int pattern = 0; pattern < 2; pattern++) {
                uint8_t b[24] = {0};
                int q[32];
                for (int j = 0; j < 32; j++) /* every value of the range, twice for Q4_1 */
                    q[j] = pattern ? top - (j & top) : (j * 7 + 3) & top;
                if (l->bits == 5)
                    for (int j = 0; j < 32; j++) q[j] = pattern ? 31 - j : j;
                place(l, b, q);
                put_f16(b, dm[k][0]);
                if (l->m >= 0) put_f16(b + l->m, dm[k][1]);
                float y[32];
                quant_dequantize_row(l->t, b, y, 32);
                for (int j = 0; j < 32; j++) {
                    const float d = f16_at(b);
                    float want;
                    if (l->m < 0) {
                        want = (float)(q[j] - 16) * d;
                    } else {
                        const float p = (float)q[j] * d;
                        want = p + f16_at(b + l->m);
                    }
                    n++;
                    CHECK(quant_f32_bits(y[j]) == quant_f32_bits(want),
                          "%s d=%g m=%g: y[%d] = %a, want %a (q %d)", l->name, (double)dm[k][0],
                          (double)dm[k][1], j, (double)y[j], (double)want, q[j]);
                }
            }
    }
    /* Q8_1: y = d * qs; s does not enter the values */
    uint8_t b[36];
    put_f16(b, -0.375f);
    put_f16(b + 2, 12345.0f);
    for (int j = 0; j < 32; j++) b[4 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    float y[32];
    quant_dequantize_row(MT_TYPE_Q8_1, b, y, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == -0.375f * (j * 8 - 128), "Q8_1 y[%d] = %g", j, y[j]);
    printf("decode: %d values of hand-built Q4_1 / Q5_0 / Q5_1 blocks (every quant, 7 scale "
           "pairs) and a Q8_1 block as specified\n",
           n);
}

/* ------------------------------------------------------------ quantizers */

static void test_quantize(void) {
    float x[32], y[32];
    uint8_t b[24];
    /* grid values come back exactly: every quant value once (Q5) or twice */
    for (int li = 0; li < 3; li++) {
        const layout *l = &L[li];
        for (int j = 0; j < 32; j++) {
            const int q = l->bits == 5 ? (j * 13) & 31 : (j * 7) & 15;
            x[j] = l->t == MT_TYPE_Q4_1   ? -1.0f + 0.25f * (float)q
                   : l->t == MT_TYPE_Q5_0 ? 0.5f * (float)(q - 16)
                                          : 2.0f + 0.125f * (float)q;
        }
        quant_quantize_row(l->t, x, b, 32);
        quant_dequantize_row(l->t, b, y, 32);
        int bad = 0;
        for (int j = 0; j < 32; j++) bad += y[j] != x[j];
        CHECK(bad == 0, "%s: %d grid values do not come back exactly", l->name, bad);
    }
    /* zero, constant, tiny (below the f16 range), extreme and one-outlier
     * blocks: finite values within the stated error (half a step of the
     * block's range, plus the f16 roundings) */
    for (int li = 0; li < 3; li++) {
        const layout *l = &L[li];
        for (int kind = 0; kind < 6; kind++) {
            for (int j = 0; j < 32; j++) {
                switch (kind) {
                case 0:
                    x[j] = 0.0f;
                    break;
                case 1:
                    x[j] = -3.0f;
                    break;
                case 2:
                    x[j] = quant_random_gauss(&rng) * 1e-9f;
                    break;
                case 3:
                    x[j] = (j & 1) ? 65000.0f : -65000.0f * (float)j / 31.0f;
                    break;
                case 4:
                    x[j] = j == 9 ? 4000.0f : quant_random_gauss(&rng) * 0.01f;
                    break;
                default:
                    x[j] = (j & 1) ? 60000.0f : -60000.0f;
                    break;
                }
            }
            quant_quantize_row(l->t, x, b, 32);
            quant_dequantize_row(l->t, b, y, 32);
            double lo = x[0], hi = x[0], amax = 0;
            for (int j = 0; j < 32; j++) {
                lo = fmin(lo, x[j]), hi = fmax(hi, x[j]);
                amax = fmax(amax, fabs(x[j]));
            }
            /* Q4_1/Q5_1: half a step (range / top), m and d rounded to f16;
             * Q5_0: one step amax/16 (the far end is one code short) */
            const double top = (1 << l->bits) - 1;
            const double bound = l->m >= 0 ? (hi - lo) / top * (0.5 + (top + 1) * 0x1p-11) +
                                                 fabs(lo) * 0x1p-10 + 0x1p-24
                                           : amax / 16 * (1 + 32 * 0x1p-11) + 0x1p-24;
            for (int j = 0; j < 32; j++)
                CHECK(isfinite(y[j]) && fabs((double)y[j] - x[j]) <= bound,
                      "%s block kind %d: x[%d] = %g decodes to %g (bound %g)", l->name, kind, j,
                      (double)x[j], (double)y[j], bound);
            if (kind == 0)
                for (int j = 0; j < 32; j++) CHECK(y[j] == 0.0f, "%s: zero block", l->name);
        }
    }
    printf("quantize: grid values exact; zero, constant, tiny, extreme and outlier blocks finite "
           "and within bounds\n");
}

/* ------------------------------------------------------------ reduction order */

static float tree16(const float a[16]) {
    float b[8];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

/* quant_kernels.h's order, from the element decoding above. */
static float order_dot(const layout *l, int64_t n, const uint8_t *w, const uint8_t *x) {
    const int xbytes = l->m >= 0 ? 36 : 34, xqs = l->m >= 0 ? 4 : 2;
    float acc[16] = {0}, mins[2] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *wb = w + b * l->bytes, *xb = x + b * xbytes;
        int lane[8] = {0};
        for (int j = 0; j < 32; j++) {
            const int q = quant_of(l, wb, j);
            lane[j / 4] += (l->m >= 0 ? q : q - 16) * (int8_t)xb[xqs + j];
        }
        const float d = f16_at(wb) * f16_at(xb);
        for (int k = 0; k < 8; k++)
            acc[8 * (b % 2) + k] = mt_fmaf((float)lane[k], d, acc[8 * (b % 2) + k]);
        if (l->m >= 0) mins[b % 2] = mt_fmaf(f16_at(wb + l->m), f16_at(xb + 2), mins[b % 2]);
    }
    const float s = tree16(acc);
    return l->m >= 0 ? s + (mins[0] + mins[1]) : s;
}

static void test_order(void) {
    enum { N = 1056 }; /* 33 blocks: an odd last block */
    uint8_t *w = malloc(N), *x = malloc(N * 2);
    float *wf = malloc(N * sizeof *wf), *xf = malloc(N * sizeof *xf);
    int n = 0, bad = 0;
    for (int li = 0; li < 3; li++) {
        const layout *l = &L[li];
        const mt_type vt = quant_vec_dot_type(l->t);
        CHECK(vt == (l->m >= 0 ? MT_TYPE_Q8_1 : MT_TYPE_Q8_0), "%s pairs with %d", l->name,
              (int)vt);
        for (int trial = 0; trial < 60; trial++) {
            quant_kernels_select("reference");
            for (int i = 0; i < N; i++)
                wf[i] = quant_random_gauss(&rng) * (trial % 5 == 0 ? 1e-3f : 1.0f);
            for (int i = 0; i < N; i++)
                xf[i] = quant_random_gauss(&rng) * (i % 61 == 3 ? 30.0f : 1.0f);
            quant_quantize_row(l->t, wf, w, N);
            if (trial % 2) quant_random_blocks(l->t, w, N, &rng);
            quant_convert_activations(vt, xf, x, N);
            if (trial % 3 == 2) { /* random-byte activations with finite scales */
                quant_random_blocks(vt, x, N, &rng);
            }
            const float want = order_dot(l, N, w, x);
            for (int s = 0; s < N_SETS; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                const float got = quant_vec_dot(l->t, N, w, x);
                n++;
                if (quant_f32_bits(got) != quant_f32_bits(want) && !(isnan(got) && isnan(want)) &&
                    bad++ < 5)
                    fprintf(stderr, "  %s trial %d (%s): %a, order %a\n", l->name, trial, sets[s],
                            (double)got, (double)want);
            }
        }
    }
    quant_kernels_select("reference");
    CHECK(bad == 0, "%d of %d dots differ from the stated reduction order", bad, n);
    printf("reduction order: %d dots (3 types, quantized and random-byte rows and activations, "
           "every kernel set) equal to the re-derived order bit for bit\n",
           n);
    free(w);
    free(x);
    free(wf);
    free(xf);
}

/* ------------------------------------------------------------ llama.cpp */

typedef void (*ggml_quantize_row_fn)(const float *x, void *y, int64_t k);
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nrc);

static void *sym(void *h, const char *name) {
    return h ? dlsym(h, name) : NULL;
}

static void test_ggml(void) {
    const char *root = getenv("MT_SRC");
    void *base = ggml_ref_open(root);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/libggml-cpu-haswell.so", root && *root ? root : ".",
             GGML_REF_DIR);
    void *cpu = base ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    CHECK(cpu != NULL, "llama.cpp's AVX2 CPU library %s is needed as the oracle (%s)", path,
          base ? dlerror() : "no libggml-base.so");
    if (!cpu) {
        if (base) dlclose(base);
        return;
    }
    ggml_quantize_row_fn q8_1;
    ggml_vec_dot_fn dots[3];
    void (*cpu_init)(void);
    void *p = sym(cpu, "ggml_cpu_init"); /* fills its f16 tables */
    memcpy(&cpu_init, &p, sizeof p);
    CHECK(cpu_init != NULL, "ggml_cpu_init missing");
    if (cpu_init) cpu_init();
    p = sym(cpu, "quantize_row_q8_1");
    memcpy(&q8_1, &p, sizeof p);
    static const char *const dot_names[3] = {"ggml_vec_dot_q4_1_q8_1", "ggml_vec_dot_q5_0_q8_0",
                                             "ggml_vec_dot_q5_1_q8_1"};
    for (int i = 0; i < 3; i++) {
        p = sym(cpu, dot_names[i]);
        memcpy(&dots[i], &p, sizeof p);
        CHECK(dots[i] != NULL, "%s missing", dot_names[i]);
    }
    CHECK(q8_1 != NULL, "quantize_row_q8_1 missing");
    if (!q8_1 || !dots[0] || !dots[1] || !dots[2]) {
        dlclose(cpu);
        dlclose(base);
        return;
    }
    enum { N = 4096 };
    float *xf = malloc(N * sizeof *xf), *wf = malloc(N * sizeof *wf), *wd = malloc(N * 4);
    uint8_t *ours = malloc(N * 2), *theirs = malloc(N * 2), *w = malloc(N);
    /* conversion: Gaussian rows, tiny and large scales, exact ties (values
     * k/2 with amax 127), zero blocks */
    int conv = 0, conv_bad = 0;
    for (int trial = 0; trial < 40; trial++) {
        const float scale = trial % 4 == 1 ? 1e-30f : trial % 4 == 2 ? 1e30f : 1.0f;
        for (int i = 0; i < N; i++) {
            xf[i] = quant_random_gauss(&rng) * scale;
            if (trial % 4 == 3)
                xf[i] = i % 32 == 0 ? 127.0f : (float)((int)(quant_random_gauss(&rng) * 60)) * 0.5f;
            if (trial % 5 == 4 && (i / 32) % 3 == 0) xf[i] = 0.0f;
        }
        q8_1(xf, theirs, N);
        for (int s = 0; s < N_SETS; s++) {
            if (quant_kernels_select(sets[s]) != 0) continue;
            memset(ours, 0xA5, N * 2);
            quant_convert_activations(MT_TYPE_Q8_1, xf, ours, N);
            conv++;
            if (memcmp(ours, theirs, N / 32 * 36) != 0 && conv_bad++ < 3) {
                int k = 0;
                while (ours[k] == theirs[k]) k++;
                fprintf(stderr, "  Q8_1 conversion (%s, trial %d) differs at block %d byte %d\n",
                        sets[s], trial, k / 36, k % 36);
            }
        }
    }
    quant_kernels_select("reference");
    CHECK(conv_bad == 0, "Q8_1 conversion: %d of %d rows differ from llama.cpp's", conv_bad, conv);
    /* dots against ggml's own, same blocks, same activations */
    double worst[3] = {0};
    for (int li = 0; li < 3; li++) {
        const layout *l = &L[li];
        const mt_type vt = quant_vec_dot_type(l->t);
        for (int trial = 0; trial < 20; trial++) {
            for (int i = 0; i < N; i++)
                wf[i] = quant_random_gauss(&rng) * (trial % 3 == 0 ? 1e-3f : 1.0f);
            for (int i = 0; i < N; i++)
                xf[i] = quant_random_gauss(&rng) * (i % 97 == 3 ? 20.0f : 1.0f);
            quant_kernels_select("reference");
            quant_quantize_row(l->t, wf, w, N);
            quant_convert_activations(vt, xf, ours, N);
            quant_dequantize_row(l->t, w, wd, N);
            float ref = 0;
            dots[li](N, &ref, 0, w, 0, ours, 0, 1);
            double mag = 0;
            for (int i = 0; i < N; i++) mag += fabs((double)wd[i] * xf[i]);
            for (int s = 0; s < N_SETS; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                const double err = fabs((double)quant_vec_dot(l->t, N, w, ours) - ref) / mag;
                worst[li] = fmax(worst[li], err);
            }
        }
        quant_kernels_select("reference");
        CHECK(worst[li] <= 1e-5, "%s: a dot is %.2e of sum|w*x| from llama.cpp's %s", l->name,
              worst[li], dot_names[li]);
    }
    printf("llama.cpp (AVX2 build): %d Q8_1 conversions equal byte for byte; dots within "
           "%.1e / %.1e / %.1e of sum|w*x| (Q4_1 / Q5_0 / Q5_1)\n",
           conv, worst[0], worst[1], worst[2]);
    free(xf);
    free(wf);
    free(wd);
    free(ours);
    free(theirs);
    free(w);
    dlclose(cpu);
    dlclose(base);
}

int main(void) {
    printf("quant kernels: %s\n", quant_kernel_name());
    test_decode();
    test_quantize();
    test_order();
    test_ggml();
    return check_report("test_quant_legacy");
}

/* test_quant_kq.c - Q2_K, Q3_K and Q5_K (group kq) beyond test_quant's loops:
 *   - blocks built field by field from the layout (docs/engine-reference.md:
 *     where each scale, min, quant and high bit goes), with every scale
 *     code, every quant value, and zero, negative, subnormal and largest
 *     f16 scales; they decode to d * S * q - dmin * m computed here;
 *   - the reduction order of quant_kernels.h re-derived from those fields
 *     (lane (i % 32) / 4 of S * u * x in integers, fmaf per lane, the bsums
 *     correction, the hsum8 tree) equals quant_vec_dot bit for bit on every
 *     kernel set, and so do the decoding tiles (four-stream runs of rows x
 *     1-3 tokens) and prompt tiles;
 *   - the quantizers on zero, constant, tiny and extreme blocks give finite
 *     values, zeros for zeros, and keep the largest element's sign. */
#include "check.h"
#include "lib/quant_random.h"
#include "moontail/quant.h"
#include "moontail/tensor_type.h"
#include "moontail/vecops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng = 0x6b71ull;

static void put_h(uint8_t *p, uint16_t h) {
    memcpy(p, &h, 2);
}

/* The fields of one block: Q2_K 16 groups (sc 0..15, m 0..15, q 0..3);
 * Q3_K 16 groups (code 0..63, the scale is code - 32; q3 -4..3); Q5_K 8
 * sub-blocks (sc, m 0..63; q 0..31). */
typedef struct {
    uint16_t d, dmin; /* f16 bits; Q3_K has no dmin */
    int sc[16], m[16], q[256];
} fields;

static int n_groups(mt_type t) {
    return t == MT_TYPE_Q5_K ? 8 : 16;
}

/* Writes the fields where the layout puts them. */
static void build(mt_type t, const fields *f, uint8_t *b) {
    memset(b, 0, (size_t)mt_type_traits_get(t)->type_size);
    if (t == MT_TYPE_Q2_K) {
        for (int g = 0; g < 16; g++) b[g] = (uint8_t)(f->sc[g] | f->m[g] << 4);
        for (int i = 0; i < 256; i++) { /* element 128n + 32j + l: byte 32n + l, bits 2j */
            int n = i / 128, j = (i % 128) / 32, l = i % 32;
            b[16 + 32 * n + l] |= (uint8_t)(f->q[i] << (2 * j));
        }
        put_h(b + 80, f->d);
        put_h(b + 82, f->dmin);
    } else if (t == MT_TYPE_Q3_K) {
        for (int i = 0; i < 256; i++) {
            int n = i / 128, j = (i % 128) / 32, l = i % 32, u = f->q[i] + 4;
            b[32 + 32 * n + l] |= (uint8_t)((u & 3) << (2 * j));
            if (f->q[i] >= 0) b[l] |= (uint8_t)(1 << (i / 32)); /* hmask: set = no -4 */
        }
        for (int g = 0; g < 16; g++) {
            b[96 + g % 8] |= (uint8_t)((f->sc[g] & 15) << (g < 8 ? 0 : 4));
            b[104 + g % 4] |= (uint8_t)((f->sc[g] >> 4) << (2 * (g / 4)));
        }
        put_h(b + 108, f->d);
    } else {
        put_h(b, f->d);
        put_h(b + 2, f->dmin);
        for (int s = 0; s < 8; s++) {
            if (s < 4) {
                b[4 + s] |= (uint8_t)f->sc[s];
                b[8 + s] |= (uint8_t)f->m[s];
            } else { /* low 4 bits in byte s + 8, top 2 bits in bytes s - 4, s */
                b[4 + s + 4] |= (uint8_t)((f->sc[s] & 15) | (f->m[s] & 15) << 4);
                b[4 + s - 4] |= (uint8_t)((f->sc[s] >> 4) << 6);
                b[4 + s] |= (uint8_t)((f->m[s] >> 4) << 6);
            }
        }
        for (int i = 0; i < 256; i++) {
            int s = i / 32, l = i % 32;
            b[48 + 32 * (s / 2) + l] |= (uint8_t)((f->q[i] & 15) << (4 * (s % 2)));
            b[16 + l] |= (uint8_t)((f->q[i] >> 4) << s);
        }
    }
}

/* S, u and M of element i (quant_kernels.h): the integer scale, the
 * unsigned quant and (per group) the correction weight. */
static int el_scale(mt_type t, const fields *f, int i) {
    int g = t == MT_TYPE_Q5_K ? i / 32 : i / 16;
    return t == MT_TYPE_Q3_K ? f->sc[g] - 32 : f->sc[g];
}
static int el_u(mt_type t, const fields *f, int i) {
    return t == MT_TYPE_Q3_K ? f->q[i] + 4 : f->q[i];
}

/* The value of element i in double (exact for the scales used below). */
static double el_value(mt_type t, const fields *f, int i) {
    double d = mt_f16_to_f32(f->d), dm = t == MT_TYPE_Q3_K ? 0 : mt_f16_to_f32(f->dmin);
    int g = t == MT_TYPE_Q5_K ? i / 32 : i / 16;
    if (t == MT_TYPE_Q3_K) return d * (f->sc[g] - 32) * f->q[i];
    return d * f->sc[g] * f->q[i] - dm * f->m[g];
}

static void random_fields(mt_type t, fields *f) {
    const int cmax = t == MT_TYPE_Q2_K ? 15 : 63, qmax = t == MT_TYPE_Q5_K ? 31 : 3;
    for (int g = 0; g < 16; g++) {
        f->sc[g] = (int)(quant_random_u64(&rng) % (uint64_t)(cmax + 1));
        f->m[g] = t == MT_TYPE_Q3_K ? 0 : (int)(quant_random_u64(&rng) % (uint64_t)(cmax + 1));
    }
    for (int i = 0; i < 256; i++) {
        int v = (int)(quant_random_u64(&rng) % (uint64_t)(qmax + 1 + (t == MT_TYPE_Q3_K ? 4 : 0)));
        f->q[i] = t == MT_TYPE_Q3_K ? v - 4 : v;
    }
    f->d = (uint16_t)(quant_random_u64(&rng) & 0xbbff);
    f->dmin = (uint16_t)(quant_random_u64(&rng) & 0xbbff);
}

/* ------------------------------------------------------------ decoding */

static const mt_type types[] = {MT_TYPE_Q2_K, MT_TYPE_Q3_K, MT_TYPE_Q5_K};
static const char *const sets[] = {"reference", "avx2", "avx512"};

static void test_decode(void) {
    uint8_t b[256];
    float y[256];
    /* scale f16 values: 1, 0.25 / 0.5, negative, zero, subnormal, largest */
    static const uint16_t ds[][2] = {{0x3c00, 0x3c00}, {0x3400, 0x3800}, {0xc000, 0xb400},
                                     {0x0000, 0x3c00}, {0x0001, 0x0003}, {0x7bff, 0x7bff}};
    for (size_t ti = 0; ti < 3; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get(t)->name;
        const int ng = n_groups(t), cmax = t == MT_TYPE_Q2_K ? 15 : 63;
        const int qlo = t == MT_TYPE_Q3_K ? -4 : 0, qn = t == MT_TYPE_Q5_K   ? 32
                                                         : t == MT_TYPE_Q3_K ? 8
                                                                             : 4;
        int bad = 0, cases = 0;
        for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++)
            for (int rot = 0; rot <= cmax; rot += ng) { /* every scale and min code */
                fields f;
                f.d = ds[k][0];
                f.dmin = ds[k][1];
                for (int g = 0; g < 16; g++) {
                    f.sc[g] = (rot + g) % (cmax + 1);
                    f.m[g] = t == MT_TYPE_Q3_K ? 0 : (cmax - rot - g + 2 * (cmax + 1)) % (cmax + 1);
                }
                for (int i = 0; i < 256; i++) f.q[i] = qlo + (i * 7 + rot) % qn; /* every quant */
                build(t, &f, b);
                quant_dequantize_row(t, b, y, 256);
                for (int i = 0; i < 256; i++) {
                    cases++;
                    double want = el_value(t, &f, i);
                    /* exact, except that the largest f16 overflows no float
                     * and a subnormal one rounds: both stay within 1 ulp */
                    if (!((double)y[i] == want ||
                          fabs((double)y[i] - want) <= fabs(want) * 0x1p-23)) {
                        if (bad++ < 5)
                            fprintf(stderr, "%s d=%04x y[%d] = %a, want %a\n", name, ds[k][0], i,
                                    (double)y[i], want);
                    }
                }
            }
        CHECK(bad == 0, "%s: %d of %d hand-built values decode wrongly", name, bad, cases);
        printf("%s: %d hand-built values (every scale/min code and quant; zero, negative, "
               "subnormal, largest f16 scales) decode as specified\n",
               name, cases);
    }
    /* one element by hand per type, straight from the format's words */
    {
        fields f = {0};
        f.d = 0x3c00, f.dmin = 0x3800; /* 1, 0.5 */
        f.sc[5] = 9, f.m[5] = 7, f.q[5 * 16 + 3] = 3;
        build(MT_TYPE_Q2_K, &f, b);
        quant_dequantize_row(MT_TYPE_Q2_K, b, y, 256);
        CHECK(y[83] == 9 * 3 - 3.5f && y[84] == -3.5f, "Q2_K by hand: %g %g", y[83], y[84]);
        CHECK(b[5] == 0x79 && b[16 + 19] == 3 << 4, "Q2_K by hand: bytes %02x %02x", b[5],
              b[16 + 19]);
        memset(&f, 0, sizeof f);
        for (int g = 0; g < 16; g++) f.sc[g] = 32;
        f.d = 0x3c00, f.sc[13] = 60 /* scale 28 */, f.q[13 * 16 + 1] = -3;
        build(MT_TYPE_Q3_K, &f, b);
        quant_dequantize_row(MT_TYPE_Q3_K, b, y, 256);
        CHECK(y[209] == -84.0f && y[0] == 0.0f, "Q3_K by hand: %g %g", y[209], y[0]);
        memset(&f, 0, sizeof f);
        f.d = 0x3c00, f.dmin = 0x3c00, f.sc[6] = 45, f.m[6] = 50, f.q[6 * 32 + 4] = 29;
        build(MT_TYPE_Q5_K, &f, b);
        quant_dequantize_row(MT_TYPE_Q5_K, b, y, 256);
        CHECK(y[196] == 45 * 29 - 50 && y[197] == -50.0f, "Q5_K by hand: %g %g", y[196], y[197]);
    }
}

/* ------------------------------------------------------------ dot order */

/* The dot of quant_kernels.h from the fields and the activation bytes. */
static float order_dot(mt_type t, int nb, const fields *f, const uint8_t *xc) {
    float lanes[8] = {0}, mins = 0;
    for (int b = 0; b < nb; b++) {
        const uint8_t *xb = xc + 292 * b;
        float dx;
        memcpy(&dx, xb, 4);
        int64_t lane[8] = {0}, corr = 0;
        for (int i = 0; i < 256; i++)
            lane[(i % 32) / 4] +=
                (int64_t)el_scale(t, &f[b], i) * el_u(t, &f[b], i) * (int8_t)xb[4 + i];
        for (int j = 0; j < 16; j++) {
            int16_t bs;
            memcpy(&bs, xb + 260 + 2 * j, 2);
            int mj = t == MT_TYPE_Q2_K   ? f[b].m[j]
                     : t == MT_TYPE_Q5_K ? f[b].m[j / 2]
                                         : 4 * (f[b].sc[j] - 32);
            corr += (int64_t)bs * mj;
        }
        const float dw = mt_f16_to_f32(f[b].d) * dx;
        const float dm =
            (t == MT_TYPE_Q3_K ? mt_f16_to_f32(f[b].d) : mt_f16_to_f32(f[b].dmin)) * dx;
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)lane[l], dw, lanes[l]);
        mins = mt_fmaf(dm, (float)corr, mins);
    }
    float s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
              ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    return s - mins;
}

enum { NB = 6, ROWS = 21, TOK = 9 };

/* Q8_K activation blocks: random quants (-128 included when extreme), the
 * bsums of them (as any Q8_K row has), a finite f32 scale. */
static void random_x(uint8_t *xc, int nb, int extreme) {
    for (int b = 0; b < nb; b++) {
        uint8_t *xb = xc + 292 * b;
        float d = (float)((double)(int32_t)quant_random_u64(&rng) * 0x1p-36);
        memcpy(xb, &d, 4);
        for (int i = 0; i < 256; i++)
            xb[4 + i] = extreme ? (uint8_t)(i % 3 ? 0x80 : 0x7f) : (uint8_t)quant_random_u64(&rng);
        for (int j = 0; j < 16; j++) {
            int16_t s = 0;
            for (int i = 0; i < 16; i++) s = (int16_t)(s + (int8_t)xb[4 + 16 * j + i]);
            memcpy(xb + 260 + 2 * j, &s, 2);
        }
    }
}

static void test_order(void) {
    static fields f[ROWS][NB];
    static uint8_t w[ROWS][NB * 176], x[TOK][NB * 292];
    static float want[TOK][ROWS], y[TOK * ROWS];
    for (size_t ti = 0; ti < 3; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get(t)->name;
        const int wb = mt_type_traits_get(t)->type_size;
        int bad = 0, cases = 0;
        for (int trial = 0; trial < 8; trial++) {
            const int extreme = trial == 7; /* largest codes and quants against -128 / 127 */
            for (int r = 0; r < ROWS; r++)
                for (int b = 0; b < NB; b++) {
                    random_fields(t, &f[r][b]);
                    if (extreme) {
                        for (int g = 0; g < 16; g++)
                            f[r][b].sc[g] = r % 2 ? 0 : 63 % (t == MT_TYPE_Q2_K ? 16 : 64);
                        for (int i = 0; i < 256; i++)
                            f[r][b].q[i] = t == MT_TYPE_Q3_K ? -4 : t == MT_TYPE_Q5_K ? 31 : 3;
                    }
                    build(t, &f[r][b], w[r] + b * wb);
                }
            for (int k = 0; k < TOK; k++) random_x(x[k], NB, extreme);
            for (int k = 0; k < TOK; k++)
                for (int r = 0; r < ROWS; r++) want[k][r] = order_dot(t, NB, f[r], x[k]);
            for (size_t s = 0; s < 3; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                for (int r = 0; r < ROWS; r++) {
                    cases++;
                    float got = quant_vec_dot(t, NB * 256, w[r], x[r % TOK]);
                    if (quant_f32_bits(got) != quant_f32_bits(want[r % TOK][r]) && bad++ < 5)
                        fprintf(stderr, "%s %s trial %d row %d: %a, order gives %a\n", name,
                                sets[s], trial, r, (double)got, (double)want[r % TOK][r]);
                }
                /* tiles: decoding (1-3 tokens, rows read as four streams),
                 * then prompt shapes */
                for (int nt = 1; nt <= TOK; nt += (nt < 3 ? 1 : 3)) {
                    quant_tile(t, NB * 256, w[0], sizeof w[0], ROWS, x[0], sizeof x[0], nt, y,
                               ROWS);
                    for (int k = 0; k < nt; k++)
                        for (int r = 0; r < ROWS; r++) {
                            cases++;
                            if (quant_f32_bits(y[k * ROWS + r]) != quant_f32_bits(want[k][r]) &&
                                bad++ < 5)
                                fprintf(stderr, "%s %s tile %d x %d: row %d token %d differs\n",
                                        name, sets[s], ROWS, nt, r, k);
                        }
                }
            }
            quant_kernels_select("reference");
        }
        CHECK(bad == 0, "%s: %d of %d dots differ from the specified order", name, bad, cases);
        printf("%s: %d dots and tile elements (every kernel set here) equal the specified order "
               "bit for bit\n",
               name, cases);
    }
}

/* ------------------------------------------------------------ quantizers */

static void test_quantize(void) {
    float x[256], y[256];
    uint8_t b[256];
    for (size_t ti = 0; ti < 3; ti++) {
        const mt_type t = types[ti];
        const char *name = mt_type_traits_get(t)->name;
        for (int c = 0; c < 6; c++) {
            for (int i = 0; i < 256; i++) {
                float g = (float)((int)(quant_random_u64(&rng) % 2001) - 1000) / 1000.0f;
                x[i] = c == 0   ? 0.0f
                       : c == 1 ? 2.5f       /* constant */
                       : c == 2 ? g * 1e-30f /* f16 underflow */
                       : c == 3 ? (i == 77   ? -3e38f
                                   : i == 78 ? 3e38f
                                             : g)             /* extreme */
                       : c == 4 ? (i == 5 ? 1e6f : g * 1e-3f) /* one outlier */
                                : -1.0f - g * g;              /* all negative */
            }
            quant_quantize_row(t, x, b, 256);
            quant_dequantize_row(t, b, y, 256);
            int finite = 1, zeros = 1;
            float amax = 0;
            int at = 0;
            for (int i = 0; i < 256; i++) {
                finite &= isfinite(y[i]) != 0;
                zeros &= c != 0 || y[i] == 0.0f;
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]), at = i;
            }
            CHECK(finite, "%s case %d: a decoded value is not finite", name, c);
            CHECK(zeros, "%s: zeros do not decode to zeros", name);
            if (c == 1 || c == 4 || c == 5)
                CHECK((y[at] > 0) == (x[at] > 0) && fabsf(y[at] - x[at]) <= 0.5f * amax,
                      "%s case %d: the largest element %g decodes to %g", name, c, x[at], y[at]);
        }
    }
    printf("quantizers: zero, constant, underflowing, +-3e38, outlier and all-negative blocks "
           "decode finite (zeros exactly)\n");
}

int main(void) {
    test_decode();
    test_order();
    test_quantize();
    return check_report("test_quant_kq");
}

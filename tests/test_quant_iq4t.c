/* test_quant_iq4t.c - IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0 against their
 * specification (docs/engine-reference.md, "Tensor types"), on every kernel
 * set this CPU runs:
 *   - the IQ4 table as the decoder gives it (d = 1, codes 0..15: 16 distinct
 *     increasing int8 values; test_quant_ggml checks them against llama.cpp)
 *     and every code at every position, with zero, negative, subnormal and
 *     the largest scales; IQ4_XS with every one of its 64 sub-block scale
 *     codes and the rounding of d * (ls - 32) before the table value;
 *   - TQ2_0 with every 2-bit quant at every position; TQ1_0 with all 243
 *     five-trit numbers (and 81 four-trit ones in qh) written as
 *     ceil(v * 256 / 243) at every byte position, so the base-3 reading and
 *     the value order both come from the definition, not from the decoder;
 *   - the quantizers: ternary patterns round-trip exactly, zero blocks give
 *     zeros, huge, tiny and NaN inputs give finite values;
 *   - the reduction orders re-derived here from the decoded integers (Q8_0
 *     order for IQ4_NL, Q4_K's lanes without mins for the others) and
 *     compared bit for bit with quant_vec_dot and every tile shape of every
 *     kernel set, on random-byte blocks and on the extreme case of weights
 *     -127 with scale -32 against activations of -128 (the largest lanes,
 *     and the one activation whose magnitude does not fit int8). */
#include "check.h"
#include "lib/quant_random.h"
#include "moontail/quant.h"
#include "moontail/tensor_type.h"
#include "moontail/vecops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x1A4715ull;

static void put_f16(uint8_t *p, uint16_t h) {
    memcpy(p, &h, 2);
}

static const char *const sets[] = {"reference", "avx2", "avx512"};
enum { N_SETS = 3 };

/* The IQ4 table as decoded with d = 1. */
static int T[16];

/* ------------------------------------------------------------ decoding */

static void test_iq4_table(void) {
    uint8_t b[18] = {0};
    put_f16(b, 0x3c00); /* 1.0 */
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    quant_dequantize_row(MT_TYPE_IQ4_NL, b, y, 32);
    int ok = 1;
    for (int j = 0; j < 16; j++) {
        T[j] = (int)y[j];
        ok &= y[j] == (float)T[j] && T[j] >= -128 && T[j] <= 127;
        ok &= j == 0 || T[j] > T[j - 1];
        ok &= y[16 + (15 - j)] == y[j]; /* high nibble of byte 15-j: value 31-j */
    }
    CHECK(ok, "IQ4 table: the decoded values at d = 1 are not 16 increasing int8 values");
}

/* IQ4_NL: every code at every position, several scales. */
static void test_iq4_nl_blocks(void) {
    static const uint16_t ds[] = {0x3c00, 0xb800, 0x0001, 0x8123, 0x7bff, 0x0000, 0x4d80};
    int bad = 0;
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++)
        for (int shift = 0; shift < 16; shift++) {
            uint8_t b[18];
            put_f16(b, ds[k]);
            for (int j = 0; j < 16; j++)
                b[2 + j] = (uint8_t)((j + shift) % 16 | ((j + 3 * shift) % 16) << 4);
            const float d = mt_f16_to_f32(ds[k]);
            for (int s = 0; s < N_SETS; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                float y[32];
                quant_dequantize_row(MT_TYPE_IQ4_NL, b, y, 32);
                for (int j = 0; j < 16; j++) {
                    bad += quant_f32_bits(y[j]) != quant_f32_bits(d * (float)T[(j + shift) % 16]);
                    bad += quant_f32_bits(y[j + 16]) !=
                           quant_f32_bits(d * (float)T[(j + 3 * shift) % 16]);
                }
            }
        }
    quant_kernels_select("reference");
    CHECK(bad == 0, "IQ4_NL: %d values differ from d * T[code]", bad);
}

/* IQ4_XS: all 64 scale codes (8 blocks of 8), random codes. */
static void test_iq4_xs_blocks(void) {
    int bad = 0;
    static const uint16_t ds[] = {0x3c00, 0xc000, 0x0003, 0x7bff, 0x2e66};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        uint8_t b[8 * 136];
        int ls[64];
        for (int blk = 0; blk < 8; blk++) {
            uint8_t *wb = b + 136 * blk;
            put_f16(wb, ds[k]);
            uint16_t h = 0;
            memset(wb + 4, 0, 4);
            for (int s = 0; s < 8; s++) {
                const int code = (8 * blk + 5 * s) % 64; /* every code once over the 8 blocks */
                ls[8 * blk + s] = code;
                wb[4 + s / 2] |= (uint8_t)((code & 15) << (4 * (s % 2)));
                h |= (uint16_t)((code >> 4) << (2 * s));
            }
            memcpy(wb + 2, &h, 2);
            for (int j = 0; j < 128; j++) wb[8 + j] = (uint8_t)quant_random_u64(&rng);
        }
        const float d = mt_f16_to_f32(ds[k]);
        for (int s = 0; s < N_SETS; s++) {
            if (quant_kernels_select(sets[s]) != 0) continue;
            float y[2048];
            quant_dequantize_row(MT_TYPE_IQ4_XS, b, y, 2048);
            for (int e = 0; e < 2048; e++) {
                const uint8_t *wb = b + 136 * (e / 256);
                const int sb = (e % 256) / 32, j = e % 32;
                const uint8_t byte = wb[8 + 16 * sb + j % 16];
                const int code = j < 16 ? byte & 15 : byte >> 4;
                const float dl = d * (float)(ls[e / 32] - 32);
                bad += quant_f32_bits(y[e]) != quant_f32_bits(dl * (float)T[code]);
            }
        }
    }
    quant_kernels_select("reference");
    CHECK(bad == 0, "IQ4_XS: %d values differ from (d * (ls - 32)) * T[code]", bad);
}

/* TQ2_0: value 128h + 32k + m in bits 2k of byte 32h + m, (q - 1) * d. */
static void test_tq2_blocks(void) {
    int bad = 0;
    static const uint16_t ds[] = {0x3c00, 0xbc00, 0x0001, 0x7bff, 0x0000};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++)
        for (int rot = 0; rot < 4; rot++) {
            uint8_t b[66] = {0};
            int q[256];
            for (int e = 0; e < 256; e++) {
                q[e] = (e + rot + e / 7) % 4;
                b[32 * (e / 128) + e % 32] |= (uint8_t)(q[e] << (2 * ((e % 128) / 32)));
            }
            put_f16(b + 64, ds[k]);
            const float d = mt_f16_to_f32(ds[k]);
            float y[256];
            quant_dequantize_row(MT_TYPE_TQ2_0, b, y, 256);
            for (int e = 0; e < 256; e++)
                bad += quant_f32_bits(y[e]) != quant_f32_bits((float)(q[e] - 1) * d);
        }
    CHECK(bad == 0, "TQ2_0: %d values differ from (q - 1) * d", bad);
}

/* The byte holding the base-3 digits t[0..5) (t[0] most significant). */
static uint8_t base3_byte(const int t[5]) {
    int v = 0;
    for (int n = 0; n < 5; n++) v = 3 * v + t[n];
    return (uint8_t)((v * 256 + 242) / 243); /* ceil(v * 256 / 243) */
}

/* TQ1_0: every 5-trit number at every qs byte, every 4-trit one in qh. */
static void test_tq1_blocks(void) {
    int bad = 0, blocks = 0;
    for (int v0 = 0; v0 < 243; v0 += 1) {
        uint8_t b[54];
        int trit[256];
        for (int byte = 0; byte < 52; byte++) {
            const int v = (v0 + 37 * byte) % (byte < 48 ? 243 : 81);
            int t[5];
            for (int n = 0, r = v * (byte < 48 ? 1 : 3); n < 5; n++) {
                t[4 - n] = r % 3;
                r /= 3;
            }
            b[byte] = base3_byte(t);
            for (int n = 0; n < (byte < 48 ? 5 : 4); n++) {
                const int e = byte < 32   ? 32 * n + byte
                              : byte < 48 ? 160 + 16 * n + (byte - 32)
                                          : 240 + 4 * n + (byte - 48);
                trit[e] = t[n];
            }
        }
        const uint16_t dh = (uint16_t)(0x3c00 + v0 * 3) ^ (v0 % 2 ? 0x8000 : 0);
        put_f16(b + 52, dh);
        const float d = mt_f16_to_f32(dh);
        float y[256];
        quant_dequantize_row(MT_TYPE_TQ1_0, b, y, 256);
        for (int e = 0; e < 256; e++)
            bad += quant_f32_bits(y[e]) != quant_f32_bits((float)(trit[e] - 1) * d);
        blocks++;
    }
    CHECK(bad == 0, "TQ1_0: %d values of %d blocks differ from the base-3 digits", bad, blocks);
}

/* ------------------------------------------------------------ quantizers */

static void test_quantizers(void) {
    static const mt_type types[] = {MT_TYPE_IQ4_NL, MT_TYPE_IQ4_XS, MT_TYPE_TQ1_0, MT_TYPE_TQ2_0};
    enum { N = 1024 };
    float x[N], y[N];
    uint8_t q[N * 2];
    /* ternary patterns: {-1, 0, 1} with a +1 present round-trip exactly */
    for (int k = 2; k < 4; k++) {
        int bad = 0;
        for (int rep = 0; rep < 4; rep++) {
            for (int i = 0; i < N; i++) x[i] = (float)((int)(quant_random_u64(&rng) % 3) - 1);
            x[0] = 1.0f;
            quant_quantize_row(types[k], x, q, N);
            quant_dequantize_row(types[k], q, y, N);
            for (int i = 0; i < N; i++) bad += y[i] != x[i];
        }
        CHECK(bad == 0, "%s: %d ternary values do not round-trip",
              mt_type_traits_get(types[k])->name, bad);
    }
    for (int k = 0; k < 4; k++) {
        const char *name = mt_type_traits_get(types[k])->name;
        /* zeros; then huge, tiny, NaN and mixed values: finite results */
        for (int i = 0; i < N; i++) x[i] = 0.0f;
        quant_quantize_row(types[k], x, q, N);
        quant_dequantize_row(types[k], q, y, N);
        int nz = 0;
        for (int i = 0; i < N; i++) nz += y[i] != 0.0f;
        CHECK(nz == 0, "%s: zeros decode to %d nonzero values", name, nz);
        for (int i = 0; i < N; i++) {
            const int c = i / 256;
            x[i] = c == 0   ? (i % 2 ? 3e38f : -1e30f)
                   : c == 1 ? (float)(i % 5) * 1e-42f
                   : c == 2 ? (i % 17 == 3 ? NAN : (float)(i % 9) - 4.0f)
                            : (i % 32 == 0 ? 1e6f : 1e-3f);
        }
        quant_quantize_row(types[k], x, q, N);
        quant_dequantize_row(types[k], q, y, N);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += !isfinite(y[i]);
        CHECK(bad == 0, "%s: %d extreme inputs decode to NaN or infinity", name, bad);
        /* the huge block keeps its signs: clipped, not flipped */
        int flipped = 0;
        for (int i = 0; i < 256; i++) flipped += (y[i] > 0) != (x[i] > 0);
        CHECK(flipped == 0, "%s: %d huge values change sign", name, flipped);
    }
}

/* ------------------------------------------------------------ dot products */

static float tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* The integer weight of every value of a row and, per 32 values, the
 * integer chunk scale (IQ4_XS: ls - 32; 1 otherwise), decoded here from the
 * layouts; the scale of each block (f16 bits). */
static void int_weights(mt_type t, const uint8_t *w, int64_t n, int *wi, int *sc, float *dw) {
    const mt_type_traits *tr = mt_type_traits_get(t);
    for (int64_t b = 0; b < n / tr->blck; b++) {
        const uint8_t *wb = w + b * tr->type_size;
        for (int e = 0; e < tr->blck; e++) {
            const int64_t i = b * tr->blck + e;
            int v = 0, s = 1;
            if (t == MT_TYPE_IQ4_NL) {
                const uint8_t byte = wb[2 + e % 16];
                v = T[e < 16 ? byte & 15 : byte >> 4];
            } else if (t == MT_TYPE_IQ4_XS) {
                const int sb = e / 32, j = e % 32;
                const uint8_t byte = wb[8 + 16 * sb + j % 16];
                v = T[j < 16 ? byte & 15 : byte >> 4];
                uint16_t h;
                memcpy(&h, wb + 2, 2);
                s = (((wb[4 + sb / 2] >> (4 * (sb % 2))) & 15) | ((h >> (2 * sb)) & 3) << 4) - 32;
            } else if (t == MT_TYPE_TQ2_0) {
                v = ((wb[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) - 1;
            } else { /* TQ1_0: find the byte and digit of value e */
                static const int pow3[5] = {3, 9, 27, 81, 243}; /* 3^(n+1) */
                int byte, dig;
                if (e < 160)
                    byte = e % 32, dig = e / 32;
                else if (e < 240)
                    byte = 32 + (e - 160) % 16, dig = (e - 160) / 16;
                else
                    byte = 48 + (e - 240) % 4, dig = (e - 240) / 4;
                /* digit dig of the base-3 fraction byte / 256 */
                v = wb[byte] * pow3[dig] / 256 % 3 - 1;
            }
            wi[i] = v;
            if (e % 32 == 0) sc[i / 32] = s;
        }
        uint16_t dh;
        memcpy(&dh, wb + (t == MT_TYPE_TQ1_0 ? 52 : t == MT_TYPE_TQ2_0 ? 64 : 0), 2);
        dw[b] = mt_f16_to_f32(dh);
    }
}

/* The documented reduction orders, from the integers above. */
static float order_dot(mt_type t, int64_t n, const uint8_t *w, const uint8_t *x) {
    static int wi[4096], sc[128];
    static float dw[128];
    int_weights(t, w, n, wi, sc, dw);
    if (t == MT_TYPE_IQ4_NL) {
        float acc[16] = {0};
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *xb = x + 34 * b;
            uint16_t dxh;
            memcpy(&dxh, xb, 2);
            const float d = dw[b] * mt_f16_to_f32(dxh);
            for (int l = 0; l < 8; l++) {
                int s = 0;
                for (int j = 4 * l; j < 4 * l + 4; j++) s += wi[32 * b + j] * (int8_t)xb[2 + j];
                acc[8 * (b % 2) + l] = mt_fmaf((float)s, d, acc[8 * (b % 2) + l]);
            }
        }
        float s8[8];
        for (int l = 0; l < 8; l++) s8[l] = acc[l] + acc[l + 8];
        return tree8(s8);
    }
    float lanes[8] = {0};
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *xb = x + 292 * b;
        float dx;
        memcpy(&dx, xb, 4);
        int64_t lane[8] = {0};
        for (int e = 0; e < 256; e++)
            lane[(e % 32) / 4] +=
                (int64_t)sc[(256 * b + e) / 32] * wi[256 * b + e] * (int8_t)xb[4 + e];
        for (int l = 0; l < 8; l++) {
            CHECK(lane[l] == (int32_t)lane[l], "lane sum %lld does not fit int32",
                  (long long)lane[l]);
            lanes[l] = mt_fmaf((float)lane[l], dw[b] * dx, lanes[l]);
        }
    }
    return tree8(lanes);
}

/* Rows of random blocks (and one extreme row) against random activations:
 * quant_vec_dot and every tile of up to 5 x 5 equal the order. */
static void test_dots(void) {
    static const mt_type types[] = {MT_TYPE_IQ4_NL, MT_TYPE_IQ4_XS, MT_TYPE_TQ1_0, MT_TYPE_TQ2_0};
    enum { N = 1024, R = 5 };
    for (int k = 0; k < 4; k++) {
        const mt_type t = types[k], vt = quant_vec_dot_type(t);
        const char *name = mt_type_traits_get(t)->name;
        const size_t wrow = mt_type_row_size(t, N), xrow = mt_type_row_size(vt, N);
        uint8_t *w = malloc(R * wrow), *x = malloc(R * xrow);
        int bad = 0, cases = 0;
        for (int trial = 0; trial < 12; trial++) {
            for (int r = 0; r < R; r++) quant_random_blocks(t, w + r * wrow, N, &rng);
            for (int c = 0; c < R; c++) {
                uint8_t *xc = x + c * xrow;
                for (size_t i = 0; i < xrow; i++) xc[i] = (uint8_t)quant_random_u64(&rng);
                for (int b = 0; b < N / (vt == MT_TYPE_Q8_K ? 256 : 32); b++) {
                    if (vt == MT_TYPE_Q8_K) {
                        float d = (float)((double)(int32_t)quant_random_u64(&rng) * 0x1p-36);
                        memcpy(xc + 292 * b, &d, 4);
                    } else {
                        put_f16(xc + 34 * b, (uint16_t)(quant_random_u64(&rng) & 0xbbff));
                    }
                }
            }
            if (trial == 0) { /* extreme: code 0 (-127), scale code 0 (-32), activations -128 */
                for (int r = 0; r < R; r++)
                    for (int b = 0; b < N / mt_type_traits_get(t)->blck; b++) {
                        uint8_t *wb = w + r * wrow + b * mt_type_traits_get(t)->type_size;
                        if (t == MT_TYPE_IQ4_NL) memset(wb + 2, 0, 16);
                        if (t == MT_TYPE_IQ4_XS) memset(wb + 2, 0, 134);
                        if (t == MT_TYPE_TQ2_0) memset(wb, 0, 64); /* q = 0: -1 */
                        if (t == MT_TYPE_TQ1_0) memset(wb, 0, 52); /* trits 0: -1 */
                    }
                for (int c = 0; c < R; c++)
                    for (int b = 0; b < N / (vt == MT_TYPE_Q8_K ? 256 : 32); b++)
                        if (vt == MT_TYPE_Q8_K)
                            memset(x + c * xrow + 292 * b + 4, 0x80, 256);
                        else
                            memset(x + c * xrow + 34 * b + 2, 0x80, 32);
            }
            float want[R][R];
            for (int r = 0; r < R; r++)
                for (int c = 0; c < R; c++)
                    want[c][r] = order_dot(t, N, w + r * wrow, x + c * xrow);
            for (int s = 0; s < N_SETS; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                for (int r = 0; r < R; r++)
                    for (int c = 0; c < R; c++) {
                        const float got = quant_vec_dot(t, N, w + r * wrow, x + c * xrow);
                        cases++;
                        if (quant_f32_bits(got) != quant_f32_bits(want[c][r]) && bad++ < 3)
                            fprintf(stderr, "%s %s trial %d row %d token %d: %a, order gives %a\n",
                                    name, sets[s], trial, r, c, (double)got, (double)want[c][r]);
                    }
                for (int nr = 1; nr <= R; nr++)
                    for (int nt = 1; nt <= R; nt++) {
                        float y[R * R];
                        quant_tile(t, N, w, wrow, nr, x, xrow, nt, y, R);
                        for (int r = 0; r < nr; r++)
                            for (int c = 0; c < nt; c++) {
                                cases++;
                                if (quant_f32_bits(y[c * R + r]) != quant_f32_bits(want[c][r]) &&
                                    bad++ < 3)
                                    fprintf(stderr, "%s %s tile %dx%d: (%d,%d) differs\n", name,
                                            sets[s], nr, nt, r, c);
                            }
                    }
            }
            quant_kernels_select("reference");
        }
        CHECK(bad == 0, "%s: %d of %d dots and tile elements differ from the reduction order", name,
              bad, cases);
        printf("%-6s  %d dots and tile elements (random-byte and extreme blocks, every kernel "
               "set) equal the order\n",
               name, cases);
        free(w);
        free(x);
    }
}

int main(void) {
    test_iq4_table();
    printf("IQ4 table (d = 1):");
    for (int j = 0; j < 16; j++) printf(" %d", T[j]);
    printf("\n");
    test_iq4_nl_blocks();
    test_iq4_xs_blocks();
    test_tq2_blocks();
    test_tq1_blocks();
    printf("hand-built blocks: IQ4_NL (7 scales x 16 code rotations), IQ4_XS (all 64 scale "
           "codes x 5 scales), TQ2_0 (every quant at every position), TQ1_0 (243 base-3 "
           "numbers at every byte) decode as specified\n");
    test_quantizers();
    printf("quantizers: ternary patterns exact, zeros, huge, tiny and NaN inputs finite\n");
    test_dots();
    return check_report("test_quant_iq4t");
}

/* quant_iq4t.c - reference kernels of the non-linear 4-bit types IQ4_NL and
 * IQ4_XS and of the ternary types TQ1_0 and TQ2_0.
 *
 * Layouts (docs/engine-reference.md, "Tensor types"); T is quant_iq4_values:
 *   IQ4_NL (18 bytes, 32 values): d f16 @0; qs[16] @2. For j < 16:
 *     y[j] = d * T[qs[j] & 0xF], y[j + 16] = d * T[qs[j] >> 4].
 *     Activations meet it as Q8_0.
 *   IQ4_XS (136 bytes, 256 values): d f16 @0; scales_h u16 @2; scales_l[4] @4;
 *     qs[128] @8. Sub-block s (0..7) of 32 values has the 6-bit code
 *     ls = (nibble s % 2 of scales_l[s / 2]) | (bits 2s..2s+1 of scales_h) << 4
 *     and dl = d * (float)(ls - 32) (rounded to f32 first, as llama.cpp does);
 *     its codes are qs[16s .. 16s + 15], low nibbles for values 32s + j and
 *     high nibbles for 32s + 16 + j: y = dl * T[code]. Against Q8_K.
 *   TQ2_0 (66 bytes, 256 values): qs[64] @0; d f16 @64. Byte qs[32h + m]
 *     holds value 128h + 32k + m in bits 2k..2k+1 (k < 4): y = d * (q - 1),
 *     q in 0..3 (3, value 2, is never written but decodes). Against Q8_K.
 *   TQ1_0 (54 bytes, 256 values): qs[48] @0; qh[4] @48; d f16 @52. A byte
 *     holds up to 5 trits t (0..2) as a base-3 fraction rounded up: trit n is
 *     the top of (byte * 3^n mod 256) * 3, i.e. ((uint8_t)(byte * 3^n) * 3)
 *     >> 8. qs[m] (m < 32) gives values 32n + m (n < 5), qs[32 + m] (m < 16)
 *     gives 160 + 16n + m (n < 5), qh[j] gives 240 + 4n + j (n < 4);
 *     y = d * (t - 1). Against Q8_K.
 *
 * Reduction orders (quant_kernels.h): IQ4_NL is of the Q8_0 family; IQ4_XS,
 * TQ1_0 and TQ2_0 follow Q4_K's: per super-block, lane l (0..7) is an exact
 * int32 sum over the 32-value chunks c of (chunk scale) * (the products of
 * values 32c + 4l .. 32c + 4l + 3), then fmaf((float)lane, dw * dx, acc[l]),
 * and quant_hsum8 at the end (no mins term). */
#include "quant_kernels.h"

/* The 16 values of the IQ4 codes. Format data, not derived: measured
 * through llama.cpp's own decoder (dequantize_row_iq4_nl of the pinned
 * libggml-base.so on a block with d = 1 and codes 0..15), and checked on
 * every run of tests/test_quant_ggml.c, which decodes random blocks with
 * both decoders and compares them bit for bit. */
const int8_t quant_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

/* ------------------------------------------------------------ helpers */

enum { F16_MAX_BITS = 0x7bff }; /* 65504, the largest finite half */

/* The smallest f16 >= v (v >= 0), at most 65504; its bits in *bits. A scale
 * rounded up never shrinks the range it must cover. */
static float f16_ceil(float v, uint16_t *bits) {
    uint16_t h = mt_f32_to_f16(v);
    if ((h & 0x7fff) > F16_MAX_BITS) h = F16_MAX_BITS; /* inf or NaN */
    if (quant_f16_to_f32(h) < v && h < F16_MAX_BITS) h++;
    *bits = h;
    return quant_f16_to_f32(h);
}

/* The signed element of largest magnitude (the first one on a tie) of
 * x[0..n); NaN elements are skipped. */
static float signed_max(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* The IQ4 code whose value is nearest to t (the lower one on a tie): the
 * number of midpoints between neighbouring values that t exceeds. */
static int iq4_code(float t) {
    int k = 0;
    for (int j = 0; j < 15; j++)
        k += t > 0.5f * (float)(quant_iq4_values[j] + quant_iq4_values[j + 1]);
    return k;
}

/* The codes of 32 values x at step dl (dl = 0: code 8, value +1 * 0),
 * packed as IQ4_NL and IQ4_XS pack a 32-value group into 16 bytes. */
static void iq4_pack32(const float *x, float dl, uint8_t *qs) {
    const float inv = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < 16; j++) {
        const int lo = dl != 0.0f ? iq4_code(x[j] * inv) : 8;
        const int hi = dl != 0.0f ? iq4_code(x[j + 16] * inv) : 8;
        qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

/* ================================================================ IQ4_NL */

void quant_iq4_nl_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += IQ4_NL_BYTES, dst += QK_32) {
        const float d = quant_load_f16(b);
        const uint8_t *qs = b + IQ4_NL_QS;
        for (int j = 0; j < QK_32 / 2; j++) {
            dst[j] = d * (float)quant_iq4_values[qs[j] & 0xF];
            dst[j + QK_32 / 2] = d * (float)quant_iq4_values[qs[j] >> 4];
        }
    }
}

/* Plain round-to-nearest: the element of largest magnitude, max, maps to
 * -127 (the value of largest magnitude) with d = max / -127 (rounded up in
 * magnitude to f16, at most 65504), every element to the code nearest to
 * x / d. The error is at most 14 d (113 is the largest positive value, so
 * an element of the other sign than max clips there) and otherwise half the
 * largest gap, 12 d. */
size_t quant_iq4_nl_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += IQ4_NL_BYTES, src += QK_32) {
        const float max = signed_max(src, QK_32);
        uint16_t bits;
        float d = f16_ceil(fabsf(max) / 127.0f, &bits);
        if (max > 0.0f) {
            bits |= 0x8000;
            d = -d;
        }
        memcpy(b, &bits, 2);
        iq4_pack32(src, d, b + IQ4_NL_QS);
    }
    return (size_t)(n / QK_32) * IQ4_NL_BYTES;
}

/* The Q8_0-family order (quant_kernels.h): per block, 8 exact int32 lane
 * sums of 4 consecutive products T[code] * x, each added to its lane float
 * as fmaf(lane, dw * dx, acc), even blocks into lanes 0-7 and odd blocks
 * into lanes 8-15; quant_hsum16 at the end. */
float quant_iq4_nl_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float acc[16] = {0};
    for (int64_t i = 0; i < n / QK_32; i++, wb += IQ4_NL_BYTES, xb += Q8_0_BYTES) {
        int8_t q[QK_32];
        quant_nibbles32(wb + IQ4_NL_QS, quant_iq4_values, q);
        const float d = quant_load_f16(wb) * quant_load_f16(xb);
        quant_q8_family_block(acc, i, q, (const int8_t *)(xb + Q8_0_QS), d);
    }
    return quant_hsum16(acc);
}

/* ================================================================ IQ4_XS */

void quant_iq4_xs_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ4_XS_BYTES) {
        const float d = quant_load_f16(b);
        for (int s = 0; s < 8; s++, dst += 32) {
            const float dl = d * (float)quant_iq4_xs_scale(b, s);
            const uint8_t *qs = b + IQ4_XS_QS + 16 * s;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)quant_iq4_values[qs[j] & 0xF];
                dst[j + 16] = dl * (float)quant_iq4_values[qs[j] >> 4];
            }
        }
    }
}

/* Sub-block s wants the step ds = max_s / -127 (as IQ4_NL); the super-block
 * scale d = max |ds| / 31 is rounded up to f16, and each sub-block scale
 * code l = ceil(|ds| / d) (at most 31) takes ds's sign, so the step d * l is
 * never smaller than ds: the error of a value is at most 14 |d * l| <=
 * 14 (|ds| + d) (see quant_iq4_nl_quantize). */
size_t quant_iq4_xs_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ4_XS_BYTES, src += QK_K) {
        float ds[8], dmax = 0.0f;
        for (int s = 0; s < 8; s++) {
            ds[s] = signed_max(src + 32 * s, 32) / -127.0f;
            if (fabsf(ds[s]) > dmax) dmax = fabsf(ds[s]);
        }
        uint16_t d_bits;
        const float d = f16_ceil(dmax / 31.0f, &d_bits);
        memcpy(b, &d_bits, 2);
        uint16_t scales_h = 0;
        memset(b + IQ4_XS_SCALES_L, 0, 4);
        for (int s = 0; s < 8; s++) {
            int l = 0;
            if (d > 0.0f) {
                const float k = ceilf(fabsf(ds[s]) / d);
                l = k >= 31.0f ? 31 : (int)k;
                if (ds[s] < 0.0f) l = -l;
            }
            const int ls = l + 32;
            b[IQ4_XS_SCALES_L + s / 2] |= (uint8_t)((ls & 0xF) << (4 * (s % 2)));
            scales_h |= (uint16_t)((ls >> 4) << (2 * s));
            iq4_pack32(src + 32 * s, d * (float)l, b + IQ4_XS_QS + 16 * s);
        }
        memcpy(b + IQ4_XS_SCALES_H, &scales_h, 2);
    }
    return (size_t)(n / QK_K) * IQ4_XS_BYTES;
}

/* The Q4_K order without mins: lane l of a super-block is the exact int32
 * sum over the sub-blocks s of (ls - 32) * (the products T[code] * x of
 * values 32s + 4l .. 32s + 4l + 3); fmaf((float)lane, dw * dx, acc[l]) per
 * super-block; quant_hsum8 at the end. |lane| < 8 * 32 * 4 * 127 * 128. */
float quant_iq4_xs_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++, wb += IQ4_XS_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int32_t acc[8] = {0};
        for (int s = 0; s < 8; s++) {
            const uint8_t *q = wb + IQ4_XS_QS + 16 * s;
            const int sc = quant_iq4_xs_scale(wb, s);
            for (int l = 0; l < 8; l++) {
                int32_t p = 0;
                for (int j = 4 * l; j < 4 * l + 4; j++)
                    p += quant_iq4_values[j < 16 ? q[j] & 0xF : q[j - 16] >> 4] * xq[32 * s + j];
                acc[l] += sc * p;
            }
        }
        const float d = quant_load_f16(wb) * quant_load_f32(xb);
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
    }
    return quant_hsum8(lanes);
}

/* ================================================================ TQ2_0 */

/* q (0..3) of value e of a TQ2_0 block. */
static inline int tq2_quant(const uint8_t *b, int e) {
    return (b[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void quant_tq2_0_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += TQ2_0_BYTES, dst += QK_K) {
        const float d = quant_load_f16(b + TQ2_0_D);
        for (int e = 0; e < QK_K; e++) dst[e] = (float)(tq2_quant(b, e) - 1) * d;
    }
}

/* Ternary round-to-nearest: d = the block's largest magnitude (rounded up
 * to f16, at most 65504), q = nearest of -1, 0, 1 to x / d, stored as q + 1;
 * the error is at most d / 2. */
static float ternary_scale(const float *src, uint8_t *d_field, int8_t q[QK_K]) {
    uint16_t bits;
    const float d = f16_ceil(fabsf(signed_max(src, QK_K)), &bits);
    memcpy(d_field, &bits, 2);
    for (int e = 0; e < QK_K; e++) {
        int v = 0;
        if (d > 0.0f) {
            const float t = src[e] / d;
            v = t >= 0.5f ? 1 : t <= -0.5f ? -1 : 0;
        }
        q[e] = (int8_t)v;
    }
    return d;
}

size_t quant_tq2_0_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += TQ2_0_BYTES, src += QK_K) {
        int8_t q[QK_K];
        ternary_scale(src, b + TQ2_0_D, q);
        memset(b, 0, 64);
        for (int e = 0; e < QK_K; e++)
            b[32 * (e / 128) + e % 32] |= (uint8_t)((q[e] + 1) << (2 * ((e % 128) / 32)));
    }
    return (size_t)(n / QK_K) * TQ2_0_BYTES;
}

/* The order of IQ4_XS with every chunk scale 1: lane l of a super-block is
 * the exact int32 sum of (q - 1) * x over the values e with e % 32 in
 * 4l .. 4l + 3; fmaf((float)lane, dw * dx, acc[l]); quant_hsum8. */
float quant_tq2_0_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++, wb += TQ2_0_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int32_t acc[8] = {0};
        for (int e = 0; e < QK_K; e++) acc[(e % 32) / 4] += (tq2_quant(wb, e) - 1) * xq[e];
        const float d = quant_load_f16(wb + TQ2_0_D) * quant_load_f32(xb);
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
    }
    return quant_hsum8(lanes);
}

/* ================================================================ TQ1_0 */

/* Trit n (0..4) of a packed byte: the base-3 digits are the bits of a
 * fraction of 243 scaled to 256, so multiplying by 3^n (mod 256) drops the
 * n leading digits and multiplying by 3 brings the next one above bit 8. */
static inline int tq1_trit(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t u = (uint8_t)(byte * pow3[n]);
    return (u * 3) >> 8;
}

/* The byte of up to 5 trits t[0..k) (most significant first, the missing
 * ones 0): the base-3 number v = sum t[n] 3^(4-n) as ceil(v * 256 / 243).
 * Rounding up keeps the fraction v/243 <= byte/256 < (v + 1)/243, so
 * every leading digit comes out as written. */
static uint8_t tq1_pack(const int *t, int k) {
    int v = 0;
    for (int n = 0; n < 5; n++) v = 3 * v + (n < k ? t[n] : 0);
    return (uint8_t)((v * 256 + 242) / 243);
}

/* The value index of trit n of byte `byte` of a TQ1_0 block (bytes 0..51:
 * qs then qh); -1 for qh's missing fifth trit. */
static inline int tq1_index(int byte, int n) {
    if (byte < 32) return 32 * n + byte;
    if (byte < 48) return 160 + 16 * n + (byte - 32);
    return n < 4 ? 240 + 4 * n + (byte - 48) : -1;
}

void quant_tq1_0_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += TQ1_0_BYTES, dst += QK_K) {
        const float d = quant_load_f16(b + TQ1_0_D);
        for (int k = 0; k < TQ1_0_D; k++)
            for (int t = 0; t < 5; t++) {
                const int e = tq1_index(k, t);
                if (e >= 0) dst[e] = (float)(tq1_trit(b[k], t) - 1) * d;
            }
    }
}

size_t quant_tq1_0_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += TQ1_0_BYTES, src += QK_K) {
        int8_t q[QK_K];
        ternary_scale(src, b + TQ1_0_D, q);
        for (int k = 0; k < TQ1_0_D; k++) {
            int t[5];
            const int m = k < 48 ? 5 : 4;
            for (int j = 0; j < m; j++) t[j] = q[tq1_index(k, j)] + 1;
            b[k] = tq1_pack(t, m);
        }
    }
    return (size_t)(n / QK_K) * TQ1_0_BYTES;
}

/* The TQ2_0 order (trits t - 1 instead of q - 1). */
float quant_tq1_0_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++, wb += TQ1_0_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int32_t acc[8] = {0};
        for (int k = 0; k < TQ1_0_D; k++)
            for (int t = 0; t < 5; t++) {
                const int e = tq1_index(k, t);
                if (e >= 0) acc[(e % 32) / 4] += (tq1_trit(wb[k], t) - 1) * xq[e];
            }
        const float d = quant_load_f16(wb + TQ1_0_D) * quant_load_f32(xb);
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
    }
    return quant_hsum8(lanes);
}

/* quant_kq.c - reference kernels of the K-quants Q2_K, Q3_K and Q5_K
 * (256-element super-blocks with small per-sub-block scales), against Q8_K
 * activations like Q4_K (quant_k.c).
 *
 * Layouts (docs/engine-reference.md, "Tensor types"); element i of a block:
 *   Q2_K (84 bytes): scales[16] @0; qs[64] @16; d f16 @80; dmin f16 @82.
 *     Group g = i/16 has scale sc = scales[g] & 15 and min m = scales[g] >> 4;
 *     q = (qs[32*(i/128) + i%32] >> 2*((i%128)/32)) & 3;
 *     y = (d*sc)*q - dmin*m.
 *   Q3_K (110 bytes): hmask[32] @0; qs[64] @32; scales[12] @96; d f16 @108.
 *     Group g = i/16 has the 6-bit code sc (quant_k3_scale); q2 as Q2_K's q
 *     (qs @32), h = bit i/32 of hmask[i%32]; q3 = q2 - (h ? 0 : 4), in
 *     [-4, 3]; y = (d*(sc-32))*q3.
 *   Q5_K (176 bytes): d f16 @0; dmin f16 @2; scales[12] @4; qh[32] @16;
 *     qs[128] @48. Sub-block s = i/32 has Q4_K's 6-bit scale and min
 *     (quant_k4_scale_min); q = (nibble s%2 of qs[32*(s/2) + i%32]) +
 *     16 * (bit s of qh[i%32]), in [0, 31]; y = (d*sc)*q - dmin*m.
 * The float operations of the decoders are llama.cpp's (dequantize_row_*),
 * so the decoded values are bit for bit its values (test_quant_ggml).
 *
 * Dot products (quant_kernels.h, one order for the three): lane l (0..7) of
 * a super-block is the exact int32 sum over its elements i with
 * (i % 32) / 4 == l of S(i) * u(i) * x(i), where u is the unsigned quant
 * (Q2_K: q; Q3_K: q3 + 4 = q2 + 4h; Q5_K: q) and S the integer scale of its
 * group (Q3_K: sc - 32); per super-block lanes[l] = fmaf((float)lane,
 * d * dx, lanes[l]), and the exact integer correction C (Q2_K, Q5_K:
 * sum of bsums[j] * m of group j; Q3_K: 4 * sum bsums[g] * (sc[g] - 32))
 * enters mins = fmaf(dm * dx, (float)C, mins) with dm = dmin (Q3_K: d);
 * the result is quant_hsum8(lanes) - mins. */
#include "quant_kernels.h"

/* ------------------------------------------------------------ shared */

static inline int16_t load_bsum(const uint8_t *xb, int j) {
    int16_t bs;
    memcpy(&bs, xb + Q8_K_BSUMS + 2 * j, 2);
    return bs;
}

/* Smallest k in [0, max] with k * unit >= v (v >= 0). */
static int ceil_code(float v, float unit, int max) {
    if (!(unit > 0.0f) || !(v > 0.0f)) return 0;
    float k = ceilf(v / unit);
    return k > (float)max ? max : (int)k;
}

/* f16 value of x rounded up a little (so that max * result >= max * x after
 * the f16 rounding), and never above the largest finite half. */
static float f16_at_least(float x, uint16_t *bits) {
    float v = x * (1.0f + 1.0f / 1024.0f);
    *bits = v < 65504.0f ? mt_f32_to_f16(v) : 0x7bffu;
    return mt_f16_to_f32(*bits);
}

/* The plain min/max quantizer of Q4_K (quant_k.c) for ng groups of gs
 * elements, codes of the scale and min in [0, cmax], quants in [0, qmax]:
 * each group spans [lo, hi] with lo = min(0, min x); the min code is rounded
 * up so that -dmin*m <= lo, then the scale code so that qmax steps reach
 * hi; each element rounds to the nearest step. */
static void minmax_quantize(const float *x, int ng, int gs, int cmax, int qmax, uint16_t *d_bits,
                            uint16_t *dmin_bits, int *sc, int *m, uint8_t *q) {
    float lo[16], hi[16], eff_m[16], need[16], max_m = 0.0f, max_need = 0.0f;
    for (int g = 0; g < ng; g++) {
        lo[g] = 0.0f;
        hi[g] = x[gs * g];
        for (int l = 0; l < gs; l++) {
            float v = x[gs * g + l];
            if (v < lo[g]) lo[g] = v;
            if (v > hi[g]) hi[g] = v;
        }
        if (-lo[g] > max_m) max_m = -lo[g];
    }
    const float dmin = f16_at_least(max_m / (float)cmax, dmin_bits);
    for (int g = 0; g < ng; g++) {
        m[g] = ceil_code(-lo[g], dmin, cmax);
        eff_m[g] = dmin * (float)m[g];
        need[g] = (hi[g] + eff_m[g]) / (float)qmax;
        if (need[g] > max_need) max_need = need[g];
    }
    const float d = f16_at_least(max_need / (float)cmax, d_bits);
    for (int g = 0; g < ng; g++) {
        sc[g] = ceil_code(need[g], d, cmax);
        const float step = d * (float)sc[g];
        for (int l = 0; l < gs; l++) {
            int v = 0;
            if (step > 0.0f) {
                float t = (x[gs * g + l] + eff_m[g]) / step;
                v = t <= 0.0f ? 0 : t >= (float)qmax ? qmax : quant_nearest_int(t);
            }
            q[gs * g + l] = (uint8_t)v;
        }
    }
}

/* The 2-bit field of element i in a 64-byte qs array of Q2_K / Q3_K. */
static inline int k2_quant(const uint8_t *qs, int i) {
    return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

/* ================================================================ Q2_K */

void quant_q2_k_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QK_K; k++, b += Q2_K_BYTES, dst += QK_K) {
        const float d = quant_load_f16(b + Q2_K_D), dmin = quant_load_f16(b + Q2_K_DMIN);
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)(b[g] & 0xF), ml = dmin * (float)(b[g] >> 4);
            for (int i = 16 * g; i < 16 * g + 16; i++)
                dst[i] = dl * (float)k2_quant(b + Q2_K_QS, i) - ml;
        }
    }
}

/* minmax_quantize over 16 groups of 16 (4-bit codes, 2-bit quants). */
size_t quant_q2_k_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t k = 0; k < n / QK_K; k++, b += Q2_K_BYTES, src += QK_K) {
        uint16_t d_bits, dmin_bits;
        int sc[16], m[16];
        uint8_t q[QK_K];
        minmax_quantize(src, 16, 16, 15, 3, &d_bits, &dmin_bits, sc, m, q);
        memset(b, 0, Q2_K_BYTES);
        for (int g = 0; g < 16; g++) b[g] = (uint8_t)(sc[g] | (m[g] << 4));
        for (int i = 0; i < QK_K; i++)
            b[Q2_K_QS + 32 * (i / 128) + i % 32] |= (uint8_t)(q[i] << (2 * ((i % 128) / 32)));
        memcpy(b + Q2_K_D, &d_bits, 2);
        memcpy(b + Q2_K_DMIN, &dmin_bits, 2);
    }
    return (size_t)(n / QK_K) * Q2_K_BYTES;
}

float quant_q2_k_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0}, mins = 0.0f;
    for (int64_t k = 0; k < n / QK_K; k++, wb += Q2_K_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int32_t acc[8] = {0}, summ = 0;
        for (int r = 0; r < 8; r++) /* runs of 32: groups 2r, 2r+1 */
            for (int l = 0; l < 8; l++) {
                const int i0 = 32 * r + 4 * l;
                int32_t p = 0;
                for (int i = i0; i < i0 + 4; i++) p += k2_quant(wb + Q2_K_QS, i) * xq[i];
                acc[l] += (wb[i0 / 16] & 0xF) * p;
            }
        for (int g = 0; g < 16; g++) summ += load_bsum(xb, g) * (wb[g] >> 4);
        const float dx = quant_load_f32(xb);
        const float d = quant_load_f16(wb + Q2_K_D) * dx;
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
        mins = mt_fmaf(quant_load_f16(wb + Q2_K_DMIN) * dx, (float)summ, mins);
    }
    return quant_hsum8(lanes) - mins;
}

/* ================================================================ Q3_K */

/* u = q3 + 4 (0..7) of element i: the 2 low bits and the hmask bit. */
static inline int k3_u(const uint8_t *b, int i) {
    return k2_quant(b + Q3_K_QS, i) | (((b[i % 32] >> (i / 32)) & 1) << 2);
}

void quant_q3_k_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QK_K; k++, b += Q3_K_BYTES, dst += QK_K) {
        const float d = quant_load_f16(b + Q3_K_D);
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)(quant_k3_scale(b + Q3_K_SCALES, g) - 32);
            for (int i = 16 * g; i < 16 * g + 16; i++) dst[i] = dl * (float)(k3_u(b, i) - 4);
        }
    }
}

/* Symmetric per 16 elements: the group's element of largest magnitude M
 * maps to -4 (its step is M / -4, so the sign of the 6-bit scale carries
 * M's sign, as Q4_0 does), the signed code is rounded away from zero so the
 * step never shrinks; error per element at most half a step, or one step
 * for an element of the other sign near |M| (clamped to 3). */
size_t quant_q3_k_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t k = 0; k < n / QK_K; k++, b += Q3_K_BYTES, src += QK_K) {
        float s[16], max_s = 0.0f;
        for (int g = 0; g < 16; g++) {
            float amax = 0.0f, M = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(src[16 * g + l]) > amax)
                    amax = fabsf(src[16 * g + l]), M = src[16 * g + l];
            s[g] = M / -4.0f;
            if (amax / 4.0f > max_s) max_s = amax / 4.0f;
        }
        uint16_t d_bits;
        const float d = f16_at_least(max_s / 31.0f, &d_bits);
        memset(b, 0, Q3_K_BYTES);
        memcpy(b + Q3_K_D, &d_bits, 2);
        uint8_t *scales = b + Q3_K_SCALES;
        for (int g = 0; g < 16; g++) {
            const int mag = ceil_code(fabsf(s[g]), d, 31), code = s[g] < 0.0f ? -mag : mag;
            const int sc = code + 32;
            scales[g % 8] |= (uint8_t)((sc & 0xF) << (4 * (g / 8)));
            scales[8 + g % 4] |= (uint8_t)((sc >> 4) << (2 * (g / 4)));
            const float step = d * (float)code;
            for (int i = 16 * g; i < 16 * g + 16; i++) {
                int q = 0;
                if (step != 0.0f) {
                    float t = src[i] / step;
                    q = t <= -4.0f ? -4 : t >= 3.0f ? 3 : quant_nearest_int(t);
                }
                const int u = q + 4;
                b[Q3_K_QS + 32 * (i / 128) + i % 32] |=
                    (uint8_t)((u & 3) << (2 * ((i % 128) / 32)));
                b[i % 32] |= (uint8_t)((u >> 2) << (i / 32));
            }
        }
    }
    return (size_t)(n / QK_K) * Q3_K_BYTES;
}

float quant_q3_k_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0}, mins = 0.0f;
    for (int64_t k = 0; k < n / QK_K; k++, wb += Q3_K_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int sc[16];
        int32_t acc[8] = {0}, summ = 0;
        for (int g = 0; g < 16; g++) sc[g] = quant_k3_scale(wb + Q3_K_SCALES, g) - 32;
        for (int r = 0; r < 8; r++)
            for (int l = 0; l < 8; l++) {
                const int i0 = 32 * r + 4 * l;
                int32_t p = 0;
                for (int i = i0; i < i0 + 4; i++) p += k3_u(wb, i) * xq[i];
                acc[l] += sc[i0 / 16] * p;
            }
        for (int g = 0; g < 16; g++) summ += load_bsum(xb, g) * sc[g];
        summ *= 4;
        const float d = quant_load_f16(wb + Q3_K_D) * quant_load_f32(xb);
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
        mins = mt_fmaf(d, (float)summ, mins);
    }
    return quant_hsum8(lanes) - mins;
}

/* ================================================================ Q5_K */

/* q (0..31) of element i of a Q5_K block. */
static inline int k5_quant(const uint8_t *b, int i) {
    const int s = i / 32, l = i % 32;
    const uint8_t byte = b[Q5_K_QS + 32 * (s / 2) + l];
    return (s % 2 ? byte >> 4 : byte & 0xF) | (((b[Q5_K_QH + l] >> s) & 1) << 4);
}

void quant_q5_k_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QK_K; k++, b += Q5_K_BYTES, dst += QK_K) {
        const float d = quant_load_f16(b), dmin = quant_load_f16(b + Q5_K_DMIN);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            quant_k4_scale_min(b + Q5_K_SCALES, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int i = 32 * s; i < 32 * s + 32; i++) dst[i] = d1 * (float)k5_quant(b, i) - m1;
        }
    }
}

/* minmax_quantize over 8 groups of 32 (6-bit codes, 5-bit quants). */
size_t quant_q5_k_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t k = 0; k < n / QK_K; k++, b += Q5_K_BYTES, src += QK_K) {
        uint16_t d_bits, dmin_bits;
        int sc[8], m[8];
        uint8_t q[QK_K];
        minmax_quantize(src, 8, 32, 63, 31, &d_bits, &dmin_bits, sc, m, q);
        memset(b, 0, Q5_K_BYTES);
        memcpy(b, &d_bits, 2);
        memcpy(b + Q5_K_DMIN, &dmin_bits, 2);
        uint8_t *scales = b + Q5_K_SCALES;
        for (int s = 0; s < 4; s++) {
            scales[s] = (uint8_t)(sc[s] | ((sc[s + 4] >> 4) << 6));
            scales[s + 4] = (uint8_t)(m[s] | ((m[s + 4] >> 4) << 6));
            scales[s + 8] = (uint8_t)((sc[s + 4] & 0xF) | ((m[s + 4] & 0xF) << 4));
        }
        for (int i = 0; i < QK_K; i++) {
            const int s = i / 32, l = i % 32;
            b[Q5_K_QS + 32 * (s / 2) + l] |= (uint8_t)((q[i] & 0xF) << (4 * (s % 2)));
            b[Q5_K_QH + l] |= (uint8_t)((q[i] >> 4) << s);
        }
    }
    return (size_t)(n / QK_K) * Q5_K_BYTES;
}

float quant_q5_k_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0}, mins = 0.0f;
    for (int64_t k = 0; k < n / QK_K; k++, wb += Q5_K_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int sc[8], m[8];
        for (int s = 0; s < 8; s++) quant_k4_scale_min(wb + Q5_K_SCALES, s, &sc[s], &m[s]);
        int32_t acc[8] = {0}, summ = 0;
        for (int s = 0; s < 8; s++)
            for (int l = 0; l < 8; l++) {
                const int i0 = 32 * s + 4 * l;
                int32_t p = 0;
                for (int i = i0; i < i0 + 4; i++) p += k5_quant(wb, i) * xq[i];
                acc[l] += sc[s] * p;
            }
        for (int j = 0; j < 16; j++) summ += load_bsum(xb, j) * m[j / 2];
        const float dx = quant_load_f32(xb);
        const float d = quant_load_f16(wb) * dx;
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
        mins = mt_fmaf(quant_load_f16(wb + Q5_K_DMIN) * dx, (float)summ, mins);
    }
    return quant_hsum8(lanes) - mins;
}

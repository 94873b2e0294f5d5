/* quant_k.c - reference kernels of the K-quants Q4_K and Q6_K (256-element
 * super-blocks with small per-sub-block scales), and of Q8_K, the activation
 * format they meet in a dot product.
 *
 * Layouts (docs/engine-reference.md, "Tensor types"):
 *   Q4_K (144 bytes): d f16 @0; dmin f16 @2; scales[12] @4; qs[128] @16.
 *     8 sub-blocks of 32 with 6-bit scale sc[s] and min m[s] packed in
 *     scales[] (quant_k4_scale_min); y = d*sc[s]*q - dmin*m[s], q in [0,15];
 *     qs[32c + l] holds sub-block 2c in its low and 2c+1 in its high nibble.
 *   Q6_K (210 bytes): ql[128] @0; qh[64] @128; scales[16] int8 @192; d f16 @208.
 *     y = d*scales[i/16]*(q-32), q in [0,63]: 4 low bits from ql, 2 high from qh.
 *   Q8_K (292 bytes): d f32 @0; qs[256] int8 @4; bsums[16] int16 @260. */
#include "quant_kernels.h"

/* ================================================================ Q4_K */

/* ------------------------------------------------------------ decode */

void quant_q4_k_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q4_K_BYTES) {
        const float d = quant_load_f16(b);
        const float dmin = quant_load_f16(b + Q4_K_DMIN);
        const uint8_t *q = b + Q4_K_QS;
        for (int c = 0; c < 4; c++, q += 32) { /* chunk c: sub-blocks 2c, 2c+1 */
            int sc, m;
            quant_k4_scale_min(b + Q4_K_SCALES, 2 * c, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            quant_k4_scale_min(b + Q4_K_SCALES, 2 * c + 1, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* ------------------------------------------------------------ encode */

/* Smallest k in [0, 63] with k * unit >= v (v >= 0), i.e. a 6-bit code
 * that does not shrink the range it encodes. */
static int ceil_code(float v, float unit, int max) {
    if (!(unit > 0.0f) || !(v > 0.0f)) return 0;
    float k = ceilf(v / unit);
    return k > (float)max ? max : (int)k;
}

/* f16 value of x rounded up a little, so that 63 * result >= 63 * x even
 * after rounding to f16 (f16 rounding moves a normal value by < 2^-11). */
static float f16_at_least(float x, uint16_t *bits) {
    *bits = mt_f32_to_f16(x * (1.0f + 1.0f / 1024.0f));
    return mt_f16_to_f32(*bits);
}

/* A plain min/max quantizer (no search, unlike llama-quantize): each
 * sub-block spans [lo, hi] with lo = min(0, min x); the 6-bit min code is
 * rounded up so that -dmin*m <= lo, then the 6-bit scale code is rounded up
 * so that 15 steps reach hi; each element rounds to the nearest step. The
 * error per element is at most half a step except when a code saturates. */
size_t quant_q4_k_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q4_K_BYTES, src += QK_K) {
        float lo[8], hi[8], max_m = 0.0f;
        for (int s = 0; s < 8; s++) {
            lo[s] = 0.0f;
            hi[s] = src[32 * s];
            for (int l = 0; l < 32; l++) {
                float v = src[32 * s + l];
                if (v < lo[s]) lo[s] = v;
                if (v > hi[s]) hi[s] = v;
            }
            if (-lo[s] > max_m) max_m = -lo[s];
        }
        uint16_t dmin_bits, d_bits;
        const float dmin = f16_at_least(max_m / 63.0f, &dmin_bits);
        int sc[8], m[8];
        float eff_m[8], need[8], max_need = 0.0f;
        for (int s = 0; s < 8; s++) {
            m[s] = ceil_code(-lo[s], dmin, 63);
            eff_m[s] = dmin * (float)m[s];
            need[s] = (hi[s] + eff_m[s]) / 15.0f;
            if (need[s] > max_need) max_need = need[s];
        }
        const float d = f16_at_least(max_need / 63.0f, &d_bits);
        for (int s = 0; s < 8; s++) sc[s] = ceil_code(need[s], d, 63);

        memcpy(b, &d_bits, 2);
        memcpy(b + Q4_K_DMIN, &dmin_bits, 2);
        uint8_t *scales = b + Q4_K_SCALES;
        for (int s = 0; s < 4; s++) {
            scales[s] = (uint8_t)(sc[s] | ((sc[s + 4] >> 4) << 6));
            scales[s + 4] = (uint8_t)(m[s] | ((m[s + 4] >> 4) << 6));
            scales[s + 8] = (uint8_t)((sc[s + 4] & 0xF) | ((m[s + 4] & 0xF) << 4));
        }
        uint8_t q[QK_K];
        for (int s = 0; s < 8; s++) {
            const float step = d * (float)sc[s];
            for (int l = 0; l < 32; l++) {
                int v = 0;
                if (step > 0.0f) {
                    float t = (src[32 * s + l] + eff_m[s]) / step;
                    v = t <= 0.0f ? 0 : t >= 15.0f ? 15 : quant_nearest_int(t);
                }
                q[32 * s + l] = (uint8_t)v;
            }
        }
        uint8_t *qs = b + Q4_K_QS;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
    return (size_t)(n / QK_K) * Q4_K_BYTES;
}

/* ------------------------------------------------------------ dot */

/* The Q4_K order (quant_kernels.h): lane l (0..7) of a super-block is the
 * exact int32 sum over the 8 sub-blocks s of sc[s] * (the products of
 * elements 32s+4l .. 32s+4l+3); each super-block adds fmaf((float)lane,
 * dw * dx, acc[l]) per lane and fmaf(dminw * dx, (float)summ, mins) for the
 * exact sum summ of bsums * mins; the result is quant_hsum8(acc) - mins. */
float quant_q4_k_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0};
    float mins = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, wb += Q4_K_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        const uint8_t *wq = wb + Q4_K_QS;
        int sc[8], m[8];
        int32_t summ = quant_q4_k_scales_and_min_sum(wb, xb, sc, m);
        int32_t acc[8] = {0};
        for (int s = 0; s < 8; s++) {
            const uint8_t *q = wq + 32 * (s / 2);
            for (int l = 0; l < 8; l++) {
                int32_t p = 0;
                for (int j = 4 * l; j < 4 * l + 4; j++)
                    p += (s % 2 ? q[j] >> 4 : q[j] & 0xF) * xq[32 * s + j];
                acc[l] += sc[s] * p;
            }
        }
        const float dx = quant_load_f32(xb);
        const float d = quant_load_f16(wb) * dx;
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
        const float dmin = quant_load_f16(wb + Q4_K_DMIN) * dx;
        mins = mt_fmaf(dmin, (float)summ, mins);
    }
    return quant_hsum8(lanes) - mins;
}

/* ================================================================ Q6_K */

/* ------------------------------------------------------------ decode */

/* q (0..63) of element i of a Q6_K block. */
static inline int q6_quant(const uint8_t *b, int i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const uint8_t *ql = b + 64 * h + (k & 1) * 32;
    const int lo = (k < 2 ? ql[l] & 0xF : ql[l] >> 4);
    const int hi = (b[Q6_K_QH + 32 * h + l] >> (2 * k)) & 3;
    return lo | (hi << 4);
}

void quant_q6_k_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q6_K_BYTES, dst += QK_K) {
        const float d = quant_load_f16(b + Q6_K_D);
        const int8_t *scales = (const int8_t *)(b + Q6_K_SCALES);
        for (int e = 0; e < QK_K; e++)
            dst[e] = d * (float)scales[e / 16] * (float)(q6_quant(b, e) - 32);
    }
}

/* ------------------------------------------------------------ encode */

/* Symmetric per 16 elements: step = amax/31 (quants -31..31 around 32), the
 * int8 scale code rounded up so the step never shrinks; error per element
 * at most half a step unless a code saturates. */
size_t quant_q6_k_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q6_K_BYTES, src += QK_K) {
        float step[16], max_step = 0.0f;
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(src[16 * j + l]) > amax) amax = fabsf(src[16 * j + l]);
            step[j] = amax / 31.0f;
            if (step[j] > max_step) max_step = step[j];
        }
        uint16_t d_bits = mt_f32_to_f16(max_step / 127.0f * (1.0f + 1.0f / 1024.0f));
        const float d = mt_f16_to_f32(d_bits);
        memset(b, 0, Q6_K_BYTES);
        memcpy(b + Q6_K_D, &d_bits, 2);
        int8_t *scales = (int8_t *)(b + Q6_K_SCALES);
        for (int j = 0; j < 16; j++) scales[j] = (int8_t)ceil_code(step[j], d, 127);
        for (int e = 0; e < QK_K; e++) {
            const float st = d * (float)scales[e / 16];
            int q = 0;
            if (st > 0.0f) {
                float t = src[e] / st;
                q = t <= -32.0f ? -32 : t >= 31.0f ? 31 : quant_nearest_int(t);
            }
            q += 32;
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            uint8_t *ql = b + 64 * h + (k & 1) * 32 + l;
            *ql |= (uint8_t)(k < 2 ? (q & 0xF) : (q & 0xF) << 4);
            b[Q6_K_QH + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
    return (size_t)(n / QK_K) * Q6_K_BYTES;
}

/* ------------------------------------------------------------ dot */

/* ggml_vec_dot_q6_K_q8_K (generic): like Q4_K's, 8 int32 lanes of
 * scale * w * x per super-block (scales per 16 elements, w = q - 32), a float
 * per lane, the lanes added to the total last. */
float quant_q6_k_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++, wb += Q6_K_BYTES, xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        const int8_t *scales = (const int8_t *)(wb + Q6_K_SCALES);
        const uint8_t *ql = wb, *qh = wb + Q6_K_QH;
        int8_t a[QK_K]; /* w - 32 in element order */
        for (int h = 0; h < 2; h++, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                a[128 * h + l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
                a[128 * h + 32 + l] =
                    (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                a[128 * h + 64 + l] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                a[128 * h + 96 + l] =
                    (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        int32_t acc[8] = {0};
        for (int e = 0; e < QK_K; e++) acc[e & 7] += scales[e / 16] * (xq[e] * a[e]);
        const float d = quant_load_f16(wb + Q6_K_D) * quant_load_f32(xb);
        for (int l = 0; l < 8; l++) lanes[l] += d * (float)acc[l];
    }
    float sum = 0.0f;
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum;
}

/* ================================================================ Q8_K */

void quant_q8_k_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES, dst += QK_K) {
        const float d = quant_load_f32(b);
        const int8_t *qs = (const int8_t *)(b + Q8_K_QS);
        for (int j = 0; j < QK_K; j++) dst[j] = d * (float)qs[j];
    }
}

/* Activations, exactly as ggml's quantize_row_q8_K_ref (which its x86 CPU
 * backend uses as is): max = the first element of largest magnitude,
 * iscale = -127/max, q = min(127, round-half-even(iscale * x)), d = 1/iscale
 * (so d < 0 and quants flip sign when max > 0), bsums = sums of 16 quants.
 * An all-zero block (or one whose 127/max overflows) gets d = 0, zero quants
 * and zero bsums (ggml leaves its bsums unset). */
size_t quant_q8_k_convert(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES, src += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float a = fabsf(src[j]);
            if (a > amax) {
                amax = a;
                max = src[j];
            }
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        int8_t *qs = (int8_t *)(b + Q8_K_QS);
        if (iscale == 0.0f || !isfinite(iscale)) {
            memset(b, 0, Q8_K_BYTES);
            continue;
        }
        for (int j = 0; j < QK_K; j++) {
            int v = quant_nearest_int(iscale * src[j]);
            qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < 16; j++) {
            int16_t s = 0;
            for (int l = 0; l < 16; l++) s = (int16_t)(s + qs[16 * j + l]);
            memcpy(b + Q8_K_BSUMS + 2 * j, &s, 2);
        }
        const float d = 1.0f / iscale;
        memcpy(b, &d, 4);
    }
    return (size_t)(n / QK_K) * Q8_K_BYTES;
}

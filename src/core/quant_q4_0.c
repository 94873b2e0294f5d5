/* quant_q4_0.c - reference kernels of Q4_0: 32 4-bit quants and one f16 scale
 * per block; activations meet it as Q8_0.
 *
 * Block (18 bytes): d f16 @0; qs[16] @2. For j < 16:
 *   y[j]      = d * ((qs[j] & 0xF) - 8)
 *   y[j + 16] = d * ((qs[j] >> 4)  - 8) */
#include "quant_kernels.h"

/* ------------------------------------------------------------ decode */

void quant_q4_0_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q4_0_BYTES, dst += QK_32) {
        const float d = quant_load_f16(b);
        const uint8_t *qs = b + Q4_0_QS;
        for (int j = 0; j < QK_32 / 2; j++) {
            dst[j] = (float)((qs[j] & 0xF) - 8) * d;
            dst[j + QK_32 / 2] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* ------------------------------------------------------------ encode */

/* As ggml's reference quantizer: the element of largest magnitude, max, maps
 * to quant 0 (value -8 d) with d = max / -8; others round half up to
 * q = (int)(x/d + 8.5), capped at 15. */
size_t quant_q4_0_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q4_0_BYTES, src += QK_32) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_32; j++) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant_store_f16(b, d);
        uint8_t *qs = b + Q4_0_QS;
        for (int j = 0; j < QK_32 / 2; j++) {
            int q0 = (int)(src[j] * id + 8.5f); /* in [0, 16] */
            int q1 = (int)(src[j + QK_32 / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
    return (size_t)(n / QK_32) * Q4_0_BYTES;
}

/* ------------------------------------------------------------ dot */

/* The Q8_0-family order (quant_kernels.h): per block, 8 exact int32 lane
 * sums of 4 consecutive products (element j < 16 from the low nibble of
 * qs[j], j >= 16 from the high nibble of qs[j - 16]), each added to its lane
 * float as fmaf(lane, dw * dx, acc), even blocks into lanes 0-7 and odd
 * blocks into lanes 8-15; quant_hsum16 at the end. */
float quant_q4_0_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float acc[16] = {0};
    for (int64_t i = 0; i < n / QK_32; i++, wb += Q4_0_BYTES, xb += Q8_0_BYTES) {
        static const int8_t minus8[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
        int8_t q[QK_32];
        quant_nibbles32(wb + Q4_0_QS, minus8, q);
        const float d = quant_load_f16(wb) * quant_load_f16(xb);
        quant_q8_family_block(acc, i, q, (const int8_t *)(xb + Q8_0_QS), d);
    }
    return quant_hsum16(acc);
}

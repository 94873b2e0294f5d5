/* quant_q8_0.c - reference kernels of Q8_0: 32 int8 quants and one f16 scale
 * per block. Q8_0 is also the activation format that Q4_0, Q8_0 and MXFP4
 * weights meet in a dot product.
 *
 * Block (34 bytes): d f16 @0; qs[32] int8 @2; y[j] = d * qs[j]. */
#include "quant_kernels.h"

/* ------------------------------------------------------------ decode */

void quant_q8_0_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q8_0_BYTES, dst += QK_32) {
        const float d = quant_load_f16(b);
        const int8_t *qs = (const int8_t *)(b + Q8_0_QS);
        for (int j = 0; j < QK_32; j++) dst[j] = (float)qs[j] * d;
    }
}

/* ------------------------------------------------------------ encode */

static float block_amax(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < QK_32; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    return amax;
}

/* Weights: ggml's reference quantizer (what llama-quantize writes):
 * d = amax/127, q = roundf(x / d) with ties away from zero. */
size_t quant_q8_0_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q8_0_BYTES, src += QK_32) {
        const float d = block_amax(src) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant_store_f16(b, d);
        int8_t *qs = (int8_t *)(b + Q8_0_QS);
        for (int j = 0; j < QK_32; j++) qs[j] = (int8_t)roundf(src[j] * id);
    }
    return (size_t)(n / QK_32) * Q8_0_BYTES;
}

/* Activations: ggml's CPU backend on x86 (AVX/AVX2 quantize_row_q8_0), the
 * build MoonTail is compared against: d = amax/127 stored as f16, and
 * q = round-half-even(x * (127/amax)) computed in f32. (ggml's generic C path
 * uses 1/d and roundf instead; the two differ by one step on rare ties.)
 * A block whose 127/amax overflows (amax < ~3.7e-37) gets zero quants, where
 * ggml would produce garbage. */
size_t quant_q8_0_convert(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q8_0_BYTES, src += QK_32) {
        const float amax = block_amax(src);
        const float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        if (!isfinite(id)) id = 0.0f;
        quant_store_f16(b, d);
        int8_t *qs = (int8_t *)(b + Q8_0_QS);
        for (int j = 0; j < QK_32; j++) {
            float v = src[j] * id; /* |v| <= 127 up to rounding (NaN inputs aside) */
            if (v >= 127.0f) {
                qs[j] = 127;
            } else if (v <= -128.0f || v != v) {
                qs[j] = -128; /* what cvtps_epi32 + saturating packs give */
            } else {
                qs[j] = (int8_t)quant_nearest_int(v);
            }
        }
    }
    return (size_t)(n / QK_32) * Q8_0_BYTES;
}

/* ------------------------------------------------------------ dot */

/* The Q8_0-family order (quant_kernels.h): per block, 8 exact int32 lane
 * sums of 4 consecutive products, each added to its lane float as
 * fmaf(lane, dw * dx, acc), even blocks into lanes 0-7 and odd blocks into
 * lanes 8-15; the 16 lane floats are added by quant_hsum16 at the end.
 * (ggml's generic C sums each block into one int and the blocks in order;
 * its x86 kernels sum 8 float lanes like this one, with other groupings.) */
float quant_q8_0_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float acc[16] = {0};
    for (int64_t i = 0; i < n / QK_32; i++, wb += Q8_0_BYTES, xb += Q8_0_BYTES) {
        const float d = quant_load_f16(wb) * quant_load_f16(xb);
        quant_q8_family_block(acc, i, (const int8_t *)(wb + Q8_0_QS),
                              (const int8_t *)(xb + Q8_0_QS), d);
    }
    return quant_hsum16(acc);
}

/* quant_mxfp4.c - reference kernels of MXFP4 (OCP microscaling FP4): 32 E2M1
 * values sharing one E8M0 exponent; activations meet it as Q8_0.
 *
 * Block (17 bytes): e @0; qs[16] @1. With T the doubled E2M1 table below and
 * scale = 2^(e-128) (ggml stores half the MX scale 2^(e-127)), for j < 16:
 *   y[j]      = T[qs[j] & 0xF] * scale
 *   y[j + 16] = T[qs[j] >> 4]  * scale */
#include "quant_kernels.h"

#include "moontail/mathf.h"

const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ------------------------------------------------------------ decode */

void quant_mxfp4_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += MXFP4_BYTES, dst += QK_32) {
        const float d = quant_e8m0_half(b[0]);
        const uint8_t *qs = b + MXFP4_QS;
        for (int j = 0; j < QK_32 / 2; j++) {
            dst[j] = (float)quant_mxfp4_values[qs[j] & 0xF] * d;
            dst[j + QK_32 / 2] = (float)quant_mxfp4_values[qs[j] >> 4] * d;
        }
    }
}

/* ------------------------------------------------------------ encode */

/* The code whose value is nearest to x (the first one on a tie, so 0 -> 0). */
static int nearest_code(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)quant_mxfp4_values[0] * d - x);
    for (int k = 1; k < 16; k++) {
        float err = fabsf((float)quant_mxfp4_values[k] * d - x);
        if (err < best_err) {
            best = k;
            best_err = err;
        }
    }
    return best;
}

/* As ggml's reference quantizer: e = floor(log2(amax)) - 2 + 127, so the
 * block maximum lands in the top binade [4, 8) * scale of the doubled table
 * (values up to 2^(k+1) are clipped to 12 * scale = 1.5 * 2^k); each element
 * takes the nearest code. e is clamped to [0, 254] (ggml does not clamp).
 * log2 is mt_math_log2f (mathf.h), the same on every platform. */
size_t quant_mxfp4_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += MXFP4_BYTES, src += QK_32) {
        float amax = 0.0f;
        for (int j = 0; j < QK_32; j++)
            if (fabsf(src[j]) > amax) amax = fabsf(src[j]);
        int e = 0;
        if (amax > 0.0f && isfinite(amax)) {
            float fe = floorf(mt_math_log2f(amax)) - 2.0f + 127.0f;
            e = fe < 0.0f ? 0 : fe > 254.0f ? 254 : (int)fe;
        }
        const float d = quant_e8m0_half((uint8_t)e);
        b[0] = (uint8_t)e;
        uint8_t *qs = b + MXFP4_QS;
        for (int j = 0; j < QK_32 / 2; j++)
            qs[j] = (uint8_t)(nearest_code(src[j], d) | (nearest_code(src[j + QK_32 / 2], d) << 4));
    }
    return (size_t)(n / QK_32) * MXFP4_BYTES;
}

/* ------------------------------------------------------------ dot */

/* The Q8_0-family order (quant_kernels.h): per block, 8 exact int32 lane
 * sums of 4 consecutive products of table values and activations, each
 * added to its lane float as fmaf(lane, dx * 2^(e-128), acc), even blocks
 * into lanes 0-7 and odd blocks into lanes 8-15; quant_hsum16 at the end. */
float quant_mxfp4_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float acc[16] = {0};
    for (int64_t i = 0; i < n / QK_32; i++, wb += MXFP4_BYTES, xb += Q8_0_BYTES) {
        const float d = quant_load_f16(xb) * quant_e8m0_half(wb[0]);
        int8_t q[QK_32];
        quant_nibbles32(wb + MXFP4_QS, quant_mxfp4_values, q);
        quant_q8_family_block(acc, i, q, (const int8_t *)(xb + Q8_0_QS), d);
    }
    return quant_hsum16(acc);
}

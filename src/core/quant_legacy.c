/* quant_legacy.c - reference kernels of ggml's older 32-element block
 * formats Q4_1, Q5_0 and Q5_1, and of Q8_1, the activation format that Q4_1
 * and Q5_1 weights meet in a dot product (Q5_0 meets Q8_0, quant_q8_0.c).
 *
 * Blocks (docs/engine-reference.md, "Tensor types"; f16 fields widened to
 * f32, j < 16, nibbles placed as in Q4_0):
 *   Q4_1 (20 bytes): d f16 @0; m f16 @2; qs[16] @4.
 *     q[j] = qs[j] & 0xF, q[j + 16] = qs[j] >> 4; y = q * d + m
 *   Q5_0 (22 bytes): d f16 @0; qh[4] @2 (32 bits, little-endian); qs[16] @6.
 *     q[j] = (qs[j] & 0xF) | (bit j of qh) << 4,
 *     q[j + 16] = (qs[j] >> 4) | (bit j + 16 of qh) << 4; y = (q - 16) * d
 *   Q5_1 (24 bytes): d f16 @0; m f16 @2; qh[4] @4; qs[16] @8.
 *     q as Q5_0's; y = q * d + m
 *   Q8_1 (36 bytes): d f16 @0; s f16 @2; qs[32] int8 @4. y = qs * d; s is
 *     d * sum(qs), kept for the min term of the Q4_1 / Q5_1 dot product.
 * y = q * d + m is one multiply and one add, each rounded (what llama.cpp's
 * dequantize_row_q4_1 / _q5_1 compute; test_quant_ggml checks it bit for
 * bit on random-byte blocks).
 *
 * Reduction orders (quant_kernels.h):
 *   Q5_0 x Q8_0: the Q8_0-family order, with w = q - 16.
 *   Q4_1, Q5_1 x Q8_1: per block, 8 exact int32 lane sums of 4 consecutive
 *   products q * x (q unsigned, 0..15 or 0..31), each added to its lane
 *   float as fmaf(lane, dw * dx, acc), even blocks into lanes 0-7 and odd
 *   blocks into lanes 8-15; the min term apart, in two chains
 *   mins[b mod 2] = fmaf(m, s, mins[b mod 2]); the result is
 *   quant_hsum16(acc) + (mins[0] + mins[1]). */
#include "quant_kernels.h"

/* ------------------------------------------------------------ decode */

/* The 32 quants of a Q4_1 (qh NULL) or Q5_0 / Q5_1 block less `offset`, in
 * element order. */
static void unpack32(const uint8_t *qs, const uint8_t *qh, int offset, int8_t q[QK_32]) {
    uint32_t h = 0;
    if (qh) memcpy(&h, qh, 4);
    for (int j = 0; j < QK_32 / 2; j++) {
        q[j] = (int8_t)(((qs[j] & 0xF) | (int)((h >> j) & 1) << 4) - offset);
        q[j + QK_32 / 2] = (int8_t)(((qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4) - offset);
    }
}

void quant_q4_1_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q4_1_BYTES, dst += QK_32) {
        const float d = quant_load_f16(b), m = quant_load_f16(b + Q4_1_M);
        int8_t q[QK_32];
        unpack32(b + Q4_1_QS, NULL, 0, q);
        for (int j = 0; j < QK_32; j++) {
            const float p = (float)q[j] * d; /* two roundings, as llama.cpp */
            dst[j] = p + m;
        }
    }
}

void quant_q5_0_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q5_0_BYTES, dst += QK_32) {
        const float d = quant_load_f16(b);
        int8_t q[QK_32];
        unpack32(b + Q5_0_QS, b + Q5_0_QH, 16, q);
        for (int j = 0; j < QK_32; j++) dst[j] = (float)q[j] * d;
    }
}

void quant_q5_1_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q5_1_BYTES, dst += QK_32) {
        const float d = quant_load_f16(b), m = quant_load_f16(b + Q5_1_M);
        int8_t q[QK_32];
        unpack32(b + Q5_1_QS, b + Q5_1_QH, 0, q);
        for (int j = 0; j < QK_32; j++) {
            const float p = (float)q[j] * d;
            dst[j] = p + m;
        }
    }
}

void quant_q8_1_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q8_1_BYTES, dst += QK_32) {
        const float d = quant_load_f16(b);
        const int8_t *qs = (const int8_t *)(b + Q8_1_QS);
        for (int j = 0; j < QK_32; j++) dst[j] = (float)qs[j] * d;
    }
}

/* ------------------------------------------------------------ encode */

/* Packs 32 quants (0..31) into qs (low 4 bits) and, when qh is not NULL,
 * bit 4 of quant j into bit j of qh. */
static void pack32(const int q[QK_32], uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < QK_32 / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + QK_32 / 2] & 0xF) << 4);
        h |= (uint32_t)(q[j] >> 4) << j | (uint32_t)(q[j + QK_32 / 2] >> 4) << (j + 16);
    }
    if (qh) memcpy(qh, &h, 4);
}

/* round(v) clamped to [0, top]; NaN gives 0. */
static int quant_clamped(float v, int top) {
    v = fminf(fmaxf(v, 0.0f), (float)top);
    return quant_nearest_int(v);
}

/* Q4_1 / Q5_1: the block's minimum as m (rounded to f16 first, so the codes
 * count from the stored value), d = (max - m) / (2^bits - 1) rounded to f16,
 * q = round((x - m) / d) clamped to the code range. */
static void quantize_min(const float *x, int top, uint8_t *dm, int q[QK_32]) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < QK_32; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    quant_store_f16(dm + 2, lo);
    const float m = quant_load_f16(dm + 2);
    quant_store_f16(dm, fminf((hi - m) / (float)top, 65504.0f)); /* the largest f16 */
    const float d = quant_load_f16(dm);
    const float id = d > 0.0f && isfinite(d) ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK_32; j++) q[j] = quant_clamped((x[j] - m) * id, top);
}

size_t quant_q4_1_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q4_1_BYTES, src += QK_32) {
        int q[QK_32];
        quantize_min(src, 15, b, q);
        pack32(q, b + Q4_1_QS, NULL);
    }
    return (size_t)(n / QK_32) * Q4_1_BYTES;
}

size_t quant_q5_1_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q5_1_BYTES, src += QK_32) {
        int q[QK_32];
        quantize_min(src, 31, b, q);
        pack32(q, b + Q5_1_QS, b + Q5_1_QH);
    }
    return (size_t)(n / QK_32) * Q5_1_BYTES;
}

/* Q5_0, as Q4_0: the element of largest magnitude, max, maps to code 0
 * (value -16 d) with d = max / -16 rounded to f16; the others round to
 * nearest against the stored d, clamped to 0..31. */
size_t quant_q5_0_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_32; i++, b += Q5_0_BYTES, src += QK_32) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_32; j++) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        quant_store_f16(b, max / -16.0f);
        const float d = quant_load_f16(b);
        const float id = d != 0.0f && isfinite(d) ? 1.0f / d : 0.0f;
        int q[QK_32];
        for (int j = 0; j < QK_32; j++) q[j] = quant_clamped(src[j] * id + 16.0f, 31);
        pack32(q, b + Q5_0_QS, b + Q5_0_QH);
    }
    return (size_t)(n / QK_32) * Q5_0_BYTES;
}

/* Activations, as ggml's CPU backend on x86 (the AVX2 quantize_row_q8_1):
 * d = amax / 127 and the quants exactly as quant_q8_0_convert (127/amax in
 * f32, round half to even; the same answers for NaN, infinite and tiny
 * blocks); then s = d * (float)sum(qs), with d the f32 value before its
 * rounding to f16, rounded to f16 once. (ggml's generic C path sums the two
 * halves apart and rounds with roundf; the x86 path is what MoonTail is
 * compared against.) */
size_t quant_q8_1_convert(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    uint8_t q8[Q8_0_BYTES];
    for (int64_t i = 0; i < n / QK_32; i++, b += Q8_1_BYTES, src += QK_32) {
        quant_q8_0_convert(src, q8, QK_32);
        float amax = 0.0f; /* quant_q8_0_convert's amax: NaN never wins */
        for (int j = 0; j < QK_32; j++)
            if (fabsf(src[j]) > amax) amax = fabsf(src[j]);
        const float d = amax / 127.0f;
        int32_t sum = 0;
        for (int j = 0; j < QK_32; j++) sum += (int8_t)q8[Q8_0_QS + j];
        memcpy(b, q8, 2);
        quant_store_f16(b + Q8_1_S, d * (float)sum);
        memcpy(b + Q8_1_QS, q8 + Q8_0_QS, QK_32);
    }
    return (size_t)(n / QK_32) * Q8_1_BYTES;
}

/* ------------------------------------------------------------ dot */

/* Q5_0 x Q8_0: the Q8_0-family order (quant_kernels.h), w = q - 16. */
float quant_q5_0_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float acc[16] = {0};
    for (int64_t i = 0; i < n / QK_32; i++, wb += Q5_0_BYTES, xb += Q8_0_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_0_QS);
        const float d = quant_load_f16(wb) * quant_load_f16(xb);
        int8_t q[QK_32];
        unpack32(wb + Q5_0_QS, wb + Q5_0_QH, 16, q);
        quant_q8_family_block(acc, i, q, xq, d);
    }
    return quant_hsum16(acc);
}

/* Q4_1 (qh_off 0) or Q5_1 x Q8_1: the order in the top comment. */
static float dot_min(int64_t n, const uint8_t *wb, const uint8_t *xb, int wbytes, int qs_off,
                     int qh_off) {
    float acc[16] = {0}, mins[2] = {0};
    for (int64_t i = 0; i < n / QK_32; i++, wb += wbytes, xb += Q8_1_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_1_QS);
        const float d = quant_load_f16(wb) * quant_load_f16(xb);
        int8_t q[QK_32];
        unpack32(wb + qs_off, qh_off ? wb + qh_off : NULL, 0, q);
        quant_q8_family_block(acc, i, q, xq, d);
        mins[i & 1] = mt_fmaf(quant_load_f16(wb + 2), quant_load_f16(xb + Q8_1_S), mins[i & 1]);
    }
    return quant_hsum16(acc) + (mins[0] + mins[1]);
}

float quant_q4_1_vec_dot(int64_t n, const void *w, const void *x) {
    return dot_min(n, w, x, Q4_1_BYTES, Q4_1_QS, 0);
}

float quant_q5_1_vec_dot(int64_t n, const void *w, const void *x) {
    return dot_min(n, w, x, Q5_1_BYTES, Q5_1_QS, Q5_1_QH);
}

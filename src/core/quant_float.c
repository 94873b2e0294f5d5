/* quant_float.c - reference kernels of the unquantized formats F32, F16, BF16.
 *
 * Activations meet a float weight row in the same format (ggml converts them
 * to F16 for F16 weights and to BF16 for BF16 weights). A dot product sums
 * the exact products (double)w_i * (double)x_i in double, in 16 lanes
 * (i mod 16, each from low i to high), adds the lanes with quant_hsum16d and
 * rounds to f32 once: as exact as ggml's double sum, and an order that SIMD
 * code can follow at full width. */
#include "quant_kernels.h"

/* ---------------------------------------------------------------- F32 */

void quant_f32_dequantize(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

size_t quant_f32_quantize(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
    return (size_t)n * sizeof(float);
}

float quant_f32_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x; /* (n) f32 each, any alignment */
    double acc[16] = {0};
    for (int64_t i = 0; i < n; i++)
        acc[i % 16] += (double)quant_load_f32(wb + 4 * i) * (double)quant_load_f32(xb + 4 * i);
    return (float)quant_hsum16d(acc);
}

/* ---------------------------------------------------------------- F16 */

void quant_f16_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = quant_load_f16(s + 2 * i);
}

size_t quant_f16_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) quant_store_f16(d + 2 * i, src[i]);
    return (size_t)n * 2;
}

float quant_f16_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    double acc[16] = {0};
    for (int64_t i = 0; i < n; i++)
        acc[i % 16] += (double)quant_load_f16(wb + 2 * i) * (double)quant_load_f16(xb + 2 * i);
    return (float)quant_hsum16d(acc);
}

/* --------------------------------------------------------------- BF16 */

static inline float load_bf16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return mt_bf16_to_f32(h);
}

void quant_bf16_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = load_bf16(s + 2 * i);
}

size_t quant_bf16_quantize(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = mt_f32_to_bf16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
    return (size_t)n * 2;
}

float quant_bf16_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    double acc[16] = {0};
    for (int64_t i = 0; i < n; i++)
        acc[i % 16] += (double)load_bf16(wb + 2 * i) * (double)load_bf16(xb + 2 * i);
    return (float)quant_hsum16d(acc);
}

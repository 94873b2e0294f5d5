/* quant_kernels.h - private to the quant_* files: block layouts, the kernel
 * function table, and the portable reference kernels of every format.
 *
 * Blocks are addressed as bytes at the offsets of docs/engine-reference.md
 * (never through struct pointers), so a row may start at any address. Scalars
 * inside blocks are little-endian, as on every host MoonTail targets.
 *
 * A kernel set is a table indexed by mt_type. quant.c starts from the
 * reference set (quant_ref_kernels) and lets a SIMD file replace entries
 * (quant_avx2_install, quant_avx512_install); a SIMD entry must return
 * bit-identical results.
 *
 * Reduction orders. Every dot product is defined so that SIMD code can
 * follow it exactly and still run at full width (the reference kernels spell
 * each one out in C):
 *  - Q8_0, Q4_0, MXFP4 (against Q8_0 activations): in each 32-element block,
 *    lane l (0..7) is the exact int32 sum of the products of elements
 *    4l..4l+3; block b adds it to lane float 8 * (b mod 2) + l as
 *    fmaf((float)lane, dw * dx, acc) (two blocks fill a 512-bit register);
 *    the 16 lane floats are added by quant_hsum16.
 *  - Q4_K (against Q8_K): lane l of a super-block is the exact int32 sum
 *    over its 8 sub-blocks s of sc[s] * (products of elements 32s+4l..+3);
 *    lanes accumulate fmaf((float)lane, dw * dx, acc[l]); the mins term
 *    accumulates fmaf(dmin * dx, (float)summ, mins); result hsum8 - mins.
 *  - Q5_0 (against Q8_0): the Q8_0-family order above, w = q - 16.
 *  - Q4_1, Q5_1 (against Q8_1): lanes as the Q8_0 family's with the
 *    unsigned quants q (w = q * d + m), fmaf((float)lane, dw * dx, acc) into
 *    lane 8 * (b mod 2) + l; the min term apart, in two chains
 *    mins[b mod 2] = fmaf(m, s_x, mins[b mod 2]) (s_x: the Q8_1 block's s);
 *    result quant_hsum16(acc) + (mins[0] + mins[1]).
 *  - Q2_K, Q3_K, Q5_K (against Q8_K; quant_kq.c): Q4_K's order. Lane l of
 *    a super-block is the exact int32 sum over its elements i with
 *    (i mod 32) / 4 = l of S(i) * u(i) * x(i): u the unsigned quant (Q2_K
 *    0..3; Q3_K q3 + 4, 0..7; Q5_K 0..31), S its group's integer scale
 *    (Q3_K: code - 32); lanes accumulate fmaf((float)lane, dw * dx, acc[l]);
 *    the exact correction C (Q2_K, Q5_K: sum of bsums[j] * min of group j;
 *    Q3_K: 4 * sum bsums[g] * (code[g] - 32)) accumulates
 *    fmaf(dm * dx, (float)C, mins) with dm = dmin (Q3_K: d); result
 *    hsum8 - mins.
 *  - Q6_K: ggml's generic order (lane = element index mod 8).
 *  - IQ4_NL (against Q8_0): the Q8_0 order, with table values as weights.
 *  - IQ4_XS, TQ1_0, TQ2_0 (against Q8_K): Q4_K's order without the mins:
 *    lane l of a super-block is the exact int32 sum over its 32-value chunks
 *    c of sc[c] * (products of elements 32c+4l..+3), where sc is IQ4_XS's
 *    sub-block scale ls - 32 and 1 for TQ1_0/TQ2_0 (whose weights are the
 *    trits t - 1); fmaf((float)lane, dw * dx, acc[l]); result hsum8.
 *  - IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (against Q8_K): each element is
 *    d * sc * w * k with integer sc (2c + 1 of its sub-block or IQ1_M half)
 *    and w (IQ3: signed grid magnitude; IQ1: 8g +- 1, the delta folded in),
 *    k = 1/4, 1, 1/8, 1/8; lane l (0..7) of a super-block is the exact int32
 *    sum of sc * w * x over elements e with e mod 32 in [4l, 4l + 4); lanes
 *    accumulate fmaf((float)lane, dw * dx, acc[l]); result k * hsum8(acc).
 *  - IQ2_XXS, IQ2_XS, IQ2_S (against Q8_K): lane l of a super-block is the
 *    exact int32 sum over its 8 sub-blocks of ls * (products of elements
 *    32s+4l..+3), ls = 2 * (4-bit scale) + 1 of those elements (one per 32
 *    for XXS; lanes 0-3 and 4-7 have their own for XS and S); lanes
 *    accumulate fmaf((float)lane, (0.125f * dw) * dx, acc[l]) (the 1/8 of
 *    the format's (0.5 + sc) / 4 folded into dw, exactly); result hsum8.
 *  - F32, F16, BF16: lane l (0..15) sums (double)w_i * (double)x_i (exact
 *    products) for i = l mod 16 in double, lanes added by quant_hsum16d,
 *    rounded to f32 once. */
#ifndef MOONTAIL_QUANT_KERNELS_H
#define MOONTAIL_QUANT_KERNELS_H

#include "moontail/quant.h"
#include "moontail/tensor_type.h"
#include "moontail/vecops.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------ geometry */

enum {
    QK_32 = 32, /* elements per block of Q8_0, Q4_0, MXFP4 */
    QK_K = 256, /* elements per super-block of the K-quants and Q8_K */

    Q8_0_BYTES = 34, /* d f16 @0; qs[32] int8 @2 */
    Q8_0_QS = 2,

    Q4_0_BYTES = 18, /* d f16 @0; qs[16] @2 (low nibbles: j, high nibbles: j+16) */
    Q4_0_QS = 2,

    MXFP4_BYTES = 17, /* e (E8M0) @0; qs[16] @1 */
    MXFP4_QS = 1,

    Q4_K_BYTES = 144, /* d f16 @0; dmin f16 @2; scales[12] @4; qs[128] @16 */
    Q4_K_DMIN = 2,
    Q4_K_SCALES = 4,
    Q4_K_QS = 16,

    Q6_K_BYTES = 210, /* ql[128] @0; qh[64] @128; scales[16] int8 @192; d f16 @208 */
    Q6_K_QH = 128,
    Q6_K_SCALES = 192,
    Q6_K_D = 208,

    /* legacy 32-blocks (quant_legacy.c) */
    Q4_1_BYTES = 20, /* d f16 @0; m f16 @2; qs[16] @4 (nibbles as Q4_0) */
    Q4_1_M = 2,
    Q4_1_QS = 4,

    Q5_0_BYTES = 22, /* d f16 @0; qh[4] @2 (bit j: bit 4 of quant j); qs[16] @6 */
    Q5_0_QH = 2,
    Q5_0_QS = 6,

    Q5_1_BYTES = 24, /* d f16 @0; m f16 @2; qh[4] @4; qs[16] @8 */
    Q5_1_M = 2,
    Q5_1_QH = 4,
    Q5_1_QS = 8,

    Q8_1_BYTES = 36, /* d f16 @0; s f16 @2 (d * sum of qs); qs[32] int8 @4 */
    Q8_1_S = 2,
    Q8_1_QS = 4,

    /* group kq (quant_kq.c) */
    Q2_K_BYTES = 84, /* scales[16] @0 (scale low nibble, min high); qs[64] @16; d @80; dmin @82 */
    Q2_K_QS = 16,
    Q2_K_D = 80,
    Q2_K_DMIN = 82,

    Q3_K_BYTES = 110, /* hmask[32] @0; qs[64] @32; scales[12] @96 (16 x 6 bits); d f16 @108 */
    Q3_K_QS = 32,
    Q3_K_SCALES = 96,
    Q3_K_D = 108,

    Q5_K_BYTES = 176, /* d f16 @0; dmin f16 @2; scales[12] @4 (as Q4_K); qh[32] @16; qs[128] @48 */
    Q5_K_DMIN = 2,
    Q5_K_SCALES = 4,
    Q5_K_QH = 16,
    Q5_K_QS = 48,

    /* group iq4t (quant_iq4t.c) */
    IQ4_NL_BYTES = 18, /* d f16 @0; qs[16] @2 (low nibbles: j, high nibbles: j+16) */
    IQ4_NL_QS = 2,
    IQ4_XS_BYTES = 136, /* d f16 @0; scales_h u16 @2; scales_l[4] @4; qs[128] @8 */
    IQ4_XS_SCALES_H = 2,
    IQ4_XS_SCALES_L = 4,
    IQ4_XS_QS = 8,
    TQ1_0_BYTES = 54, /* qs[48] @0 (5 trits a byte); qh[4] @48 (4 trits a byte); d f16 @52 */
    TQ1_0_QH = 48,
    TQ1_0_D = 52,
    TQ2_0_BYTES = 66, /* qs[64] @0 (4 2-bit quants a byte); d f16 @64 */
    TQ2_0_D = 64,
    /* the grid i-quants IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (quant_iq3_iq1.c) */
    IQ3_XXS_BYTES = 98, /* d f16 @0; qs[64] grid indices @2; 8 x u32 signs+scale @66 */
    IQ3_XXS_SAS = 66,
    IQ3_S_BYTES = 110, /* d f16 @0; qs[64] @2; qh[8] @66; signs[32] @74; scales[4] @106 */
    IQ3_S_QH = 66,
    IQ3_S_SIGNS = 74,
    IQ3_S_SCALES = 106,
    IQ1_S_BYTES = 50, /* d f16 @0; qs[32] @2; qh[8] u16 @34 */
    IQ1_S_QH = 34,
    IQ1_M_BYTES = 56, /* qs[32] @0; qh[16] @32; scales[4] u16 @48 (f16 d in top nibbles) */
    IQ1_M_QH = 32,
    IQ1_M_SCALES = 48,
    /* IQ2 (quant_iq2.c): d f16 @0 in each */
    IQ2_XXS_BYTES = 66, /* qs @2: per 32: 4 grid index bytes, u32 signs + scale */
    IQ2_XXS_QS = 2,
    IQ2_XS_BYTES = 74, /* qs[32] u16 @2 (index 9 bits | sign index << 9); scales[8] @66 */
    IQ2_XS_QS = 2,
    IQ2_XS_SCALES = 66,
    IQ2_S_BYTES = 82, /* qs[32] @2; signs[32] @34; qh[8] @66; scales[8] @74 */
    IQ2_S_QS = 2,
    IQ2_S_SIGNS = 34,
    IQ2_S_QH = 66,
    IQ2_S_SCALES = 74,

    Q8_K_BYTES = 292, /* d f32 @0; qs[256] int8 @4; bsums[16] int16 @260 (sum of each 16 qs) */
    Q8_K_QS = 4,
    Q8_K_BSUMS = 260,
};

/* ----------------------------------------------------- scalar helpers */

/* mt_f16_to_f32, inline (the kernels decode a half per block or element):
 * normal, inf and NaN by rebiasing the exponent, subnormals as m * 2^-24. */
static inline float quant_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, em = h & 0x7fffu;
    uint32_t bits;
    if (em >= 0x7c00u) {
        bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
    } else if (em >= 0x0400u) {
        bits = sign | ((em << 13) + (112u << 23));
    } else {
        float v = (float)em * (1.0f / 16777216.0f); /* exact */
        memcpy(&bits, &v, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float quant_load_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return quant_f16_to_f32(h);
}

static inline void quant_store_f16(uint8_t *p, float f) {
    uint16_t h = mt_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static inline float quant_load_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* Round to nearest, ties to even, for |f| <= 2^22: adding 1.5 * 2^23 leaves
 * the integer in the low mantissa bits (the same trick as ggml's nearest_int). */
static inline int quant_nearest_int(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* 2^(e-128), the value ggml uses for an E8M0 exponent (half the MX scale;
 * the FP4 table is doubled to match). e = 0 and 1 are f32 subnormals. */
static inline float quant_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The fixed addition tree of 8 lane sums: what adding the upper half of a
 * 256-bit register to the lower, then the upper pair to the lower, gives. */
static inline float quant_hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* One block of the Q8_0-family order (the top of this file): 8 exact int32
 * sums of 4 consecutive products w[j] * x[j], each added to its lane float
 * as fmaf(sum, d, lane); block i into lanes 0-7 when even, 8-15 when odd. */
static inline void quant_q8_family_block(float acc[16], int64_t i, const int8_t w[32],
                                         const int8_t *x, float d) {
    float *lane = acc + 8 * (i & 1);
    for (int l = 0; l < 8; l++) {
        int32_t s = 0;
        for (int j = 4 * l; j < 4 * l + 4; j++) s += (int32_t)w[j] * x[j];
        lane[l] = mt_fmaf((float)s, d, lane[l]);
    }
}

/* The 32 values of a block of 16 nibble bytes through a 16-entry table:
 * element j < 16 from the low nibble of qs[j], j >= 16 from the high nibble
 * of qs[j - 16]. */
static inline void quant_nibbles32(const uint8_t *qs, const int8_t table[16], int8_t out[32]) {
    for (int j = 0; j < 16; j++) {
        out[j] = table[qs[j] & 0xF];
        out[j + 16] = table[qs[j] >> 4];
    }
}

/* 16 lanes: lane l and l + 8 first, then quant_hsum8. */
static inline float quant_hsum16(const float a[16]) {
    float b[8];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    return quant_hsum8(b);
}

/* The same tree over 16 double lanes (lane l and l + 8 first). */
static inline double quant_hsum16d(const double a[16]) {
    double b[8];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

/* Doubled E2M1 values of the 16 FP4 codes. */
extern const int8_t quant_mxfp4_values[16];

/* The 16 values of the IQ4_NL / IQ4_XS codes (quant_iq4t.c). */
extern const int8_t quant_iq4_values[16];

/* IQ4_XS: the signed scale ls - 32 (-32..31) of sub-block s (0..7). */
static inline int quant_iq4_xs_scale(const uint8_t *b, int s) {
    uint16_t h;
    memcpy(&h, b + IQ4_XS_SCALES_H, 2);
    const int lo = (b[IQ4_XS_SCALES_L + s / 2] >> (4 * (s % 2))) & 0xF;
    return (lo | (((h >> (2 * s)) & 3) << 4)) - 32;
}

/* Q4_K / Q5_K: 6-bit scale and min of sub-block s (0..7) from scales[12]. */
static inline void quant_k4_scale_min(const uint8_t *scales, int s, int *sc, int *m) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *m = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 0xF) | ((scales[s - 4] >> 6) << 4);
        *m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
    }
}

/* Q3_K: the 6-bit scale code (0..63, the scale is code - 32) of group g
 * (0..15) from scales[12]: the low 4 bits are the low (g < 8) or high nibble
 * of byte g % 8, the top 2 bits are bits 2*(g/4) of byte 8 + g % 4. */
static inline int quant_k3_scale(const uint8_t *scales, int g) {
    const int lo = g < 8 ? scales[g] & 0xF : scales[g - 8] >> 4;
    return lo | (((scales[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
}

/* One Q4_K block against one Q8_K block: unpacks the 8 sub-block scales and
 * mins, and returns sum_j bsums[j] * min[j/2], the integer part of the
 * dmin correction that the dot product subtracts. */
static inline int32_t quant_q4_k_scales_and_min_sum(const uint8_t *wb, const uint8_t *xb, int sc[8],
                                                    int m[8]) {
    for (int s = 0; s < 8; s++) quant_k4_scale_min(wb + Q4_K_SCALES, s, &sc[s], &m[s]);
    int32_t summ = 0;
    for (int j = 0; j < 16; j++) {
        int16_t bs;
        memcpy(&bs, xb + Q8_K_BSUMS + 2 * j, 2);
        summ += bs * m[j / 2];
    }
    return summ;
}

/* ---------------------------------------------------------- the table */

typedef void (*quant_row_fn)(const void *src, float *dst, int64_t n);
/* quant_tile_fn (quant.h): a tile of a matrix product, each element equal
 * bit for bit to vec_dot of its weight row and activation row. */
typedef size_t (*quant_encode_fn)(const float *src, void *dst, int64_t n);

struct vec_kernel_set; /* vec_kernels.h: the float vector kernels of the same set */

typedef struct quant_kernel_set {
    const char *name;
    quant_row_fn dequantize[MT_TYPE_COUNT];  /* decode a row of this type */
    quant_encode_fn quantize[MT_TYPE_COUNT]; /* weights: simple round-to-nearest */
    quant_encode_fn convert[MT_TYPE_COUNT];  /* activations, as ggml's CPU matmul */
    mt_type vec_dot_type[MT_TYPE_COUNT];     /* MT_TYPE_COUNT: no vec_dot */
    quant_vec_dot_fn vec_dot[MT_TYPE_COUNT]; /* weight row . converted activations */
    quant_tile_fn tile[MT_TYPE_COUNT];       /* many rows . many activations; NULL: vec_dot each */
    const struct vec_kernel_set *vec;        /* norms, softmax, SwiGLU, RoPE, attention */
} quant_kernel_set;

/* Fills `ks` with the portable kernels (quant.c). */
void quant_ref_kernels(quant_kernel_set *ks);

/* Replaces entries of `ks` with AVX2 kernels if this CPU has AVX2, FMA and
 * F16C; returns whether it did (quant_avx2.c; a stub elsewhere). */
bool quant_avx2_install(quant_kernel_set *ks);

/* Replaces entries of `ks` (already holding the AVX2 set) with AVX-512
 * kernels if this CPU has AVX-512 F, BW, VL, VNNI and VBMI (quant_avx512.c). */
bool quant_avx512_install(quant_kernel_set *ks);

/* ------------------------------------------------ reference kernels */

/* quant_float.c */
void quant_f32_dequantize(const void *src, float *dst, int64_t n);
size_t quant_f32_quantize(const float *src, void *dst, int64_t n);
float quant_f32_vec_dot(int64_t n, const void *w, const void *x);
void quant_f16_dequantize(const void *src, float *dst, int64_t n);
size_t quant_f16_quantize(const float *src, void *dst, int64_t n);
float quant_f16_vec_dot(int64_t n, const void *w, const void *x);
void quant_bf16_dequantize(const void *src, float *dst, int64_t n);
size_t quant_bf16_quantize(const float *src, void *dst, int64_t n);
float quant_bf16_vec_dot(int64_t n, const void *w, const void *x);

/* quant_q8_0.c */
void quant_q8_0_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q8_0_quantize(const float *src, void *dst, int64_t n);
size_t quant_q8_0_convert(const float *src, void *dst, int64_t n);
float quant_q8_0_vec_dot(int64_t n, const void *w, const void *x);

/* quant_q4_0.c */
void quant_q4_0_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q4_0_quantize(const float *src, void *dst, int64_t n);
float quant_q4_0_vec_dot(int64_t n, const void *w, const void *x);

/* quant_mxfp4.c */
void quant_mxfp4_dequantize(const void *src, float *dst, int64_t n);
size_t quant_mxfp4_quantize(const float *src, void *dst, int64_t n);
float quant_mxfp4_vec_dot(int64_t n, const void *w, const void *x);

/* quant_k.c */
void quant_q4_k_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q4_k_quantize(const float *src, void *dst, int64_t n);
float quant_q4_k_vec_dot(int64_t n, const void *w, const void *x);
void quant_q6_k_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q6_k_quantize(const float *src, void *dst, int64_t n);
float quant_q6_k_vec_dot(int64_t n, const void *w, const void *x);
void quant_q8_k_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q8_k_convert(const float *src, void *dst, int64_t n);

/* quant_legacy.c */
void quant_q4_1_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q4_1_quantize(const float *src, void *dst, int64_t n);
float quant_q4_1_vec_dot(int64_t n, const void *w, const void *x);
void quant_q5_0_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q5_0_quantize(const float *src, void *dst, int64_t n);
float quant_q5_0_vec_dot(int64_t n, const void *w, const void *x);
void quant_q5_1_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q5_1_quantize(const float *src, void *dst, int64_t n);
float quant_q5_1_vec_dot(int64_t n, const void *w, const void *x);
void quant_q8_1_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q8_1_convert(const float *src, void *dst, int64_t n);

/* quant_kq.c (group kq: Q2_K, Q3_K, Q5_K against Q8_K) */
void quant_q2_k_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q2_k_quantize(const float *src, void *dst, int64_t n);
float quant_q2_k_vec_dot(int64_t n, const void *w, const void *x);
void quant_q3_k_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q3_k_quantize(const float *src, void *dst, int64_t n);
float quant_q3_k_vec_dot(int64_t n, const void *w, const void *x);
void quant_q5_k_dequantize(const void *src, float *dst, int64_t n);
size_t quant_q5_k_quantize(const float *src, void *dst, int64_t n);
float quant_q5_k_vec_dot(int64_t n, const void *w, const void *x);

/* quant_iq4t.c (group iq4t) */
void quant_iq4_nl_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq4_nl_quantize(const float *src, void *dst, int64_t n);
float quant_iq4_nl_vec_dot(int64_t n, const void *w, const void *x);
void quant_iq4_xs_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq4_xs_quantize(const float *src, void *dst, int64_t n);
float quant_iq4_xs_vec_dot(int64_t n, const void *w, const void *x);
void quant_tq1_0_dequantize(const void *src, float *dst, int64_t n);
size_t quant_tq1_0_quantize(const float *src, void *dst, int64_t n);
float quant_tq1_0_vec_dot(int64_t n, const void *w, const void *x);
void quant_tq2_0_dequantize(const void *src, float *dst, int64_t n);
size_t quant_tq2_0_quantize(const float *src, void *dst, int64_t n);
float quant_tq2_0_vec_dot(int64_t n, const void *w, const void *x);

/* quant_iq3_iq1.c, quant_iq3_iq1_grids.c: IQ3_XXS, IQ3_S, IQ1_S, IQ1_M */
extern const uint8_t quant_iq3xxs_levels[8], quant_iq3s_levels[8];
extern const uint16_t quant_iq3xxs_grid[256], quant_iq3s_grid[512], quant_iq1s_grid[2048];

/* IQ3_XXS signs: a 7-bit index gives the signs of elements 0-6 of a group
 * of 8 (bit j set: element j negative); element 7 is negative when the
 * index has an odd number of set bits, so every group has an even number
 * of negative elements. Returns the 8 sign bits. */
static inline uint8_t quant_iq3xxs_signs(unsigned idx7) {
    unsigned p = idx7 ^ (idx7 >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return (uint8_t)((idx7 & 127) | ((p & 1) << 7));
}

/* IQ1_M: the f16 super-block scale from the top nibbles of the 4 words. */
static inline uint16_t quant_iq1m_d_bits(const uint8_t *b) {
    uint16_t sc[4];
    memcpy(sc, b + IQ1_M_SCALES, 8);
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                      (sc[3] & 0xf000));
}

void quant_iq3_xxs_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq3_xxs_quantize(const float *src, void *dst, int64_t n);
float quant_iq3_xxs_vec_dot(int64_t n, const void *w, const void *x);
void quant_iq3_s_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq3_s_quantize(const float *src, void *dst, int64_t n);
float quant_iq3_s_vec_dot(int64_t n, const void *w, const void *x);
void quant_iq1_s_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq1_s_quantize(const float *src, void *dst, int64_t n);
float quant_iq1_s_vec_dot(int64_t n, const void *w, const void *x);
void quant_iq1_m_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq1_m_quantize(const float *src, void *dst, int64_t n);
float quant_iq1_m_vec_dot(int64_t n, const void *w, const void *x);
/* ---------------------------------------------------- IQ2 (quant_iq2.c) */

/* quant_iq2_grids.c (generated, measured from llama.cpp): the magnitudes 8,
 * 25, 43 and, per grid entry, 2-bit codes into them (element j: bits 2j..). */
extern const uint8_t quant_iq2_levels[3];
extern const uint16_t quant_iq2xxs_grid[256];
extern const uint16_t quant_iq2xs_grid[512];
extern const uint16_t quant_iq2s_grid[1024];
/* Filled by quant_iq2_tables_init (called by quant_ref_kernels): the grids
 * as 8 magnitude bytes per entry; the sign byte of a 7-bit sign index (the
 * parity rule); per sign byte, 8 bytes of +1 (bit clear) or -1 (bit set). */
extern uint64_t quant_iq2xxs_grid64[256];
extern uint64_t quant_iq2xs_grid64[512];
extern uint64_t quant_iq2s_grid64[1024];
extern uint8_t quant_iq2_sign7[128];
extern uint64_t quant_iq2_signs64[256];
extern uint64_t quant_iq2_signs64_7[128]; /* quant_iq2_signs64 of quant_iq2_sign7 */
/* per scale byte (two 4-bit scales): 8 words 2 * low + 1, 8 words 2 * high + 1 */
extern _Alignas(32) int16_t quant_iq2_ls16[256][16];
void quant_iq2_tables_init(void);
void quant_iq2_xxs_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq2_xxs_quantize(const float *src, void *dst, int64_t n);
float quant_iq2_xxs_vec_dot(int64_t n, const void *w, const void *x);
void quant_iq2_xs_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq2_xs_quantize(const float *src, void *dst, int64_t n);
float quant_iq2_xs_vec_dot(int64_t n, const void *w, const void *x);
void quant_iq2_s_dequantize(const void *src, float *dst, int64_t n);
size_t quant_iq2_s_quantize(const float *src, void *dst, int64_t n);
float quant_iq2_s_vec_dot(int64_t n, const void *w, const void *x);

#endif

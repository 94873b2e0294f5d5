/* quant_random.h - random-byte blocks of any quantized type for the quant
 * tests: every quant, grid index, sign and sub-scale pattern a block can
 * hold, with only its f16/f32 scale fields kept finite (some subnormal), so
 * that kernels and decoders can be compared bit for bit; and the small
 * helpers the quant tests share (normal samples, float bits, the Q8_1 min
 * term). Header-only. */
#ifndef MOONTAIL_TEST_QUANT_RANDOM_H
#define MOONTAIL_TEST_QUANT_RANDOM_H

#include "moontail/quant.h"
#include "moontail/tensor_type.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t quant_random_u64(uint64_t *state) { /* splitmix64 */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A standard normal sample (Box-Muller over two uniform doubles). */
static inline float quant_random_gauss(uint64_t *state) {
    double u = ((double)(quant_random_u64(state) >> 11) + 0.5) * 0x1p-53;
    double v = ((double)(quant_random_u64(state) >> 11) + 0.5) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* The bits of f, for bit-for-bit comparisons. */
static inline uint32_t quant_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Byte offsets of the f16 scale fields in a block of type t (docs/
 * engine-reference.md, "Tensor types"); returns how many. Q8_K's f32 scale,
 * MXFP4's exponent byte and IQ1_M's scale (in the top nibbles of its four
 * 16-bit sub-scales) are handled by quant_random_blocks itself. */
static inline int quant_scale_fields(mt_type t, int off[2]) {
    switch (t) {
    case MT_TYPE_Q6_K:
        off[0] = 208;
        return 1;
    case MT_TYPE_Q2_K:
        off[0] = 80, off[1] = 82;
        return 2;
    case MT_TYPE_Q3_K:
        off[0] = 108;
        return 1;
    case MT_TYPE_TQ1_0:
        off[0] = 52;
        return 1;
    case MT_TYPE_TQ2_0:
        off[0] = 64;
        return 1;
    case MT_TYPE_Q4_K:
    case MT_TYPE_Q5_K:
    case MT_TYPE_Q4_1:
    case MT_TYPE_Q5_1:
    case MT_TYPE_Q8_1:
        off[0] = 0, off[1] = 2;
        return 2;
    case MT_TYPE_MXFP4:
    case MT_TYPE_IQ1_M:
    case MT_TYPE_Q8_K:
        return 0;
    default: /* Q8_0 Q4_0 Q5_0 IQ4_NL IQ4_XS IQ2_* IQ3_* IQ1_S: d at 0 */
        off[0] = 0;
        return 1;
    }
}

/* Fills the `len` elements of a row of type t with random blocks. */
static inline void quant_random_blocks(mt_type t, uint8_t *row, int64_t len, uint64_t *state) {
    const mt_type_traits *tr = mt_type_traits_get((uint32_t)t);
    const int wblk = tr->type_size;
    const int64_t nb = len / tr->blck;
    for (int64_t i = 0; i < nb * wblk; i++) row[i] = (uint8_t)quant_random_u64(state);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *wb = row + b * wblk;
        uint16_t h = (uint16_t)(quant_random_u64(state) & 0xbbff); /* exponent < 31 */
        int off[2], k = quant_scale_fields(t, off);
        for (int i = 0; i < k; i++) memcpy(wb + off[i], &h, 2);
        if (t == MT_TYPE_MXFP4) wb[0] = (uint8_t)(quant_random_u64(state) % 200 + 27);
        if (t == MT_TYPE_IQ1_M) wb[55] &= 0xbf; /* the f16 scale's top exponent bit: finite */
        if (t == MT_TYPE_Q8_K) {
            float d = (float)((double)(int32_t)quant_random_u64(state) * 0x1p-40);
            memcpy(wb, &d, 4);
        }
    }
}

/* Q4_1 and Q5_1 meet Q8_1 activations, whose s (f16 of the f32 scale times
 * the sum of the quants) stands in the dot for dx * sum(qs) of the decoded
 * block: returns sum_b m_b * (s_b - dx_b * sum(qs_b)) (m at byte 2 of both
 * weight blocks), the difference to the exact dot of the decoded rows, and
 * in *bound its stated bound: s and dx are two f16 roundings of the same
 * product, so |m| * (|s| * 2^-10 * 1.001 + 2^-25) per block. */
static inline double quant_q8_1_min_shift(mt_type t, int64_t n, const uint8_t *w, const uint8_t *xc,
                                          double *bound) {
    double shift = 0;
    *bound = 0;
    if (quant_vec_dot_type(t) != MT_TYPE_Q8_1) return 0;
    const int wbytes = mt_type_traits_get(t)->type_size;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *wb = w + b * wbytes, *xb = xc + b * 36;
        uint16_t mh, dh, sh;
        memcpy(&mh, wb + 2, 2);
        memcpy(&dh, xb, 2);
        memcpy(&sh, xb + 2, 2);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += (int8_t)xb[4 + j];
        const double m = mt_f16_to_f32(mh), sx = mt_f16_to_f32(sh);
        shift += m * (sx - (double)mt_f16_to_f32(dh) * sum);
        *bound += fabs(m) * (fabs(sx) * ldexp(1, -10) * 1.001 + ldexp(1, -25));
    }
    return shift;
}

#endif

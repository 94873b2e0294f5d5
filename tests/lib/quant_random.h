/* quant_random.h - random-byte blocks of any quantized type for the quant
 * tests: every quant, grid index, sign and sub-scale pattern a block can
 * hold, with only its f16/f32 scale fields kept finite (some subnormal), so
 * that kernels and decoders can be compared bit for bit. Header-only. */
#ifndef MOONTAIL_TEST_QUANT_RANDOM_H
#define MOONTAIL_TEST_QUANT_RANDOM_H

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

#endif
